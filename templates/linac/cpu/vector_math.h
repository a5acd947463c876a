//===- vector_math.h - vectorised elementwise math on the CPU ---*- C++ -*-===//
//
// The transcendental functions generated prologues apply to whole key and
// value vectors, compiled once per instruction set with Eigen's vectorised
// kernels (vector_math.cpp, in each instruction set's products archive),
// so that a package's compilation does not parse Eigen and its vectors do
// not go through libm an element at a time.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CPU_VECTOR_MATH_H
#define LINAC_CPU_VECTOR_MATH_H

namespace linac::cpu {

enum class MathFunction { Exp, Log, Log1p, Tanh, Sqrt, Softplus, Sigmoid };

/// out[i] = f(in[i]) for i < n; `in` and `out` may be the same array.
void applyMath(MathFunction f, const float *in, float *out, int n);

} // namespace linac::cpu

#endif // LINAC_CPU_VECTOR_MATH_H
