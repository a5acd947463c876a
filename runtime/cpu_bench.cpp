//===- cpu_bench.cpp - timing cpu packages --------------------------------===//

#include "linac/cpu_bench.h"

#include "bench_json.h"
#include "cpu_gemms.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <random>
#include <thread>

// LINAC_CPU_GEMMS(X) (cpu_gemms.h, written by runtime/CMakeLists.txt) calls
// X(isa) for each instruction set the reference GEMM was compiled for.
#define LINAC_DECLARE_GEMM(isa)                                                \
  extern "C" void linac_cpu_gemm_##isa(int n, const float *a, const float *b,  \
                                       float *c);
LINAC_CPU_GEMMS(LINAC_DECLARE_GEMM)
#undef LINAC_DECLARE_GEMM

namespace linac::bench {
namespace {

using Clock = std::chrono::steady_clock;

double secondsOf(const std::function<void()> &body) {
  Clock::time_point start = Clock::now();
  body();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The fewest seconds of reps rounds of body(t) on `threads` threads at
/// once (t = 0 on the caller's), after one untimed round that warms caches
/// and pages up.
double bestSecondsOnThreads(int threads, int reps,
                            const std::function<void(int)> &body) {
  double best = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep <= reps; ++rep) {
    double seconds = secondsOf([&] {
      std::vector<std::thread> pool;
      for (int t = 1; t < threads; ++t)
        pool.emplace_back(body, t);
      body(0);
      for (std::thread &thread : pool)
        thread.join();
    });
    if (rep > 0)
      best = std::min(best, seconds);
  }
  return best;
}

} // namespace

CpuGemm measureCpuGemm(int threads, int reps) {
  using Gemm = void (*)(int, const float *, const float *, float *);
  struct Variant {
    const char *isa;
    Gemm gemm;
  };
  CpuGemm result;
  Gemm gemm = nullptr;
#define LINAC_GEMM_VARIANT(isa) Variant{#isa, linac_cpu_gemm_##isa},
  for (const Variant &variant : {LINAC_CPU_GEMMS(LINAC_GEMM_VARIANT)}) {
    std::optional<manifest::CpuIsa> isa =
        manifest::parse<manifest::CpuIsa>(variant.isa);
    if (isa && hostRuns(*isa) &&
        (!gemm || *isa > *manifest::parse<manifest::CpuIsa>(result.isa))) {
      gemm = variant.gemm;
      result.isa = variant.isa;
    }
  }
#undef LINAC_GEMM_VARIANT
  result.threads = hostThreads(threads);
  constexpr int n = 1024;
  std::mt19937 rng(1);
  std::vector<std::vector<float>> a, b, c;
  for (int t = 0; t < result.threads; ++t) {
    a.push_back(randomValues(size_t(n) * n, false, rng));
    b.push_back(randomValues(size_t(n) * n, false, rng));
    c.emplace_back(size_t(n) * n);
  }
  const double seconds = bestSecondsOnThreads(result.threads, reps, [&](int t) {
    gemm(n, a[t].data(), b[t].data(), c[t].data());
  });
  result.flopsPerSecond = 2.0 * n * n * double(n) * result.threads / seconds;
  return result;
}

double measureCpuCopy(int threads, int reps) {
  const int count = hostThreads(threads);
  // 128 MB copied in all, well past the last level of cache, so that the
  // copies reach memory; shared out among the threads.
  const size_t floats = std::max<size_t>((size_t(32) << 20) / count, 1 << 20);
  std::vector<std::vector<float>> from, to;
  for (int t = 0; t < count; ++t) {
    from.emplace_back(floats, 1.0f);
    to.emplace_back(floats, 0.0f);
  }
  const double seconds = bestSecondsOnThreads(count, reps, [&](int t) {
    std::copy(from[t].begin(), from[t].end(), to[t].begin());
  });
  return 2.0 * sizeof(float) * floats * count / seconds;
}

namespace {

/// Random host tensors for every argument of `package`: inputs [leading...,
/// H, features...], parameters [H, features...].
struct HostArguments {
  std::map<std::string, HostTensor> tensors;
  std::vector<std::vector<float>> storage;
  double inputBytes = 0;

  HostArguments(const Package &package, std::vector<int64_t> leading,
                int64_t heads, std::mt19937 &rng) {
    int64_t rows = 1;
    for (int64_t d : leading)
      rows *= d;
    storage.reserve(package.info().arguments.size());
    for (const manifest::Argument &arg : package.info().arguments) {
      bool param = arg.role == manifest::Role::Param;
      std::vector<int64_t> dims = param ? std::vector<int64_t>{} : leading;
      dims.push_back(heads);
      size_t count = size_t(param ? 1 : rows) * heads;
      for (int64_t f : manifest::trailingDims(arg.kind, package.keyDim(),
                                              package.valueDim())) {
        dims.push_back(f);
        count *= size_t(f);
      }
      storage.push_back(randomValues(count, param, rng));
      tensors[arg.name] = {storage.back().data(), dims};
      if (!param)
        inputBytes += sizeof(float) * double(count);
    }
  }
};

} // namespace

Result forwardHost(const Package &package, Shape shape, int threads, int reps,
                   int64_t segmentTokens) {
  std::mt19937 rng(std::random_device{}());
  HostArguments arguments(package, {shape.batch, shape.tokens}, shape.heads,
                          rng);
  ForwardRequest request;
  request.tensors = arguments.tensors;
  std::vector<float> output(size_t(shape.batch * shape.tokens) * shape.heads *
                            package.valueDim());
  std::vector<float> finalState(size_t(shape.batch) * shape.heads *
                                package.keyDim() * package.stateColumns());
  request.output = output.data();
  request.finalState = finalState.data();
  request.threads = hostThreads(threads);
  request.segmentTokens = segmentTokens;

  Result result;
  result.milliseconds =
      medianSeconds(reps, [&] { package.forward(request); }) * 1e3;
  result.flops = forwardFlops(package, shape);
  result.kernel = package.kernelFile();
  result.threads = request.threads;
  return result;
}

Result decodeHost(const Package &package, Shape shape, int threads, int reps) {
  std::mt19937 rng(std::random_device{}());
  HostArguments arguments(package, {shape.batch, shape.tokens}, shape.heads,
                          rng);
  const size_t stateFloats = size_t(shape.batch) * shape.heads *
                             package.keyDim() * package.stateColumns();
  std::vector<float> pool = randomValues(stateFloats, false, rng);
  std::vector<float> output(size_t(shape.batch * shape.tokens) * shape.heads *
                            package.valueDim());
  DecodeRequest request;
  request.tensors = arguments.tensors;
  request.statePool = pool.data();
  request.poolShape = {shape.batch, shape.heads, package.keyDim(),
                       package.stateColumns()};
  // One slot a sequence, in reverse order as the GPU bench's.
  for (int64_t b = shape.batch - 1; b >= 0; --b)
    request.stateIndices.push_back(b);
  request.output = output.data();
  request.threads = hostThreads(threads);

  Result result;
  result.milliseconds =
      medianSeconds(reps, [&] { package.decode(request); }) * 1e3;
  // The states are read and written once, the inputs and outputs once.
  result.bytes = 2.0 * sizeof(float) * double(stateFloats) +
                 arguments.inputBytes + sizeof(float) * double(output.size());
  result.kernel = package.kernelFile();
  result.threads = request.threads;
  return result;
}

std::string cpuJsonLine(const Package &package, Shape shape,
                        const Result &result, const CpuGemm &gemm) {
  double flopsPerSecond = result.flops / (result.milliseconds * 1e-3);
  nlohmann::json line = {
      {"variant", package.layer()},
      {"mode", "forward"},
      {"target", "cpu"},
      {"kernel", result.kernel},
      {"shape", shapeJson(package, shape)},
      {"threads", result.threads},
      {"ms", result.milliseconds},
      {"gflop_per_s", flopsPerSecond * 1e-9},
      {"gemm_gflop_per_s", gemm.flopsPerSecond * 1e-9},
      {"gemm_isa", gemm.isa},
      {"fraction_of_gemm", flopsPerSecond / gemm.flopsPerSecond},
  };
  return line.dump();
}

std::string cpuDecodeJsonLine(const Package &package, Shape shape,
                              const Result &result,
                              double copyBytesPerSecond) {
  double bytesPerSecond = result.bytes / (result.milliseconds * 1e-3);
  nlohmann::json line = {
      {"variant", package.layer()},
      {"mode", "decode"},
      {"target", "cpu"},
      {"kernel", result.kernel},
      {"shape", shapeJson(package, shape)},
      {"threads", result.threads},
      {"ms", result.milliseconds},
      {"gb_per_s", bytesPerSecond * 1e-9},
      {"copy_gb_per_s", copyBytesPerSecond * 1e-9},
      {"fraction_of_copy", bytesPerSecond / copyBytesPerSecond},
  };
  return line.dump();
}

} // namespace linac::bench
