//===- layer.h - the CPU skeletons generated layers instantiate -*- C++ -*-===//
//
// A generated layer is a struct `Layer` with the spec's dimensions and
// normal form as constants and, from the spec's body,
//   prologue(token, operands): the token's normal-form operands, and
//   epilogue(token, read, out): the output from the read,
// for the chunkwise families, and for every layer
//   step(token, state, out): the whole time step, for the recurrent scan and
//   decode.
// forward<Layer> runs either over every sequence and head, and decode<Layer>
// the step from a state pool, both spread over the caller's threads.
// LINAC_CONTRACT exports the hash that ties the library to its manifest.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CPU_LAYER_H
#define LINAC_CPU_LAYER_H

#include "linac/contract.h"
#include "linac/cpu/abi.h"
#include "linac/cpu/chunk.h"
#include "linac/cpu/threads.h"
#include "linac/cpu/vec.h"
#include "linac/gates.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

namespace linac::cpu {

/// One token of one head: where its inputs and parameters are, in the
/// arguments of a forward pass or of a decode step.
template <typename Layer, typename Args = linac_cpu_forward_args> struct Token {
  const Args &args;
  int64_t token;
  int64_t head;

  /// Argument heads map onto the state's heads in contiguous groups.
  static int64_t groupHead(int64_t head, int64_t stateHeads, int64_t heads) {
    return head / (stateHeads / heads);
  }
  const float *input(int i) const {
    int64_t heads = args.input_heads[i];
    int64_t h = groupHead(head, args.num_heads, heads);
    return args.inputs[i] + (token * heads + h) * Layer::inputSize(i);
  }
  const float *param(int i) const {
    int64_t h = groupHead(head, args.num_heads, args.param_heads[i]);
    return args.params[i] + h * Layer::paramSize(i);
  }
};

/// The state of one head: S (K x V) and, with a normaliser, n as column V,
/// in memory as in the tensors the runtime passes ([K, V] or [K, V + 1]).
template <int K, int V, bool Normalized> struct State {
  static constexpr int kColumns = V + (Normalized ? 1 : 0);
  static constexpr size_t kSize = size_t(K) * kColumns;

  /// A state of its own, zeros.
  State() : owned_(kSize, 0.0f), s(owned_.data()) {}
  /// The state at `p` (a decode pool's slot), updated where it is.
  explicit State(float *p) : s(p) {}
  State(State &&) = default;
  State(const State &) = delete;
  State &operator=(const State &) = delete;

private:
  std::vector<float> owned_;

public:
  float *s;

  float &at(int i, int j) { return s[size_t(i) * kColumns + j]; }
  float at(int i, int j) const { return s[size_t(i) * kColumns + j]; }

  void load(const float *p) { std::copy(p, p + kSize, s); }
  void store(float *p) const { std::copy(s, s + kSize, p); }
  /// A state of its own with these values (copies are never implicit).
  State copy() const {
    State out;
    out.load(s);
    return out;
  }

  void decay(const Vec<K> &gk, const Vec<V> &gv) {
    for (int i = 0; i < K; ++i)
      for (int j = 0; j < kColumns; ++j)
        at(i, j) *= std::exp(gk[i] + (j < V ? gv[j] : 0.0f));
  }
  /// A key-side gate alone: one factor a row.
  void decay(const Vec<K> &gk) {
    for (int i = 0; i < K; ++i) {
      const float factor = std::exp(gk[i]);
      for (int j = 0; j < kColumns; ++j)
        at(i, j) *= factor;
    }
  }
  void matrixGate(const Mat<K, V> &g) {
    for (int i = 0; i < K; ++i)
      for (int j = 0; j < V; ++j)
        at(i, j) *= std::exp(g[i * V + j]);
  }
  /// S <- S - k (e^T S). Sums run over rows, a row at a time for every
  /// column at once, so that the loops walk memory in order.
  void erase(const Vec<K> &k, const Vec<K> &e) {
    std::array<double, kColumns> proj{};
    for (int i = 0; i < K; ++i)
      for (int j = 0; j < kColumns; ++j)
        proj[j] += double(e[i]) * at(i, j);
    for (int i = 0; i < K; ++i)
      for (int j = 0; j < kColumns; ++j)
        at(i, j) -= float(k[i] * proj[j]);
  }
  /// S <- S + k u^T; the normaliser's column takes `normalizerWeight`.
  void write(const Vec<K> &k, const Vec<V> &u, float normalizerWeight) {
    for (int i = 0; i < K; ++i) {
      for (int j = 0; j < V; ++j)
        at(i, j) += k[i] * u[j];
      if constexpr (Normalized)
        at(i, V) += k[i] * normalizerWeight;
    }
  }
  Vec<V> read(const Vec<K> &q, float scale) const {
    std::array<double, kColumns> sum{};
    for (int i = 0; i < K; ++i)
      for (int j = 0; j < kColumns; ++j)
        sum[j] += double(at(i, j)) * q[i] * scale;
    Vec<kColumns> raw;
    for (int j = 0; j < kColumns; ++j)
      raw[j] = float(sum[j]);
    return normalize<V, Normalized>(raw);
  }

  /// Drops the normaliser column after dividing by max(|n^T q|, 1).
  template <int N, bool WithNormalizer>
  static Vec<N> normalize(const Vec<N + (WithNormalizer ? 1 : 0)> &raw) {
    Vec<N> out;
    float divisor = 1.0f;
    if constexpr (WithNormalizer)
      divisor = std::max(std::fabs(raw[N]), 1.0f);
    for (int j = 0; j < N; ++j)
      out[j] = raw[j] / divisor;
    return out;
  }
};

/// The normal-form operands of one token: e = erase strength (.) k and
/// u = write strength (.) v, with the normaliser's weight appended to u.
template <int K, int V, bool Normalized> struct Operands {
  Vec<K> q, k, e, gk;
  Vec<V> gv;
  Vec<V + (Normalized ? 1 : 0)> u;
};

/// u with the normaliser's weight appended when the state carries one.
template <int V, bool Normalized>
Vec<V + (Normalized ? 1 : 0)> appendNormalizer(const Vec<V> &u, float weight) {
  Vec<V + (Normalized ? 1 : 0)> out;
  for (int j = 0; j < V; ++j)
    out[j] = u[j];
  if constexpr (Normalized)
    out[V] = weight;
  return out;
}

template <typename Layer, typename Args> float readScale(const Args &args) {
  return Layer::kFixedScale > 0 ? Layer::kFixedScale : args.scale;
}

/// Runs the step over tokens [begin, end) of one head from `state`.
template <typename Layer, typename Args>
void stepThrough(const Args &args, int64_t begin, int64_t end, int64_t head,
                 State<Layer::K, Layer::V, Layer::kNormalizer> &state) {
  float scale = readScale<Layer>(args);
  for (int64_t t = begin; t < end; ++t)
    Layer::step(Token<Layer, Args>{args, t, head}, state, scale,
                args.output + (t * args.num_heads + head) * Layer::V);
}

/// The chunkwise algorithm (docs/design.md) for one sequence and head of
/// a layer with a value-side decay and an erase, whose solve differs for
/// every value column and whose factors differ for every pair,
/// key channel and value column. Every gate factor is exp of a difference of
/// cumulative log-gates taken per pair (t, j) with j <= t, so exponents are
/// never positive and no cumulative decay or its inverse is formed alone;
/// each token's log-gate is first raised to gates.h's floor.
template <typename Layer>
void pairwiseChunkSequence(
    const linac_cpu_forward_args &args, int64_t seq, int64_t head,
    State<Layer::K, Layer::V, Layer::kNormalizer> &state) {
  constexpr int K = Layer::K, V = Layer::V, C = Layer::kChunkSize;
  constexpr bool N = Layer::kNormalizer;
  constexpr int U = V + (N ? 1 : 0);
  float scale = readScale<Layer>(args);

  std::vector<Operands<K, V, N>> ops(C);
  // Inclusive cumulative log-gates, and the ones the query sees (exclusive
  // when the read comes before the token's transitions).
  // Sums of log-gates in double: a difference of two large fp32 sums
  // would cancel catastrophically under strong gates.
  std::vector<std::array<double, K>> lam(C), lamQ(C);
  std::vector<std::array<double, V>> psi(C), psiQ(C);
  std::vector<Vec<U>> delta(C);
  // The intra-chunk products: erase-key A[t][s] (s < t) and query-key
  // P[t][s] (s <= t, s < t reading first), with their gate factors.
  std::vector<std::array<double, C>> pairA(C), pairP(C);

  using KeyLogs = std::array<double, K>;
  using ValueLogs = std::array<double, V>;
  auto valueFactor = [&](const ValueLogs &to, const ValueLogs &from, int j) {
    return Layer::kValueDecay && j < V ? std::exp(to[j] - from[j]) : 1.0;
  };
  auto keyProduct = [&](const Vec<K> &a, const KeyLogs &lamA, const Vec<K> &b,
                        const KeyLogs &lamB) {
    double sum = 0;
    if constexpr (Layer::kUniformKeyGate) {
      // Every channel's log-gates are the same: so is every factor.
      const double factor = std::exp(lamA[0] - lamB[0]);
      for (int d = 0; d < K; ++d)
        sum += double(a[d]) * b[d] * factor;
    } else {
      for (int d = 0; d < K; ++d)
        sum += double(a[d]) * b[d] * std::exp(lamA[d] - lamB[d]);
    }
    return sum;
  };

  for (int64_t start = args.cu_seqlens[seq]; start < args.cu_seqlens[seq + 1];
       start += C) {
    int L = int(std::min<int64_t>(C, args.cu_seqlens[seq + 1] - start));
    for (int t = 0; t < L; ++t) {
      Layer::prologue(Token<Layer>{args, start + t, head}, ops[t]);
      ops[t].q = ops[t].q * Vec<K>::splat(scale);
      // Floored first: a zero decay factor (-inf) would make the sums'
      // differences NaN.
      for (int d = 0; d < K; ++d)
        lam[t][d] = (t ? lam[t - 1][d] : 0.0) + floorLogGate(ops[t].gk[d]);
      for (int j = 0; j < V; ++j)
        psi[t][j] = (t ? psi[t - 1][j] : 0.0) + floorLogGate(ops[t].gv[j]);
      lamQ[t] = !Layer::kReadBefore ? lam[t] : t ? lam[t - 1] : KeyLogs{};
      psiQ[t] = !Layer::kReadBefore ? psi[t] : t ? psi[t - 1] : ValueLogs{};
    }

    // Each exponential is taken once where the loops below would repeat it
    // for every column (or key): the same factors, in the same products.
    std::array<double, K> keyDecay;
    auto decaysOf = [&](const KeyLogs &logs) {
      for (int d = 0; d < K; ++d)
        keyDecay[d] = std::exp(logs[d]);
    };
    // sum_d S[d][j] x[d] keyDecay[d] for every column j, the state's rows
    // in order (each column's sum in the order of d, as one column at a
    // time would take it, so the same value).
    auto readState = [&](const Vec<K> &x, std::array<double, U> &out) {
      out.fill(0.0);
      for (int d = 0; d < K; ++d) {
        const float *row = &state.at(d, 0);
        for (int j = 0; j < U; ++j)
          out[j] += double(row[j]) * x[d] * keyDecay[d];
      }
    };

    // Under a key-vector gate a pair's exponentials (one a channel) serve
    // both of its products when the query sees the token's own gates.
    constexpr bool kShareFactors =
        Layer::kErase && !Layer::kUniformKeyGate && !Layer::kReadBefore;
    for (int t = 0; t < L; ++t)
      for (int s = 0; s <= t; ++s) {
        if constexpr (kShareFactors) {
          double a = 0, p = 0;
          for (int d = 0; d < K; ++d) {
            const double factor = std::exp(lam[t][d] - lam[s][d]);
            a += double(ops[t].e[d]) * ops[s].k[d] * factor;
            p += double(ops[t].q[d]) * ops[s].k[d] * factor;
          }
          pairA[t][s] = a;
          pairP[t][s] = p;
          continue;
        }
        if (Layer::kErase && s < t)
          pairA[t][s] = keyProduct(ops[t].e, lam[t], ops[s].k, lam[s]);
        if (s < t || !Layer::kReadBefore)
          pairP[t][s] = keyProduct(ops[t].q, lamQ[t], ops[s].k, lam[s]);
      }

    // Residuals delta_t = u_t - (D_t S_{t-1} E_t)^T e_t, by forward
    // substitution through the chunk (the unit lower-triangular solve).
    for (int t = 0; t < L; ++t) {
      delta[t] = ops[t].u;
      if constexpr (!Layer::kErase)
        continue;
      std::array<double, U> r;
      decaysOf(lam[t]);
      readState(ops[t].e, r);
      for (int j = 0; j < U; ++j)
        r[j] = ops[t].u[j] - r[j] * valueFactor(psi[t], ValueLogs{}, j);
      for (int s = 0; s < t; ++s) {
        const double a = pairA[t][s];
        for (int j = 0; j < U; ++j)
          r[j] -= a * valueFactor(psi[t], psi[s], j) * delta[s][j];
      }
      for (int j = 0; j < U; ++j)
        delta[t][j] = float(r[j]);
    }

    // Outputs: the incoming state's contribution plus the masked
    // intra-chunk products.
    for (int t = 0; t < L; ++t) {
      // Accumulated in double: strong write gates (exp(i) in mLSTM) put
      // terms of very different sizes into one sum.
      std::array<double, U> sum;
      decaysOf(lamQ[t]);
      readState(ops[t].q, sum);
      for (int j = 0; j < U; ++j)
        sum[j] *= valueFactor(psiQ[t], ValueLogs{}, j);
      int last = Layer::kReadBefore ? t - 1 : t;
      for (int s = 0; s <= last; ++s) {
        const double a = pairP[t][s];
        for (int j = 0; j < U; ++j)
          sum[j] += a * valueFactor(psiQ[t], psi[s], j) * delta[s][j];
      }
      Vec<U> raw;
      for (int j = 0; j < U; ++j)
        raw[j] = float(sum[j]);
      int64_t token = start + t;
      Layer::epilogue(Token<Layer>{args, token, head},
                      State<K, V, N>::template normalize<V, N>(raw),
                      args.output + (token * args.num_heads + head) * V);
    }

    // The state after the chunk: the value-side factors of each token and
    // column, and each key's factors of each token, taken once.
    const KeyLogs &lamEnd = lam[L - 1];
    const ValueLogs &psiEnd = psi[L - 1];
    std::array<double, U> valueEnd;
    for (int j = 0; j < U; ++j)
      valueEnd[j] = valueFactor(psiEnd, ValueLogs{}, j);
    std::vector<std::array<double, U>> valueTo(Layer::kValueDecay ? L : 0);
    for (int s = 0; s < int(valueTo.size()); ++s)
      for (int j = 0; j < U; ++j)
        valueTo[s][j] = valueFactor(psiEnd, psi[s], j);
    // Each row's sums over the tokens in order, a column each.
    std::array<double, U> row;
    for (int d = 0; d < K; ++d) {
      const double keyEnd = std::exp(lamEnd[d]);
      for (int j = 0; j < U; ++j)
        row[j] = double(state.at(d, j)) * keyEnd * valueEnd[j];
      for (int s = 0; s < L; ++s) {
        const double keyTo = std::exp(lamEnd[d] - lam[s][d]);
        for (int j = 0; j < U; ++j)
          row[j] += double(ops[s].k[d]) * keyTo *
                    (Layer::kValueDecay ? valueTo[s][j] : 1.0) * delta[s][j];
      }
      for (int j = 0; j < U; ++j)
        state.at(d, j) = float(row[j]);
    }
  }
}

/// Decode: each sequence's few new tokens on its pool slot, in place.
template <typename Layer> int decode(const linac_cpu_decode_args &args) {
  constexpr int K = Layer::K, V = Layer::V;
  forEachHeadRun(
      nullptr, args.num_seqs, args.num_heads, args.threads,
      [&](int64_t seq, int64_t firstHead, int64_t endHead) {
        const int64_t slot = args.state_indices[seq];
        if (slot < 0)
          return;
        for (int64_t head = firstHead; head < endHead; ++head) {
          using HeadState = State<K, V, Layer::kNormalizer>;
          HeadState state(args.state_pool +
                          size_t(slot * args.num_heads + head) *
                              HeadState::kSize);
          stepThrough<Layer>(args, seq * args.tokens, (seq + 1) * args.tokens,
                             head, state);
        }
      });
  return 0;
}

/// The chunkwise forward by matrix products with sequences cut into
/// `pieces` (docs/design.md, "Segments"), each (piece, head) a task: every
/// sequence's first piece from its initial state and every middle piece
/// from zeros (its transition beside it), side by side; then each
/// sequence's true state after every piece, in order; then every piece
/// after the first from its true entering state, side by side.
template <typename Layer>
void piecewiseForward(const linac_cpu_forward_args &args,
                      const std::vector<SequencePiece> &pieces) {
  constexpr int K = Layer::K, V = Layer::V;
  constexpr bool N = Layer::kNormalizer;
  using HeadState = State<K, V, N>;
  using Operands = Operands<K, V, N>;
  constexpr int U = HeadState::kColumns;
  // What carries a state across a piece: a transition with an erase, else
  // the piece's total log-gates (as chunkHeadsByProducts counts them).
  constexpr int kTransition = Layer::kErase ? K * K : 0;
  constexpr int kLogs = Layer::kErase ? 0
                                      : (Layer::kUniformKeyGate ? 1 : K) +
                                            (Layer::kValueDecay ? U : 0);
  const int64_t H = args.num_heads;
  const size_t slots = pieces.size() * size_t(H);
  // Each (piece, head)'s state after the piece: from zeros, then the true
  // one, which the next piece starts from.
  std::vector<float> states(slots * HeadState::kSize, 0.0f);
  std::vector<float> transitions(slots * kTransition, 0.0f);
  std::vector<double> logs(slots * kLogs, 0.0);
  auto at = [](auto &v, size_t slot, size_t size) {
    return v.data() + slot * size;
  };
  const float scale = readScale<Layer>(args);
  auto run = [&](size_t slot, const SequencePiece &piece, HeadState &state,
                 bool reads, bool carry) {
    const int64_t head = int64_t(slot % H);
    HeadsPass pass{piece.begin, piece.end, reads};
    if (carry && Layer::kErase) {
      float *t = at(transitions, slot, kTransition);
      for (int d = 0; d < K; ++d)
        t[d * K + d] = 1.0f;
      pass.transitions = t;
    } else if (carry) {
      pass.logGateTotals = at(logs, slot, kLogs);
    }
    chunkHeadsByProducts<Layer, Token<Layer>, HeadState, Operands>(
        args, pass, head, &state, 1, scale);
    if (piece.last && args.final_state)
      state.store(args.final_state +
                  size_t(piece.seq * H + head) * HeadState::kSize);
  };

  std::vector<size_t> first;
  for (size_t p = 0; p < pieces.size(); ++p)
    if (pieces[p].index == 0 || !pieces[p].last)
      first.push_back(p);
  forEachTask(int64_t(first.size()) * H, args.threads, [&](int64_t task) {
    const size_t p = first[size_t(task / H)];
    const size_t slot = p * H + size_t(task % H);
    const SequencePiece &piece = pieces[p];
    if (piece.index == 0 && args.initial_state)
      std::copy_n(args.initial_state +
                      size_t(piece.seq * H + task % H) * HeadState::kSize,
                  HeadState::kSize, at(states, slot, HeadState::kSize));
    HeadState state(at(states, slot, HeadState::kSize));
    run(slot, piece, state, piece.index == 0, piece.index > 0);
  });
  for (size_t p = 0; p < pieces.size(); ++p)
    if (pieces[p].index > 0 && !pieces[p].last)
      for (int64_t head = 0; head < H; ++head) {
        const size_t slot = p * H + size_t(head);
        const double *totals = at(logs, slot, kLogs);
        composePiece(K, U,
                     kTransition ? at(transitions, slot, kTransition) : nullptr,
                     totals, Layer::kUniformKeyGate,
                     Layer::kValueDecay ? totals + kLogs - U : nullptr,
                     at(states, slot - H, HeadState::kSize),
                     at(states, slot, HeadState::kSize));
      }
  std::vector<size_t> rest;
  for (size_t p = 0; p < pieces.size(); ++p)
    if (pieces[p].index > 0)
      rest.push_back(p);
  forEachTask(int64_t(rest.size()) * H, args.threads, [&](int64_t task) {
    const size_t p = rest[size_t(task / H)];
    const size_t slot = p * H + size_t(task % H);
    // A state of its own: the next piece reads this slot meanwhile.
    HeadState state;
    state.load(at(states, slot - H, HeadState::kSize));
    run(slot, pieces[p], state, true, false);
  });
}

/// Each sequence and head from its initial state to its final state
/// without reads (abi.h's `output` NULL), on runs of heads as forward's,
/// with its transition beside it when asked (abi.h's `transitions`): the
/// chunks' products on the identity with an erase, else the factors of its
/// total log-gates.
template <typename Layer>
void statesForward(const linac_cpu_forward_args &args) {
  constexpr int K = Layer::K, V = Layer::V;
  constexpr bool N = Layer::kNormalizer;
  using HeadState = State<K, V, N>;
  constexpr int U = HeadState::kColumns;
  constexpr int G = Layer::kUniformKeyGate ? 1 : K;
  constexpr int P = Layer::kValueDecay ? U : 0;
  constexpr size_t kTransition = size_t(K) * (Layer::kErase ? K : U);
  forEachHeadRun(
      args.cu_seqlens, args.num_seqs, args.num_heads, args.threads,
      [&](int64_t seq, int64_t firstHead, int64_t endHead) {
        const int heads = int(endHead - firstHead);
        const size_t slot = size_t(seq * args.num_heads + firstHead);
        std::vector<HeadState> states(heads);
        for (int h = 0; h < heads && args.initial_state; ++h)
          states[h].load(args.initial_state + (slot + h) * HeadState::kSize);
        HeadsPass pass{args.cu_seqlens[seq], args.cu_seqlens[seq + 1], false};
        float *transitions =
            args.transitions ? args.transitions + slot * kTransition : nullptr;
        std::vector<double> totals(size_t(heads) * (G + P), 0.0);
        if (transitions && Layer::kErase) {
          std::fill_n(transitions, heads * kTransition, 0.0f);
          for (int h = 0; h < heads; ++h)
            for (int d = 0; d < K; ++d)
              transitions[h * kTransition + d * K + d] = 1.0f;
          pass.transitions = transitions;
        } else if (transitions) {
          pass.logGateTotals = totals.data();
        }
        chunkHeadsByProducts<Layer, Token<Layer>, HeadState, Operands<K, V, N>>(
            args, pass, firstHead, states.data(), heads,
            readScale<Layer>(args));
        for (int h = 0; h < heads; ++h) {
          states[h].store(args.final_state + (slot + h) * HeadState::kSize);
          const double *sums = totals.data() + h * (G + P);
          for (int d = 0; transitions && !Layer::kErase && d < K; ++d)
            for (int j = 0; j < U; ++j)
              transitions[h * kTransition + d * U + j] = float(
                  std::exp(sums[G == 1 ? 0 : d] + (P ? sums[G + j] : 0.0)));
        }
      });
}

/// A cut sequence's first piece against each later one (cutSequences): the
/// share of a piece's whole time that a middle piece's state from zeros
/// takes, which the first piece's one pass runs beside. Measured with two
/// workers on one head of 16384 tokens (the cut's three pieces), linear
/// attention, RetNet and Mamba-2 were fastest near 0.5 and GLA near 0.65
/// (per-channel factors, a key vector's or a value-side decay's, make the
/// state's products the larger part). With an erase a middle piece's
/// transition takes as long again as its state, so the pieces stay equal.
template <typename Layer> constexpr double firstPieceShare() {
  if constexpr (Layer::kErase)
    return 1.0;
  else
    return Layer::kUniformKeyGate && !Layer::kValueDecay ? 0.5 : 0.65;
}

/// Each sequence and head from its initial state (zeros without one) to its
/// final state: the recurrent scan (the step, token by token), the pairwise
/// chunkwise algorithm for an erase under a value-side decay, or the
/// chunkwise algorithm by matrix products (chunk.h) on a run of heads, its
/// sequences cut into pieces where workers would otherwise idle.
template <typename Layer> int forward(const linac_cpu_forward_args &args) {
  constexpr int K = Layer::K, V = Layer::V;
  constexpr bool N = Layer::kNormalizer;
  using HeadState = State<K, V, N>;
  constexpr bool kByProducts =
      !Layer::kRecurrent && !(Layer::kValueDecay && Layer::kErase);
  if (!args.output) {
    // The runtime asks only layers by products for states alone.
    if constexpr (kByProducts)
      statesForward<Layer>(args);
    return kByProducts ? 0 : 1;
  }
  if constexpr (kByProducts) {
    const std::vector<SequencePiece> pieces =
        cutSequences(args.cu_seqlens, args.num_seqs, args.num_heads,
                     args.threads, Layer::kChunkSize, Layer::kErase,
                     args.segment_tokens, firstPieceShare<Layer>());
    if (!pieces.empty()) {
      piecewiseForward<Layer>(args, pieces);
      return 0;
    }
  }
  auto stateOffset = [&](int64_t seq, int64_t head) {
    return size_t(seq * args.num_heads + head) * HeadState::kSize;
  };
  forEachHeadRun(
      args.cu_seqlens, args.num_seqs, args.num_heads, args.threads,
      [&](int64_t seq, int64_t firstHead, int64_t endHead) {
        std::vector<HeadState> states(size_t(endHead - firstHead));
        for (int64_t head = firstHead; head < endHead; ++head)
          if (args.initial_state)
            states[head - firstHead].load(args.initial_state +
                                          stateOffset(seq, head));
        for (int64_t head = firstHead; head < endHead; ++head) {
          HeadState &state = states[head - firstHead];
          if constexpr (Layer::kRecurrent)
            stepThrough<Layer>(args, args.cu_seqlens[seq],
                               args.cu_seqlens[seq + 1], head, state);
          else if constexpr (Layer::kValueDecay && Layer::kErase)
            pairwiseChunkSequence<Layer>(args, seq, head, state);
        }
        if constexpr (kByProducts)
          chunkHeadsByProducts<Layer, Token<Layer>, HeadState,
                               Operands<K, V, N>>(
              args, HeadsPass{args.cu_seqlens[seq], args.cu_seqlens[seq + 1]},
              firstHead, states.data(), int(endHead - firstHead),
              readScale<Layer>(args));
        if (args.final_state)
          for (int64_t head = firstHead; head < endHead; ++head)
            states[head - firstHead].store(args.final_state +
                                           stateOffset(seq, head));
      });
  return 0;
}

} // namespace linac::cpu

/// The manifest's contract hash, exported for the runtime to compare with
/// the manifest's before and after loading (linac/contract.h).
#define LINAC_CONTRACT(hash)                                                   \
  extern "C" const char linac_contract[] = LINAC_CONTRACT_PREFIX hash;

#endif // LINAC_CPU_LAYER_H
