//===- backward.h - the chunkwise backward on the CPU -----------*- C++ -*-===//
//
// backward<Layer> runs the gradients of a chunkwise layer without a
// value-side decay or a normaliser, one (sequence, head) at a time:
//
//   forward: the generated prologue and chunkForward (products.h) from the
//     initial state, keeping the state that enters each chunk;
//   backward, chunk by chunk from the last: the chunk's operands and reads
//     again from its entering state, the generated epilogueBackward (the
//     output's gradient to the read's and the arguments'), chunkBackward
//     (the reads' and the leaving state's gradients to the operands' and
//     the entering state's), then prologueBackward (the operands' to the
//     arguments').
//
// The generated functions are the reverse of prologue and epilogue
// (compiler/lib/Codegen.cpp); docs/design.md gives the chunk's formulas.
// Work is spread over (sequence, group of heads) tasks, a group the heads
// that share a row of some input, so that no two tasks add to one input
// row; each task adds its parameters' gradients into buffers of its own,
// summed in task order at the end, so that the result does not depend on
// the thread count.
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
  float *const *paramGrads;
  int64_t token;
  int64_t head;

  float *input(int i) const {
    const linac_cpu_forward_args &f = args.forward;
    const int64_t heads = f.input_heads[i];
    const int64_t h = Token<Layer>::groupHead(head, f.num_heads, heads);
    return args.input_grads[i] + (token * heads + h) * Layer::inputSize(i);
  }
  float *param(int i) const {
    const linac_cpu_forward_args &f = args.forward;
    const int64_t h =
        Token<Layer>::groupHead(head, f.num_heads, f.param_heads[i]);
    return paramGrads[i] + h * Layer::paramSize(i);
  }
};

/// The backward of one head of one sequence, its gradients added to
/// `args`' buffers and its parameters' to `paramGrads`.
template <typename Layer>
void headBackward(const linac_cpu_backward_args &args, float *const *paramGrads,
                  int64_t seq, int64_t head) {
  constexpr int K = Layer::K, V = Layer::V, C = Layer::kChunkSize;
  constexpr int G = Layer::kUniformKeyGate ? 1 : K;
  using Records = Operands<K, V, false>;
  static_assert(sizeof(Records) % sizeof(float) == 0 &&
                    sizeof(Vec<V>) == V * sizeof(float),
                "records and reads are whole floats");
  const linac_cpu_forward_args &forward = args.forward;
  const int64_t begin = forward.cu_seqlens[seq],
                end = forward.cu_seqlens[seq + 1];
  const int64_t chunks = (end - begin + C - 1) / C;
  const size_t stateSize = size_t(K) * V;
  const size_t stateAt = size_t(seq * forward.num_heads + head) * stateSize;

  std::vector<Records> records(C), gradients(C);
  std::vector<Vec<V>> reads(C), dReads(C);
  std::vector<double> lam(C * G), lamQ(C * G), dGate(C * G);
  const int rowStride = int(sizeof(Records) / sizeof(float));
  const Chunk chunk{C,
                    K,
                    V,
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
                    nullptr,
                    nullptr};
  const ChunkGradients out{rowStride,
                           gradients[0].q.x.data(),
                           gradients[0].k.x.data(),
                           gradients[0].e.x.data(),
                           gradients[0].u.x.data(),
                           dGate.data()};
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
    }
    return L;
  };

  std::vector<float> entering(size_t(chunks) * stateSize);
  std::vector<float> state(stateSize, 0.0f);
  if (forward.initial_state)
    std::copy_n(forward.initial_state + stateAt, stateSize, state.begin());
  for (int64_t c = 0; c < chunks; ++c) {
    std::copy(state.begin(), state.end(), entering.begin() + c * stateSize);
    prepare(c);
    chunkForward(chunk, state.data(), nullptr);
  }

  std::vector<float> dState(stateSize, 0.0f);
  if (args.d_final_state)
    std::copy_n(args.d_final_state + stateAt, stateSize, dState.begin());
  for (int64_t c = chunks - 1; c >= 0; --c) {
    const int L = prepare(c);
    const int64_t start = begin + c * C;
    const float *const enteringState = entering.data() + c * stateSize;
    std::copy_n(enteringState, stateSize, state.begin());
    chunkForward(chunk, state.data(), reads[0].x.data());
    for (int t = 0; t < C; ++t) {
      dReads[t] = Vec<V>{};
      if (t >= L)
        continue;
      const int64_t token = start + t;
      Layer::epilogueBackward(
          Token<Layer>{forward, token, head}, reads[t],
          Vec<V>::load(args.d_output + (token * forward.num_heads + head) * V),
          dReads[t], TokenGradients<Layer>{args, paramGrads, token, head});
    }
    std::fill(gradients.begin(), gradients.end(), Records{});
    chunkBackward(chunk, enteringState, dReads[0].x.data(), dState.data(), out);
    for (int t = 0; t < L; ++t) {
      Records &d = gradients[t];
      // A log-gate raised to the floor passes no gradient.
      for (int g = 0; g < G; ++g)
        d.gk[g] =
            records[t].gk[g] < kLogGateFloor ? 0.0f : float(dGate[t * G + g]);
      const int64_t token = start + t;
      Layer::prologueBackward(
          Token<Layer>{forward, token, head}, d,
          TokenGradients<Layer>{args, paramGrads, token, head});
    }
  }
  if (args.d_initial_state)
    std::copy(dState.begin(), dState.end(), args.d_initial_state + stateAt);
}

/// The backward over every sequence and head on args.forward.threads
/// workers.
template <typename Layer> int backward(const linac_cpu_backward_args &args) {
  static_assert(!Layer::kRecurrent && !Layer::kValueDecay &&
                    !Layer::kNormalizer,
                "the backward covers chunkwise layers without a value-side "
                "decay or a normaliser");
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
  std::vector<float> taskParams(size_t(tasks * taskFloats), 0.0f);
  forEachTask(tasks, forward.threads, [&](int64_t task) {
    std::vector<float *> paramGrads(Layer::kNumParams);
    float *next = taskParams.data() + task * taskFloats;
    for (int i = 0; i < Layer::kNumParams; ++i) {
      paramGrads[i] = next;
      next += paramFloats[i];
    }
    const int64_t seq = task / groups, group = task % groups;
    for (int64_t head = group * groupHeads; head < (group + 1) * groupHeads;
         ++head)
      headBackward<Layer>(args, paramGrads.data(), seq, head);
  });
  for (int64_t task = 0; task < tasks; ++task) {
    const float *from = taskParams.data() + task * taskFloats;
    for (int i = 0; i < Layer::kNumParams; ++i)
      for (int64_t x = 0; x < paramFloats[i]; ++x)
        args.param_grads[i][x] += *from++;
  }
  return 0;
}

} // namespace linac::cpu

#endif // LINAC_CPU_BACKWARD_H
