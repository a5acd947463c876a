//===- cpu_numerics_test.cpp - CPU packages against the fp64 reference ----===//
//
// Every example, and specs no seed system uses, at several K and V, on fresh
// random inputs (gates moderate, strong, saturating to decay factors of 0,
// and zero): output and final state within 1e-5 of the reference, every
// element written and finite; and a token of NaN gates, which must leave
// NaN wherever the reference has NaN.
//
//===----------------------------------------------------------------------===//

#include "harness.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace fs = std::filesystem;
using namespace linac::harness;

namespace {

void check(const fs::path &spec, Dims dims, const Case &c) {
  auto package =
      compiled(spec, dims, fs::path(testing::TempDir()) / "linac_cpu_numerics",
               Passes::ForwardOnly);
  Outcome outcome = run(*package, dims, c);
  EXPECT_TRUE(outcome.finite) << "an output or final-state element is unwritten or not finite";
  EXPECT_LE(outcome.outputError, 1e-5);
  EXPECT_LE(outcome.stateError, 1e-5);
}


class CpuNumerics : public testing::TestWithParam<fs::path> {};

TEST_P(CpuNumerics, Lengths) {
  for (int64_t tokens : {1, 63, 64, 65, 300}) {
    SCOPED_TRACE("T = " + std::to_string(tokens));
    Case c;
    c.tokens = tokens;
    check(GetParam(), {64, 64}, c);
  }
}

TEST_P(CpuNumerics, Dimensions) {
  for (Dims dims : {Dims{16, 16}, Dims{100, 64}, Dims{64, 100}, Dims{128, 128}}) {
    SCOPED_TRACE("K = " + std::to_string(dims.k) + ", V = " + std::to_string(dims.v));
    Case c;
    c.tokens = 130;
    c.initialState = true;
    check(GetParam(), dims, c);
  }
}

TEST_P(CpuNumerics, VariableLengthsWithInitialState) {
  Case c;
  c.batch = 1;
  c.cuSeqlens = {0, 1, 1, 66, 130, 330};
  c.initialState = true;
  check(GetParam(), {64, 64}, c);
}

TEST_P(CpuNumerics, AnyThreadCount) {
  // One worker, fewer workers than (sequence, head) pairs, and more.
  for (int threads : {1, 3, 64}) {
    SCOPED_TRACE("threads = " + std::to_string(threads));
    Case c;
    c.batch = 1;
    c.cuSeqlens = {0, 70, 70, 200};
    c.heads = 4;
    c.initialState = true;
    c.threads = threads;
    check(GetParam(), {64, 64}, c);
  }
}

// Sequences cut into pieces that run side by side, composed exactly: by
// request (pieces of one and of two chunks, a varlen batch whose short
// sequences stay whole) and where idle workers call for them (one head of
// one long sequence on eight workers, the first piece shorter than the
// others without an erase), under strong gates too.
TEST_P(CpuNumerics, Pieces) {
  for (int64_t segmentTokens : {64, 100}) {
    SCOPED_TRACE("segment tokens = " + std::to_string(segmentTokens));
    Case c;
    c.batch = 1;
    c.cuSeqlens = {0, 70, 70, 330};
    c.initialState = true;
    c.threads = 3;
    c.segmentTokens = segmentTokens;
    check(GetParam(), {64, 64}, c);
  }
  for (GateRange gates : {GateRange::Moderate, GateRange::Strong}) {
    Case c;
    c.batch = 1;
    c.heads = c.keyHeads = 1;
    c.tokens = 1100;
    c.initialState = true;
    c.threads = 8;
    c.gates = gates;
    check(GetParam(), {64, 64}, c);
  }
}

TEST_P(CpuNumerics, GroupedHeads) {
  Case c;
  c.heads = 4;
  c.keyHeads = 2;
  c.tokens = 70;
  c.initialState = true;
  check(GetParam(), {64, 64}, c);
}

TEST_P(CpuNumerics, StrongGates) {
  Case c;
  c.tokens = 150;
  c.gates = GateRange::Strong;
  check(GetParam(), {64, 64}, c);
}

// Decay factors of exactly 0 where fp32's gate math saturates: a reset,
// never a NaN.
TEST_P(CpuNumerics, SaturatingGates) {
  Case c;
  c.tokens = 150;
  c.gates = GateRange::Saturating;
  c.initialState = true;
  check(GetParam(), {64, 64}, c);
}

// A NaN gate is no reset: the floor keeps it NaN, so the kernel's results
// are NaN wherever the reference's are.
TEST_P(CpuNumerics, NanGatesStayNan) {
  Dims dims{64, 64};
  auto package = compiled(GetParam(), dims,
                          fs::path(testing::TempDir()) / "linac_cpu_numerics",
                          Passes::ForwardOnly);
  Case c;
  c.tokens = 150;
  c.initialState = true;
  c.nanGateToken = 70;
  Outcome outcome = run(*package, dims, c);
  EXPECT_TRUE(outcome.nansKept) << "a NaN gate became a number";
  if (!makeProblem(*package, dims, c).decayInputs.empty()) {
    EXPECT_GT(outcome.referenceNans, 0) << "no NaN reached the reference";
  }
}

TEST_P(CpuNumerics, ZeroKeysAndGates) {
  Case c;
  c.tokens = 100;
  c.zeroKeys = true;
  c.gates = GateRange::Zero;
  c.initialState = true;
  check(GetParam(), {64, 64}, c);
}

INSTANTIATE_TEST_SUITE_P(Specs, CpuNumerics, testing::ValuesIn(testSpecs()),
                         [](const testing::TestParamInfo<fs::path> &info) {
                           return info.param.stem().string();
                         });

} // namespace
