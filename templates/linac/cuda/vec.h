//===- vec.h - value types for generated CUDA layers ------------*- C++ -*-===//
//
// The chunkwise kernels run a token's prologue and epilogue on one warp:
// WarpVec<N> spreads a key or value vector over the 32 lanes, each lane a
// contiguous run (lane l of a vector of 128 holds elements 4l..4l+3), so
// that rows move in one access a lane. The recurrent scan gives each
// thread one column of the state: ColumnVec<N> holds that thread's element of a
// value vector, FullVec<N> a whole key vector (every thread has it), and
// MatrixColumn the thread's column of a per-token matrix. Each type offers the
// elementwise functions the dialect's arith, math and helper ops lower to, with
// the CPU templates' names, so one generated body serves every target.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CUDA_VEC_H
#define LINAC_CUDA_VEC_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#define LINAC_DEVICE __device__ __forceinline__
#define LINAC_HOST_DEVICE __host__ __device__

namespace linac::cuda {

LINAC_DEVICE float toFloat(float x) { return x; }
LINAC_DEVICE float toFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
LINAC_DEVICE float toFloat(__half x) { return __half2float(x); }

template <typename T> LINAC_DEVICE T fromFloat(float x);
template <> LINAC_DEVICE float fromFloat<float>(float x) { return x; }
template <> LINAC_DEVICE __nv_bfloat16 fromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}
template <> LINAC_DEVICE __half fromFloat<__half>(float x) {
  return __float2half(x);
}

template <typename T> LINAC_DEVICE float loadScalar(const T *p) {
  return toFloat(*p);
}
/// Inputs held in registers rather than memory offer scalar() and
/// warpVec<N>() (chunk.h's staged tokens).
template <typename Source,
          typename = std::enable_if_t<!std::is_pointer_v<Source>>>
LINAC_DEVICE float loadScalar(const Source &source) {
  return source.scalar();
}

LINAC_DEVICE int laneId() { return threadIdx.x & 31; }

/// Two fp32 values as a packed pair of 16-bit T, the first in the low half.
template <typename T = __nv_bfloat16>
LINAC_DEVICE uint32_t packPair(float lo, float hi) {
  std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162> pair;
  if constexpr (std::is_same_v<T, __half>)
    pair = __floats2half2_rn(lo, hi);
  else
    pair = __floats2bfloat162_rn(lo, hi);
  uint32_t bits;
  memcpy(&bits, &pair, sizeof bits);
  return bits;
}

LINAC_DEVICE float warpSum(float x) {
  for (int offset = 16; offset > 0; offset /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Scalar functions. arith.maximumf and arith.minimumf propagate NaN.
LINAC_DEVICE float exp_(float x) { return expf(x); }
LINAC_DEVICE float exp2_(float x) { return exp2f(x); }
LINAC_DEVICE float log_(float x) { return logf(x); }
LINAC_DEVICE float log2_(float x) { return log2f(x); }
LINAC_DEVICE float log1p_(float x) { return log1pf(x); }
LINAC_DEVICE float sqrt_(float x) { return sqrtf(x); }
LINAC_DEVICE float rsqrt(float x) { return rsqrtf(x); }
LINAC_DEVICE float tanh_(float x) { return tanhf(x); }
LINAC_DEVICE float abs_(float x) { return fabsf(x); }
LINAC_DEVICE float pow_(float a, float b) { return powf(a, b); }
// sigmoid and softplus take the fast exponential, logarithm and division:
// their results are bounded by 1 or by |x| + log 2, so the intrinsics'
// few-ulp errors stay below 1e-6 relative, and the accurate calls' range
// reductions and slow paths cost GDN-2's decode 7 to 9 points of the copy
// ceiling (bench/history/decode.md, E23).
LINAC_DEVICE float sigmoid(float x) {
  return __fdividef(1.0f, 1.0f + __expf(-x));
}
/// max(x, 0) + log1p(e^-|x|); below 1/64, where 1 + z would round away
/// z's low bits, log1p(z) by its series to z^3.
LINAC_DEVICE float softplus(float x) {
  float z = __expf(-fabsf(x));
  float series = z * (1.0f - z * (0.5f - z * (1.0f / 3.0f)));
  return fmaxf(x, 0.0f) + (z < 1.0f / 64.0f ? series : __logf(1.0f + z));
}
LINAC_DEVICE float maximum(float a, float b) {
  return isnan(a) || isnan(b) ? NAN : fmaxf(a, b);
}
LINAC_DEVICE float minimum(float a, float b) {
  return isnan(a) || isnan(b) ? NAN : fminf(a, b);
}

/// Registers per thread and elementwise algebra shared by the vector types;
/// `Derived` says how elements map to threads and how to reduce.
template <typename Derived, int Slots> struct Elements {
  float x[Slots];

  LINAC_DEVICE static Derived splat(float value) {
    Derived v;
    for (int i = 0; i < Slots; ++i)
      v.x[i] = value;
    return v;
  }
  template <typename F> LINAC_DEVICE Derived map(F f) const {
    Derived r;
    for (int i = 0; i < Slots; ++i)
      r.x[i] = f(x[i]);
    return r;
  }
  template <typename F> LINAC_DEVICE Derived zip(const Derived &b, F f) const {
    Derived r;
    for (int i = 0; i < Slots; ++i)
      r.x[i] = f(x[i], b.x[i]);
    return r;
  }
};

/// Whether slot i of a Vec holds an element of a vector of N: always when
/// no thread's slots reach index Vec::kSpan or past, so that whole splits
/// check nothing.
template <typename Vec, int N> LINAC_DEVICE bool holdsElement(int i) {
  return Vec::kSpan <= N || Vec::index(i) < N;
}

/// A vector of N from memory, for types whose slot i holds element
/// Vec::index(i) (zero past N).
template <typename Vec, int N, typename T>
LINAC_DEVICE Vec loadSlots(const T *p) {
  Vec v;
#pragma unroll
  for (int i = 0; i < int(sizeof(v.x) / sizeof(float)); ++i)
    v.x[i] = holdsElement<Vec, N>(i) ? toFloat(p[Vec::index(i)]) : 0.0f;
  return v;
}

/// The sum of this thread's elements of such a vector.
template <int N, typename Vec> LINAC_DEVICE float sumOfSlots(const Vec &v) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < int(sizeof(v.x) / sizeof(float)); ++i)
    s += holdsElement<Vec, N>(i) ? v.x[i] : 0.0f;
  return s;
}

/// S elements of type T that move as one access.
template <typename T, int S> struct alignas(sizeof(T) * S) Run { T x[S]; };

/// Whether p is aligned to `bytes`.
template <typename T> LINAC_DEVICE bool isAligned(const T *p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

/// A vector of N spread over a warp, lane l holding elements l * kSlots to
/// l * kSlots + kSlots - 1; lanes hold zeros past N.
template <int N> struct WarpVec : Elements<WarpVec<N>, (N + 31) / 32> {
  static constexpr int kSlots = (N + 31) / 32;
  /// Every lane's run is whole and moves as one access.
  static constexpr bool kRuns =
      N == 32 * kSlots && (kSlots == 2 || kSlots == 4);
  static constexpr int kSpan = 32 * kSlots;
  LINAC_DEVICE static int index(int slot) { return laneId() * kSlots + slot; }
  template <typename T> LINAC_DEVICE static WarpVec load(const T *p) {
    if constexpr (kRuns)
      if (isAligned(p, sizeof(Run<T, kSlots>)))
        return loadRuns(p);
    return loadSlots<WarpVec, N>(p);
  }
  /// load(p) for p known to be aligned to a run when there are runs (rows of
  /// shared memory), without the check.
  template <typename T> LINAC_DEVICE static WarpVec loadAligned(const T *p) {
    if constexpr (kRuns)
      return loadRuns(p);
    else
      return loadSlots<WarpVec, N>(p);
  }
  template <typename Source,
            typename = std::enable_if_t<!std::is_pointer_v<Source>>>
  LINAC_DEVICE static WarpVec load(const Source &source) {
    return source.template warpVec<N>();
  }
  template <typename T> LINAC_DEVICE void store(T *p) const {
    if constexpr (kRuns)
      if (isAligned(p, sizeof(Run<T, kSlots>)))
        return storeRuns(p);
    storeSlots(p);
  }
  /// store(p) for p known to be aligned to a run, as loadAligned.
  template <typename T> LINAC_DEVICE void storeAligned(T *p) const {
    if constexpr (kRuns)
      storeRuns(p);
    else
      storeSlots(p);
  }
  LINAC_DEVICE float sum() const { return warpSum(sumOfSlots<N>(*this)); }

private:
  template <typename T> LINAC_DEVICE static WarpVec loadRuns(const T *p) {
    Run<T, kSlots> run = reinterpret_cast<const Run<T, kSlots> *>(p)[laneId()];
    WarpVec v;
#pragma unroll
    for (int i = 0; i < kSlots; ++i)
      v.x[i] = toFloat(run.x[i]);
    return v;
  }
  template <typename T> LINAC_DEVICE void storeRuns(T *p) const {
    Run<T, kSlots> run;
#pragma unroll
    for (int i = 0; i < kSlots; ++i)
      run.x[i] = fromFloat<T>(this->x[i]);
    reinterpret_cast<Run<T, kSlots> *>(p)[laneId()] = run;
  }
  template <typename T> LINAC_DEVICE void storeSlots(T *p) const {
    for (int i = 0; i < kSlots; ++i)
      if (index(i) < N)
        p[index(i)] = fromFloat<T>(this->x[i]);
  }
};

/// A key vector every thread of the scan holds whole.
template <int N> struct FullVec : Elements<FullVec<N>, N> {
  /// From a pointer, or a source indexed as one (backward.h's AnyInput).
  template <typename P> LINAC_DEVICE static FullVec load(const P &p) {
    FullVec v;
    for (int i = 0; i < N; ++i)
      v.x[i] = toFloat(p[i]);
    return v;
  }
  LINAC_DEVICE float sum() const {
    float s = 0.0f;
    for (int i = 0; i < N; ++i)
      s += this->x[i];
    return s;
  }
  LINAC_DEVICE float operator[](int i) const { return this->x[i]; }
};

/// Sums `x` over the block; every thread of the block must call it.
LINAC_DEVICE float blockSum(float x) {
  __shared__ float partial[32];
  __syncthreads();
  x = warpSum(x);
  if (laneId() == 0)
    partial[threadIdx.x / 32] = x;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < int(blockDim.x + 31) / 32; ++w)
    total += partial[w];
  return total;
}

/// Thread j's element of a value vector of N (zero for j >= N).
template <int N> struct ColumnVec : Elements<ColumnVec<N>, 1> {
  LINAC_DEVICE static int column() { return threadIdx.x; }
  template <typename P> LINAC_DEVICE static ColumnVec load(const P &p) {
    ColumnVec v;
    v.x[0] = column() < N ? toFloat(p[column()]) : 0.0f;
    return v;
  }
  template <typename T> LINAC_DEVICE void store(T *p) const {
    if (column() < N)
      p[column()] = fromFloat<T>(this->x[0]);
  }
  LINAC_DEVICE float sum() const {
    return blockSum(column() < N ? this->x[0] : 0.0f);
  }
};

/// Thread j's column of a per-token K x V matrix, row-major in memory.
template <int K, int V> struct MatrixColumn : Elements<MatrixColumn<K, V>, K> {
  template <typename P> LINAC_DEVICE static MatrixColumn load(const P &p) {
    MatrixColumn m;
    int j = threadIdx.x;
    for (int i = 0; i < K; ++i)
      m.x[i] = j < V ? toFloat(p[i * V + j]) : 0.0f;
    return m;
  }
};

template <typename T> struct IsVector : std::false_type {};
template <int N> struct IsVector<WarpVec<N>> : std::true_type {};
template <int N> struct IsVector<FullVec<N>> : std::true_type {};
template <int N> struct IsVector<ColumnVec<N>> : std::true_type {};
template <int K, int V> struct IsVector<MatrixColumn<K, V>> : std::true_type {};

template <typename T>
using IfVector = std::enable_if_t<IsVector<T>::value, T>;

#define LINAC_CUDA_BINARY(op)                                                  \
  template <typename T>                                                        \
  LINAC_DEVICE IfVector<T> operator op(const T &a, const T &b) {               \
    return a.zip(b, [](float x, float y) { return x op y; });                  \
  }
LINAC_CUDA_BINARY(+)
LINAC_CUDA_BINARY(-)
LINAC_CUDA_BINARY(*)
LINAC_CUDA_BINARY(/)
#undef LINAC_CUDA_BINARY

template <typename T> LINAC_DEVICE IfVector<T> operator-(const T &a) {
  return a.map([](float x) { return -x; });
}

#define LINAC_CUDA_UNARY(name)                                                 \
  template <typename T> LINAC_DEVICE IfVector<T> name(const T &a) {            \
    return a.map([](float x) { return name(x); });                             \
  }
LINAC_CUDA_UNARY(exp_)
LINAC_CUDA_UNARY(exp2_)
LINAC_CUDA_UNARY(log_)
LINAC_CUDA_UNARY(log2_)
LINAC_CUDA_UNARY(log1p_)
LINAC_CUDA_UNARY(sqrt_)
LINAC_CUDA_UNARY(rsqrt)
LINAC_CUDA_UNARY(tanh_)
LINAC_CUDA_UNARY(abs_)
LINAC_CUDA_UNARY(sigmoid)
LINAC_CUDA_UNARY(softplus)
#undef LINAC_CUDA_UNARY

#define LINAC_CUDA_ZIP(name)                                                   \
  template <typename T>                                                        \
  LINAC_DEVICE IfVector<T> name(const T &a, const T &b) {                      \
    return a.zip(b, [](float x, float y) { return name(x, y); });              \
  }
LINAC_CUDA_ZIP(maximum)
LINAC_CUDA_ZIP(minimum)
LINAC_CUDA_ZIP(pow_)
#undef LINAC_CUDA_ZIP

template <typename T> LINAC_DEVICE float dot(const T &a, const T &b) {
  return (a * b).sum();
}

template <typename T> LINAC_DEVICE IfVector<T> l2norm(const T &a, float eps) {
  float inv = rsqrtf(dot(a, a) + eps);
  return a.map([inv](float x) { return x * inv; });
}

template <typename T, typename Out>
LINAC_DEVICE void store(Out *out, const T &v) {
  v.store(out);
}

} // namespace linac::cuda

#endif // LINAC_CUDA_VEC_H
