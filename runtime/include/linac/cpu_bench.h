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

/// Runs cpu `package`'s forward pass at `shape` on `threads` threads, on
/// fresh random inputs: one untimed call, then the median of `reps`.
Result forwardHost(const Package &package, Shape shape, int threads,
                   int reps = 5);

/// One JSON line: variant, mode, target, kernel file, shape, threads, ms,
/// GFLOP/s, the GEMM's rate and instruction set, and the pass's rate as a
/// fraction of it.
std::string cpuJsonLine(const Package &package, Shape shape,
                        const Result &result, const CpuGemm &gemm);

} // namespace linac::bench

#endif // LINAC_CPU_BENCH_H
