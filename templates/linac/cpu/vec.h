//===- vec.h - fixed-size vectors for generated CPU layers ------*- C++ -*-===//
//
// The value types generated prologues and steps compute with: float for
// per-token scalars, Vec<N> for key-side and value-side vectors, Mat<K, V>
// for per-token matrices, with the elementwise functions the dialect's
// arith, math and helper ops lower to.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CPU_VEC_H
#define LINAC_CPU_VEC_H

#include "linac/cpu/vector_math.h"

#include <algorithm>
#include <array>
#include <cmath>

/// Generated layers mark functions the CUDA templates call on the device.
#define LINAC_HOST_DEVICE

namespace linac::cpu {

template <int N> struct Vec {
  std::array<float, N> x{};

  static Vec splat(float value) {
    Vec v;
    v.x.fill(value);
    return v;
  }
  static Vec load(const float *p) {
    Vec v;
    std::copy(p, p + N, v.x.begin());
    return v;
  }
  float &operator[](int i) { return x[i]; }
  float operator[](int i) const { return x[i]; }
};

template <int K, int V> using Mat = Vec<K * V>;

inline float loadScalar(const float *p) { return *p; }
template <int N> void store(float *out, const Vec<N> &v) {
  std::copy(v.x.begin(), v.x.end(), out);
}

template <int N, typename F> Vec<N> map(const Vec<N> &a, F f) {
  Vec<N> r;
  for (int i = 0; i < N; ++i)
    r[i] = f(a[i]);
  return r;
}
template <int N, typename F>
Vec<N> zip(const Vec<N> &a, const Vec<N> &b, F f) {
  Vec<N> r;
  for (int i = 0; i < N; ++i)
    r[i] = f(a[i], b[i]);
  return r;
}

template <int N> Vec<N> operator+(const Vec<N> &a, const Vec<N> &b) {
  return zip(a, b, [](float x, float y) { return x + y; });
}
template <int N> Vec<N> operator-(const Vec<N> &a, const Vec<N> &b) {
  return zip(a, b, [](float x, float y) { return x - y; });
}
template <int N> Vec<N> operator*(const Vec<N> &a, const Vec<N> &b) {
  return zip(a, b, [](float x, float y) { return x * y; });
}
template <int N> Vec<N> operator/(const Vec<N> &a, const Vec<N> &b) {
  return zip(a, b, [](float x, float y) { return x / y; });
}
template <int N> Vec<N> operator-(const Vec<N> &a) {
  return map(a, [](float x) { return -x; });
}

inline float softplus(float x) {
  return std::max(x, 0.0f) + std::log1p(std::exp(-std::fabs(x)));
}
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }
// arith.maximumf and arith.minimumf propagate NaN, unlike std::fmax.
inline float maximum(float a, float b) {
  return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
}
inline float minimum(float a, float b) {
  return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
}

#define LINAC_CPU_UNARY(name, fn)                                              \
  inline float name(float x) { return fn(x); }                                 \
  template <int N> Vec<N> name(const Vec<N> &a) {                              \
    return map(a, [](float x) { return fn(x); });                              \
  }
LINAC_CPU_UNARY(exp2_, std::exp2)
LINAC_CPU_UNARY(log2_, std::log2)
LINAC_CPU_UNARY(abs_, std::fabs)
#undef LINAC_CPU_UNARY

/// A vector through vector_math.cpp's vectorised kernels; one token's
/// scalars stay with libm.
template <int N> Vec<N> applied(MathFunction f, const Vec<N> &a) {
  Vec<N> r;
  applyMath(f, a.x.data(), r.x.data(), N);
  return r;
}
#define LINAC_CPU_VECTOR_UNARY(name, scalar, function)                         \
  inline float name(float x) { return scalar(x); }                             \
  template <int N> Vec<N> name(const Vec<N> &a) {                              \
    return applied(MathFunction::function, a);                                 \
  }
LINAC_CPU_VECTOR_UNARY(exp_, std::exp, Exp)
LINAC_CPU_VECTOR_UNARY(log_, std::log, Log)
LINAC_CPU_VECTOR_UNARY(log1p_, std::log1p, Log1p)
LINAC_CPU_VECTOR_UNARY(sqrt_, std::sqrt, Sqrt)
LINAC_CPU_VECTOR_UNARY(tanh_, std::tanh, Tanh)
#undef LINAC_CPU_VECTOR_UNARY

template <int N> Vec<N> softplus(const Vec<N> &a) {
  return applied(MathFunction::Softplus, a);
}
template <int N> Vec<N> sigmoid(const Vec<N> &a) {
  return applied(MathFunction::Sigmoid, a);
}
template <int N> Vec<N> rsqrt(const Vec<N> &a) {
  Vec<N> r = applied(MathFunction::Sqrt, a);
  for (int i = 0; i < N; ++i)
    r[i] = 1.0f / r[i];
  return r;
}
template <int N> Vec<N> maximum(const Vec<N> &a, const Vec<N> &b) {
  return zip(a, b, [](float x, float y) { return maximum(x, y); });
}
template <int N> Vec<N> minimum(const Vec<N> &a, const Vec<N> &b) {
  return zip(a, b, [](float x, float y) { return minimum(x, y); });
}
inline float pow_(float a, float b) { return std::pow(a, b); }
template <int N> Vec<N> pow_(const Vec<N> &a, const Vec<N> &b) {
  return zip(a, b, [](float x, float y) { return std::pow(x, y); });
}

template <int N> float dot(const Vec<N> &a, const Vec<N> &b) {
  // Eight partial sums in double, which the compiler keeps in vector
  // registers, rather than one chain of dependent additions.
  constexpr int kLanes = 8;
  double partial[kLanes] = {};
  for (int i = 0; i + kLanes <= N; i += kLanes)
    for (int j = 0; j < kLanes; ++j)
      partial[j] += double(a[i + j]) * b[i + j];
  double sum = 0;
  for (int i = N - N % kLanes; i < N; ++i)
    sum += double(a[i]) * b[i];
  for (double p : partial)
    sum += p;
  return float(sum);
}

template <int N> Vec<N> l2norm(const Vec<N> &a, float eps) {
  float inv = 1.0f / std::sqrt(dot(a, a) + eps);
  return map(a, [inv](float x) { return x * inv; });
}

} // namespace linac::cpu

#endif // LINAC_CPU_VEC_H
