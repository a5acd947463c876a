//===- backward.h - the backward pass on the GPU ----------------*- C++ -*-===//
//
// The gradients of any layer token by token, on the scan's block: one block
// per (head, sequence), thread j holding column j of the state and of its
// gradient. The step runs from the initial state, keeping the state every
// kCheckpointTokens tokens in the workspace; then, from the last stretch
// between checkpoints, the states entering its tokens again, and the
// generated ScanBackward::stepBackward of each token from the last, which
// runs the step again, keeping the state each state op takes, and walks it
// back (compiler/lib/Codegen.cpp). The reverses of the state ops below are
// templates/linac/cpu/backward.h's, a column a thread: a key vector's
// gradient sums over the columns, so over the block.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CUDA_BACKWARD_H
#define LINAC_CUDA_BACKWARD_H

#include "linac/cuda/adjoint.h"
#include "linac/cuda/scan.h"

namespace linac::cuda {

/// Warps of the largest scan block: V = 256 and a normaliser.
inline constexpr int kMaxScanWarps = (256 + 1 + 31) / 32;

/// Rows of a key vector blockSum transposes at a time.
inline constexpr int kSumRows = 32;

/// The shared memory blockSum transposes through: kSumRows rows of a
/// thread's element each. One for every N, so that a kernel's sums share
/// it.
LINAC_DEVICE float *blockSumRows() {
  __shared__ float rows[kSumRows * 32 * kMaxScanWarps];
  return rows;
}

/// Each element of `x` summed over the block's threads, every thread
/// getting the same bits. The rows go through shared memory a piece at a
/// time, each summed by one warp, rather than by a chain of shuffles an
/// element, which would make the kernel many times longer to compile.
/// Every thread of the block must call it.
template <int N> LINAC_DEVICE FullVec<N> blockSum(const FullVec<N> &x) {
  __shared__ float total[N];
  float *const rows = blockSumRows();
  const int threads = blockDim.x, warps = threads / 32;
#pragma unroll
  for (int first = 0; first < N; first += kSumRows) {
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kSumRows; ++i)
      if (first + i < N)
        rows[i * threads + threadIdx.x] = x.x[first + i];
    __syncthreads();
    const int count = min(kSumRows, N - first);
    for (int i = threadIdx.x / 32; i < count; i += warps) {
      float s = 0.0f;
      for (int c = laneId(); c < threads; c += 32)
        s += rows[i * threads + c];
      s = warpSum(s);
      if (laneId() == 0)
        total[first + i] = s;
    }
  }
  __syncthreads();
  FullVec<N> sums;
#pragma unroll
  for (int i = 0; i < N; ++i)
    sums.x[i] = total[i];
  return sums;
}

/// S' = D_k S D_v; the normaliser's column decays by the key gate alone.
template <int K, int V, bool N>
LINAC_DEVICE void decayBackward(ScanState<K, V, N> &dS,
                                const ScanState<K, V, N> &before,
                                const FullVec<K> &gk, const ColumnVec<V> &gv,
                                FullVec<K> &dgk, ColumnVec<V> &dgv) {
  const int j = ScanState<K, V, N>::column();
  const float g = j < V ? gv.x[0] : 0.0f;
  FullVec<K> terms;
  float columnSum = 0.0f;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const float factor = expf(gk.x[i] + g);
    terms.x[i] = dS.s[i] * factor * before.s[i];
    columnSum += terms.x[i];
    dS.s[i] *= factor;
  }
  dgk = dgk + blockSum(terms);
  if (j < V)
    dgv.x[0] += columnSum;
}

/// S' = exp(G) (.) S; returns G's gradient (the normaliser's column takes
/// no matrix gate).
template <int K, int V, bool N>
LINAC_DEVICE MatrixColumn<K, V>
matrixGateBackward(ScanState<K, V, N> &dS, const ScanState<K, V, N> &before,
                   const MatrixColumn<K, V> &g) {
  MatrixColumn<K, V> dg{};
  if (ScanState<K, V, N>::column() < V)
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const float factor = expf(g.x[i]);
      dg.x[i] = dS.s[i] * factor * before.s[i];
      dS.s[i] *= factor;
    }
  return dg;
}

/// S' = S - k (e^T S).
template <int K, int V, bool N>
LINAC_DEVICE void eraseBackward(ScanState<K, V, N> &dS,
                                const ScanState<K, V, N> &before,
                                const FullVec<K> &k, const FullVec<K> &e,
                                FullVec<K> &dk, FullVec<K> &de) {
  float eS = 0.0f, kG = 0.0f;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    eS += e.x[i] * before.s[i];
    kG += k.x[i] * dS.s[i];
  }
  FullVec<K> dkTerms, deTerms;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    dkTerms.x[i] = dS.s[i] * eS;
    deTerms.x[i] = before.s[i] * kG;
    dS.s[i] -= e.x[i] * kG;
  }
  dk = dk - blockSum(dkTerms);
  de = de - blockSum(deTerms);
}

/// S' = S + k u^T, the normaliser's column plus k `weight`.
template <int K, int V, bool N>
LINAC_DEVICE void writeBackward(const ScanState<K, V, N> &dS,
                                const FullVec<K> &k, const ColumnVec<V> &u,
                                float weight, FullVec<K> &dk, ColumnVec<V> &du,
                                float &dweight) {
  const int j = ScanState<K, V, N>::column();
  const float uj = j < V ? u.x[0] : N && j == V ? weight : 0.0f;
  FullVec<K> terms;
  float columnSum = 0.0f;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    terms.x[i] = dS.s[i] * uj;
    columnSum += k.x[i] * dS.s[i];
  }
  dk = dk + blockSum(terms);
  if (j < V)
    du.x[0] += columnSum;
  if constexpr (N)
    dweight += blockSum(j == V ? columnSum : 0.0f);
}

/// o = scale S^T q, divided by max(|n . q scale|, 1) with a normaliser
/// (whose gradient is 0 where that is 1, as the reference's); `state` is
/// the state read, `dOut` o's gradient. Returns q's.
template <int K, int V, bool N>
LINAC_DEVICE FullVec<K>
readBackward(ScanState<K, V, N> &dS, const ScanState<K, V, N> &state,
             const FullVec<K> &q, float scale, const ColumnVec<V> &dOut) {
  const int j = ScanState<K, V, N>::column();
  float raw = 0.0f;
#pragma unroll
  for (int i = 0; i < K; ++i)
    raw += state.s[i] * q.x[i];
  raw *= scale;
  float dRaw = j < V ? dOut.x[0] : 0.0f;
  if constexpr (N) {
    const float m = blockSum(j == V ? raw : 0.0f),
                divisor = fmaxf(fabsf(m), 1.0f);
    const float dDivisor =
        -blockSum(j < V ? dOut.x[0] * raw : 0.0f) / (divisor * divisor);
    if (j < V)
      dRaw /= divisor;
    else if (j == V)
      dRaw = fabsf(m) > 1.0f ? (m > 0.0f ? dDivisor : -dDivisor) : 0.0f;
  }
  FullVec<K> terms;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    terms.x[i] = state.s[i] * dRaw;
    dS.s[i] += q.x[i] * scale * dRaw;
  }
  return scale * blockSum(terms);
}

/// Element `first + i` of an activation of the call's dtype (linac_dtype),
/// as element i: one backward kernel serves every dtype, since the pass is
/// long to compile and its loads are not what bounds it.
struct AnyInput {
  const void *base;
  int64_t first;
  int32_t dtype;

  LINAC_DEVICE float operator[](int64_t i) const {
    switch (dtype) {
    case 1:
      return toFloat(static_cast<const __nv_bfloat16 *>(base)[first + i]);
    case 2:
      return toFloat(static_cast<const __half *>(base)[first + i]);
    default:
      return static_cast<const float *>(base)[first + i];
    }
  }
  LINAC_DEVICE float scalar() const { return (*this)[0]; }
  template <int N> LINAC_DEVICE WarpVec<N> warpVec() const {
    WarpVec<N> v;
#pragma unroll
    for (int i = 0; i < WarpVec<N>::kSlots; ++i)
      v.x[i] =
          holdsElement<WarpVec<N>, N>(i) ? (*this)[WarpVec<N>::index(i)] : 0.0f;
    return v;
  }
};

/// A token's inputs as Token's, of the dtype the backward call names.
template <typename Layer> struct AnyToken : Token<Layer, float> {
  int32_t dtype;

  LINAC_DEVICE AnyInput input(int i) const {
    const int64_t heads = this->args.input_heads[i];
    return {this->args.inputs[i],
            (this->token * heads + this->groupHead(heads)) *
                Layer::inputSize(i),
            dtype};
  }
};

/// Where one token of one head adds its arguments' gradients.
template <typename Layer> struct TokenGradients {
  const linac_cuda_backward_args &args;
  Token<Layer, float> at;

  LINAC_DEVICE float *input(int i) const {
    const int64_t heads = args.forward.input_heads[i];
    return args.input_grads[i] +
           (at.token * heads + at.groupHead(heads)) * Layer::inputSize(i);
  }
  LINAC_DEVICE float *param(int i) const {
    return args.param_grads[i] +
           at.groupHead(args.forward.param_heads[i]) * Layer::paramSize(i);
  }
};

template <typename Layer>
LINAC_DEVICE void scanBackwardKernel(const linac_cuda_backward_args &args) {
  constexpr int K = Layer::K, V = Layer::V, C = kCheckpointTokens;
  using State = ScanState<K, V, Layer::kNormalizer>;
  static_assert(scanThreads(V, Layer::kNormalizer) <= 32 * kMaxScanWarps,
                "blockSum's partial sums hold every warp's");
  constexpr int64_t kStateSize = int64_t(K) * State::kColumns;
  const linac_cuda_forward_args &forward = args.forward;
  const int head = blockIdx.x;
  const int64_t heads = forward.num_heads, seq = blockIdx.y;
  int64_t begin, end;
  sequenceBounds(forward, seq, begin, end);
  const int64_t offset = stateOffset<Layer>(forward, seq, head);
  const float scale = readScale<Layer>(forward);
  auto checkpoint = [&](int64_t c) {
    return args.checkpoints +
           (checkpointSlot(seq, begin, c) * heads + head) * kStateSize;
  };
  float *const entering =
      args.entering + (seq * heads + head) * int64_t(C) * kStateSize;
  auto tokenAt = [&](int64_t t) {
    return AnyToken<Layer>{{forward, t, head}, args.dtype};
  };
  // The step's outputs, which the passes here do not keep.
  __shared__ float discarded[V];

  State state;
  state.load(forward.initial_state ? forward.initial_state + offset : nullptr);
  for (int64_t t = begin; t < end; ++t) {
    if ((t - begin) % C == 0)
      state.store(checkpoint((t - begin) / C));
    Layer::Scan::step(tokenAt(t), state, scale, discarded);
  }

  State dState;
  dState.load(args.d_final_state ? args.d_final_state + offset : nullptr);
  for (int64_t c = (end - begin + C - 1) / C - 1; c >= 0; --c) {
    const int64_t start = begin + c * C;
    const int length = int(min(int64_t(C), end - start));
    // Each thread stores and loads its own columns: no barrier between.
    state.load(checkpoint(c));
    for (int t = 0; t < length; ++t) {
      state.store(entering + t * kStateSize);
      Layer::Scan::step(tokenAt(start + t), state, scale, discarded);
    }
    for (int t = length - 1; t >= 0; --t) {
      const int64_t token = start + t;
      state.load(entering + t * kStateSize);
      Layer::ScanBackward::stepBackward(
          tokenAt(token), state, scale, dState,
          ColumnVec<V>::load(
              AnyInput{args.d_output, (token * heads + head) * V, args.dtype}),
          TokenGradients<Layer>{args, {forward, token, head}});
    }
  }
  if (args.d_initial_state)
    dState.store(args.d_initial_state + offset);
}

} // namespace linac::cuda

#endif // LINAC_CUDA_BACKWARD_H
