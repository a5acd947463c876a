//===- chunk.h - the chunkwise forward on the CPU, by matrix products -*- C++ -*-===//
//
// The chunkwise algorithm of docs/design.md for layers without an erase
// under a value-side decay, on a run of a sequence's heads: each chunk's
// operands, written by the generated prologue into one record a token, go
// with their cumulative log-gates to chunkForward (products.h) for the
// products, and its reads to the generated epilogue.
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

/// What chunkHeadsByProducts runs: tokens [begin, end) of one sequence,
/// with or without the reads (the outputs, by the epilogue), and what a
/// piece of a cut sequence keeps beside its states (null for nothing):
/// with an erase each head's transition [K, K], carried from what it
/// holds; without, each head's total log-gates over the pass (its G key
/// and P value ones, chunkHeadsByProducts' counts), added to.
struct HeadsPass {
  int64_t begin, end;
  bool reads = true;
  float *transitions = nullptr;
  double *logGateTotals = nullptr;
};

/// The chunkwise forward of a run of heads over `pass` (docs/design.md)
/// for a layer without an erase under a value-side decay, `states[h]` head
/// firstHead + h's: chunk by chunk, each head in turn, so that a chunk's
/// input rows (a token's heads side by side) are fetched once for all.
template <typename Layer, typename Token, typename State, typename Operands>
void chunkHeadsByProducts(const linac_cpu_forward_args &args,
                          const HeadsPass &pass, int64_t firstHead,
                          State *states, int heads, float scale) {
  constexpr int K = Layer::K, V = Layer::V, C = Layer::kChunkSize;
  constexpr bool N = Layer::kNormalizer;
  constexpr int U = V + (N ? 1 : 0);
  static_assert(!(Layer::kValueDecay && Layer::kErase),
                "an erase under a value-side decay takes the pairwise path");

  // A uniform gate's log-gates are one a token.
  constexpr int G = Layer::kUniformKeyGate ? 1 : K;
  // The prologue writes each token's operands into its record, whose q, k,
  // e and u rows the products read in place; the reads come back as rows
  // the epilogue takes as they are.
  static_assert(sizeof(Operands) % sizeof(float) == 0 &&
                    sizeof(Vec<U>) == U * sizeof(float),
                "records and reads are whole floats");
  std::vector<Operands> records(C);
  std::vector<Vec<U>> reads(C);
  std::vector<double> lam(C * G), lamQ(C * G);
  // A value-side decay's log-gates, one a column (none in a normaliser's).
  constexpr int P = Layer::kValueDecay ? U : 0;
  std::vector<double> psi(C * P, 0.0), psiQ(C * P, 0.0);
  const Operands &first = records.front();
  const Chunk chunk{C,
                    K,
                    U,
                    Layer::kErase,
                    Layer::kReadBefore,
                    Layer::kUniformKeyGate,
                    scale,
                    int(sizeof(Operands) / sizeof(float)),
                    first.q.x.data(),
                    first.k.x.data(),
                    first.e.x.data(),
                    first.u.x.data(),
                    lam.data(),
                    lamQ.data(),
                    P ? psi.data() : nullptr,
                    P ? psiQ.data() : nullptr};

  // A transition is the state's map without the writes: the chunk's
  // products on the identity ([K, K]) with u of zeros.
  std::vector<float> zeros(pass.transitions ? C * chunk.rowStride : 0, 0.0f);
  Chunk transition = chunk;
  transition.columns = K;
  transition.u = zeros.data();

  const int64_t end = pass.end;
  for (int64_t start = pass.begin; start < end; start += C) {
    const int L = int(std::min<int64_t>(C, end - start));
    for (int h = 0; h < heads; ++h) {
      const int64_t head = firstHead + h;
      for (int t = 0; t < C; ++t) {
        Operands &ops = records[t];
        // A short last chunk: rows of zeros, whose gates stay where they
        // were, change no product.
        if (t < L)
          Layer::prologue(Token{args, start + t, head}, ops);
        else
          ops = Operands{};
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
      }
      // The next head's inputs (the next chunk's after the last head)
      // arrive while this one's products run.
      if (h + 1 < heads)
        prefetchInputs<Layer, Token>(args, start, start + L, head + 1);
      else
        prefetchInputs<Layer, Token>(args, start + C,
                                     std::min(start + 2 * C, end), firstHead);
      chunkForward(chunk, states[h].s,
                   pass.reads ? reads.front().x.data() : nullptr);
      if (pass.transitions)
        chunkForward(transition, pass.transitions + size_t(h) * K * K, nullptr);
      if (double *totals = pass.logGateTotals) {
        // The padded rows keep the last token's sums.
        for (int d = 0; d < G; ++d)
          totals[h * (G + P) + d] += lam[(C - 1) * G + d];
        for (int j = 0; j < P; ++j)
          totals[h * (G + P) + G + j] += psi[(C - 1) * P + j];
      }
      for (int t = 0; t < L && pass.reads; ++t) {
        const int64_t token = start + t;
        Layer::epilogue(Token{args, token, head},
                        State::template normalize<V, N>(reads[t]),
                        args.output + (token * args.num_heads + head) * V);
      }
    }
  }
}

} // namespace linac::cpu

#endif // LINAC_CPU_CHUNK_H
