//===- adjoint.h - what generated backward code computes with -*- C++ -*-===//
//
// The CUDA side of templates/linac/cpu/adjoint.h, for the scan's vector
// types: the helpers the adjoints of a generated stepBackward call
// (compiler/lib/Codegen.cpp, emitAdjoint), each derivative the fp64
// reference's, and the sinks of an argument's gradient. Every thread of
// the block holds a key vector whole and the same bits of it, so a key
// vector's adjoint is the same on every thread too; a value vector's
// reductions run over the block (ColumnVec::sum).
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CUDA_ADJOINT_H
#define LINAC_CUDA_ADJOINT_H

#include "linac/cuda/vec.h"

namespace linac::cuda {

template <typename T> LINAC_DEVICE IfVector<T> operator*(float s, const T &v) {
  return v.map([s](float x) { return s * x; });
}
template <typename T> LINAC_DEVICE IfVector<T> operator*(const T &v, float s) {
  return s * v;
}
template <typename T> LINAC_DEVICE IfVector<T> operator-(float s, const T &v) {
  return v.map([s](float x) { return s - x; });
}
template <typename T> LINAC_DEVICE IfVector<T> operator+(float s, const T &v) {
  return v.map([s](float x) { return s + x; });
}
template <typename T> LINAC_DEVICE IfVector<T> operator-(const T &v, float s) {
  return v.map([s](float x) { return x - s; });
}
template <typename T> LINAC_DEVICE IfVector<T> operator/(const T &v, float s) {
  return v.map([s](float x) { return x / s; });
}

/// The sum of a vector's elements (the adjoint of a broadcast, and of a
/// scalar gate taken by every key channel); a scalar is its own. Every
/// thread of the block must call it.
LINAC_DEVICE float sum(float x) { return x; }
template <typename T> LINAC_DEVICE float sum(const T &v) { return v.sum(); }

/// d where a >= b, else 0: which operand of a maximum (or, swapped, a
/// minimum) takes the result's gradient, the first on a tie.
LINAC_DEVICE float whereAtLeast(float a, float b, float d) {
  return a >= b ? d : 0.0f;
}
template <typename T>
LINAC_DEVICE IfVector<T> whereAtLeast(const T &a, const T &b, const T &d) {
  T r;
  for (int i = 0; i < int(sizeof(r.x) / sizeof(float)); ++i)
    r.x[i] = whereAtLeast(a.x[i], b.x[i], d.x[i]);
  return r;
}

/// The derivative of |x|: 0 at 0.
LINAC_DEVICE float sign_(float x) {
  return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : 0.0f;
}
template <typename T> LINAC_DEVICE IfVector<T> sign_(const T &a) {
  return a.map([](float x) { return sign_(x); });
}

/// The gradient of x from r = l2norm(x, eps) and r's gradient d:
/// (d - r (r . d)) / sqrt(x . x + eps).
template <typename T>
LINAC_DEVICE T l2normGradient(const T &x, const T &r, const T &d, float eps) {
  const float inverseNorm = rsqrtf(dot(x, x) + eps);
  const float along = dot(r, d);
  return d.zip(
      r, [=](float di, float ri) { return (di - ri * along) * inverseNorm; });
}

/// An argument's gradient added to its row, which blocks of other heads
/// may share (grouped heads, parameters): each element by one thread.
LINAC_DEVICE void addGradient(float *row, float d) {
  if (threadIdx.x == 0)
    atomicAdd(row, d);
}
template <int N>
LINAC_DEVICE void addGradient(float *row, const FullVec<N> &d) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (i % blockDim.x == threadIdx.x)
      atomicAdd(row + i, d.x[i]);
}
template <int N>
LINAC_DEVICE void addGradient(float *row, const ColumnVec<N> &d) {
  if (ColumnVec<N>::column() < N)
    atomicAdd(row + ColumnVec<N>::column(), d.x[0]);
}
template <int K, int V>
LINAC_DEVICE void addGradient(float *row, const MatrixColumn<K, V> &d) {
  const int j = threadIdx.x;
  if (j < V)
    for (int i = 0; i < K; ++i)
      atomicAdd(row + i * V + j, d.x[i]);
}

} // namespace linac::cuda

#endif // LINAC_CUDA_ADJOINT_H
