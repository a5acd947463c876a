//===- chunk_backward.h - the chunkwise backward on the GPU ----*- C++ -*-===//
//
// The gradients of a chunkwise layer under any key-side gate (none, fixed,
// scalar or a key vector), with an erase or without, reading after the
// write, with no normaliser and no value-side decay, in seven launches
// (abi.h), by chunks of kBackwardChunk tokens. Only the two walks go chunk
// by chunk, a block a (column tile, head, sequence), and they take only the
// products with the state; the rest runs for every chunk at once:
//
//   operands:  the generated prologue of every (token, head), a warp each,
//              its operands in fp32 into the workspace;
//   prepare:   every chunk's products without the state: P, the walks'
//              rows Q' and K' and the decay, and with an erase
//              T = (I + A)^-1, W = T (Gamma (.) E) and U' = T U;
//   states:    the walk forward: the state entering each chunk, and every
//              token's read, from Delta = U' - W S;
//   reads:     the generated epilogueBackward of every token: the output's
//              gradient to the read's, in the read's place;
//   state_gradients: the walk back: the gradient of the state leaving each
//              chunk, through dDelta = P^T dO + K' dS;
//   chunks:    every chunk's operands' gradients (each column tile's share,
//              added), by the formulas of the CPU's chunkBackward
//              (products.cpp), from the two states;
//   arguments: the generated prologueBackward of every token, the operands'
//              gradients to the inputs' and parameters'.
//
// Every product is fp32 on the CUDA cores, whatever the activations. A
// block's warps own the chunk's rows t = w, w + warps, ... (eight warps a
// block, sixteen a walk's) and its lanes the keys or the columns; a pair's
// factor is a key's under a key-vector gate, applied element by element,
// and a pair's alone otherwise.
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
  static constexpr int kGates =
      backwardGates(K, Layer::kKeyGate == Gate::Vector);
  static constexpr int kQ = 0, kK = K, kE = 2 * K, kU = 3 * K,
                       kGate = 3 * K + V;
  static constexpr int64_t kFloats = backwardRecordFloats(K, V, kGates);
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
    if constexpr (Layer::kKeyGate == Gate::Vector)
      ops.gk.store(record + Record::kGate);
    else if (laneId() == 0)
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
    const float *const gates =
        args.operands + item * Record::kFloats + Record::kGate;
    if constexpr (Layer::kKeyGate == Gate::Vector)
      d.gk = WarpVec<K>::load(gates).zip(
          WarpVec<K>::load(grads + Record::kGate), [](float gate, float dg) {
            return gate < kLogGateFloor ? 0.0f : dg;
          });
    else
      d.gk = *gates < kLogGateFloor ? 0.0f : grads[Record::kGate];
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

/// A block of the chunkwise backward of `Threads` threads: value columns
/// [column, column + W) of one head of one sequence, a chunk of C tokens at
/// a time, in shared memory.
template <typename Layer, int Threads = kBackwardThreads> struct BackwardBlock {
  static constexpr int K = Layer::K, V = Layer::V, C = kBackwardChunk,
                       W = kBackwardColumns;
  static constexpr int KP = K + 1, WP = W + 1, CP = C + 1;
  static constexpr int kWarps = Threads / 32;
  static constexpr bool kErase = Layer::kErase;
  /// Log-gates a token: one a key channel under a key-vector gate, else one.
  static constexpr int G = backwardGates(K, Layer::kKeyGate == Gate::Vector);
  static constexpr bool kUniform = G == 1;
  static_assert(C == 32 && W == 32 && C % kWarps == 0,
                "a chunk's tokens and a block's columns are a warp's lanes");
  using Record = BackwardRecord<Layer>;
  /// A warp's rows of the chunk (t = w, w + kWarps, ...) and a lane's keys
  /// (i = lane, lane + 32, ...).
  static constexpr int kRows = C / kWarps, kKeys = (K + 31) / 32;
  using RowTile = float[kRows][kKeys];
  /// A warp's keys of the state (i = w, w + kWarps, ...), a lane a column.
  static constexpr int kStateRows = (K + kWarps - 1) / kWarps;
  // A chunk's prepared record: P, T = (I + A)^-1, W = T (Gamma (.) E),
  // Q' = scale Gamma (.) Q, K' = (Gamma_C / Gamma) (.) K, the decay
  // Gamma_C (a key each) and U' = T U.
  static constexpr int kPreparedP = 0, kPreparedT = C * C,
                       kPreparedW = 2 * C * C, kPreparedQ = kPreparedW + C * K,
                       kPreparedK = kPreparedQ + C * K,
                       kPreparedDecay = kPreparedK + C * K,
                       kPreparedU = kPreparedDecay + K;
  static_assert(kPreparedU + C * V == backwardPreparedFloats(K, V),
                "the prepared record's floats");

  const linac_cuda_backward_args &args;
  int head, column;
  int64_t seq, begin, end;
  float scale;
  // [C][KP]: the chunk's rows (the walks take Q', K' and W in their places;
  // the gate's sums take q's and k's at the end of a chunk's gradients).
  float *q, *k, *e;
  // [K][WP]: the state (entering the chunk) and the leaving state's gradient.
  float *S, *dS;
  // [C][WP]: the writes (u, then Delta), the reads' gradient, the writes'.
  float *delta, *dO, *dDelta;
  // [C][CP]: the erase's pairs A (then dA), the reads' pairs P = scale
  // (q . k) F, and the reads' gradients' scale G (or T while the chunk is
  // prepared); under a uniform gate dA and G carry the pairs' factors F.
  float *pairsA, *pairsQ, *pairsG;
  // [C][G]: cumulative floored log-gates from the chunk's start.
  double *lam;
  // [K]: the state's decay over the chunk, a key each (the walks), and
  // each key's term of S0 carried into the leaving state (the gradients).
  float *decay, *kept;

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
    lam = reinterpret_cast<double *>(take(2 * C * G));
    decay = take(K);
    kept = take(K);
  }

  LINAC_DEVICE static int warp() { return threadIdx.x / 32; }
  LINAC_DEVICE static int rowOf(int r) { return warp() + r * kWarps; }
  LINAC_DEVICE static int keyOf(int m) { return laneId() + 32 * m; }
  LINAC_DEVICE static int stateRowOf(int m) { return warp() + m * kWarps; }

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
  /// Token t's cumulative log-gate of key i.
  LINAC_DEVICE double lamOf(int t, int i) const {
    return lam[t * G + (kUniform ? 0 : i)];
  }
  /// e^(lambda_t - lambda_s) of key i: at most 1 for s <= t.
  LINAC_DEVICE float factor(int t, int s, int i) const {
    return expf(float(lamOf(t, i) - lamOf(s, i)));
  }
  /// Gamma_t, Gamma_C / Gamma_t and Gamma_C of key i.
  LINAC_DEVICE float gamma(int t, int i) const {
    return expf(float(lamOf(t, i)));
  }
  LINAC_DEVICE float keyFactor(int t, int i) const {
    return expf(float(lamOf(C - 1, i) - lamOf(t, i)));
  }

  /// out[r] = sum_i rows[t_r][i] f(t_r, i) state[i][j] for the warp's rows
  /// t_r and the lane's column j: each element of the state loaded once for
  /// all the warp's rows; f = 1 where it is `nullptr`.
  /// Under a uniform gate f is a row's alone, applied once to its sum.
  template <typename Factor = std::nullptr_t>
  LINAC_DEVICE static void rowsTimesState(float (&out)[kRows],
                                          const float *rows, const float *state,
                                          Factor f = nullptr) {
    constexpr bool kFactors = !std::is_same_v<Factor, std::nullptr_t>;
    const int j = laneId();
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      out[r] = 0.0f;
    for (int i = 0; i < K; ++i) {
      const float x = state[i * WP + j];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float row = rows[rowOf(r) * KP + i];
        if constexpr (kFactors && !kUniform)
          row *= f(rowOf(r), i);
        out[r] += row * x;
      }
    }
    if constexpr (kFactors && kUniform)
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        out[r] *= f(rowOf(r), 0);
  }
  /// state[i][j] <- decay[i] state[i][j] + sum_t rows[t][i] y_t(j) for the
  /// warp's keys i and the lane's column j, y_t = term(t) once a token.
  template <typename Term>
  LINAC_DEVICE static void updateState(float *state, const float *decay,
                                       const float *rows, Term term) {
    const int j = laneId();
    float x[kStateRows];
#pragma unroll
    for (int m = 0; m < kStateRows; ++m) {
      const int i = stateRowOf(m);
      x[m] = i < K ? (decay ? decay[i] : 1.0f) * state[i * WP + j] : 0.0f;
    }
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

  /// Copies N elements into shared memory, element x from `load(x)` to
  /// `to[at(x)]`, each thread's elements all loaded into registers before
  /// it stores any, so that their loads are in flight together.
  template <int N, typename Load, typename At>
  LINAC_DEVICE static void copyIn(float *to, Load load, At at) {
    constexpr int Each = (N + Threads - 1) / Threads;
    float x[Each];
#pragma unroll
    for (int m = 0; m < Each; ++m) {
      const int element = threadIdx.x + m * Threads;
      x[m] = element < N ? load(element) : 0.0f;
    }
#pragma unroll
    for (int m = 0; m < Each; ++m) {
      const int element = threadIdx.x + m * Threads;
      if (element < N)
        to[at(element)] = x[m];
    }
  }

  /// A state of [K, V] in memory (null for zeros) into `to`, this block's
  /// columns; and back.
  LINAC_DEVICE void loadState(float *to, const float *from) const {
    copyIn<K * W>(
        to,
        [&](int x) {
          const int i = x / W, j = x % W;
          return from && j < width() ? from[i * V + column + j] : 0.0f;
        },
        [](int x) { return x / W * WP + x % W; });
  }
  LINAC_DEVICE void storeState(float *to, const float *from) const {
    for (int x = threadIdx.x; x < K * W; x += Threads) {
      const int i = x / W, j = x % W;
      if (j < width())
        to[i * V + column + j] = from[i * WP + j];
    }
  }

  /// Rows [C][KP] from memory, row t at `rows + t * stride` (zero from
  /// `length` on).
  LINAC_DEVICE void loadRows(float *to, const float *rows, int64_t stride,
                             int length) const {
    copyIn<C * K>(
        to,
        [&](int x) {
          const int t = x / K;
          return t < length ? rows[t * stride + x % K] : 0.0f;
        },
        [](int x) { return x / K * KP + x % K; });
  }
  /// This block's columns [C][WP] of rows from memory, as loadRows.
  LINAC_DEVICE void loadColumns(float *to, const float *rows, int64_t stride,
                                int length) const {
    copyIn<C * W>(
        to,
        [&](int x) {
          const int t = x / W, j = x % W;
          return t < length && j < width() ? rows[t * stride + column + j]
                                           : 0.0f;
        },
        [](int x) { return x / W * WP + x % W; });
  }
  /// A [C][C] array from memory into [C][CP].
  LINAC_DEVICE void loadPairs(float *to, const float *from) const {
    copyIn<C * C>(
        to, [&](int x) { return from[x]; },
        [](int x) { return x / C * CP + x % C; });
  }

  /// Chunk c's rows (zero past the sequence): q and k, e with `erase`, its
  /// writes u with `values`, its reads' gradients with `gradients`; lam the
  /// cumulative floored log-gates, the last repeated past the sequence.
  /// Returns its length.
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
    // A thread a gate channel sums its tokens' log-gates in fp64.
    for (int g = threadIdx.x; g < G; g += Threads) {
      double sum = 0.0;
#pragma unroll
      for (int t = 0; t < C; ++t) {
        if (t < length)
          sum += floorLogGate(first[t * stride + Record::kGate + g]);
        lam[t * G + g] = sum;
      }
    }
    __syncthreads();
    return length;
  }

  /// The chunk's pairs: P = scale sum_i q_ti k_si F_ts,i on s <= t and,
  /// with an erase, A = sum_i e_ti k_si F_ts,i on s < t; lane s, each key
  /// of k_s loaded once for all the warp's rows.
  LINAC_DEVICE void pairs() {
    const int s = laneId();
    float qk[kRows] = {}, ek[kRows] = {};
    for (int i = 0; i < K; ++i) {
      const float key = k[s * KP + i];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int t = rowOf(r);
        // A pair's factor of key i (1 under a uniform gate, applied below).
        const float f = kUniform || s > t ? 1.0f : factor(t, s, i);
        qk[r] += q[t * KP + i] * key * f;
        if constexpr (kErase)
          ek[r] += e[t * KP + i] * key * f;
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int t = rowOf(r);
      const float f = s <= t && kUniform ? factor(t, s, 0) : 1.0f;
      pairsQ[t * CP + s] = s <= t ? scale * qk[r] * f : 0.0f;
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
      rowsTimesState(eS, e, S, [&](int t, int i) { return gamma(t, i); });
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        delta[rowOf(r) * WP + j] -= eS[r];
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

  /// Chunk c prepared (every chunk at once, a block a column tile): P, and
  /// the walks' rows Q', K' and decay; with an erase T = (I + A)^-1, W = T
  /// (Gamma (.) E) and this block's columns of U' = T U. The first tile
  /// writes all but U'.
  LINAC_DEVICE void prepare(int64_t c) {
    loadChunk(c, true, kErase, false);
    pairs();
    float *const record = prepared(c);
    if (column == 0) {
      for (int x = threadIdx.x; x < C * C; x += Threads)
        record[kPreparedP + x] = pairsQ[x / C * CP + x % C];
      for (int x = threadIdx.x; x < C * K; x += Threads) {
        const int t = x / K, i = x % K;
        record[kPreparedQ + x] = scale * gamma(t, i) * q[t * KP + i];
        record[kPreparedK + x] = keyFactor(t, i) * k[t * KP + i];
      }
      for (int i = threadIdx.x; i < K; i += Threads)
        record[kPreparedDecay + i] = gamma(C - 1, i);
    }
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
        for (int x = threadIdx.x; x < C * C; x += Threads)
          record[kPreparedT + x] = T[x / C * CP + x % C];
        for (int x = threadIdx.x; x < C * K; x += Threads) {
          const int t = x / K, i = x % K;
          float w = 0.0f;
          for (int s = 0; s <= t; ++s)
            w += T[t * CP + s] * gamma(s, i) * e[s * KP + i];
          record[kPreparedW + x] = w;
        }
      }
      for (int x = threadIdx.x; x < C * W; x += Threads) {
        const int t = x / W, j = x % W;
        float u = 0.0f;
        for (int s = 0; s <= t; ++s)
          u += T[t * CP + s] * delta[s * WP + j];
        if (j < width())
          record[kPreparedU + t * V + column + j] = u;
      }
    }
  }

  /// A walk's chunk c: its prepared P, Q' and K' (in q's and k's places),
  /// W with an erase (in e's), the decay, and its length.
  LINAC_DEVICE int loadWalk(int64_t c) {
    const float *const record = prepared(c);
    loadPairs(pairsQ, record + kPreparedP);
    loadRows(q, record + kPreparedQ, K, C);
    loadRows(k, record + kPreparedK, K, C);
    if constexpr (kErase)
      loadRows(e, record + kPreparedW, K, C);
    for (int i = threadIdx.x; i < K; i += Threads)
      decay[i] = record[kPreparedDecay + i];
    return int(min(int64_t(C), end - (begin + c * C)));
  }

  /// The walk forward: the state entering each chunk into its slot, and the
  /// reads o = Q' S + P Delta, Delta = U' - W S with an erase, else U; then
  /// S <- Gamma_C S + K'^T Delta.
  LINAC_DEVICE void walkForward() {
    loadState(S, args.forward.initial_state
                     ? args.forward.initial_state +
                           stateOffset<Layer>(args.forward, seq, head)
                     : nullptr);
    const int j = laneId();
    for (int64_t c = 0; c < chunks(); ++c) {
      __syncthreads();
      storeState(stateSlot(c), S);
      const int length = loadWalk(c);
      const int64_t start = begin + c * C;
      if constexpr (kErase)
        loadColumns(delta, prepared(c) + kPreparedU, V, length);
      else
        loadColumns(delta,
                    args.operands + item(start) * Record::kFloats + Record::kU,
                    args.forward.num_heads * Record::kFloats, length);
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
      float qS[kRows];
      rowsTimesState(qS, q, S);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int t = rowOf(r);
        float paired = 0.0f;
        for (int s = 0; s <= t; ++s)
          paired += pairsQ[t * CP + s] * delta[s * WP + j];
        if (t < length && j < width())
          args.reads[item(start + t) * V + column + j] = qS[r] + paired;
      }
      __syncthreads();
      updateState(S, decay, k, [&](int t) { return delta[t * WP + j]; });
    }
  }

  /// dDelta_s = sum_t P_ts dO_t + K'_s dS, K' = (Gamma_C / Gamma) (.) K:
  /// the walk's prepared rows, or the raw keys through keyFactor.
  template <bool Prepared> LINAC_DEVICE void writesGradient() {
    const int j = laneId();
    float kS[kRows];
    if constexpr (Prepared)
      rowsTimesState(kS, k, dS);
    else
      rowsTimesState(kS, k, dS, [&](int t, int i) { return keyFactor(t, i); });
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int s = rowOf(r);
      float x = 0.0f;
      for (int t = s; t < C; ++t)
        x += pairsQ[t * CP + s] * dO[t * WP + j];
      dDelta[s * WP + j] = x + kS[r];
    }
    __syncthreads();
  }

  /// The walk back: the gradient of the state leaving each chunk into its
  /// slot, then the entering state's: dS <- Gamma_C dS + Q'^T dO - W^T
  /// dDelta (with an erase; W^T dDelta = (Gamma (.) E)^T dR).
  LINAC_DEVICE void walkBackward() {
    const int64_t stateAt = stateOffset<Layer>(args.forward, seq, head);
    loadState(dS, args.d_final_state ? args.d_final_state + stateAt : nullptr);
    const int j = laneId();
    for (int64_t c = chunks() - 1; c >= 0; --c) {
      __syncthreads();
      storeState(gradientSlot(c), dS);
      const int length = loadWalk(c);
      loadColumns(dO, args.reads + item(begin + c * C) * V,
                  args.forward.num_heads * V, length);
      __syncthreads();
      writesGradient<true>();
      updateState(dS, decay, q, [&](int t) { return dO[t * WP + j]; });
      if constexpr (kErase)
        updateState(dS, nullptr, e, [&](int t) { return -dDelta[t * WP + j]; });
    }
    __syncthreads();
    if (args.d_initial_state)
      storeState(args.d_initial_state + stateAt, dS);
  }

  /// Chunk c's operands' gradients, this block's columns' share (every
  /// chunk at once), from the state entering it and the gradient of the one
  /// leaving it.
  LINAC_DEVICE void gradients(int64_t c) {
    const int64_t start = begin + c * C;
    for (int i = threadIdx.x; i < K; i += Threads)
      kept[i] = 0.0f;
    loadState(S, stateSlot(c));
    loadState(dS, gradientSlot(c));
    const int length = loadChunk(c, true, true, true);
    pairs();
    solveWrites();
    const int lane = laneId();
    // G_ts = dO_t . Delta_s on s <= t, times scale (and F under a uniform
    // gate).
    for (int t = warp(); t < C; t += kWarps) {
      const int s = lane;
      float g = 0.0f;
      for (int j = 0; j < W; ++j)
        g += dO[t * WP + j] * delta[s * WP + j];
      pairsG[t * CP + s] =
          s <= t ? scale * g * (kUniform ? factor(t, s, 0) : 1.0f) : 0.0f;
    }
    __syncthreads();
    writesGradient<false>();
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
      // dA = -dR Delta^T on s < t (times F under a uniform gate), in A's
      // place.
      for (int t = warp(); t < C; t += kWarps) {
        const int s = lane;
        float d = 0.0f;
        for (int j = 0; j < W; ++j)
          d -= dDelta[t * WP + j] * delta[s * WP + j];
        pairsA[t * CP + s] =
            s < t ? d * (kUniform ? factor(t, s, 0) : 1.0f) : 0.0f;
      }
    }
    // The written values' gradient: dR with an erase, else dDelta; this
    // block's columns alone.
    for (int x = threadIdx.x; x < C * W; x += Threads) {
      const int t = x / W, j = x % W;
      if (t < length && j < width())
        args.operand_grads[item(start + t) * Record::kFloats + Record::kU +
                           column + j] = dDelta[t * WP + j];
    }
    __syncthreads();
    rowGradients(start, length);
    gateGradients(start, length);
  }

  /// acc[r][m] += sum over the pairs (t_r, s), s < t_r, of pair(t_r, s)
  /// x[s][i_m] F_(t_r)s (when `Later`, the pairs (s, t_r), s > t_r, with
  /// F_s(t_r)); F is 1 where the pairs carry it (a uniform gate). Each step
  /// over s loads the lane's keys of x once for all the warp's rows.
  template <bool Later, typename Pair>
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
      for (int r = 0; r < kRows; ++r) {
        const int t = rowOf(r);
        if (Later ? s <= t : s >= t)
          continue;
#pragma unroll
        for (int m = 0; m < kKeys; ++m)
          acc[r][m] += a[r] * v[m] *
                       (kUniform ? 1.0f
                        : Later  ? factor(s, t, keyOf(m))
                                 : factor(t, s, keyOf(m)));
      }
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

  /// dq, dk and de of each row, this block's columns' share, added to the
  /// workspace; then each (token, key)'s terms of the gate's gradient in
  /// q's place (those that count for the tokens after it: the pairs'
  /// terms joining less those leaving, and the writes) and k's (those that
  /// count for it and the tokens before: the reads of S0), and each key's
  /// carry of S0 in `kept`.
  LINAC_DEVICE void rowGradients(int64_t start, int length) {
    RowTile after{}, upTo{};
    auto addRow = [&](const RowTile &gradient, int offset) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int t = rowOf(r);
        if (t >= length)
          continue;
        float *const grads =
            args.operand_grads + item(start + t) * Record::kFloats + offset;
#pragma unroll
        for (int m = 0; m < kKeys; ++m)
          if (keyOf(m) < K)
            atomicAdd(grads + keyOf(m), gradient[r][m]);
      }
    };
    auto row = [&](const float *rows, int r, int m) {
      return keyOf(m) < K ? rows[rowOf(r) * KP + keyOf(m)] : 0.0f;
    };
    auto key = [&](int m) { return keyOf(m) < K ? keyOf(m) : 0; };
    {
      // dq = scale (G (.) F) K + scale Gamma (.) (dO S^T).
      RowTile paired{}, read{};
      pairProducts<false>(
          paired, [&](int t, int s) { return pairsG[t * CP + s]; }, k);
      stateProducts(read, dO, S);
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int m = 0; m < kKeys; ++m) {
          const int t = rowOf(r);
          const float x = row(q, r, m);
          read[r][m] *= scale * gamma(t, key(m));
          after[r][m] -= x * paired[r][m];
          upTo[r][m] += x * read[r][m];
          paired[r][m] += pairsG[t * CP + t] * row(k, r, m) + read[r][m];
        }
      addRow(paired, Record::kQ);
    }
    {
      // dk = scale (G (.) F)^T Q + (dA (.) F)^T E + (Gamma_C / Gamma) (.)
      // (Delta dS^T).
      RowTile paired{}, update{};
      pairProducts<true>(
          paired, [&](int t, int s) { return pairsG[s * CP + t]; }, q);
      if constexpr (kErase)
        pairProducts<true>(
            paired, [&](int t, int s) { return pairsA[s * CP + t]; }, e);
      stateProducts(update, delta, dS);
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int m = 0; m < kKeys; ++m) {
          const int t = rowOf(r);
          const float x = row(k, r, m);
          update[r][m] *= keyFactor(t, key(m));
          after[r][m] += x * (paired[r][m] + update[r][m]);
          paired[r][m] += pairsG[t * CP + t] * row(q, r, m) + update[r][m];
        }
      addRow(paired, Record::kK);
    }
    if constexpr (kErase) {
      // de = (dA (.) F) K - Gamma (.) (dR S^T).
      RowTile paired{}, erased{};
      pairProducts<false>(
          paired, [&](int t, int s) { return pairsA[t * CP + s]; }, k);
      stateProducts(erased, dDelta, S);
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int m = 0; m < kKeys; ++m) {
          const float x = row(e, r, m);
          erased[r][m] *= -gamma(rowOf(r), key(m));
          after[r][m] -= x * paired[r][m];
          upTo[r][m] += x * erased[r][m];
          paired[r][m] += erased[r][m];
        }
      addRow(paired, Record::kE);
    }
    // S0 carried into the leaving state, a key's terms.
    for (int x = threadIdx.x; x < K * W; x += Threads) {
      const int i = x / W, j = x % W;
      atomicAdd(&kept[i], gamma(C - 1, i) * S[i * WP + j] * dS[i * WP + j]);
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int m = 0; m < kKeys; ++m)
        if (keyOf(m) < K) {
          q[rowOf(r) * KP + keyOf(m)] = after[r][m];
          k[rowOf(r) * KP + keyOf(m)] = upTo[r][m];
        }
    __syncthreads();
  }

  /// Each token's own log-gate's gradient (a key's, or their sum under a
  /// uniform gate), this block's columns' share: what its gate scales (the
  /// CPU's gateGradients): the pairs straddling it and the writes before it
  /// (q's place, summed over the tokens before), the reads of S0 from its
  /// token on (k's place, over it and the tokens after) and S0's carry.
  LINAC_DEVICE void gateGradients(int64_t start, int length) {
    // A thread a key: its column of the totals, in place of q's.
    for (int i = threadIdx.x; i < K; i += Threads) {
      double before = 0.0, from = 0.0;
      for (int t = 0; t < C; ++t)
        from += k[t * KP + i];
      for (int t = 0; t < C; ++t) {
        const double total = before + from + double(kept[i]);
        before += q[t * KP + i];
        from -= k[t * KP + i];
        q[t * KP + i] = float(total);
      }
    }
    __syncthreads();
    float *const grads = args.operand_grads + Record::kGate;
    if constexpr (kUniform) {
      for (int t = warp(); t < length; t += kWarps) {
        float sum = 0.0f;
        for (int i = laneId(); i < K; i += 32)
          sum += q[t * KP + i];
        sum = warpSum(sum);
        if (laneId() == 0)
          atomicAdd(grads + item(start + t) * Record::kFloats, sum);
      }
    } else {
      for (int x = threadIdx.x; x < length * K; x += Threads)
        atomicAdd(grads + item(start + x / K) * Record::kFloats + x % K,
                  q[x / K * KP + x % K]);
    }
  }
};

/// The walks: a block a (column tile, head, sequence), of
/// kBackwardWalkThreads threads.
template <typename Layer>
LINAC_DEVICE BackwardBlock<Layer, kBackwardWalkThreads>
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
