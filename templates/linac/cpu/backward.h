//===- backward.h - the backward pass on the CPU ----------------*- C++ -*-===//
//
// backward<Layer> runs the gradients of a layer, one (sequence, head) at a
// time. A chunkwise layer (a value-side decay without an erase among them)
// goes by chunks, a normaliser as one more column of the state and of the
// writes:
//
//   forward: the generated prologue and chunkForward (products.h) from the
//     initial state, keeping the state that enters each chunk and the
//     chunk's reads;
//   backward, chunk by chunk from the last: the chunk's operands again,
//     the generated epilogueBackward on its kept reads (the
//     output's gradient to the read's and the arguments'), the division by
//     the normaliser's read reversed (normalizeBackward), chunkBackward
//     (the reads' and the leaving state's gradients to the operands' and
//     the entering state's), then prologueBackward (the operands' to the
//     arguments').
//
// Any other layer goes token by token: the step from the initial state,
// keeping the state every kCheckpointTokens tokens; then, from the last
// stretch, the states entering its tokens again and the generated
// stepBackward of each token from the last, which runs the step again,
// keeping the state each state op takes, and walks it back.
//
// The generated functions are the reverse of prologue, epilogue and step
// (compiler/lib/Codegen.cpp); docs/design.md gives the chunk's formulas.
// Work is spread over (sequence, group of heads) tasks, a group the heads
// that share a row of some input, so that no two tasks add to one input
// row; each task adds its parameters' gradients into fp64 buffers of its
// own (a sum over all its tokens, whose cancellation would magnify fp32's
// rounding), summed in task order at the end, so that the result does not
// depend on the thread count.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CPU_BACKWARD_H
#define LINAC_CPU_BACKWARD_H

#include "linac/cpu/adjoint.h"
#include "linac/cpu/layer.h"

#include <numeric>

namespace linac::cpu {

/// Where one token of one head adds its arguments' gradients: the rows of
/// its inputs' gradients and of its parameters' (`paramGrads`, the
/// task's).
template <typename Layer> struct TokenGradients {
  const linac_cpu_backward_args &args;
  double *const *paramGrads;
  int64_t token;
  int64_t head;

  float *input(int i) const {
    const linac_cpu_forward_args &f = args.forward;
    const int64_t heads = f.input_heads[i];
    const int64_t h = Token<Layer>::groupHead(head, f.num_heads, heads);
    return args.input_grads[i] + (token * heads + h) * Layer::inputSize(i);
  }
  double *param(int i) const {
    const linac_cpu_forward_args &f = args.forward;
    const int64_t h =
        Token<Layer>::groupHead(head, f.num_heads, f.param_heads[i]);
    return paramGrads[i] + h * Layer::paramSize(i);
  }
};

/// The backward of one head of one sequence, its gradients added to
/// `args`' buffers and its parameters' to `paramGrads`.
/// The gradient of a raw read (V columns and the normaliser's n^T q
/// scale) from that of normalize's result, `dRead`: divided by max(|n^T q
/// scale|, 1), whose own gradient is 0 where it is 1, as the reference's.
template <int V, bool N>
Vec<V + (N ? 1 : 0)> normalizeBackward(const Vec<V + (N ? 1 : 0)> &raw,
                                       const Vec<V> &dRead) {
  Vec<V + (N ? 1 : 0)> dRaw;
  std::copy_n(dRead.x.begin(), V, dRaw.x.begin());
  if constexpr (N) {
    const double m = raw[V], divisor = std::max(std::fabs(m), 1.0);
    double dDivisor = 0.0;
    for (int j = 0; j < V; ++j) {
      dRaw[j] = float(dRead[j] / divisor);
      dDivisor -= double(dRead[j]) * raw[j] / (divisor * divisor);
    }
    dRaw[V] = std::fabs(m) > 1.0 ? float(m > 0.0 ? dDivisor : -dDivisor) : 0.0f;
  }
  return dRaw;
}

template <typename Layer>
void headBackward(const linac_cpu_backward_args &args,
                  double *const *paramGrads, int64_t seq, int64_t head) {
  constexpr int K = Layer::K, V = Layer::V, C = Layer::kChunkSize;
  constexpr bool N = Layer::kNormalizer;
  constexpr int U = V + (N ? 1 : 0);
  constexpr int G = Layer::kUniformKeyGate ? 1 : K;
  using Records = Operands<K, V, N>;
  static_assert(sizeof(Records) % sizeof(float) == 0 &&
                    sizeof(Vec<U>) == U * sizeof(float),
                "records and reads are whole floats");
  const linac_cpu_forward_args &forward = args.forward;
  const int64_t begin = forward.cu_seqlens[seq],
                end = forward.cu_seqlens[seq + 1];
  const int64_t chunks = (end - begin + C - 1) / C;
  const size_t stateSize = size_t(K) * U;
  const size_t stateAt = size_t(seq * forward.num_heads + head) * stateSize;

  std::vector<Records> records(C), gradients(C);
  std::vector<Vec<U>> dReads(C);
  constexpr int P = Layer::kValueDecay ? U : 0;
  std::vector<double> lam(C * G), lamQ(C * G), dGate(C * G);
  std::vector<double> psi(C * P), psiQ(C * P), dValueGate(C * P);
  const int rowStride = int(sizeof(Records) / sizeof(float));
  const Chunk chunk{C,
                    K,
                    U,
                    Layer::kErase,
                    Layer::kReadBefore,
                    Layer::kUniformKeyGate,
                    readScale<Layer>(forward),
                    rowStride,
                    records[0].q.x.data(),
                    records[0].k.x.data(),
                    records[0].e.x.data(),
                    records[0].u.x.data(),
                    lam.data(),
                    lamQ.data(),
                    P ? psi.data() : nullptr,
                    P ? psiQ.data() : nullptr};
  const ChunkGradients out{rowStride,
                           gradients[0].q.x.data(),
                           gradients[0].k.x.data(),
                           gradients[0].e.x.data(),
                           gradients[0].u.x.data(),
                           dGate.data(),
                           dValueGate.data()};
  // Chunk c's operands and cumulative log-gates, as chunk.h makes them;
  // returns its length.
  auto prepare = [&](int64_t c) {
    const int64_t start = begin + c * C;
    const int L = int(std::min<int64_t>(C, end - start));
    for (int t = 0; t < C; ++t) {
      if (t < L)
        Layer::prologue(Token<Layer>{forward, start + t, head}, records[t]);
      else
        records[t] = Records{};
      for (int d = 0; d < G; ++d) {
        const double before = t ? lam[(t - 1) * G + d] : 0.0;
        lam[t * G + d] = before + floorLogGate(records[t].gk[d]);
        lamQ[t * G + d] = Layer::kReadBefore ? before : lam[t * G + d];
      }
      for (int j = 0; j < P; ++j) {
        const double before = t ? psi[(t - 1) * P + j] : 0.0;
        psi[t * P + j] = before + floorLogGate(records[t].gv[j]);
        psiQ[t * P + j] = Layer::kReadBefore ? before : psi[t * P + j];
      }
    }
    return L;
  };

  // The state entering each chunk and each chunk's reads, kept.
  std::vector<float> entering(size_t(chunks) * stateSize);
  std::vector<Vec<U>> reads(size_t(chunks) * C);
  std::vector<float> state(stateSize, 0.0f);
  if (forward.initial_state)
    std::copy_n(forward.initial_state + stateAt, stateSize, state.begin());
  for (int64_t c = 0; c < chunks; ++c) {
    std::copy(state.begin(), state.end(), entering.begin() + c * stateSize);
    prepare(c);
    chunkForward(chunk, state.data(), reads[c * C].x.data());
  }

  std::vector<float> dState(stateSize, 0.0f);
  if (args.d_final_state)
    std::copy_n(args.d_final_state + stateAt, stateSize, dState.begin());
  for (int64_t c = chunks - 1; c >= 0; --c) {
    const int L = prepare(c);
    const int64_t start = begin + c * C;
    const float *const enteringState = entering.data() + c * stateSize;
    for (int t = 0; t < C; ++t) {
      dReads[t] = Vec<U>{};
      if (t >= L)
        continue;
      const int64_t token = start + t;
      const Vec<U> &raw = reads[c * C + t];
      Vec<V> dRead;
      Layer::epilogueBackward(
          Token<Layer>{forward, token, head},
          State<K, V, N>::template normalize<V, N>(raw),
          Vec<V>::load(args.d_output + (token * forward.num_heads + head) * V),
          dRead, TokenGradients<Layer>{args, paramGrads, token, head});
      dReads[t] = normalizeBackward<V, N>(raw, dRead);
    }
    std::fill(gradients.begin(), gradients.end(), Records{});
    chunkBackward(chunk, enteringState, dReads[0].x.data(), dState.data(), out);
    for (int t = 0; t < L; ++t) {
      Records &d = gradients[t];
      // A log-gate raised to the floor passes no gradient.
      for (int g = 0; g < G; ++g)
        d.gk[g] =
            records[t].gk[g] < kLogGateFloor ? 0.0f : float(dGate[t * G + g]);
      for (int j = 0; j < P; ++j)
        d.gv[j] = records[t].gv[j] < kLogGateFloor
                      ? 0.0f
                      : float(dValueGate[t * P + j]);
      const int64_t token = start + t;
      Layer::prologueBackward(
          Token<Layer>{forward, token, head}, d,
          TokenGradients<Layer>{args, paramGrads, token, head});
    }
  }
  if (args.d_initial_state)
    std::copy(dState.begin(), dState.end(), args.d_initial_state + stateAt);
}

/// The reverses of the state ops stepBackward calls: each takes the
/// gradient dS of the state the op leaves to that of the state it takes
/// (`before`), and adds its other operands' gradients to the out
/// arguments (or returns them). A normaliser's column decays by the key
/// gate alone, takes no matrix gate, and takes the write's weight.

/// S' = D_k S D_v.
template <int K, int V, bool N>
void decayBackward(State<K, V, N> &dS, const State<K, V, N> &before,
                   const Vec<K> &gk, const Vec<V> &gv, Vec<K> &dgk,
                   Vec<V> &dgv) {
  constexpr int Columns = State<K, V, N>::kColumns;
  std::array<double, V> columnSums{};
  for (int i = 0; i < K; ++i) {
    double rowSum = 0.0;
    for (int j = 0; j < Columns; ++j) {
      const float factor = std::exp(gk[i] + (j < V ? gv[j] : 0.0f));
      const double term = double(dS.at(i, j)) * factor * before.at(i, j);
      rowSum += term;
      if (j < V)
        columnSums[j] += term;
      dS.at(i, j) *= factor;
    }
    dgk[i] += float(rowSum);
  }
  for (int j = 0; j < V; ++j)
    dgv[j] += float(columnSums[j]);
}

/// S' = exp(G) (.) S; returns G's gradient.
template <int K, int V, bool N>
Mat<K, V> matrixGateBackward(State<K, V, N> &dS, const State<K, V, N> &before,
                             const Mat<K, V> &g) {
  Mat<K, V> dg;
  for (int i = 0; i < K; ++i)
    for (int j = 0; j < V; ++j) {
      const float factor = std::exp(g[i * V + j]);
      dg[i * V + j] = dS.at(i, j) * factor * before.at(i, j);
      dS.at(i, j) *= factor;
    }
  return dg;
}

/// S' = S - k (e^T S).
template <int K, int V, bool N>
void eraseBackward(State<K, V, N> &dS, const State<K, V, N> &before,
                   const Vec<K> &k, const Vec<K> &e, Vec<K> &dk, Vec<K> &de) {
  constexpr int Columns = State<K, V, N>::kColumns;
  std::array<double, Columns> eS{}, kG{};
  for (int i = 0; i < K; ++i)
    for (int j = 0; j < Columns; ++j) {
      eS[j] += double(e[i]) * before.at(i, j);
      kG[j] += double(k[i]) * dS.at(i, j);
    }
  for (int i = 0; i < K; ++i) {
    double dki = 0.0, dei = 0.0;
    for (int j = 0; j < Columns; ++j) {
      dki -= dS.at(i, j) * eS[j];
      dei -= before.at(i, j) * kG[j];
      dS.at(i, j) -= float(e[i] * kG[j]);
    }
    dk[i] += float(dki);
    de[i] += float(dei);
  }
}

/// S' = S + k u^T, the normaliser's column plus k `weight`.
template <int K, int V, bool N>
void writeBackward(const State<K, V, N> &dS, const Vec<K> &k, const Vec<V> &u,
                   float weight, Vec<K> &dk, Vec<V> &du, float &dweight) {
  std::array<double, V> columnSums{};
  double weightSum = 0.0;
  for (int i = 0; i < K; ++i) {
    double dki = 0.0;
    for (int j = 0; j < V; ++j) {
      dki += double(dS.at(i, j)) * u[j];
      columnSums[j] += double(k[i]) * dS.at(i, j);
    }
    if constexpr (N) {
      dki += double(dS.at(i, V)) * weight;
      weightSum += double(k[i]) * dS.at(i, V);
    }
    dk[i] += float(dki);
  }
  for (int j = 0; j < V; ++j)
    du[j] += float(columnSums[j]);
  dweight += float(weightSum);
}

/// o = scale S^T q, divided by max(|n . q scale|, 1) with a normaliser
/// (whose gradient is 0 where that is 1, as the reference's); `state` is
/// the state read, `dOut` o's gradient. Returns q's.
template <int K, int V, bool N>
Vec<K> readBackward(State<K, V, N> &dS, const State<K, V, N> &state,
                    const Vec<K> &q, float scale, const Vec<V> &dOut) {
  constexpr int Columns = State<K, V, N>::kColumns;
  std::array<double, Columns> raw{}, dRaw{};
  for (int i = 0; i < K; ++i)
    for (int j = 0; j < Columns; ++j)
      raw[j] += double(state.at(i, j)) * q[i] * scale;
  for (int j = 0; j < V; ++j)
    dRaw[j] = dOut[j];
  if constexpr (N) {
    const double m = raw[V], divisor = std::max(std::fabs(m), 1.0);
    double dDivisor = 0.0;
    for (int j = 0; j < V; ++j) {
      dRaw[j] = dOut[j] / divisor;
      dDivisor -= dOut[j] * raw[j] / (divisor * divisor);
    }
    dRaw[V] = std::fabs(m) > 1.0 ? (m > 0.0 ? dDivisor : -dDivisor) : 0.0;
  }
  Vec<K> dq;
  for (int i = 0; i < K; ++i) {
    double sum = 0.0;
    for (int j = 0; j < Columns; ++j) {
      sum += double(state.at(i, j)) * dRaw[j];
      dS.at(i, j) += float(q[i] * scale * dRaw[j]);
    }
    dq[i] = float(sum * scale);
  }
  return dq;
}

/// Tokens between the states a token-by-token backward keeps.
inline constexpr int kCheckpointTokens = 64;

/// The token-by-token backward of one head of one sequence, its gradients
/// added to `args`' buffers and its parameters' to `paramGrads`.
template <typename Layer>
void stepHeadBackward(const linac_cpu_backward_args &args,
                      double *const *paramGrads, int64_t seq, int64_t head) {
  constexpr int K = Layer::K, V = Layer::V, C = kCheckpointTokens;
  using HeadState = State<K, V, Layer::kNormalizer>;
  const linac_cpu_forward_args &forward = args.forward;
  const int64_t begin = forward.cu_seqlens[seq],
                end = forward.cu_seqlens[seq + 1];
  const int64_t stretches = (end - begin + C - 1) / C;
  const size_t stateAt =
      size_t(seq * forward.num_heads + head) * HeadState::kSize;
  const float scale = readScale<Layer>(forward);
  std::vector<float> unused(V);

  HeadState state;
  if (forward.initial_state)
    state.load(forward.initial_state + stateAt);
  std::vector<float> checkpoints(size_t(stretches) * HeadState::kSize);
  for (int64_t t = begin; t < end; ++t) {
    if ((t - begin) % C == 0)
      state.store(checkpoints.data() + (t - begin) / C * HeadState::kSize);
    Layer::step(Token<Layer>{forward, t, head}, state, scale, unused.data());
  }

  HeadState dState;
  if (args.d_final_state)
    dState.load(args.d_final_state + stateAt);
  std::vector<float> entering(size_t(C) * HeadState::kSize);
  for (int64_t c = stretches - 1; c >= 0; --c) {
    const int64_t start = begin + c * C;
    const int L = int(std::min<int64_t>(C, end - start));
    state.load(checkpoints.data() + c * HeadState::kSize);
    for (int t = 0; t < L; ++t) {
      state.store(entering.data() + t * HeadState::kSize);
      Layer::step(Token<Layer>{forward, start + t, head}, state, scale,
                  unused.data());
    }
    for (int t = L - 1; t >= 0; --t) {
      const int64_t token = start + t;
      state.load(entering.data() + t * HeadState::kSize);
      Layer::stepBackward(
          Token<Layer>{forward, token, head}, state, scale, dState,
          Vec<V>::load(args.d_output + (token * forward.num_heads + head) * V),
          TokenGradients<Layer>{args, paramGrads, token, head});
    }
  }
  if (args.d_initial_state)
    dState.store(args.d_initial_state + stateAt);
}

/// The backward over every sequence and head on args.forward.threads
/// workers.
template <typename Layer> int backward(const linac_cpu_backward_args &args) {
  constexpr bool kByChunks =
      !Layer::kRecurrent && !(Layer::kValueDecay && Layer::kErase);
  const linac_cpu_forward_args &forward = args.forward;
  const int64_t heads = forward.num_heads;
  // Groups of heads whose boundaries are every input's row boundaries:
  // the greatest common divisor of the inputs' head counts.
  int64_t groups = heads;
  for (int i = 0; i < Layer::kNumInputs; ++i)
    groups = std::gcd(groups, forward.input_heads[i]);
  const int64_t groupHeads = heads / groups;
  const int64_t tasks = forward.num_seqs * groups;

  // Each task's parameters' gradients, one buffer a parameter.
  std::vector<int64_t> paramFloats(Layer::kNumParams);
  int64_t taskFloats = 0;
  for (int i = 0; i < Layer::kNumParams; ++i)
    taskFloats += paramFloats[i] = forward.param_heads[i] * Layer::paramSize(i);
  std::vector<double> taskParams(size_t(tasks * taskFloats), 0.0);
  forEachTask(tasks, forward.threads, [&](int64_t task) {
    std::vector<double *> paramGrads(Layer::kNumParams);
    double *next = taskParams.data() + task * taskFloats;
    for (int i = 0; i < Layer::kNumParams; ++i) {
      paramGrads[i] = next;
      next += paramFloats[i];
    }
    const int64_t seq = task / groups, group = task % groups;
    for (int64_t head = group * groupHeads; head < (group + 1) * groupHeads;
         ++head)
      if constexpr (kByChunks)
        headBackward<Layer>(args, paramGrads.data(), seq, head);
      else
        stepHeadBackward<Layer>(args, paramGrads.data(), seq, head);
  });
  for (int64_t task = 1; task < tasks; ++task)
    for (int64_t x = 0; x < taskFloats; ++x)
      taskParams[x] += taskParams[task * taskFloats + x];
  const double *from = taskParams.data();
  for (int i = 0; i < Layer::kNumParams; ++i)
    for (int64_t x = 0; x < paramFloats[i]; ++x)
      args.param_grads[i][x] += float(*from++);
  return 0;
}

} // namespace linac::cpu

#endif // LINAC_CPU_BACKWARD_H
