//===- cpu_bench_test.cpp - timing cpu packages ---------------------------===//
//
// The CPU bench times a real pass and a real GEMM, counts the FLOPs of
// docs/performance.md, and reports both in its JSON line; and a real
// decode step beside the host's copy rate.
//
//===----------------------------------------------------------------------===//

#include "harness.h"
#include "linac/cpu_bench.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using namespace linac::harness;

namespace {

std::shared_ptr<linac::Package> package(const char *example) {
  return compiled(fs::path(LINAC_EXAMPLES_DIR) / example, {32, 16},
                  fs::path(testing::TempDir()) / "linac_cpu_bench");
}

TEST(CpuBench, TimesAPassAndCountsItsFlops) {
  linac::bench::Shape shape{2, 100, 3};
  // Chunks of 64: 4KV + 2C(K + V) a token and head without an erase, and
  // 6KV + 4C(K + V) + 2C^2/3 with one.
  auto linear = package("linear_attention.mlir");
  linac::bench::Result result = linac::bench::forwardHost(*linear, shape, 2, 3);
  EXPECT_GT(result.milliseconds, 0.0);
  EXPECT_EQ(result.threads, 2);
  EXPECT_EQ(result.kernel, linear->kernelFile());
  EXPECT_DOUBLE_EQ(result.flops, (4 * 32 * 16 + 2 * 64 * 48) * 600.0);
  auto delta = package("deltanet.mlir");
  EXPECT_DOUBLE_EQ(linac::bench::forwardHost(*delta, shape, 1, 1).flops,
                   (6 * 32 * 16 + 4 * 64 * 48 + 2.0 / 3.0 * 64 * 64) * 600.0);
}

TEST(CpuBench, ReportsTheGemmRateBeside) {
  linac::bench::CpuGemm gemm = linac::bench::measureCpuGemm(1, 1);
  EXPECT_EQ(gemm.threads, 1);
  // Any host multiplies faster than 0.1 GFLOP/s and slower than 100 TFLOP/s.
  EXPECT_GT(gemm.flopsPerSecond, 1e8);
  EXPECT_LT(gemm.flopsPerSecond, 1e14);
  EXPECT_TRUE(linac::hostRuns(
      *linac::manifest::parse<linac::manifest::CpuIsa>(gemm.isa)));

  auto linear = package("linear_attention.mlir");
  linac::bench::Shape shape{1, 64, 2};
  linac::bench::Result result = linac::bench::forwardHost(*linear, shape, 1, 1);
  nlohmann::json line =
      nlohmann::json::parse(linac::bench::cpuJsonLine(*linear, shape, result, gemm));
  EXPECT_EQ(line["variant"], "linear_attention");
  EXPECT_EQ(line["threads"], 1);
  EXPECT_EQ(line["shape"]["K"], 32);
  EXPECT_EQ(line["gemm_isa"], gemm.isa);
  double rate = result.flops / (result.milliseconds * 1e-3);
  EXPECT_DOUBLE_EQ(line["gflop_per_s"].get<double>(), rate * 1e-9);
  EXPECT_DOUBLE_EQ(line["fraction_of_gemm"].get<double>(),
                   rate / gemm.flopsPerSecond);
}

TEST(CpuBench, TimesADecodeStepBesideTheCopyRate) {
  const double copy = linac::bench::measureCpuCopy(1, 1);
  // Any host copies faster than 0.1 GB/s and slower than 10 TB/s.
  EXPECT_GT(copy, 1e8);
  EXPECT_LT(copy, 1e13);

  auto linear = package("linear_attention.mlir");
  linac::bench::Shape shape{3, 2, 4};
  linac::bench::Result result = linac::bench::decodeHost(*linear, shape, 2, 2);
  EXPECT_GT(result.milliseconds, 0.0);
  EXPECT_EQ(result.threads, 2);
  // States [3, 4, 32, 16] read and written; q, k and v of 3 x 2 tokens and
  // 4 heads read, outputs written.
  EXPECT_DOUBLE_EQ(result.bytes, 4.0 * (2 * 3 * 4 * 32 * 16 +
                                        3 * 2 * 4 * (32 + 32 + 16 + 16)));
  nlohmann::json line = nlohmann::json::parse(
      linac::bench::cpuDecodeJsonLine(*linear, shape, result, copy));
  EXPECT_EQ(line["mode"], "decode");
  EXPECT_EQ(line["shape"]["T"], 2);
  double rate = result.bytes / (result.milliseconds * 1e-3);
  EXPECT_DOUBLE_EQ(line["gb_per_s"].get<double>(), rate * 1e-9);
  EXPECT_DOUBLE_EQ(line["fraction_of_copy"].get<double>(), rate / copy);
}

TEST(CpuBench, RefusesThreadCountsOutOfRange) {
  EXPECT_THROW(linac::bench::measureCpuGemm(-1, 1), linac::Error);
  EXPECT_THROW(linac::bench::measureCpuCopy(1025, 1), linac::Error);
  EXPECT_THROW(linac::bench::forwardHost(*package("linear_attention.mlir"),
                                         {1, 8, 1}, 2000, 1),
               linac::Error);
}

} // namespace
