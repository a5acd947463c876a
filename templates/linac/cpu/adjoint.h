//===- adjoint.h - what generated backward code computes with -*- C++ -*-===//
//
// The reverse of vec.h: the helpers the adjoints of generated
// prologueBackward and epilogueBackward call (compiler/lib/Codegen.cpp,
// emitAdjoint), each derivative the fp64 reference's, and the sink of an
// argument's gradient. Mixed float and Vec arithmetic appears only here:
// the forward's ops combine values of one type.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CPU_ADJOINT_H
#define LINAC_CPU_ADJOINT_H

#include "linac/cpu/vec.h"

#include <algorithm>
#include <cmath>

namespace linac::cpu {

template <int N> Vec<N> operator*(float s, const Vec<N> &v) {
  return map(v, [s](float x) { return s * x; });
}
template <int N> Vec<N> operator*(const Vec<N> &v, float s) { return s * v; }
template <int N> Vec<N> operator-(float s, const Vec<N> &v) {
  return map(v, [s](float x) { return s - x; });
}
template <int N> Vec<N> operator+(float s, const Vec<N> &v) {
  return map(v, [s](float x) { return s + x; });
}
template <int N> Vec<N> operator-(const Vec<N> &v, float s) {
  return map(v, [s](float x) { return x - s; });
}
template <int N> Vec<N> operator/(const Vec<N> &v, float s) {
  return map(v, [s](float x) { return x / s; });
}

/// The sum of a vector's elements (the adjoint of a broadcast, and of a
/// scalar gate taken by every key channel); a scalar is its own.
inline float sum(float x) { return x; }
template <int N> float sum(const Vec<N> &v) {
  double total = 0.0;
  for (int i = 0; i < N; ++i)
    total += v[i];
  return float(total);
}

/// d where a >= b, else 0: which operand of a maximum (or, swapped, a
/// minimum) takes the result's gradient, the first on a tie.
inline float whereAtLeast(float a, float b, float d) {
  return a >= b ? d : 0.0f;
}
template <int N>
Vec<N> whereAtLeast(const Vec<N> &a, const Vec<N> &b, const Vec<N> &d) {
  Vec<N> r;
  for (int i = 0; i < N; ++i)
    r[i] = whereAtLeast(a[i], b[i], d[i]);
  return r;
}

/// The derivative of |x|: 0 at 0.
inline float sign_(float x) {
  return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : 0.0f;
}
template <int N> Vec<N> sign_(const Vec<N> &a) {
  return map(a, [](float x) { return sign_(x); });
}

/// The gradient of x from r = l2norm(x, eps) and r's gradient d:
/// (d - r (r . d)) / sqrt(x . x + eps).
template <int N>
Vec<N> l2normGradient(const Vec<N> &x, const Vec<N> &r, const Vec<N> &d,
                      float eps) {
  const double norm = std::sqrt(double(dot(x, x)) + eps);
  const double along = dot(r, d);
  Vec<N> g;
  for (int i = 0; i < N; ++i)
    g[i] = float((d[i] - r[i] * along) / norm);
  return g;
}

/// The first V elements of a written value's gradient: without its
/// normaliser's weight, the last of V + 1 when the state carries one.
template <int V, int U> Vec<V> valuesOf(const Vec<U> &d) {
  static_assert(U == V || U == V + 1, "V columns and at most a normaliser");
  Vec<V> values;
  std::copy_n(d.x.begin(), V, values.x.begin());
  return values;
}

/// An argument's gradient added to its row: an input's in fp32, a
/// parameter's (a sum over every token of a task) in fp64.
template <typename T> void addGradient(T *row, float d) { *row += d; }
template <typename T, int N> void addGradient(T *row, const Vec<N> &d) {
  for (int i = 0; i < N; ++i)
    row[i] += d[i];
}

} // namespace linac::cpu

#endif // LINAC_CPU_ADJOINT_H
