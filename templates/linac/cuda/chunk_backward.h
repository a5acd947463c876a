//===- chunk_backward.h - the chunkwise backward pass on the GPU -*- C++
//-*-===//
//
// The gradients of a chunkwise layer under a key-side gate that is the same
// on every channel (none, fixed or scalar), with an erase or without,
// reading after the write, with no normaliser and no value-side decay, in
// five launches (abi.h):
//
//   operands:  the generated prologue of every (token, head), a warp each,
//              its operands in fp32 into the workspace;
//   states:    a block a (column tile, head, sequence) walks the chunks of
//              kBackwardChunk tokens forward, keeping the state entering
//              each and every token's read;
//   reads:     the generated epilogueBackward of every token: the output's
//              gradient to the read's, in the read's place;
//   chunks:    the same blocks walk the chunks back from the leaving state's
//              gradient: each chunk's operands' gradients (its columns'
//              share, added) and the entering state's, by the formulas of
//              the CPU's chunkBackward (products.cpp) under a uniform gate;
//   arguments: the generated prologueBackward of every token, the operands'
//              gradients to the inputs' and parameters'.
//
// Every product is fp32 on the CUDA cores, whatever the activations. A
// block's warps own the chunk's rows t = w, w + 8, ...; a row's reductions
// over keys are warp sums, those over the pairs' other token sums in
// shared memory.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CUDA_CHUNK_BACKWARD_H
#define LINAC_CUDA_CHUNK_BACKWARD_H

#include "linac/cuda/adjoint.h"
#include "linac/cuda/backward.h"
#include "linac/cuda/chunk.h"
#include "linac/gates.h"

namespace linac::cuda {

/// A written value's gradient without the normaliser's weight (the chunkwise
/// backward takes no normaliser).
template <int V> LINAC_DEVICE WarpVec<V> valuesOf(const NormalizedValue<V> &d) {
  return d.u;
}

/// A row a warp adds an argument's gradient to, element by element.
struct WarpRow {
  float *row;
};
LINAC_DEVICE void addGradient(WarpRow to, float d) {
  if (laneId() == 0)
    atomicAdd(to.row, d);
}
template <int N>
LINAC_DEVICE void addGradient(WarpRow to, const WarpVec<N> &d) {
#pragma unroll
  for (int i = 0; i < WarpVec<N>::kSlots; ++i)
    if (holdsElement<WarpVec<N>, N>(i))
      atomicAdd(to.row + WarpVec<N>::index(i), d.x[i]);
}

/// Where the warp of one (token, head) adds its arguments' gradients.
template <typename Layer> struct WarpGradients {
  const linac_cuda_backward_args &args;
  Token<Layer, float> at;

  LINAC_DEVICE WarpRow input(int i) const {
    const int64_t heads = args.forward.input_heads[i];
    return {args.input_grads[i] +
            (at.token * heads + at.groupHead(heads)) * Layer::inputSize(i)};
  }
  LINAC_DEVICE WarpRow param(int i) const {
    return {args.param_grads[i] +
            at.groupHead(args.forward.param_heads[i]) * Layer::paramSize(i)};
  }
};

/// The tokens of the whole batch.
LINAC_DEVICE int64_t batchTokens(const linac_cuda_forward_args &args) {
  return args.cu_seqlens ? args.cu_seqlens[args.num_seqs]
                         : args.num_seqs * args.tokens_per_seq;
}

/// Runs f(token, head, item) for this warp's (token, head) of a warp grid,
/// item = token * H + head; a warp past the last returns whole.
template <typename F>
LINAC_DEVICE void forWarpItem(const linac_cuda_forward_args &args, F f) {
  const int64_t item =
      (int64_t(blockIdx.x) * kBackwardThreads + threadIdx.x) / 32;
  if (item >= batchTokens(args) * args.num_heads)
    return;
  f(item / args.num_heads, int(item % args.num_heads), item);
}

/// Where a record's operands lie, in floats from its start.
template <typename Layer> struct BackwardRecord {
  static constexpr int K = Layer::K, V = Layer::V;
  static constexpr int kQ = 0, kK = K, kE = 2 * K, kU = 3 * K,
                       kGate = 3 * K + V;
  static constexpr int64_t kFloats = backwardRecordFloats(K, V);
};

template <typename Layer>
LINAC_DEVICE void backwardOperandsKernel(const linac_cuda_backward_args &args) {
  using Record = BackwardRecord<Layer>;
  forWarpItem(args.forward, [&](int64_t token, int head, int64_t item) {
    LayerOperands<Layer> ops;
    Layer::Chunk::prologue(
        AnyToken<Layer>{{args.forward, token, head}, args.dtype}, ops);
    float *const record = args.operands + item * Record::kFloats;
    ops.q.store(record + Record::kQ);
    ops.k.store(record + Record::kK);
    if constexpr (Layer::kErase)
      ops.e.store(record + Record::kE);
    ops.u.u.store(record + Record::kU);
    if (laneId() == 0)
      record[Record::kGate] = ops.gk;
  });
}

template <typename Layer>
LINAC_DEVICE void backwardReadsKernel(const linac_cuda_backward_args &args) {
  constexpr int V = Layer::V;
  forWarpItem(args.forward, [&](int64_t token, int head, int64_t item) {
    float *const row = args.reads + item * V;
    const auto read = WarpVec<V>::load(row);
    const auto dOut =
        WarpVec<V>::load(AnyInput{args.d_output, item * V, args.dtype});
    WarpVec<V> dRead;
    Layer::ChunkBackward::epilogueBackward(
        AnyToken<Layer>{{args.forward, token, head}, args.dtype}, read, dOut,
        dRead, WarpGradients<Layer>{args, {args.forward, token, head}});
    dRead.store(row);
  });
}

template <typename Layer>
LINAC_DEVICE void
backwardArgumentsKernel(const linac_cuda_backward_args &args) {
  constexpr int K = Layer::K, V = Layer::V;
  using Record = BackwardRecord<Layer>;
  forWarpItem(args.forward, [&](int64_t token, int head, int64_t item) {
    const float *const grads = args.operand_grads + item * Record::kFloats;
    LayerOperands<Layer> d;
    d.q = WarpVec<K>::load(grads + Record::kQ);
    d.k = WarpVec<K>::load(grads + Record::kK);
    if constexpr (Layer::kErase)
      d.e = WarpVec<K>::load(grads + Record::kE);
    d.u = {WarpVec<V>::load(grads + Record::kU), 0.0f};
    // A log-gate raised to the floor passes no gradient.
    const float gate = args.operands[item * Record::kFloats + Record::kGate];
    d.gk = gate < kLogGateFloor ? 0.0f : grads[Record::kGate];
    Layer::ChunkBackward::prologueBackward(
        AnyToken<Layer>{{args.forward, token, head}, args.dtype}, d,
        WarpGradients<Layer>{args, {args.forward, token, head}});
  });
}

/// One block of the state walks: value columns [column, column + W) of one
/// head of one sequence, a chunk of C tokens at a time, in shared memory.
template <typename Layer> struct BackwardBlock {
  static constexpr int K = Layer::K, V = Layer::V, C = kBackwardChunk,
                       W = kBackwardColumns;
  static constexpr int KP = K + 1, WP = W + 1, CP = C + 1;
  static constexpr int kWarps = kBackwardThreads / 32;
  static constexpr bool kErase = Layer::kErase;
  static_assert(C == 32 && W == 32,
                "a chunk's tokens and a block's columns are a warp's lanes");
  using Record = BackwardRecord<Layer>;

  const linac_cuda_backward_args &args;
  int head, column;
  int64_t seq, begin, end;
  float scale;
  // [C][KP]: the chunk's rows.
  float *q, *k, *e;
  // [K][WP]: the state (entering the chunk) and the leaving state's gradient.
  float *S, *dS;
  // [C][WP]: the writes (u, then Delta), the reads' gradient, the writes'.
  float *delta, *dO, *dDelta;
  // [C][CP]: the erase's pairs A (then their gradients' F (.) dA), the
  // reads' pairs scale (q . k) F, and the reads' gradients' F (.) G.
  float *pairsA, *pairsQ, *pairsG;
  double *lam;
  // [C] each: sums over a token's pairs and reads.
  float *leaving, *joining, *queryReads, *eraseReads, *writes, *kept;

  LINAC_DEVICE BackwardBlock(const linac_cuda_backward_args &args, float *smem)
      : args(args), head(blockIdx.y), column(blockIdx.x * W), seq(blockIdx.z),
        scale(readScale<Layer>(args.forward)) {
    sequenceBounds(args.forward, seq, begin, end);
    float *p = smem;
    auto take = [&](int floats) {
      float *at = p;
      p += floats;
      return at;
    };
    q = take(C * KP);
    k = take(C * KP);
    e = take(C * KP);
    S = take(K * WP);
    dS = take(K * WP);
    delta = take(C * WP);
    dO = take(C * WP);
    dDelta = take(C * WP);
    pairsA = take(C * CP);
    pairsQ = take(C * CP);
    pairsG = take(C * CP);
    lam = reinterpret_cast<double *>(take(2 * C));
    leaving = take(C);
    joining = take(C);
    queryReads = take(C);
    eraseReads = take(C);
    writes = take(C);
    kept = take(C);
  }

  LINAC_DEVICE int warp() const { return threadIdx.x / 32; }
  LINAC_DEVICE int64_t chunks() const { return (end - begin + C - 1) / C; }
  LINAC_DEVICE int width() const { return min(W, V - column); }
  LINAC_DEVICE float *slot(int64_t c) const {
    return args.chunk_states +
           (backwardSlot(seq, begin, c) * args.forward.num_heads + head) *
               int64_t(K) * V;
  }
  LINAC_DEVICE int64_t item(int64_t token) const {
    return token * args.forward.num_heads + head;
  }
  LINAC_DEVICE float factor(int t, int s) const {
    return expf(float(lam[t] - lam[s]));
  }

  /// A state of [K, V] in memory (null for zeros) into `to`, this block's
  /// columns; and back.
  LINAC_DEVICE void loadState(float *to, const float *from) const {
    for (int x = threadIdx.x; x < K * W; x += kBackwardThreads) {
      const int i = x / W, j = x % W;
      to[i * WP + j] = from && j < width() ? from[i * V + column + j] : 0.0f;
    }
  }
  LINAC_DEVICE void storeState(float *to, const float *from) const {
    for (int x = threadIdx.x; x < K * W; x += kBackwardThreads) {
      const int i = x / W, j = x % W;
      if (j < width())
        to[i * V + column + j] = from[i * WP + j];
    }
  }

  /// Chunk c's rows (zero past the sequence), its writes u, and with
  /// `gradients` its reads' gradients; lam the cumulative floored
  /// log-gates, the last repeated past the sequence. Returns its length.
  LINAC_DEVICE int loadChunk(int64_t c, bool gradients) {
    const int64_t start = begin + c * C;
    const int length = int(min(int64_t(C), end - start));
    for (int x = threadIdx.x; x < C * K; x += kBackwardThreads) {
      const int t = x / K, i = x % K;
      const float *record = args.operands + item(start + t) * Record::kFloats;
      const bool in = t < length;
      q[t * KP + i] = in ? record[Record::kQ + i] : 0.0f;
      k[t * KP + i] = in ? record[Record::kK + i] : 0.0f;
      if constexpr (kErase)
        e[t * KP + i] = in ? record[Record::kE + i] : 0.0f;
    }
    for (int x = threadIdx.x; x < C * W; x += kBackwardThreads) {
      const int t = x / W, j = x % W;
      const bool in = t < length && j < width();
      delta[t * WP + j] = in ? args.operands[item(start + t) * Record::kFloats +
                                             Record::kU + column + j]
                             : 0.0f;
      if (gradients)
        dO[t * WP + j] =
            in ? args.reads[item(start + t) * V + column + j] : 0.0f;
    }
    if (warp() == 0) {
      const int t = laneId();
      double sum = t < length
                       ? double(floorLogGate(
                             args.operands[item(start + t) * Record::kFloats +
                                           Record::kGate]))
                       : 0.0;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const double before = __shfl_up_sync(0xffffffffu, sum, offset);
        if (t >= offset)
          sum += before;
      }
      lam[t] = sum;
    }
    __syncthreads();
    return length;
  }

  /// The chunk's pairs (scale (q . k) F on s <= t, with an erase (e . k) F
  /// on s < t) and its writes Delta: with an erase the solution of
  /// (I + A) Delta = U - (Gamma (.) E) S, else U.
  LINAC_DEVICE void writes_() {
    for (int t = warp(); t < C; t += kWarps) {
      const int s = laneId();
      float qk = 0.0f, ek = 0.0f;
      for (int i = 0; i < K; ++i) {
        qk += q[t * KP + i] * k[s * KP + i];
        if constexpr (kErase)
          ek += e[t * KP + i] * k[s * KP + i];
      }
      const float f = s <= t ? factor(t, s) : 0.0f;
      pairsQ[t * CP + s] = scale * qk * f;
      if constexpr (kErase) {
        pairsA[t * CP + s] = s < t ? ek * f : 0.0f;
        // R_tj = u_tj - gamma_t sum_i e_ti S_ij, lane j.
        const int j = laneId();
        float eS = 0.0f;
        for (int i = 0; i < K; ++i)
          eS += e[t * KP + i] * S[i * WP + j];
        delta[t * WP + j] -= expf(float(lam[t])) * eS;
      }
    }
    __syncthreads();
    if constexpr (kErase) {
      // Forward substitution, a lane a column.
      if (warp() == 0) {
        const int j = laneId();
        for (int t = 1; t < C; ++t) {
          float x = delta[t * WP + j];
          for (int s = 0; s < t; ++s)
            x -= pairsA[t * CP + s] * delta[s * WP + j];
          delta[t * WP + j] = x;
        }
      }
      __syncthreads();
    }
  }

  /// S <- Gamma_C S + (K (.) Gamma_C / Gamma)^T Delta.
  LINAC_DEVICE void advance() {
    const float decay = expf(float(lam[C - 1]));
    const int j = laneId();
    for (int i = warp(); i < K; i += kWarps) {
      float x = decay * S[i * WP + j];
      for (int t = 0; t < C; ++t)
        x += expf(float(lam[C - 1] - lam[t])) * k[t * KP + i] *
             delta[t * WP + j];
      S[i * WP + j] = x;
    }
    __syncthreads();
  }

  /// The forward walk: the state entering each chunk into its slot, and the
  /// reads o_t = scale Gamma_t q_t S + sum_{s <= t} P_ts Delta_s.
  LINAC_DEVICE void forward() {
    loadState(S, args.forward.initial_state
                     ? args.forward.initial_state +
                           stateOffset<Layer>(args.forward, seq, head)
                     : nullptr);
    __syncthreads();
    for (int64_t c = 0; c < chunks(); ++c) {
      storeState(slot(c), S);
      const int length = loadChunk(c, false);
      writes_();
      const int64_t start = begin + c * C;
      const int j = laneId();
      for (int t = warp(); t < length; t += kWarps) {
        float qS = 0.0f, pairs = 0.0f;
        for (int i = 0; i < K; ++i)
          qS += q[t * KP + i] * S[i * WP + j];
        for (int s = 0; s <= t; ++s)
          pairs += pairsQ[t * CP + s] * delta[s * WP + j];
        if (j < width())
          args.reads[item(start + t) * V + column + j] =
              scale * expf(float(lam[t])) * qS + pairs;
      }
      __syncthreads();
      advance();
    }
  }

  /// Adds x, a warp's lanes' values, to *to from lane 0.
  LINAC_DEVICE static void addWarpSum(float *to, float x) {
    x = warpSum(x);
    if (laneId() == 0)
      *to += x;
  }

  /// The backward walk, chunk by chunk from the last.
  LINAC_DEVICE void backward() {
    const int64_t stateAt = stateOffset<Layer>(args.forward, seq, head);
    loadState(dS, args.d_final_state ? args.d_final_state + stateAt : nullptr);
    for (int64_t c = chunks() - 1; c >= 0; --c) {
      for (int t = threadIdx.x; t < 6 * C; t += kBackwardThreads)
        leaving[t] = 0.0f; // and the five sums after it
      loadState(S, slot(c));
      const int length = loadChunk(c, true);
      writes_();
      chunk(c, length);
    }
    if (args.d_initial_state)
      storeState(args.d_initial_state + stateAt, dS);
  }

  LINAC_DEVICE void chunk(int64_t c, int length) {
    const int64_t start = begin + c * C;
    const int lane = laneId();
    // G_ts = dO_t . Delta_s on s <= t: the pairs' terms of the gate
    // (P_ts G_ts on s < t), and F (.) G scale.
    for (int t = warp(); t < C; t += kWarps) {
      const int s = lane;
      float g = 0.0f;
      for (int j = 0; j < W; ++j)
        g += dO[t * WP + j] * delta[s * WP + j];
      const float term = s < t ? pairsQ[t * CP + s] * g : 0.0f;
      addWarpSum(&leaving[t], term);
      atomicAdd(&joining[s], term);
      pairsG[t * CP + s] = s <= t ? scale * factor(t, s) * g : 0.0f;
    }
    __syncthreads();
    // dDelta_s = sum_t P_ts dO_t + (Gamma_C / Gamma_s) k_s dS.
    const float end = float(lam[C - 1]);
    for (int s = warp(); s < C; s += kWarps) {
      const int j = lane;
      float x = 0.0f, kS = 0.0f;
      for (int t = s; t < C; ++t)
        x += pairsQ[t * CP + s] * dO[t * WP + j];
      for (int i = 0; i < K; ++i)
        kS += k[s * KP + i] * dS[i * WP + j];
      dDelta[s * WP + j] = x + expf(end - float(lam[s])) * kS;
    }
    __syncthreads();
    if constexpr (kErase) {
      // dR = (I + A)^-T dDelta, backward substitution a lane a column.
      if (warp() == 0) {
        const int j = lane;
        for (int t = C - 2; t >= 0; --t) {
          float x = dDelta[t * WP + j];
          for (int s = t + 1; s < C; ++s)
            x -= pairsA[s * CP + t] * dDelta[s * WP + j];
          dDelta[t * WP + j] = x;
        }
      }
      __syncthreads();
      // dA = -dR Delta^T on s < t: the gate's pair terms A_ts dA_ts, then
      // F (.) dA in A's place.
      for (int t = warp(); t < C; t += kWarps) {
        const int s = lane;
        float d = 0.0f;
        for (int j = 0; j < W; ++j)
          d -= dDelta[t * WP + j] * delta[s * WP + j];
        const float term = s < t ? pairsA[t * CP + s] * d : 0.0f;
        addWarpSum(&leaving[t], term);
        atomicAdd(&joining[s], term);
        pairsA[t * CP + s] = s < t ? factor(t, s) * d : 0.0f;
      }
    }
    // The written values' gradient: dR with an erase, else dDelta; this
    // block's columns alone.
    for (int x = threadIdx.x; x < C * W; x += kBackwardThreads) {
      const int t = x / W, j = x % W;
      if (t < length && j < width())
        args.operand_grads[item(start + t) * Record::kFloats + Record::kU +
                           column + j] = dDelta[t * WP + j];
    }
    __syncthreads();
    rowGradients(start, length);
    gateGradients(start, length);
    // dS0 = Gamma_C dS + (scale Gamma (.) Q)^T dO - (Gamma (.) E)^T dR.
    const float decay = expf(end);
    for (int i = warp(); i < K; i += kWarps) {
      const int j = lane;
      float x = decay * dS[i * WP + j];
      for (int t = 0; t < C; ++t) {
        const float gamma = expf(float(lam[t]));
        x += scale * gamma * q[t * KP + i] * dO[t * WP + j];
        if constexpr (kErase)
          x -= gamma * e[t * KP + i] * dDelta[t * WP + j];
      }
      dS[i * WP + j] = x;
    }
    __syncthreads();
  }

  /// dq, dk and de of each row, this block's columns' share, added to the
  /// workspace; and their sums for the gate.
  LINAC_DEVICE void rowGradients(int64_t start, int length) {
    const float end = float(lam[C - 1]), decay = expf(end);
    float keptSum = 0.0f;
    for (int t = warp(); t < C; t += kWarps) {
      const float gamma = expf(float(lam[t]));
      const float key = expf(end - float(lam[t]));
      float *const grads =
          args.operand_grads + item(start + t) * Record::kFloats;
      float queryTerm = 0.0f, writeTerm = 0.0f, eraseTerm = 0.0f;
      for (int i = laneId(); i < K; i += 32) {
        float dq = 0.0f, dk = 0.0f, de = 0.0f;
        float readS = 0.0f, updateS = 0.0f, eraseS = 0.0f;
        for (int s = 0; s < C; ++s) {
          dq += pairsG[t * CP + s] * k[s * KP + i];
          dk += pairsG[s * CP + t] * q[s * KP + i];
          if constexpr (kErase) {
            de += pairsA[t * CP + s] * k[s * KP + i];
            dk += pairsA[s * CP + t] * e[s * KP + i];
          }
        }
        for (int j = 0; j < W; ++j) {
          const float state = S[i * WP + j], gradient = dS[i * WP + j];
          readS += dO[t * WP + j] * state;
          updateS += delta[t * WP + j] * gradient;
          if constexpr (kErase)
            eraseS += dDelta[t * WP + j] * state;
          if (t == 0)
            keptSum += decay * state * gradient;
        }
        readS *= scale * gamma;
        updateS *= key;
        eraseS *= -gamma;
        queryTerm += q[t * KP + i] * readS;
        writeTerm += k[t * KP + i] * updateS;
        if constexpr (kErase)
          eraseTerm += e[t * KP + i] * eraseS;
        if (t < length) {
          atomicAdd(grads + Record::kQ + i, dq + readS);
          atomicAdd(grads + Record::kK + i, dk + updateS);
          if constexpr (kErase)
            atomicAdd(grads + Record::kE + i, de + eraseS);
        }
      }
      addWarpSum(&queryReads[t], queryTerm);
      addWarpSum(&writes[t], writeTerm);
      if constexpr (kErase)
        addWarpSum(&eraseReads[t], eraseTerm);
    }
    // Row 0's warp summed S0's carry over every key.
    if (warp() == 0)
      addWarpSum(&kept[0], keptSum);
    __syncthreads();
  }

  /// Each token's own log-gate's gradient, this block's columns' share:
  /// what its gate scales (the CPU's gateGradients): the pairs straddling
  /// it, the reads of S0 from its token on, the writes before it and S0's
  /// carry into the leaving state.
  LINAC_DEVICE void gateGradients(int64_t start, int length) {
    if (warp() != 0)
      return;
    const int t = laneId();
    double from = double(queryReads[t]) + double(eraseReads[t]);
    double before = writes[t];
    double straddling = double(joining[t]) - double(leaving[t]);
    // Suffix sums of `from`, exclusive prefix sums of the others.
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const double later = __shfl_down_sync(0xffffffffu, from, offset);
      const double earlier = __shfl_up_sync(0xffffffffu, before, offset);
      const double straddled = __shfl_up_sync(0xffffffffu, straddling, offset);
      if (t + offset < 32)
        from += later;
      if (t >= offset) {
        before += earlier;
        straddling += straddled;
      }
    }
    before -= writes[t];
    straddling -= double(joining[t]) - double(leaving[t]);
    if (t < length)
      atomicAdd(args.operand_grads + item(start + t) * Record::kFloats +
                    Record::kGate,
                float(straddling + from + before + double(kept[0])));
  }
};

template <typename Layer>
LINAC_DEVICE void backwardStatesKernel(const linac_cuda_backward_args &args) {
  extern __shared__ float4 backwardShared[];
  BackwardBlock<Layer>(args, reinterpret_cast<float *>(backwardShared))
      .forward();
}

template <typename Layer>
LINAC_DEVICE void backwardChunksKernel(const linac_cuda_backward_args &args) {
  extern __shared__ float4 backwardShared[];
  BackwardBlock<Layer>(args, reinterpret_cast<float *>(backwardShared))
      .backward();
}

} // namespace linac::cuda

#endif // LINAC_CUDA_CHUNK_BACKWARD_H
