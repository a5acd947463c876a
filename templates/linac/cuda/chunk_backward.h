//===- chunk_backward.h - the chunkwise backward on the GPU ----*- C++ -*-===//
//
// The gradients of a chunkwise layer under a key-side gate that is the same
// on every channel (none, fixed or scalar), with an erase or without,
// reading after the write, with no normaliser and no value-side decay, in
// seven launches (abi.h), by chunks of kBackwardChunk tokens. Only the two
// walks go chunk by chunk, a block a (column tile, head, sequence), and
// they take only the products with the state; the rest runs for every
// chunk at once:
//
//   operands:  the generated prologue of every (token, head), a warp each,
//              its operands in fp32 into the workspace;
//   prepare:   every chunk's products without the state: P, and with an
//              erase T = (I + A)^-1, W = T (Gamma (.) E) and U' = T U;
//   states:    the walk forward: the state entering each chunk, and every
//              token's read, from Delta = U' - W S;
//   reads:     the generated epilogueBackward of every token: the output's
//              gradient to the read's, in the read's place;
//   state_gradients: the walk back: the gradient of the state leaving each
//              chunk, through dR = T^T (P^T dO + K' dS);
//   chunks:    every chunk's operands' gradients (each column tile's share,
//              added), by the formulas of the CPU's chunkBackward
//              (products.cpp) under a uniform gate, from the two states;
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

/// The chunk that slot `slot` of backwardSlots holds: its sequence and
/// first token; false for a slot between sequences.
LINAC_DEVICE bool backwardChunkAt(const linac_cuda_forward_args &args,
                                  int64_t slot, int64_t &seq, int64_t &start) {
  int64_t begin, end;
  seq = sequenceOfSlot(
      args, slot,
      [](int64_t s, int64_t first) { return backwardSlot(s, first, 0); }, begin,
      end);
  start = begin + (slot - backwardSlot(seq, begin, 0)) * kBackwardChunk;
  return start < end;
}

/// A block of the chunkwise backward: value columns [column, column + W)
/// of one head of one sequence, a chunk of C tokens at a time, in shared
/// memory.
template <typename Layer> struct BackwardBlock {
  static constexpr int K = Layer::K, V = Layer::V, C = kBackwardChunk,
                       W = kBackwardColumns;
  static constexpr int KP = K + 1, WP = W + 1, CP = C + 1;
  static constexpr int kWarps = kBackwardThreads / 32;
  static constexpr bool kErase = Layer::kErase;
  static_assert(C == 32 && W == 32 && C % kWarps == 0,
                "a chunk's tokens and a block's columns are a warp's lanes");
  using Record = BackwardRecord<Layer>;
  /// A warp's rows of the chunk (t = w, w + kWarps, ...) and a lane's keys
  /// (i = lane, lane + 32, ...).
  static constexpr int kRows = C / kWarps, kKeys = (K + 31) / 32;
  using RowTile = float[kRows][kKeys];
  // A chunk's prepared record: P, T = (I + A)^-1, W = T (Gamma (.) E) and
  // U' = T U.
  static constexpr int kPreparedP = 0, kPreparedT = C * C,
                       kPreparedW = 2 * C * C, kPreparedU = 2 * C * C + C * K;
  static_assert(kPreparedU + C * V == backwardPreparedFloats(K, V),
                "the prepared record's floats");

  const linac_cuda_backward_args &args;
  int head, column;
  int64_t seq, begin, end;
  float scale;
  // [C][KP]: the chunk's rows (the walk forward keeps W in e's place).
  float *q, *k, *e;
  // [K][WP]: the state (entering the chunk) and the leaving state's gradient.
  float *S, *dS;
  // [C][WP]: the writes (u, then Delta), the reads' gradient, the writes'.
  float *delta, *dO, *dDelta;
  // [C][CP]: the erase's pairs A (then their gradients' F (.) dA, or T in
  // the walk back), the reads' pairs P = scale (q . k) F, and the reads'
  // gradients' F (.) G (or T while the chunk is prepared).
  float *pairsA, *pairsQ, *pairsG;
  double *lam;
  // [C] each: sums over a token's pairs and reads.
  float *leaving, *joining, *queryReads, *eraseReads, *writes, *kept;

  LINAC_DEVICE BackwardBlock(const linac_cuda_backward_args &args, float *smem,
                             int head, int column, int64_t seq)
      : args(args), head(head), column(column), seq(seq),
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

  LINAC_DEVICE static int warp() { return threadIdx.x / 32; }
  LINAC_DEVICE static int rowOf(int r) { return warp() + r * kWarps; }
  LINAC_DEVICE static int keyOf(int m) { return laneId() + 32 * m; }
  /// A warp's keys of the state (i = w, w + kWarps, ...), a lane a column.
  static constexpr int kStateRows = (K + kWarps - 1) / kWarps;
  LINAC_DEVICE static int stateRowOf(int m) { return warp() + m * kWarps; }

  /// out[r] = sum_i rows[t_r][i] state[i][j] for the warp's rows t_r and
  /// the lane's column j: each element of the state loaded once for all
  /// the warp's rows.
  LINAC_DEVICE static void
  rowsTimesState(float (&out)[kRows], const float *rows, const float *state) {
    const int j = laneId();
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      out[r] = 0.0f;
    for (int i = 0; i < K; ++i) {
      const float x = state[i * WP + j];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        out[r] += rows[rowOf(r) * KP + i] * x;
    }
  }
  /// state[i][j] <- decay state[i][j] + sum_t rows[t][i] y_t(j) for the
  /// warp's keys i and the lane's column j, y_t = term(t) once a token.
  template <typename Term>
  LINAC_DEVICE static void updateState(float *state, float decay,
                                       const float *rows, Term term) {
    const int j = laneId();
    float x[kStateRows];
#pragma unroll
    for (int m = 0; m < kStateRows; ++m)
      x[m] = stateRowOf(m) < K ? decay * state[stateRowOf(m) * WP + j] : 0.0f;
    for (int t = 0; t < C; ++t) {
      const float y = term(t);
#pragma unroll
      for (int m = 0; m < kStateRows; ++m)
        if (stateRowOf(m) < K)
          x[m] += rows[t * KP + stateRowOf(m)] * y;
    }
#pragma unroll
    for (int m = 0; m < kStateRows; ++m)
      if (stateRowOf(m) < K)
        state[stateRowOf(m) * WP + j] = x[m];
  }
  LINAC_DEVICE int64_t chunks() const { return (end - begin + C - 1) / C; }
  LINAC_DEVICE int width() const { return min(W, V - column); }
  LINAC_DEVICE int64_t slotIndex(int64_t c) const {
    return backwardSlot(seq, begin, c) * args.forward.num_heads + head;
  }
  /// The state entering chunk c, and the gradient of the one leaving it.
  LINAC_DEVICE float *stateSlot(int64_t c) const {
    return args.chunk_states + slotIndex(c) * int64_t(K) * V;
  }
  LINAC_DEVICE float *gradientSlot(int64_t c) const {
    return args.state_grads + slotIndex(c) * int64_t(K) * V;
  }
  LINAC_DEVICE float *prepared(int64_t c) const {
    return args.prepared + slotIndex(c) * backwardPreparedFloats(K, V);
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

  /// Rows [C][KP] from memory, row t at `rows + t * stride` (zero from
  /// `length` on).
  LINAC_DEVICE void loadRows(float *to, const float *rows, int64_t stride,
                             int length) const {
    for (int x = threadIdx.x; x < C * K; x += kBackwardThreads) {
      const int t = x / K, i = x % K;
      to[t * KP + i] = t < length ? rows[t * stride + i] : 0.0f;
    }
  }
  /// This block's columns [C][WP] of rows from memory, as loadRows.
  LINAC_DEVICE void loadColumns(float *to, const float *rows, int64_t stride,
                                int length) const {
    for (int x = threadIdx.x; x < C * W; x += kBackwardThreads) {
      const int t = x / W, j = x % W;
      to[t * WP + j] =
          t < length && j < width() ? rows[t * stride + column + j] : 0.0f;
    }
  }
  /// A [C][C] array from memory into [C][CP].
  LINAC_DEVICE void loadPairs(float *to, const float *from) const {
    for (int x = threadIdx.x; x < C * C; x += kBackwardThreads)
      to[x / C * CP + x % C] = from[x];
  }

  /// Chunk c's rows (zero past the sequence): q and k, e unless `erase` is
  /// false, its writes u unless `writes` is false, its reads' gradients
  /// when `gradients`; lam the cumulative floored log-gates, the last
  /// repeated past the sequence. Returns its length.
  LINAC_DEVICE int loadChunk(int64_t c, bool erase, bool values,
                             bool gradients) {
    const int64_t start = begin + c * C;
    const int length = int(min(int64_t(C), end - start));
    const int64_t heads = args.forward.num_heads;
    const float *first = args.operands + item(start) * Record::kFloats;
    const int64_t stride = heads * Record::kFloats;
    loadRows(q, first + Record::kQ, stride, length);
    loadRows(k, first + Record::kK, stride, length);
    if (kErase && erase)
      loadRows(e, first + Record::kE, stride, length);
    if (values)
      loadColumns(delta, first + Record::kU, stride, length);
    if (gradients)
      loadColumns(dO, args.reads + item(start) * V, heads * V, length);
    if (warp() == 0) {
      const int t = laneId();
      double sum = t < length
                       ? double(floorLogGate(first[t * stride + Record::kGate]))
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

  /// The chunk's pairs: P = scale (q . k) F on s <= t and, with an erase,
  /// A = (e . k) F on s < t; lane s, each key of k_s loaded once for all
  /// the warp's rows.
  LINAC_DEVICE void pairs() {
    const int s = laneId();
    float qk[kRows] = {}, ek[kRows] = {};
    for (int i = 0; i < K; ++i) {
      const float key = k[s * KP + i];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        qk[r] += q[rowOf(r) * KP + i] * key;
        if constexpr (kErase)
          ek[r] += e[rowOf(r) * KP + i] * key;
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int t = rowOf(r);
      const float f = s <= t ? factor(t, s) : 0.0f;
      pairsQ[t * CP + s] = scale * qk[r] * f;
      if constexpr (kErase)
        pairsA[t * CP + s] = s < t ? ek[r] * f : 0.0f;
    }
    __syncthreads();
  }

  /// With an erase, the writes Delta from U in their place: the solution of
  /// (I + A) Delta = U - (Gamma (.) E) S, a lane a column.
  LINAC_DEVICE void solveWrites() {
    if constexpr (kErase) {
      const int j = laneId();
      float eS[kRows];
      rowsTimesState(eS, e, S);
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        delta[rowOf(r) * WP + j] -= expf(float(lam[rowOf(r)])) * eS[r];
      __syncthreads();
      if (warp() == 0)
        for (int t = 1; t < C; ++t) {
          float x = delta[t * WP + j];
          for (int s = 0; s < t; ++s)
            x -= pairsA[t * CP + s] * delta[s * WP + j];
          delta[t * WP + j] = x;
        }
      __syncthreads();
    }
  }

  /// S <- Gamma_C S + (K (.) Gamma_C / Gamma)^T Delta.
  LINAC_DEVICE void advance() {
    const int j = laneId();
    updateState(S, expf(float(lam[C - 1])), k, [&](int t) {
      return expf(float(lam[C - 1] - lam[t])) * delta[t * WP + j];
    });
    __syncthreads();
  }

  /// Chunk c prepared (every chunk at once, a block a column tile): P, and
  /// with an erase T = (I + A)^-1, W = T (Gamma (.) E) and this block's
  /// columns of U' = T U; the first tile writes all but U'.
  LINAC_DEVICE void prepare(int64_t c) {
    loadChunk(c, true, kErase, false);
    pairs();
    float *const record = prepared(c);
    if (column == 0)
      for (int x = threadIdx.x; x < C * C; x += kBackwardThreads)
        record[kPreparedP + x] = pairsQ[x / C * CP + x % C];
    if constexpr (kErase) {
      // T by forward substitution on the identity's columns, a lane each.
      float *const T = pairsG;
      if (warp() == 0) {
        const int j = laneId();
        for (int t = 0; t < C; ++t) {
          float x = t == j ? 1.0f : 0.0f;
          for (int s = 0; s < t; ++s)
            x -= pairsA[t * CP + s] * T[s * CP + j];
          T[t * CP + j] = x;
        }
      }
      __syncthreads();
      if (column == 0) {
        for (int x = threadIdx.x; x < C * C; x += kBackwardThreads)
          record[kPreparedT + x] = T[x / C * CP + x % C];
        for (int x = threadIdx.x; x < C * K; x += kBackwardThreads) {
          const int t = x / K, i = x % K;
          float w = 0.0f;
          for (int s = 0; s <= t; ++s)
            w += T[t * CP + s] * expf(float(lam[s])) * e[s * KP + i];
          record[kPreparedW + x] = w;
        }
      }
      for (int x = threadIdx.x; x < C * W; x += kBackwardThreads) {
        const int t = x / W, j = x % W;
        float u = 0.0f;
        for (int s = 0; s <= t; ++s)
          u += T[t * CP + s] * delta[s * WP + j];
        if (j < width())
          record[kPreparedU + t * V + column + j] = u;
      }
    }
  }

  /// The walk forward: the state entering each chunk into its slot, and the
  /// reads o_t = scale Gamma_t q_t S + sum_{s <= t} P_ts Delta_s, Delta = U'
  /// - W S with an erase, else U.
  LINAC_DEVICE void walkForward() {
    loadState(S, args.forward.initial_state
                     ? args.forward.initial_state +
                           stateOffset<Layer>(args.forward, seq, head)
                     : nullptr);
    const int j = laneId();
    for (int64_t c = 0; c < chunks(); ++c) {
      __syncthreads();
      storeState(stateSlot(c), S);
      const int length = loadChunk(c, false, false, false);
      const float *const record = prepared(c);
      loadPairs(pairsQ, record + kPreparedP);
      if constexpr (kErase) {
        loadRows(e, record + kPreparedW, K, C);
        loadColumns(delta, record + kPreparedU, V, C);
      } else {
        loadColumns(delta,
                    args.operands + item(begin + c * C) * Record::kFloats +
                        Record::kU,
                    args.forward.num_heads * Record::kFloats, length);
      }
      __syncthreads();
      if constexpr (kErase) {
        float wS[kRows];
        rowsTimesState(wS, e, S);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const int t = rowOf(r);
          delta[t * WP + j] = t < length ? delta[t * WP + j] - wS[r] : 0.0f;
        }
        __syncthreads();
      }
      const int64_t start = begin + c * C;
      float qS[kRows];
      rowsTimesState(qS, q, S);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int t = rowOf(r);
        float paired = 0.0f;
        for (int s = 0; s <= t; ++s)
          paired += pairsQ[t * CP + s] * delta[s * WP + j];
        if (t < length && j < width())
          args.reads[item(start + t) * V + column + j] =
              scale * expf(float(lam[t])) * qS[r] + paired;
      }
      __syncthreads();
      advance();
    }
  }

  /// dDelta_s = sum_t P_ts dO_t + (Gamma_C / Gamma_s) k_s dS.
  LINAC_DEVICE void writesGradient() {
    const float end = float(lam[C - 1]);
    const int j = laneId();
    float kS[kRows];
    rowsTimesState(kS, k, dS);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int s = rowOf(r);
      float x = 0.0f;
      for (int t = s; t < C; ++t)
        x += pairsQ[t * CP + s] * dO[t * WP + j];
      dDelta[s * WP + j] = x + expf(end - float(lam[s])) * kS[r];
    }
    __syncthreads();
  }

  /// dS0 = Gamma_C dS + (scale Gamma (.) Q)^T dO - (Gamma (.) E)^T dR, in
  /// place of dS.
  LINAC_DEVICE void carryGradient(const float *dR) {
    const float decay = expf(float(lam[C - 1]));
    const int j = laneId();
    updateState(dS, decay, q, [&](int t) {
      return scale * expf(float(lam[t])) * dO[t * WP + j];
    });
    if constexpr (kErase) {
      __syncwarp();
      updateState(dS, 1.0f, e,
                  [&](int t) { return -expf(float(lam[t])) * dR[t * WP + j]; });
    }
    __syncthreads();
  }

  /// The walk back: the gradient of the state leaving each chunk into its
  /// slot, then the entering state's (dR = T^T dDelta with an erase).
  LINAC_DEVICE void walkBackward() {
    const int64_t stateAt = stateOffset<Layer>(args.forward, seq, head);
    loadState(dS, args.d_final_state ? args.d_final_state + stateAt : nullptr);
    for (int64_t c = chunks() - 1; c >= 0; --c) {
      __syncthreads();
      storeState(gradientSlot(c), dS);
      loadChunk(c, true, false, true);
      const float *const record = prepared(c);
      loadPairs(pairsQ, record + kPreparedP);
      if constexpr (kErase)
        loadPairs(pairsA, record + kPreparedT);
      __syncthreads();
      writesGradient();
      if constexpr (kErase) {
        const int j = laneId();
        for (int t = warp(); t < C; t += kWarps) {
          float x = 0.0f;
          for (int s = t; s < C; ++s)
            x += pairsA[s * CP + t] * dDelta[s * WP + j];
          delta[t * WP + j] = x;
        }
        __syncthreads();
      }
      carryGradient(delta);
    }
    if (args.d_initial_state)
      storeState(args.d_initial_state + stateAt, dS);
  }

  /// Adds x, a warp's lanes' values, to *to from lane 0.
  LINAC_DEVICE static void addWarpSum(float *to, float x) {
    x = warpSum(x);
    if (laneId() == 0)
      *to += x;
  }

  /// Chunk c's operands' gradients, this block's columns' share (every
  /// chunk at once), from the state entering it and the gradient of the one
  /// leaving it.
  LINAC_DEVICE void gradients(int64_t c) {
    const int64_t start = begin + c * C;
    for (int t = threadIdx.x; t < 6 * C; t += kBackwardThreads)
      leaving[t] = 0.0f; // and the five sums after it
    loadState(S, stateSlot(c));
    loadState(dS, gradientSlot(c));
    const int length = loadChunk(c, true, true, true);
    pairs();
    solveWrites();
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
    writesGradient();
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
  }

  /// acc[r][m] += sum_s pair(t_r, s) x[s][i_m]: each step over s loads the
  /// lane's keys of x once for all the warp's rows.
  template <typename Pair>
  LINAC_DEVICE void pairProducts(RowTile &acc, Pair pair,
                                 const float *x) const {
    for (int s = 0; s < C; ++s) {
      float a[kRows], v[kKeys];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        a[r] = pair(rowOf(r), s);
#pragma unroll
      for (int m = 0; m < kKeys; ++m)
        v[m] = keyOf(m) < K ? x[s * KP + keyOf(m)] : 0.0f;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int m = 0; m < kKeys; ++m)
          acc[r][m] += a[r] * v[m];
    }
  }
  /// acc[r][m] += sum_j y[t_r][j] state[i_m][j] over the block's columns.
  LINAC_DEVICE void stateProducts(RowTile &acc, const float *y,
                                  const float *state) const {
    for (int j = 0; j < W; ++j) {
      float a[kRows], v[kKeys];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        a[r] = y[rowOf(r) * WP + j];
#pragma unroll
      for (int m = 0; m < kKeys; ++m)
        v[m] = keyOf(m) < K ? state[keyOf(m) * WP + j] : 0.0f;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int m = 0; m < kKeys; ++m)
          acc[r][m] += a[r] * v[m];
    }
  }
  /// For each of the warp's rows t: the gradient paired + f_t fromState
  /// added to the record's operand at `offset` (t < length), and the gate's
  /// term sum_i rows[t][i] f_t fromState[i] to sums[t].
  template <typename Factor>
  LINAC_DEVICE void
  addRowGradients(int64_t start, int length, const RowTile &paired,
                  const RowTile &fromState, Factor f, const float *rows,
                  float *sums, int offset) const {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int t = rowOf(r);
      const float factor = f(t);
      float *const grads =
          args.operand_grads + item(start + t) * Record::kFloats + offset;
      float term = 0.0f;
#pragma unroll
      for (int m = 0; m < kKeys; ++m) {
        const int i = keyOf(m);
        if (i >= K)
          continue;
        const float stateTerm = factor * fromState[r][m];
        term += rows[t * KP + i] * stateTerm;
        if (t < length)
          atomicAdd(grads + i, paired[r][m] + stateTerm);
      }
      addWarpSum(&sums[t], term);
    }
  }

  /// dq, dk and de of each row, this block's columns' share, added to the
  /// workspace; and their sums for the gate.
  LINAC_DEVICE void rowGradients(int64_t start, int length) {
    const float end = float(lam[C - 1]);
    {
      // dq = (F (.) G) K + scale Gamma (dO S^T).
      RowTile paired{}, fromState{};
      pairProducts(
          paired, [&](int t, int s) { return pairsG[t * CP + s]; }, k);
      stateProducts(fromState, dO, S);
      addRowGradients(
          start, length, paired, fromState,
          [&](int t) { return scale * expf(float(lam[t])); }, q, queryReads,
          Record::kQ);
    }
    {
      // dk = (F (.) G)^T Q + (F (.) dA)^T E + (Gamma_C / Gamma) (Delta dS^T).
      RowTile paired{}, fromState{};
      pairProducts(
          paired, [&](int t, int s) { return pairsG[s * CP + t]; }, q);
      if constexpr (kErase)
        pairProducts(
            paired, [&](int t, int s) { return pairsA[s * CP + t]; }, e);
      stateProducts(fromState, delta, dS);
      addRowGradients(
          start, length, paired, fromState,
          [&](int t) { return expf(end - float(lam[t])); }, k, writes,
          Record::kK);
    }
    if constexpr (kErase) {
      // de = (F (.) dA) K - Gamma (dR S^T).
      RowTile paired{}, fromState{};
      pairProducts(
          paired, [&](int t, int s) { return pairsA[t * CP + s]; }, k);
      stateProducts(fromState, dDelta, S);
      addRowGradients(
          start, length, paired, fromState,
          [&](int t) { return -expf(float(lam[t])); }, e, eraseReads,
          Record::kE);
    }
    // S0 carried into the leaving state, each element's term.
    const float decay = expf(end);
    float carried = 0.0f;
    for (int x = threadIdx.x; x < K * W; x += kBackwardThreads)
      carried += decay * S[x / W * WP + x % W] * dS[x / W * WP + x % W];
    carried = warpSum(carried);
    if (laneId() == 0)
      atomicAdd(&kept[0], carried);
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
/// The walks: a block a (column tile, head, sequence).
template <typename Layer>
LINAC_DEVICE BackwardBlock<Layer>
walkBlock(const linac_cuda_backward_args &args, float *smem) {
  return {args, smem, int(blockIdx.y), int(blockIdx.x) * kBackwardColumns,
          int64_t(blockIdx.z)};
}

/// Every chunk at once: a block a (slot, head, column tile); f(block, c)
/// for a slot that holds a chunk.
template <typename Layer, typename F>
LINAC_DEVICE void forChunkBlock(const linac_cuda_backward_args &args,
                                float *smem, F f) {
  int64_t seq, start;
  if (!backwardChunkAt(args.forward, blockIdx.x, seq, start))
    return;
  BackwardBlock<Layer> block(args, smem, int(blockIdx.y),
                             int(blockIdx.z) * kBackwardColumns, seq);
  f(block, (start - block.begin) / kBackwardChunk);
}

LINAC_DEVICE float *backwardSharedMemory() {
  extern __shared__ float4 backwardShared[];
  return reinterpret_cast<float *>(backwardShared);
}

template <typename Layer>
LINAC_DEVICE void backwardPrepareKernel(const linac_cuda_backward_args &args) {
  forChunkBlock<Layer>(
      args, backwardSharedMemory(),
      [](BackwardBlock<Layer> &block, int64_t c) { block.prepare(c); });
}

template <typename Layer>
LINAC_DEVICE void backwardStatesKernel(const linac_cuda_backward_args &args) {
  walkBlock<Layer>(args, backwardSharedMemory()).walkForward();
}

template <typename Layer>
LINAC_DEVICE void
backwardStateGradientsKernel(const linac_cuda_backward_args &args) {
  walkBlock<Layer>(args, backwardSharedMemory()).walkBackward();
}

template <typename Layer>
LINAC_DEVICE void backwardChunksKernel(const linac_cuda_backward_args &args) {
  forChunkBlock<Layer>(
      args, backwardSharedMemory(),
      [](BackwardBlock<Layer> &block, int64_t c) { block.gradients(c); });
}

} // namespace linac::cuda

#endif // LINAC_CUDA_CHUNK_BACKWARD_H
