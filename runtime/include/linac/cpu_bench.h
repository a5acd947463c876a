//===- cpu_bench.h - timing cpu packages ------------------------*- C++ -*-===//
//
// Times a cpu package's forward pass on random fp32 inputs, and measures
// the host's fp32 GEMM rate in the same process, so that a pass's speed is
// reported as a fraction of what the machine's products reach
// (docs/performance.md).
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CPU_BENCH_H
#define LINAC_CPU_BENCH_H

#include "linac/bench.h"

#include <string>

namespace linac::bench {

/// The host's fp32 GEMM rate on `threads` threads (as hostThreads takes
/// them), each multiplying its own 1024 x 1024 matrices: the best of `reps`
/// rounds, with Eigen built for the richest instruction set the host runs
/// (`isa`).
struct CpuGemm {
  double flopsPerSecond = 0;
  std::string isa;
  int threads = 0;
};
CpuGemm measureCpuGemm(int threads, int reps = 5);

/// The host's memory copy rate (bytes read and written a second) on
/// `threads` threads, each copying its share of 128 MB: the best of `reps`
/// rounds. Decode reads and writes each state once, so this is its
/// ceiling.
double measureCpuCopy(int threads, int reps = 5);

/// Runs cpu `package`'s forward pass at `shape` on `threads` threads, its
/// sequences cut as `segmentTokens` says (ForwardRequest's), on fresh
/// random inputs: one untimed call, then the median of `reps`.
Result forwardHost(const Package &package, Shape shape, int threads,
                   int reps = 5, int64_t segmentTokens = 0);

/// A decode step of cpu `package`: B = shape.batch sequences of
/// shape.tokens new tokens, each its own slot of a random state pool, as
/// forwardHost times; `bytes` counts the states read and written and the
/// inputs and outputs.
Result decodeHost(const Package &package, Shape shape, int threads,
                  int reps = 5);

/// One JSON line: variant, mode, target, kernel file, shape, threads, ms,
/// GFLOP/s, the GEMM's rate and instruction set, and the pass's rate as a
/// fraction of it.
std::string cpuJsonLine(const Package &package, Shape shape,
                        const Result &result, const CpuGemm &gemm);

/// One JSON line of a decode step: variant, mode, target, kernel file,
/// shape, threads, ms, GB/s, the copy rate and the step's fraction of it.
std::string cpuDecodeJsonLine(const Package &package, Shape shape,
                              const Result &result,
                              double copyBytesPerSecond);

} // namespace linac::bench

#endif // LINAC_CPU_BENCH_H
