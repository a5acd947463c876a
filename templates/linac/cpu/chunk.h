//===- chunk.h - the chunkwise forward on the CPU, by matrix products -*- C++ -*-===//
//
// The chunkwise algorithm of docs/design.md for layers without a value-side
// decay: each chunk's operands from the generated prologue, gathered into
// row-major matrices with their cumulative log-gates, go to chunkForward
// (products.h) for the products, and its reads to the generated epilogue.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CPU_CHUNK_H
#define LINAC_CPU_CHUNK_H

#include "linac/cpu/abi.h"
#include "linac/cpu/products.h"
#include "linac/cpu/vec.h"
#include "linac/gates.h"

#include <algorithm>
#include <vector>

namespace linac::cpu {

/// Asks the cache for the inputs of tokens [begin, end) of `head`. A
/// head's row of a token is a few hundred bytes, H of them apart: a new
/// page every token, where the hardware's prefetchers stop.
template <typename Layer, typename Token>
void prefetchInputs(const linac_cpu_forward_args &args, int64_t begin,
                    int64_t end, int64_t head) {
  constexpr int kLineFloats = 64 / sizeof(float);
  for (int64_t t = begin; t < end; ++t)
    for (int i = 0; i < Layer::kNumInputs; ++i) {
      const float *row = Token{args, t, head}.input(i);
      for (int64_t x = 0; x < Layer::inputSize(i); x += kLineFloats)
        __builtin_prefetch(row + x);
    }
}

/// The chunkwise forward of one sequence and head (docs/design.md), for a
/// layer without an erase under a value-side decay.
template <typename Layer, typename Token, typename State, typename Operands>
void chunkSequenceByProducts(const linac_cpu_forward_args &args, int64_t seq,
                             int64_t head, State &state, float scale) {
  constexpr int K = Layer::K, V = Layer::V, C = Layer::kChunkSize;
  constexpr bool N = Layer::kNormalizer;
  constexpr int U = V + (N ? 1 : 0);
  static_assert(!(Layer::kValueDecay && Layer::kErase),
                "an erase under a value-side decay takes the pairwise path");

  // A uniform gate's log-gates are one a token.
  constexpr int G = Layer::kUniformKeyGate ? 1 : K;
  std::vector<float> q(C * K), k(C * K), e(C * K), u(C * U), out(C * U);
  std::vector<double> lam(C * G), lamQ(C * G);
  // A value-side decay's log-gates, one a column (none in a normaliser's).
  constexpr int P = Layer::kValueDecay ? U : 0;
  std::vector<double> psi(C * P, 0.0), psiQ(C * P, 0.0);
  const Chunk chunk{C,       K,        U,        Layer::kErase,
                    Layer::kReadBefore, Layer::kUniformKeyGate,
                    q.data(), k.data(), e.data(), u.data(),
                    lam.data(), lamQ.data(),
                    P ? psi.data() : nullptr, P ? psiQ.data() : nullptr};
  Operands ops;

  for (int64_t start = args.cu_seqlens[seq]; start < args.cu_seqlens[seq + 1];
       start += C) {
    const int L = int(std::min<int64_t>(C, args.cu_seqlens[seq + 1] - start));
    for (int t = 0; t < C; ++t) {
      // A short last chunk: rows of zeros, whose gates stay where they
      // were, change no product.
      if (t < L)
        Layer::prologue(Token{args, start + t, head}, ops);
      else
        ops = Operands{};
      for (int d = 0; d < K; ++d) {
        q[t * K + d] = ops.q[d] * scale;
        k[t * K + d] = ops.k[d];
        e[t * K + d] = ops.e[d];
      }
      for (int d = 0; d < G; ++d) {
        const double before = t ? lam[(t - 1) * G + d] : 0.0;
        lam[t * G + d] = before + floorLogGate(ops.gk[d]);
        lamQ[t * G + d] = Layer::kReadBefore ? before : lam[t * G + d];
      }
      for (int j = 0; j < P && j < V; ++j) {
        const double before = t ? psi[(t - 1) * P + j] : 0.0;
        psi[t * P + j] = before + floorLogGate(ops.gv[j]);
        psiQ[t * P + j] = Layer::kReadBefore ? before : psi[t * P + j];
      }
      std::copy(ops.u.x.begin(), ops.u.x.end(), u.begin() + t * U);
    }
    // The next chunk's inputs arrive while this one's products run.
    prefetchInputs<Layer, Token>(
        args, start + C, std::min(start + 2 * C, args.cu_seqlens[seq + 1]),
        head);
    chunkForward(chunk, state.s.data(), out.data());
    for (int t = 0; t < L; ++t) {
      Vec<U> raw;
      std::copy(out.begin() + t * U, out.begin() + (t + 1) * U, raw.x.begin());
      const int64_t token = start + t;
      Layer::epilogue(Token{args, token, head},
                      State::template normalize<V, N>(raw),
                      args.output + (token * args.num_heads + head) * V);
    }
  }
}

} // namespace linac::cpu

#endif // LINAC_CPU_CHUNK_H
