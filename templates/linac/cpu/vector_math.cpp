//===- vector_math.cpp - vectorised elementwise math on the CPU ------------===//
//
// Eigen's packet math (polynomial exp, log and tanh within a few ulp of
// libm's) over a whole vector. NaN stays NaN through every function.
//
//===----------------------------------------------------------------------===//

#include "linac/cpu/vector_math.h"

#include <Eigen/Core>

namespace linac::cpu {

void applyMath(MathFunction f, const float *in, float *out, int n) {
  Eigen::Map<const Eigen::ArrayXf> x(in, n);
  Eigen::Map<Eigen::ArrayXf> y(out, n);
  switch (f) {
  case MathFunction::Exp:
    y = x.exp();
    break;
  case MathFunction::Log:
    y = x.log();
    break;
  case MathFunction::Log1p:
    y = x.log1p();
    break;
  case MathFunction::Tanh:
    y = x.tanh();
    break;
  case MathFunction::Sqrt:
    y = x.sqrt();
    break;
  case MathFunction::Softplus:
    // max(x, 0) + log(1 + e^-|x|): no overflow far from zero; a NaN x
    // makes the second term NaN whatever the first.
    y = x.max(0.0f) + (-x.abs()).exp().log1p();
    break;
  case MathFunction::Sigmoid:
    y = (1.0f + (-x).exp()).inverse();
    break;
  }
}

} // namespace linac::cpu
