//===- bench.h - timing packages on the GPU ---------------------*- C++ -*-===//
//
// Times a CUDA package's forward pass with CUDA events on random inputs,
// and measures the two ceilings its floor is computed from (a
// device-to-device copy and a bf16 matrix product) in the same process
// (docs/performance.md, two ceilings, measured in every run).
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_BENCH_H
#define LINAC_BENCH_H

#include "linac/package.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace linac::bench {

/// Bytes per element of `dtype`.
size_t elementSize(DType dtype);
/// Host floats as `dtype`'s bytes (rounded to nearest), and back.
std::vector<char> encodeAs(const std::vector<float> &values, DType dtype);
std::vector<float> decodeFrom(const std::vector<char> &bytes, DType dtype);
/// Integers as raw bytes, for a DeviceBuffer (state indices, offsets).
std::vector<char> bytesOf(const std::vector<int64_t> &values);

/// Device memory, freed on scope exit; CUDA failures throw Error.
class DeviceBuffer {
public:
  explicit DeviceBuffer(size_t bytes);
  /// A copy of `host` on the device.
  explicit DeviceBuffer(const std::vector<char> &host);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  void *data() const { return data_; }
  std::vector<char> download() const;

private:
  void *data_ = nullptr;
  size_t bytes_ = 0;
};

struct Ceilings {
  double copyBytesPerSecond = 0; ///< bytes read plus written
  double gemmFlopsPerSecond = 0; ///< bf16 8192^3 through cuBLAS
};

/// Median of `reps` timed runs of each after warm-up.
Ceilings measureCeilings(int reps = 20);

struct Shape {
  int64_t batch = 8, tokens = 4096, heads = 16;
};

/// `count` random inputs as both benches draw them: normal(0, 1), or
/// uniform in [0.1, 0.9] for parameters. Normals come from a pool of 2^22
/// at a random offset, since drawing billions one by one would dominate
/// the run.
inline std::vector<float> randomValues(size_t count, bool uniform,
                                       std::mt19937 &rng) {
  constexpr size_t kPool = size_t(1) << 22;
  static const std::vector<float> normals = [] {
    std::mt19937 poolRng(std::random_device{}());
    std::normal_distribution<float> normal;
    std::vector<float> pool(kPool);
    for (float &x : pool)
      x = normal(poolRng);
    return pool;
  }();
  std::uniform_real_distribution<float> unit(0.1f, 0.9f);
  size_t offset = rng() % kPool;
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i)
    values[i] = uniform ? unit(rng) : normals[(i + offset) & (kPool - 1)];
  return values;
}

/// docs/performance.md's FLOP count of `package`'s forward pass at `shape`:
/// the chunkwise algorithm's products, for a recurrent layer the ones it
/// could take.
inline double forwardFlops(const Package &package, Shape shape) {
  double k = double(package.keyDim()), v = double(package.valueDim());
  double c = double(package.info().plan.chunkSize.value_or(64));
  bool erase = package.info().normalForm.erase != manifest::Strength::None;
  double perTokenHead = erase ? 6 * k * v + 4 * c * (k + v) + 2.0 / 3.0 * c * c
                              : 4 * k * v + 2 * c * (k + v);
  return perTokenHead * double(shape.batch * shape.tokens) * double(shape.heads);
}

struct Result {
  double milliseconds = 0; ///< median over the timed runs
  /// The host's time a call, launches queued behind each other.
  double hostMicroseconds = 0;
  double bytes = 0;        ///< the fewest bytes the pass must move
  double flops = 0;        ///< docs/performance.md's FLOP count
  std::string kernel;      ///< the entry that ran; of a cpu package its file
  int threads = 0;         ///< a cpu pass's threads
};

/// Runs `package` at `shape` on fresh random inputs in `dtype`: warm-up,
/// then the median of `reps` runs timed with CUDA events, each behind a
/// clear of L2; `segmentTokens` as DeviceForwardRequest takes it.
Result forward(const Package &package, Shape shape, DType dtype, int reps = 50,
               int64_t segmentTokens = 0);

/// Times a decode step of shape.tokens new tokens for each of shape.batch
/// sequences, each in its own slot of a pool of shape.batch slots.
Result decode(const Package &package, Shape shape, DType dtype, int reps = 50);

/// One JSON line: variant, mode (forward or decode), shape, dtype, ms, GB/s
/// over the minimum bytes, TFLOP/s, % of floor and both ceilings.
std::string jsonLine(const Package &package, const char *mode, Shape shape,
                     DType dtype, const Result &result,
                     const Ceilings &ceilings);

/// The floor in milliseconds: max(bytes / copy, FLOPs / GEMM).
double floorMilliseconds(const Result &result, const Ceilings &ceilings);

/// The median seconds of `reps` calls timed on the host's clock, after an
/// untimed one (inline: the cpu bench links without the CUDA bench).
inline double medianSeconds(int reps, const std::function<void()> &call) {
  call();
  std::vector<double> times;
  for (int rep = 0; rep < reps; ++rep) {
    auto start = std::chrono::steady_clock::now();
    call();
    times.push_back(std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - start)
                        .count());
  }
  std::nth_element(times.begin(), times.begin() + reps / 2, times.end());
  return times[reps / 2];
}

} // namespace linac::bench

#endif // LINAC_BENCH_H
