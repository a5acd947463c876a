//===- cpu_vec_test.cpp - elementwise primitives of the CPU templates -----===//
//
// The cases where a naive formula goes wrong: NaN through maximum/minimum,
// softplus far from zero, l2norm of a zero vector.
//
//===----------------------------------------------------------------------===//

#include "linac/cpu/vec.h"

#include <gtest/gtest.h>

#include <cmath>

namespace {

using linac::cpu::Vec;

TEST(CpuVec, MaximumAndMinimumPropagateNaN) {
  EXPECT_TRUE(std::isnan(linac::cpu::maximum(NAN, 1.0f)));
  EXPECT_TRUE(std::isnan(linac::cpu::minimum(1.0f, NAN)));
  Vec<2> a = Vec<2>::splat(NAN), b = Vec<2>::splat(3.0f);
  EXPECT_TRUE(std::isnan(linac::cpu::maximum(a, b)[1]));
  EXPECT_EQ(linac::cpu::maximum(2.0f, 3.0f), 3.0f);
  EXPECT_EQ(linac::cpu::minimum(2.0f, 3.0f), 2.0f);
}

TEST(CpuVec, SoftplusStaysFiniteFarFromZero) {
  EXPECT_FLOAT_EQ(linac::cpu::softplus(200.0f), 200.0f);
  float tiny = linac::cpu::softplus(-200.0f);
  EXPECT_TRUE(tiny >= 0.0f && tiny < 1e-30f);
  EXPECT_FLOAT_EQ(linac::cpu::softplus(0.0f), std::log(2.0f));
}

TEST(CpuVec, L2NormOfZeroIsZero) {
  Vec<4> zero = linac::cpu::l2norm(Vec<4>{}, 1e-6f);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(zero[i], 0.0f);
  Vec<2> v;
  v[0] = 3.0f;
  v[1] = 4.0f;
  Vec<2> unit = linac::cpu::l2norm(v, 0.0f);
  EXPECT_FLOAT_EQ(unit[0], 0.6f);
  EXPECT_FLOAT_EQ(unit[1], 0.8f);
}

} // namespace
