//===- scan.h - the recurrent scan on the GPU -------------------*- C++ -*-===//
//
// The step, token by token, for any layer: one block per (head, sequence),
// thread j holding column j of the state in registers (thread V holds the
// normaliser). Token vectors are computed by every thread (key side) or
// spread over the threads (value side), so the generated step runs as is.
// Exact in fp32; the fallback for bodies outside the normal form and for
// fp32 activations, which the tensor-core kernels would round.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CUDA_SCAN_H
#define LINAC_CUDA_SCAN_H

#include "linac/cuda/geometry.h"
#include "linac/cuda/token.h"

namespace linac::cuda {

template <int K, int V, bool Normalized> struct ScanState {
  float s[K];

  LINAC_DEVICE static int column() { return threadIdx.x; }

  /// Columns in memory: the normaliser, when kept, is the last.
  static constexpr int kColumns = V + (Normalized ? 1 : 0);

  LINAC_DEVICE void load(const float *p) {
    int j = column();
    for (int i = 0; i < K; ++i)
      s[i] = p && j < kColumns ? p[i * kColumns + j] : 0.0f;
  }
  LINAC_DEVICE ScanState copy() const { return *this; }
  LINAC_DEVICE void store(float *p) const {
    int j = column();
    if (j < kColumns)
      for (int i = 0; i < K; ++i)
        p[i * kColumns + j] = s[i];
  }
  LINAC_DEVICE void decay(const FullVec<K> &gk, const ColumnVec<V> &gv) {
    float g = column() < V ? gv.x[0] : 0.0f;
    for (int i = 0; i < K; ++i)
      s[i] *= expf(gk.x[i] + g);
  }
  /// A key-side gate alone.
  LINAC_DEVICE void decay(const FullVec<K> &gk) { decay(gk, ColumnVec<V>{}); }
  LINAC_DEVICE void matrixGate(const MatrixColumn<K, V> &g) {
    if (column() < V)
      for (int i = 0; i < K; ++i)
        s[i] *= expf(g.x[i]);
  }
  /// S <- S - k (e^T S).
  LINAC_DEVICE void erase(const FullVec<K> &k, const FullVec<K> &e) {
    float projection = 0.0f;
    for (int i = 0; i < K; ++i)
      projection += e.x[i] * s[i];
    for (int i = 0; i < K; ++i)
      s[i] -= k.x[i] * projection;
  }
  /// S <- S + k u^T; the normaliser's column takes `normalizerWeight`.
  LINAC_DEVICE void write(const FullVec<K> &k, const ColumnVec<V> &u,
                          float normalizerWeight) {
    int j = column();
    float uj = j < V ? u.x[0] : Normalized && j == V ? normalizerWeight : 0.0f;
    for (int i = 0; i < K; ++i)
      s[i] += k.x[i] * uj;
  }
  /// Every thread of the block must call it.
  LINAC_DEVICE ColumnVec<V> read(const FullVec<K> &q, float scale) const {
    float raw = 0.0f;
    for (int i = 0; i < K; ++i)
      raw += s[i] * q.x[i];
    ColumnVec<V> out;
    out.x[0] = raw * scale;
    if constexpr (Normalized) {
      __shared__ float normalizer;
      __syncthreads();
      if (column() == V)
        normalizer = out.x[0];
      __syncthreads();
      out.x[0] /= fmaxf(fabsf(normalizer), 1.0f);
    }
    return out;
  }
};

template <typename Layer> constexpr int scanThreads() {
  return cuda::scanThreads(Layer::V, Layer::kNormalizer);
}

template <typename Layer, typename T>
LINAC_DEVICE void scanKernel(const linac_cuda_forward_args &args) {
  int head = blockIdx.x;
  int64_t seq = blockIdx.y, begin, end;
  sequenceBounds(args, seq, begin, end);
  int64_t offset = stateOffset<Layer>(args, seq, head);
  ScanState<Layer::K, Layer::V, Layer::kNormalizer> state;
  state.load(args.initial_state ? args.initial_state + offset : nullptr);
  float scale = readScale<Layer>(args);
  T *output = static_cast<T *>(args.output);
  for (int64_t t = begin; t < end; ++t)
    Layer::Scan::step(Token<Layer, T>{args, t, head}, state, scale,
                      output + (t * args.num_heads + head) * Layer::V);
  if (args.final_state)
    state.store(args.final_state + offset);
}

} // namespace linac::cuda

#endif // LINAC_CUDA_SCAN_H
