//===- cpu_vec_test.cpp - elementwise primitives of the CPU templates -----===//
//
// The cases where a naive formula goes wrong: NaN through maximum/minimum,
// softplus far from zero, l2norm of a zero vector; and the vectorised
// functions of whole vectors against libm's, NaN and infinities included.
//
//===----------------------------------------------------------------------===//

#include "linac/cpu/vec.h"
#include "linac/package.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

namespace {

using linac::cpu::Vec;

/// The products archive of LINAC_TEST_ISA is linked in: its code runs only
/// on a host with that instruction set.
class CpuVec : public testing::Test {
protected:
  void SetUp() override {
    if (!linac::hostRuns(*linac::manifest::parse<linac::manifest::CpuIsa>(
            LINAC_TEST_ISA)))
      GTEST_SKIP() << "this host lacks " << LINAC_TEST_ISA;
  }
};

TEST_F(CpuVec, MaximumAndMinimumPropagateNaN) {
  EXPECT_TRUE(std::isnan(linac::cpu::maximum(NAN, 1.0f)));
  EXPECT_TRUE(std::isnan(linac::cpu::minimum(1.0f, NAN)));
  Vec<2> a = Vec<2>::splat(NAN), b = Vec<2>::splat(3.0f);
  EXPECT_TRUE(std::isnan(linac::cpu::maximum(a, b)[1]));
  EXPECT_EQ(linac::cpu::maximum(2.0f, 3.0f), 3.0f);
  EXPECT_EQ(linac::cpu::minimum(2.0f, 3.0f), 2.0f);
}

TEST_F(CpuVec, SoftplusStaysFiniteFarFromZero) {
  EXPECT_FLOAT_EQ(linac::cpu::softplus(200.0f), 200.0f);
  float tiny = linac::cpu::softplus(-200.0f);
  EXPECT_TRUE(tiny >= 0.0f && tiny < 1e-30f);
  EXPECT_FLOAT_EQ(linac::cpu::softplus(0.0f), std::log(2.0f));
}

TEST_F(CpuVec, L2NormOfZeroIsZero) {
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

/// Vectors of 1000 values, drawn afresh: normal ones scaled up to 100,
/// zeros, infinities, NaN and values where the functions under- or
/// overflow.
Vec<1000> testValues() {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> exponent(-3.0f, 2.0f);
  Vec<1000> v;
  const float specials[] = {0.0f,  -0.0f, INFINITY, -INFINITY, NAN,
                            -90.0f, 90.0f, -200.0f,  200.0f,    1e-30f};
  for (int i = 0; i < 1000; ++i)
    v[i] = i < 10 ? specials[i] : normal(rng) * std::pow(10.0f, exponent(rng));
  return v;
}

void expectClose(const Vec<1000> &in, const Vec<1000> &got,
                 const std::function<double(double)> &want, const char *name) {
  for (int i = 0; i < 1000; ++i) {
    double expected = want(double(in[i]));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got[i])) << name << "(" << in[i] << ")";
      continue;
    }
    if (std::isinf(expected) || std::fabs(expected) > 3e38) {
      EXPECT_EQ(got[i], float(expected)) << name << "(" << in[i] << ")";
      continue;
    }
    // A few fp32 ulps, or absolutely below fp32's least normal number.
    EXPECT_NEAR(got[i], expected, 4e-7 * std::fabs(expected) + 1.2e-38)
        << name << "(" << in[i] << ")";
  }
}

TEST_F(CpuVec, VectorisedFunctionsMatchLibm) {
  Vec<1000> x = testValues();
  Vec<1000> positive = linac::cpu::abs_(x);
  expectClose(x, linac::cpu::exp_(x), [](double v) { return std::exp(v); }, "exp");
  expectClose(x, linac::cpu::tanh_(x), [](double v) { return std::tanh(v); }, "tanh");
  expectClose(x, linac::cpu::softplus(x),
              [](double v) { return std::max(v, 0.0) + std::log1p(std::exp(-std::fabs(v))); },
              "softplus");
  expectClose(x, linac::cpu::sigmoid(x), [](double v) { return 1 / (1 + std::exp(-v)); },
              "sigmoid");
  expectClose(positive, linac::cpu::log_(positive), [](double v) { return std::log(v); }, "log");
  expectClose(positive, linac::cpu::log1p_(positive), [](double v) { return std::log1p(v); },
              "log1p");
  expectClose(positive, linac::cpu::sqrt_(positive), [](double v) { return std::sqrt(v); },
              "sqrt");
  expectClose(positive, linac::cpu::rsqrt(positive), [](double v) { return 1 / std::sqrt(v); },
              "rsqrt");
}

TEST_F(CpuVec, DotMatchesDoubleSum) {
  Vec<1000> a = testValues(), b = testValues();
  for (int i = 0; i < 10; ++i)
    a[i] = b[i] = 1.0f; // no NaN or infinity in the sum
  double want = 0;
  for (int i = 0; i < 1000; ++i)
    want += double(a[i]) * b[i];
  EXPECT_NEAR(linac::cpu::dot(a, b), want, 1e-6 * std::fabs(want));
  Vec<13> c = Vec<13>::splat(2.0f); // a tail past the last eight
  EXPECT_EQ(linac::cpu::dot(c, c), 52.0f);
}

} // namespace
