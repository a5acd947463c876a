//===- cpu_bench.cpp - timing cpu packages --------------------------------===//

#include "linac/cpu_bench.h"

#include "bench_json.h"
#include "cpu_gemms.h"


#include <algorithm>
#include <chrono>
#include <functional>
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
  double best = 0;
  for (int rep = 0; rep <= reps; ++rep) {
    double seconds = secondsOf([&] {
      std::vector<std::thread> pool;
      for (int t = 1; t < result.threads; ++t)
        pool.emplace_back(
            [&, t] { gemm(n, a[t].data(), b[t].data(), c[t].data()); });
      gemm(n, a[0].data(), b[0].data(), c[0].data());
      for (std::thread &thread : pool)
        thread.join();
    });
    // The first round warms caches and pages up, untimed.
    if (rep > 0)
      best = std::max(best, 2.0 * n * n * double(n) * result.threads / seconds);
  }
  result.flopsPerSecond = best;
  return result;
}

Result forwardHost(const Package &package, Shape shape, int threads, int reps) {
  std::mt19937 rng(std::random_device{}());
  int64_t k = package.keyDim(), v = package.valueDim();
  ForwardRequest request;
  std::vector<std::vector<float>> storage;
  for (const manifest::Argument &arg : package.info().arguments) {
    bool param = arg.role == manifest::Role::Param;
    std::vector<int64_t> dims =
        param ? std::vector<int64_t>{shape.heads}
              : std::vector<int64_t>{shape.batch, shape.tokens, shape.heads};
    size_t count = size_t(param ? 1 : shape.batch * shape.tokens) * shape.heads;
    for (int64_t f : manifest::trailingDims(arg.kind, k, v)) {
      dims.push_back(f);
      count *= size_t(f);
    }
    storage.push_back(randomValues(count, param, rng));
    request.tensors[arg.name] = {storage.back().data(), dims};
  }
  std::vector<float> output(size_t(shape.batch * shape.tokens) * shape.heads *
                            v);
  std::vector<float> finalState(size_t(shape.batch) * shape.heads * k *
                                package.stateColumns());
  request.output = output.data();
  request.finalState = finalState.data();
  request.threads = hostThreads(threads);

  package.forward(request);
  std::vector<double> times;
  for (int rep = 0; rep < reps; ++rep)
    times.push_back(secondsOf([&] { package.forward(request); }));
  std::nth_element(times.begin(), times.begin() + reps / 2, times.end());

  Result result;
  result.milliseconds = times[reps / 2] * 1e3;
  result.flops = forwardFlops(package, shape);
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

} // namespace linac::bench
