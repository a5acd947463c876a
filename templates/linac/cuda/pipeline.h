//===- pipeline.h - the pipelined chunkwise kernel ---------------*- C++ -*-===//
//
// The chunkwise algorithm with an erase (docs/design.md) for one (head,
// sequence) per block, its warps split in two groups that work on
// different chunks at once and hand chunks over through two buffers in
// shared memory:
//
//   state warps (8), chunk c: warp w holds the transposed state's rows
//     16w..16w+15 (value columns of S) across every key in fp32 registers,
//     and runs Delta^T = U'^T - S^T W^T, O^T = S^T Q^T + Delta^T P^T and
//     S^T <- Gamma_C S^T + Delta^T K' with the state and Delta as register
//     operands: nothing of the state leaves its warp. Then the generated
//     epilogue of chunk c's reads, and the generated prologue of chunk
//     c + 2 into the buffer chunk c has just left;
//   preparing warps (8), chunk c + 1: cumulative log-gates; the masked
//     intra-chunk matrices P and A; T = (I + A)^-1 by blocks; U' = T U and
//     W = T (E (.) Gamma); the queries and keys rescaled to Q (.) Gamma
//     scale and K (.) Gamma_C / Gamma.
//
// Named barriers order the hand-overs (a chunk's tokens in, a chunk
// prepared), so neither group waits for the other's whole chunk, and each
// group's own steps. The state needs no gate but the chunk's total decay;
// every gate factor is in the prepared operands. setmaxnreg gives the state
// warps the registers the preparing ones do not need (sm_90a).
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CUDA_PIPELINE_H
#define LINAC_CUDA_PIPELINE_H

#include "linac/cuda/chunk.h"

#include <type_traits>

namespace linac::cuda {

extern __shared__ __align__(16) char pipelineShared[];

/// A layer as a phased state block stages the inputs its epilogue loads:
/// those whose rows are whole 16-byte runs, each warp the rows of the
/// tokens its epilogue takes (SharedInputRows).
template <typename Layer> struct EpilogueStaging : Layer {
  LINAC_HOST_DEVICE static constexpr bool sharedInput(int i) {
    return Layer::epilogueInput(i) && stagedRowBytes(Layer::inputSize(i)) > 0;
  }
  LINAC_HOST_DEVICE static constexpr bool lateSharedInput(int) { return false; }
};
template <typename Layer>
using EpilogueRows =
    SharedInputRows<EpilogueStaging<Layer>, false, kPipelineGroupWarps>;

/// The shared memory of a block that works on prepared chunk buffers
/// (PipelineMap), addressed from the block's base each time, so that no
/// pointer into it takes registers.
template <typename Layer, PipelineBlock Block = PipelineBlock::Pipelined>
struct PipelineLayout {
  static constexpr PipelineMap kMap =
      Block == PipelineBlock::State
          ? PipelineMap::phasedState(
                Layer::K, Layer::V, Layer::kKeyGate, Layer::kErase,
                EpilogueRows<Layer>::kBytes / Layer::kChunkSize,
                kSm90aSharedMemory)
          : PipelineMap(Layer::K, Layer::V, Block, Layer::kKeyGate,
                        Layer::kErase);
  static constexpr bool kStagedEpilogue = kMap.stagesEpilogue();
  static constexpr int C = kMap.C, KS = kMap.KS, VS = kMap.VS, PS = kMap.PS,
                       AS = kMap.AS, OS = kMap.OS, IS = kMap.IS;
  static_assert(kMap.bytes <= kSm90aSharedMemory,
                "the pipelined working set exceeds shared memory");

  template <typename E> LINAC_DEVICE static E *at(int64_t offset) {
    return reinterpret_cast<E *>(pipelineShared + offset);
  }
  /// Buffer b: a scalar gate's log-gates, then their cumulative sums; the
  /// log of the chunk's total decay Gamma_C (a vector of K with a
  /// key-vector gate); k, then K (.) Gamma_C / Gamma; with an erase e, then
  /// W; u, then U'; q, then Q (.) Gamma scale; P.
  struct Buffer {
    int b;
    LINAC_DEVICE char *image() const { return at<char>(base()); }
    LINAC_DEVICE __nv_bfloat16 *q() const { return at<__nv_bfloat16>(base() + kMap.q); }
    LINAC_DEVICE __nv_bfloat16 *k() const { return at<__nv_bfloat16>(base() + kMap.k); }
    LINAC_DEVICE __nv_bfloat16 *w() const { return at<__nv_bfloat16>(base() + kMap.w); }
    LINAC_DEVICE __nv_bfloat16 *u() const { return at<__nv_bfloat16>(base() + kMap.u); }
    LINAC_DEVICE __nv_bfloat16 *p() const { return at<__nv_bfloat16>(base() + kMap.p); }
    LINAC_DEVICE float *lambda() const { return at<float>(base() + kMap.lambda); }
    LINAC_DEVICE float *logDecay() const { return at<float>(base() + kMap.logDecay); }
    LINAC_DEVICE int64_t base() const { return b * kMap.bufferBytes; }
  };
  LINAC_DEVICE static float *a() { return at<float>(kMap.a); }
  LINAC_DEVICE static float *inverses() { return at<float>(kMap.inverses); }
  LINAC_DEVICE static float *scratch() { return at<float>(kMap.scratch); }
  /// Under a key-vector gate, each half sub-chunk's total log-gates (a
  /// K-vector each), then the cumulative log-gates at each one's end.
  LINAC_DEVICE static float *halfTotals() { return at<float>(kMap.halfGates); }
  LINAC_DEVICE static float *halfEnds() {
    return at<float>(kMap.halfGates) + C / kHalfSubchunk * kMap.K;
  }
  LINAC_DEVICE static float *o() { return at<float>(kMap.o); }
  LINAC_DEVICE static char *epilogueRows() {
    return at<char>(kMap.epilogueRows);
  }
  LINAC_DEVICE static uint64_t *barriers() { return at<uint64_t>(kMap.barriers); }
};

/// The named barriers of a pipelined block (0 is __syncthreads').
enum PipelineBarrier : int {
  kTokensIn = 1,   // and 2: state warps arrive, preparing warps wait
  kBufferFull = 3, // and 4: preparing warps arrive, state warps wait
  kPreparing = 5,  // the preparing warps among themselves
  kStateWarps = 6, // the state warps among themselves
};

LINAC_DEVICE void barrierWait(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
LINAC_DEVICE void barrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// e^x for a gate's factor (x <= 0 where the kernels take one): by
/// ex2.approx.ftz, two instructions where __expf's care for subnormal
/// results takes five; a factor below 2^-126 is zero.
LINAC_DEVICE float gateFactor(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}

/// A chunk's cumulative log-gates, by one warp, two tokens a lane: out[i]
/// = raw[0] + ... + raw[i] (in place when out is raw); returns the chunk's
/// total on every lane.
LINAC_DEVICE float cumulativeLogGates(const float *raw, float *out) {
  const int lane = laneId();
  const float first = raw[2 * lane], both = first + raw[2 * lane + 1];
  float inclusive = both;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const float below = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset)
      inclusive += below;
  }
  out[2 * lane] = inclusive - both + first;
  out[2 * lane + 1] = inclusive;
  return __shfl_sync(0xffffffffu, inclusive, 31);
}

/// A bf16 A operand already in registers: fragment s of k-step s.
template <int Steps> struct RegisterA {
  const uint32_t (&fragments)[Steps][4];
};
template <int Steps>
LINAC_DEVICE void fragmentA(uint32_t (&a)[4], const RegisterA<Steps> &x,
                            int k0) {
#pragma unroll
  for (int r = 0; r < 4; ++r)
    a[r] = x.fragments[k0 / 16][r];
}

/// Accumulator tiles 2s and 2s + 1 (a 16 x 16 block, columns the reduction
/// of the next product) as the A fragment of its k-step s.
template <int Tiles>
LINAC_DEVICE void accumulatorFragment(uint32_t (&a)[4],
                                      const float (&acc)[Tiles][4], int s) {
  a[0] = packPair(acc[2 * s][0], acc[2 * s][1]);
  a[1] = packPair(acc[2 * s][2], acc[2 * s][3]);
  a[2] = packPair(acc[2 * s + 1][0], acc[2 * s + 1][1]);
  a[3] = packPair(acc[2 * s + 1][2], acc[2 * s + 1][3]);
}

/// A token's inputs for the pipelined prologue, in registers, so that a
/// warp loads its next token's while it runs the prologue on this one:
/// vectors as StagedInputs holds them, scalars on every lane, each as
/// loaded until the prologue reads it (a conversion at the load would wait
/// for it there).
template <typename Layer, typename T> struct TokenInputs {
  using Vectors = StagedInputs<Layer, T>;
  LINAC_HOST_DEVICE static constexpr bool isScalar(int i) {
    return Layer::inputSize(i) == 1;
  }
  static_assert(!inSharedRows<Layer>(0),
                "the pipelined kernel stages no input rows");
  Vectors vectors;
  T scalars[Layer::kNumInputs > 0 ? Layer::kNumInputs : 1];

  /// From `token`: a Token, or HeadInputs' At.
  template <typename Source> LINAC_DEVICE void load(const Source &token) {
    vectors.load(token);
    forEachIndex(
        [&](auto input) {
          constexpr int i = decltype(input)::value;
          if constexpr (isScalar(i))
            scalars[i] = *token.input(i);
        },
        Vectors::kInputs);
  }
  LINAC_DEVICE float scalar(int i) const { return toFloat(scalars[i]); }
};

/// Input i of a token whose inputs are in TokenInputs, in WarpVec's layout.
template <typename Layer, typename T> struct TokenInput {
  using Inputs = TokenInputs<Layer, T>;
  const Inputs &inputs;
  int i;
  template <int N> LINAC_DEVICE WarpVec<N> warpVec() const {
    WarpVec<N> v = WarpVec<N>::splat(0.0f);
    if (Inputs::isScalar(i)) {
      // A vector of one: lane 0's first slot.
      if (laneId() == 0)
        v.x[0] = inputs.scalar(i);
      return v;
    }
#pragma unroll
    for (int s = 0; s < WarpVec<N>::kSlots; ++s)
      v.x[s] = inputs.vectors.at(Inputs::Vectors::firstSlot(i) + s);
    return v;
  }
  LINAC_DEVICE float scalar() const {
    if (Inputs::isScalar(i))
      return inputs.scalar(i);
    return __shfl_sync(0xffffffffu,
                       inputs.vectors.at(Inputs::Vectors::firstSlot(i)), 0);
  }
};

/// A token whose inputs the prologue reads from TokenInputs.
template <typename Layer, typename T> struct RegisterToken : Token<Layer, T> {
  const TokenInputs<Layer, T> &inputs;
  /// The generated prologue passes constant indices, so slots fold.
  LINAC_DEVICE TokenInput<Layer, T> input(int i) const { return {inputs, i}; }
};

/// Registers a thread of each group takes (setmaxnreg): the state warps
/// hold the state, Delta and half the reads; the block's 64 K between them.
constexpr int kStateRegisters = 152, kPreparingRegisters = 104;
static_assert((kStateRegisters + kPreparingRegisters) * kChunkThreads / 2 ==
                  64 * 1024,
              "the groups share the register file");

template <int Registers, bool Increase> LINAC_DEVICE void setRegisters() {
#if __CUDA_ARCH__ >= 900
  if constexpr (Increase)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Registers));
  else
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Registers));
#endif
}

/// Hides `x`'s values from the compiler, so that nothing computed from them
/// before is reused after.
template <int Tiles> LINAC_DEVICE void opaque(float (&x)[Tiles][4]) {
#pragma unroll
  for (int n = 0; n < Tiles; ++n)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      asm volatile("" : "+f"(x[n][r]));
}

/// A state warp's share of the transposed state S^T in fp32 registers:
/// tile n holds its 16 value columns by keys 8n..8n+7.
template <typename Layer> using StateTiles = float[Layer::K / 8][4];

/// Where value column `col` of the state entering or leaving `work` is in
/// memory: past a transition's last column, nowhere (-1).
template <typename Layer>
LINAC_DEVICE int stateMemoryColumn(const ChunkWork &work, int col) {
  if (work.identityFrom >= 0)
    return work.identityFrom + col < Layer::K ? col : -1;
  return col;
}

/// A state warp's columns column..column+15 of the state entering `work`.
template <typename Layer>
LINAC_DEVICE void loadStateTiles(StateTiles<Layer> &st, const ChunkWork &work,
                                 int column, bool live) {
#pragma unroll
  for (int n = 0; n < Layer::K / 8; ++n)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int col = column + accRow(r), key = n * 8 + accCol(r);
      float x = 0.0f;
      if (!live)
        x = 0.0f;
      else if (work.identityFrom >= 0)
        x = stateMemoryColumn<Layer>(work, col) >= 0 &&
                    key == work.identityFrom + col
                ? 1.0f
                : 0.0f;
      else if (work.initial)
        x = work.initial[key * stateColumns<Layer>() + col];
      st[n][r] = x;
    }
}

/// A state warp's columns of the state leaving `work`, where it goes.
template <typename Layer>
LINAC_DEVICE void storeStateTiles(const StateTiles<Layer> &st,
                                  const ChunkWork &work, int column,
                                  bool live) {
  if (!work.final || !live)
    return;
#pragma unroll
  for (int n = 0; n < Layer::K / 8; ++n)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int col = column + accRow(r), key = n * 8 + accCol(r);
      const int at = stateMemoryColumn<Layer>(work, col);
      if (at >= 0)
        work.final[key * work.finalStride + at] = st[n][r];
    }
}

/// Token i's prologue operands into a buffer: q, k, e and u as bf16 rows,
/// a scalar log-gate floored (a key-vector gate's stays with its warp).
template <typename Layer, typename Layout>
LINAC_DEVICE void storeOperands(
    const typename Layout::Buffer &buffer, int i,
    const ChunkOperands<Layer::K, Layer::V, Layer::kKeyGate> &ops) {
  ops.q.storeAligned(buffer.q() + i * Layout::KS);
  ops.k.storeAligned(buffer.k() + i * Layout::KS);
  if constexpr (Layer::kErase)
    ops.e.storeAligned(buffer.w() + i * Layout::KS);
  ops.u.u.storeAligned(buffer.u() + i * Layout::VS);
  if constexpr (Layer::kKeyGate != Gate::Vector) {
    if (laneId() == 0)
      buffer.lambda()[i] =
          Layer::kKeyGate == Gate::Scalar ? floorLogGate(ops.gk) : 0.0f;
  }
}

/// Calls f(std::false_type{}) for a whole chunk and f(std::true_type{}) for
/// a partial one, so that a whole chunk's code carries none of the selects
/// that zero the rows past a partial chunk's end.
template <typename F> LINAC_DEVICE void byChunkTail(bool whole, const F &f) {
  if (whole)
    f(std::false_type{});
  else
    f(std::true_type{});
}

/// The operands of a row past the chunk's last token: zeros, which change
/// no product.
template <typename Layer>
LINAC_DEVICE ChunkOperands<Layer::K, Layer::V, Layer::kKeyGate> noOperands() {
  ChunkOperands<Layer::K, Layer::V, Layer::kKeyGate> ops;
  ops.q = ops.k = ops.e = WarpVec<Layer::K>::splat(0.0f);
  ops.u.u = WarpVec<Layer::V>::splat(0.0f);
  if constexpr (Layer::kKeyGate == Gate::Vector)
    ops.gk = WarpVec<Layer::K>::splat(0.0f);
  else
    ops.gk = 0.0f;
  return ops;
}

/// A preparing warp's half sub-chunk under a key-vector gate: each token's
/// cumulative log-gates from the half's start, its lanes' channels.
/// Token t's are set and read by a runtime t through selects over every
/// token, so that the rows stay in registers while the loops that reach
/// them stay rolled (their unrolled code overflowed the instruction cache).
template <int K> struct HalfGates {
  static constexpr int Slots = WarpVec<K>::kSlots;
  float x[kHalfSubchunk][Slots];

  LINAC_DEVICE void set(int t, const float (&row)[Slots]) {
#pragma unroll
    for (int u = 0; u < kHalfSubchunk; ++u)
#pragma unroll
      for (int s = 0; s < Slots; ++s)
        x[u][s] = u == t ? row[s] : x[u][s];
  }
  LINAC_DEVICE void get(int t, float (&row)[Slots]) const {
#pragma unroll
    for (int s = 0; s < Slots; ++s)
      row[s] = x[0][s];
#pragma unroll
    for (int u = 1; u < kHalfSubchunk; ++u)
#pragma unroll
      for (int s = 0; s < Slots; ++s)
        row[s] = u == t ? x[u][s] : row[s];
  }
};

/// Sums each of a lane's partial sums over the warp, spending one shuffle
/// a sum: each exchange gives half of them to the lane `offset` away.
/// Returns this lane's sum and sets `index` to which of the N it is.
template <int N>
LINAC_DEVICE float warpSumsSpread(float (&x)[N], int &index) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0,
                "a power of two, at most one a lane");
  // log2(N): the exchanges that halve the sums; the rest add one sum.
  constexpr int Levels = (N >= 2) + (N >= 4) + (N >= 8) + (N >= 16) + (N >= 32);
  const int lane = laneId();
  index = 0;
#pragma unroll
  for (int level = 0; level < 5; ++level) {
    const int offset = 16 >> level;
    if (level >= Levels) {
      x[0] += __shfl_xor_sync(0xffffffffu, x[0], offset);
      continue;
    }
    const int half = N >> (level + 1);
    const bool upper = lane & offset;
#pragma unroll
    for (int t = 0; t < N / 2; ++t) {
      if (t >= half)
        break;
      const float send = upper ? x[t] : x[t + half];
      const float keep = upper ? x[t + half] : x[t];
      x[t] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
    }
    if (upper)
      index += half;
  }
  return x[0];
}

/// The cumulative log-gate token i's query takes, of `lambda`'s: its own,
/// or reading before the write the previous token's (0 at the first).
template <typename Layer, typename Lambda>
LINAC_DEVICE float queryLambda(Lambda lambda, int i) {
  if constexpr (Layer::kReadBefore)
    return i > 0 ? lambda(i - 1) : 0.0f;
  else
    return lambda(i);
}

/// The largest fall of any channel's log-gate over a chunk that the
/// chunk's products may take through one reference, the fall's midpoint:
/// every factor is then within e^(+-48), inside the range of bf16's and
/// fp32's normal numbers with room for the operands' own. A masked pair's
/// product may overflow, but a select drops it.
inline constexpr float kMidpointFall = 96.0f;

/// What a preparing warp does under a key-vector gate with its half
/// sub-chunk h (rows 8h..8h+7, their prologue run and their cumulative
/// log-gates from the half's start in `gates`), before the block's products:
/// the half's end Lambda_h (the cumulative log-gates there, from the
/// halves' totals) and, for the last, the chunk's log-decay vector. Where
/// no channel falls by more than kMidpointFall over the chunk, its rows in
/// place to the fall's midpoint m = Lambda_last / 2: q and e times
/// e^(lambda_i - m), k times e^(m - lambda_j), so that every pair is one
/// product (returns true). Otherwise P and (with an erase) A between the
/// half's tokens, pair by pair in fp32, then its rows in place to the
/// half's references, so that no factor exceeds 1 however strong the gates:
/// q and e times e^(lambda_i - Lambda_h-1), k times e^(Lambda_h - lambda_j)
/// (returns false). Also zeros P above the diagonal and A on and above it.
/// Reading before the write, q takes lambda_i-1 for lambda_i (queryLambda)
/// and P's diagonal is zero too.
template <typename Layer, typename Layout>
LINAC_DEVICE bool prepareHalf(const typename Layout::Buffer &buffer, int h,
                              int thread, const HalfGates<Layer::K> &gates,
                              float scale) {
  constexpr int C = Layout::C, K = Layer::K, KS = Layout::KS,
                PS = Layout::PS, AS = Layout::AS;
  constexpr int Slots = HalfGates<K>::Slots, Half = kHalfSubchunk,
                GroupThreads = 32 * kPipelineGroupWarps;
  static_assert(C == Half * kPipelineGroupWarps, "a warp a half sub-chunk");
  const int lane = laneId();
  auto channel = [&](int s) { return lane * Slots + s; };
  float *totals = Layout::halfTotals(), *ends = Layout::halfEnds();
#pragma unroll
  for (int s = 0; s < Slots; ++s)
    if (channel(s) < K)
      totals[h * K + channel(s)] = gates.x[Half - 1][s];
  for (int e = thread; e < C * C; e += GroupThreads) {
    const int i = e / C, j = e % C;
    if (j > i)
      buffer.p()[i * PS + j] = __float2bfloat16(0.0f);
    if (Layer::kErase && j >= i)
      Layout::a()[i * AS + j] = 0.0f;
  }
  __syncthreads();
  // Each channel's log-gate where the half starts and the fall's midpoint,
  // the same sums in the same order on every warp, so that every warp
  // takes the same path.
  float before[Slots], midpoint[Slots], fall = 0.0f;
#pragma unroll
  for (int s = 0; s < Slots; ++s) {
    before[s] = midpoint[s] = 0.0f;
    if (channel(s) >= K)
      continue;
    for (int g = 0; g < kPipelineGroupWarps; ++g) {
      if (g == h)
        before[s] = midpoint[s];
      midpoint[s] += totals[g * K + channel(s)];
    }
    const float end = before[s] + gates.x[Half - 1][s];
    ends[h * K + channel(s)] = end;
    if (h == kPipelineGroupWarps - 1)
      buffer.logDecay()[channel(s)] = end;
    fall = fmaxf(fall, -midpoint[s]);
    midpoint[s] *= 0.5f;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    fall = fmaxf(fall, __shfl_xor_sync(0xffffffffu, fall, offset));
  const int first = h * Half;
  auto row = [&](const __nv_bfloat16 *m, int t) {
    return WarpVec<K>::loadAligned(m + (first + t) * KS);
  };
  // Reading before the write, token i's query's log-gates from the half's
  // start: token i - 1's, zero at the half's first token.
  auto queryGates = [&](int i, float(&row)[Slots]) {
    gates.get(i > 0 ? i - 1 : 0, row);
#pragma unroll
    for (int s = 0; s < Slots; ++s)
      row[s] = i > 0 ? row[s] : 0.0f;
  };
  if (fall <= kMidpointFall) {
#pragma unroll 1
    for (int i = 0; i < Half; ++i) {
      float gi[Slots], gq[Slots];
      gates.get(i, gi);
      if constexpr (Layer::kReadBefore)
        queryGates(i, gq);
      WarpVec<K> q = row(buffer.q(), i), k = row(buffer.k(), i),
                 e = Layer::kErase ? row(buffer.w(), i) : WarpVec<K>{};
#pragma unroll
      for (int s = 0; s < Slots; ++s) {
        const float offset = before[s] + gi[s] - midpoint[s];
        const float gate = gateFactor(offset);
        q.x[s] *= Layer::kReadBefore
                      ? gateFactor(before[s] + gq[s] - midpoint[s])
                      : gate;
        e.x[s] *= gate;
        k.x[s] *= gateFactor(-offset);
      }
      q.storeAligned(buffer.q() + (first + i) * KS);
      if constexpr (Layer::kErase)
        e.storeAligned(buffer.w() + (first + i) * KS);
      k.storeAligned(buffer.k() + (first + i) * KS);
    }
    return true;
  }

  // P_ij and A_ij for tokens i >= j of the half, a row i at a time from
  // the last: P's sums at j, A's (with an erase) at 8 + j, a lane's over
  // its channels, then over the warp. Row i then goes to the half's
  // references in place, as no later row reads it.
  constexpr int Sums = (Layer::kErase ? 2 : 1) * Half;
#pragma unroll 1
  for (int i = Half - 1; i >= 0; --i) {
    float gi[Slots], gq[Slots];
    gates.get(i, gi);
    if constexpr (Layer::kReadBefore)
      queryGates(i, gq);
    WarpVec<K> q = row(buffer.q(), i),
               e = Layer::kErase ? row(buffer.w(), i) : WarpVec<K>{};
    float sums[Sums];
#pragma unroll
    for (int j = 0; j < Half; ++j) {
      float p = 0.0f, a = 0.0f;
      if (j <= i) {
        const WarpVec<K> k = row(buffer.k(), j);
#pragma unroll
        for (int s = 0; s < Slots; ++s) {
          const float key = k.x[s] * gateFactor(gi[s] - gates.x[j][s]);
          p += q.x[s] * (Layer::kReadBefore
                             ? k.x[s] * gateFactor(gq[s] - gates.x[j][s])
                             : key);
          if constexpr (Layer::kErase)
            a += e.x[s] * key;
        }
      }
      sums[j] = !Layer::kReadBefore || j < i ? p : 0.0f;
      if constexpr (Layer::kErase)
        sums[Half + j] = j < i ? a : 0.0f;
    }
    int index;
    const float sum = warpSumsSpread(sums, index);
    if (lane % (32 / Sums) == 0) {
      if (index <= i)
        buffer.p()[(first + i) * PS + first + index] =
            __float2bfloat16(sum * scale);
      else if (Layer::kErase && index >= Half && index - Half < i)
        Layout::a()[(first + i) * AS + first + index - Half] = sum;
    }
    WarpVec<K> k = row(buffer.k(), i);
#pragma unroll
    for (int s = 0; s < Slots; ++s) {
      const float gate = gateFactor(gi[s]);
      q.x[s] *= Layer::kReadBefore ? gateFactor(gq[s]) : gate;
      e.x[s] *= gate;
      k.x[s] *= gateFactor(gates.x[Half - 1][s] - gi[s]);
    }
    q.storeAligned(buffer.q() + (first + i) * KS);
    if constexpr (Layer::kErase)
      e.storeAligned(buffer.w() + (first + i) * KS);
    k.storeAligned(buffer.k() + (first + i) * KS);
  }
  return false;
}

/// P_ij = scale q_i.k_j e^(lambda(i) - lambda(j)) for j <= i (when
/// `reads`; reading before the write, lambda(i - 1) for lambda(i) and j <
/// i), and A_ij = e_i.k_j e^(lambda(i) - lambda(j)) for j < i (with an
/// erase), from the buffer's rows: one 16 x 16 block of either a task of
/// warp p, those above the diagonal zero.
template <typename Layer, typename Layout, typename Lambda>
LINAC_DEVICE void blockProducts(const typename Layout::Buffer &buffer, int p,
                                float scale, bool reads, Lambda lambda) {
  constexpr int K = Layer::K, KS = Layout::KS, PS = Layout::PS, AS = Layout::AS,
                KeySteps = K / 16;
  for (int task = p; task < 32; task += kPipelineGroupWarps) {
    const bool query = task < 16;
    const int rows = task % 4 * 16, keys = task / 4 % 4 * 16;
    if (query ? !reads : !Layer::kErase)
      continue;
    float acc[2][4];
    zero(acc);
    if (keys <= rows)
      warpProduct<2, KeySteps>(
          acc, SharedRows{query ? buffer.q() : buffer.w(), KS, rows},
          SharedRows{buffer.k(), KS, keys});
    for (int n = 0; n < 2; ++n)
      for (int r = 0; r < 4; r += 2) {
        const int i = rows + accRow(r), j = keys + n * 8 + accCol(r);
        float x[2];
        for (int h = 0; h < 2; ++h) {
          const bool kept =
              query && !Layer::kReadBefore ? j + h <= i : j + h < i;
          const float from = query ? queryLambda<Layer>(lambda, i) : lambda(i);
          x[h] = kept ? acc[n][r + h] * gateFactor(from - lambda(j + h)) *
                            (query ? scale : 1.0f)
                      : 0.0f;
        }
        if (query)
          *reinterpret_cast<uint32_t *>(buffer.p() + i * PS + j) =
              packPair(x[0], x[1]);
        else
          *reinterpret_cast<float2 *>(Layout::a() + i * AS + j) =
              make_float2(x[0], x[1]);
      }
  }
}

/// P and A under a key-vector gate from the rows prepareHalf left. Through
/// the fall's midpoint (`midpoint`), every block by one product. Otherwise
/// between tokens of different halves: warp p takes sub-chunk p % 4's rows
/// of P (p < 4) or A. Against an earlier sub-chunk's half n the factor
/// between the references, e^(Lambda_h-1 - Lambda_n), splits at the
/// sub-chunk's start into a row factor (the second half's e^(Lambda_2b -
/// Lambda_2b-1)) and a column factor e^(Lambda_2b-1 - Lambda_n), both at
/// most 1; against the sub-chunk's own first half it is 1. Then, once
/// `prepared` has every warp past its products, the rows become the
/// state's operands: Q (.) Gamma scale, E (.) Gamma and K (.) Gamma_C /
/// Gamma.
template <typename Layer, typename Layout, typename Sync>
LINAC_DEVICE void keyVectorProducts(const typename Layout::Buffer &buffer,
                                    int p, int thread, float scale, bool reads,
                                    bool midpoint, Sync prepared) {
  constexpr int C = Layout::C, K = Layer::K, KS = Layout::KS,
                PS = Layout::PS, AS = Layout::AS;
  constexpr int KeySteps = K / 16, Half = kHalfSubchunk,
                GroupThreads = 32 * kPipelineGroupWarps;
  constexpr int EarlierTiles = C / Half - 2;
  const float *ends = Layout::halfEnds();
  auto end = [&](int half, int d) { return ends[half * K + d]; };
  // e^(Lambda_x - Lambda_y) at channels d and d + 1, packed pairs scaled.
  auto factors = [&](uint32_t pair, int x, int y, int d) {
    return scalePair(pair, gateFactor(end(x, d) - end(y, d)),
                     gateFactor(end(x, d + 1) - end(y, d + 1)));
  };
  const bool query = p < 4;
  const int b = p % 4, rows = 16 * b;
  if (midpoint)
    blockProducts<Layer, Layout>(buffer, p, scale, reads,
                                 [](int) { return 0.0f; });
  else if (query ? reads : Layer::kErase) {
    const __nv_bfloat16 *x = query ? buffer.q() : buffer.w();
    float acc[EarlierTiles][4];
    zero(acc);
    const int earlier = 2 * b;
#pragma unroll 1
    for (int ks = 0; ks < KeySteps; ++ks) {
      if (b == 0)
        break;
      uint32_t a[4];
      fragmentA(a, SharedRows{x, KS, rows}, ks * 16);
      const int d = ks * 16 + (laneId() & 3) * 2;
      a[1] = factors(a[1], earlier, earlier - 1, d);
      a[3] = factors(a[3], earlier, earlier - 1, d + 8);
#pragma unroll
      for (int n = 0; n < EarlierTiles; ++n) {
        if (n >= earlier)
          break;
        uint32_t keys[2];
        fragmentB(keys, SharedRows{buffer.k(), KS, 0}, ks * 16, n * 8);
        if (n < earlier - 1) {
          keys[0] = factors(keys[0], earlier - 1, n, d);
          keys[1] = factors(keys[1], earlier - 1, n, d + 8);
        }
        mma(acc[n], a, keys);
      }
    }
    float cross[1][4];
    zero(cross);
    warpProduct<1, KeySteps>(cross, SharedRows{x, KS, rows},
                             SharedRows{buffer.k(), KS, rows});
    auto store = [&](int i, int j, float lo, float hi) {
      if (query)
        *reinterpret_cast<uint32_t *>(buffer.p() + i * PS + j) =
            packPair(lo * scale, hi * scale);
      else
        *reinterpret_cast<float2 *>(Layout::a() + i * AS + j) =
            make_float2(lo, hi);
    };
#pragma unroll
    for (int n = 0; n < EarlierTiles; ++n)
      if (n < earlier)
        for (int r = 0; r < 4; r += 2)
          store(rows + accRow(r), n * 8 + accCol(r), acc[n][r], acc[n][r + 1]);
    // The second half's rows against the first half's keys.
    store(rows + accRow(2), rows + accCol(2), cross[0][2], cross[0][3]);
  }
  prepared();

  // A thread a pair of channels of a half's rows, their factors taken once:
  // from the midpoint m, e^m and e^(Lambda_last - m); from the half's
  // references, e^Lambda_h-1 and e^(Lambda_last - Lambda_h).
  constexpr int Last = C / Half - 1;
  for (int e = thread; e < K / 2 * (C / Half); e += GroupThreads) {
    const int d = e % (K / 2) * 2, h = e / (K / 2);
    const float fromLo = midpoint ? 0.5f * end(Last, d) : end(h, d),
                fromHi = midpoint ? 0.5f * end(Last, d + 1) : end(h, d + 1);
    const float lo = midpoint ? gateFactor(fromLo)
                     : h > 0  ? gateFactor(end(h - 1, d))
                              : 1.0f,
                hi = midpoint ? gateFactor(fromHi)
                     : h > 0  ? gateFactor(end(h - 1, d + 1))
                              : 1.0f;
    const float keyLo = gateFactor(end(Last, d) - fromLo),
                keyHi = gateFactor(end(Last, d + 1) - fromHi);
#pragma unroll
    for (int t = 0; t < Half; ++t) {
      const int i = h * Half + t;
      auto rescale = [&](__nv_bfloat16 *m, float low, float high) {
        uint32_t *pair = reinterpret_cast<uint32_t *>(m + i * KS + d);
        *pair = scalePair(*pair, low, high);
      };
      rescale(buffer.q(), lo * scale, hi * scale);
      if constexpr (Layer::kErase)
        rescale(buffer.w(), lo, hi);
      rescale(buffer.k(), keyLo, keyHi);
    }
  }
}

/// T = (I + A)^-1 in place of A, in fp32, for a strictly lower triangular
/// A of 64 x 64 (rows AS floats apart, zeros on and above the diagonal), by
/// a group of kPipelineGroupWarps warps (warp p), `sync()` their barrier;
/// `inverses` (64 rows of IS floats) and `scratch` (kPipelineScratchFloats
/// a warp) are its working memory. The inverses T_bb of the four 16 x 16
/// diagonal blocks by forward substitution, a half-warp a column, each warp
/// the same two columns of every block with the four substitutions
/// interleaved (each waits on a shuffle a row; with `RowsAhead` each
/// lane's row of A loaded four columns a step ahead of them, which the
/// warpgroup kernel's producer gains from and the preparing blocks, two a
/// multiprocessor, do not); then T_10 and T_32 from them, and the
/// lower-left 32 x 32 block from the two triangles beside it:
/// -T_hi (A_lo T_lo).
template <int AS, int IS, bool RowsAhead, typename Sync>
LINAC_DEVICE void invertUnitLower(float *a, float *inverses, float *scratch,
                                  int p, Sync sync) {
  constexpr int C = kChunkSize, GroupWarps = kPipelineGroupWarps;
  constexpr int Rows = 16, Blocks = C / Rows;
  static_assert(Blocks == 4 && Rows / 2 == GroupWarps,
                "a warp takes two columns of each of four diagonal blocks");
  const int g = laneId() >> 2, pair = (laneId() & 3) * 2;
  {
    const int column = 2 * p + laneId() / 16, i = laneId() % 16;
    float x[Blocks];
#pragma unroll
    for (int b = 0; b < Blocks; ++b)
      x[b] = i == column ? 1.0f : 0.0f;
    if constexpr (RowsAhead) {
      static_assert(AS % 4 == 0, "rows of whole 16-byte runs");
      auto rowPart = [&](int b, int part) {
        return *reinterpret_cast<const float4 *>(a + (b * Rows + i) * AS +
                                                 b * Rows + 4 * part);
      };
      float4 row[Blocks], next[Blocks];
#pragma unroll
      for (int b = 0; b < Blocks; ++b)
        row[b] = rowPart(b, 0);
#pragma unroll
      for (int part = 0; part < Rows / 4; ++part) {
        if (part + 1 < Rows / 4)
#pragma unroll
          for (int b = 0; b < Blocks; ++b)
            next[b] = rowPart(b, part + 1);
#pragma unroll
        for (int u = 0; u < 4 && 4 * part + u < Rows - 1; ++u) {
          const int m = 4 * part + u;
#pragma unroll
          for (int b = 0; b < Blocks; ++b) {
            const float y = __shfl_sync(0xffffffffu, x[b], m, 16);
            const float am = u == 0   ? row[b].x
                             : u == 1 ? row[b].y
                             : u == 2 ? row[b].z
                                      : row[b].w;
            if (i > m)
              x[b] -= am * y;
          }
        }
#pragma unroll
        for (int b = 0; b < Blocks; ++b)
          row[b] = next[b];
      }
    } else {
#pragma unroll
      for (int m = 0; m < Rows - 1; ++m)
#pragma unroll
        for (int b = 0; b < Blocks; ++b) {
          const float y = __shfl_sync(0xffffffffu, x[b], m, 16);
          if (i > m)
            x[b] -= a[(b * Rows + i) * AS + b * Rows + m] * y;
        }
    }
#pragma unroll
    for (int b = 0; b < Blocks; ++b)
      inverses[(b * Rows + i) * IS + column] = x[b];
    sync();
    // Every warp has read A's diagonal blocks, which nothing reads again
    // but as T's: they take the inverses.
#pragma unroll
    for (int b = 0; b < Blocks; ++b)
      a[(b * Rows + i) * AS + b * Rows + column] = x[b];
  }
  float *const own = scratch + p * kPipelineScratchFloats;
  // A warp's 16 x 8 tile through its scratch, to be read back as a B
  // operand.
  auto toScratch = [&](const float(&y)[4]) {
    __syncwarp();
    own[g * 8 + pair] = y[0];
    own[g * 8 + pair + 1] = y[1];
    own[(g + 8) * 8 + pair] = y[2];
    own[(g + 8) * 8 + pair + 1] = y[3];
    __syncwarp();
  };
  auto storeTile = [&](const float(&tile)[4], int row, int col) {
    float *out = a + (row + g) * AS + col + pair;
    out[0] = tile[0];
    out[1] = tile[1];
    out[8 * AS] = tile[2];
    out[8 * AS + 1] = tile[3];
  };
  if (p < 2) {
    // T_t,t-1 = -T_tt A_t,t-1 T_t-1,t-1 for t = 1 (warp 0) and 3 (warp 1),
    // a column tile at a time; this warp alone reads A_t,t-1.
    const int t = 2 * p + 1;
    float tiles[2][4] = {};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float y[4] = {};
      tf32Product<2>(y, a + t * Rows * AS + (t - 1) * Rows, AS,
                     inverses + (t - 1) * Rows * IS + h * 8, IS, 2, 1.0f);
      toScratch(y);
      tf32Product<2>(tiles[h], inverses + t * Rows * IS, IS, own, 8, 2, -1.0f);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
      storeTile(tiles[h], t * Rows, (t - 1) * Rows + h * 8);
  }
  sync();
  {
    // Warp p: rows of block 2 + p / 4, columns 8(p % 4).. of the lower-left
    // block. Y = A_lo T_lo, then (once both row blocks' are in) -T_hi Y,
    // which reads no part of A_lo.
    const int r = 2 + p / 4, c = p % 4;
    float y[4] = {};
    tf32Product<4>(y, a + r * Rows * AS, AS, a + c * 8, AS, 4, 1.0f);
    toScratch(y);
    sync();
    const float *upperY = scratch + (p % 4) * kPipelineScratchFloats;
    float tile[4] = {};
    tf32Product<2>(tile, a + r * Rows * AS + 2 * Rows, AS, upperY, 8, 2, -1.0f);
    if (r == 3)
      tf32Product<2>(tile, a + r * Rows * AS + 3 * Rows, AS, own, 8, 2, -1.0f);
    storeTile(tile, r * Rows, c * 8);
  }
  sync();
}

/// Prepares a buffer whose rows hold a chunk's prologue operands, by a
/// group of kPipelineGroupWarps warps (warp p of them, thread `thread`),
/// `prepared()` their barrier: cumulative log-gates; the masked
/// intra-chunk matrices P (when `reads`) and, with an erase, A,
/// T = (I + A)^-1 by blocks, U' = T U (zero unless `values`) and
/// W = T (E (.) Gamma); the queries and keys rescaled to Q (.) Gamma scale
/// and K (.) Gamma_C / Gamma. Under a key-vector gate, `midpoint` is what
/// prepareHalf returned.
template <typename Layer, typename Layout, typename Sync>
LINAC_DEVICE void prepareBuffer(const typename Layout::Buffer &buffer, int p,
                                int thread, float scale, bool reads,
                                bool values, Sync prepared,
                                bool midpoint = false) {
  constexpr int C = Layout::C, K = Layer::K, V = Layer::V;
  constexpr int KS = Layout::KS, VS = Layout::VS, AS = Layout::AS,
                IS = Layout::IS;
  constexpr int GroupWarps = kPipelineGroupWarps;
  constexpr int ChunkSteps = C / 16;
  constexpr Gate G = Layer::kKeyGate;
  // 2. Cumulative log-gates, a warp: two tokens a lane, then across lanes.
  if constexpr (G == Gate::Scalar) {
    if (p == 0) {
      const float total = cumulativeLogGates(buffer.lambda(), buffer.lambda());
      if (laneId() == 0)
        *buffer.logDecay() = total;
    }
    prepared();
  } else if constexpr (G == Gate::Vector) {
    // prepareHalf has run: every warp's rows and the halves' ends are in.
    prepared();
  } else if (thread == 0) {
    *buffer.logDecay() = 0.0f;
  }
  auto lambda = [&](int i) {
    return G == Gate::Scalar ? buffer.lambda()[i] : 0.0f;
  };

  // 3. P and, with an erase, A.
  if constexpr (G == Gate::Vector)
    keyVectorProducts<Layer, Layout>(buffer, p, thread, scale, reads, midpoint,
                                     prepared);
  else
    blockProducts<Layer, Layout>(buffer, p, scale, reads, lambda);
  prepared();

  // Without an erase A is zero, T the identity, U' = U and W nothing.
  if constexpr (Layer::kErase) {
    // 4. T = (I + A)^-1 in place of A.
    invertUnitLower<AS, IS, false>(Layout::a(), Layout::inverses(),
                                   Layout::scratch(), p, prepared);

    // 5. U' = T U, then W = T (E (.) Gamma): warp p takes rows 16(p % 4)..
    // and half p / 4 of the columns into registers, and once every warp
    // has read U (then E) the products replace them.
    const int rowBase = p % 4 * 16, half = p / 4;
    auto tRow = [&](bool gated) {
      return [&, gated](int r, int j) {
        const float *row = Layout::a() + (rowBase + r) * AS + j;
        float lo = row[0], hi = row[1];
        if (gated && G == Gate::Scalar) {
          lo *= gateFactor(lambda(j));
          hi *= gateFactor(lambda(j + 1));
        }
        return packPair(lo, hi);
      };
    };
    auto solved = [&](auto tiles, __nv_bfloat16 *m, int stride, bool gated,
                      bool zeros) {
      constexpr int Tiles = decltype(tiles)::value;
      const int first = half * Tiles * 8;
      float acc[Tiles][4];
      zero(acc);
      if (!zeros)
        warpProduct<Tiles, ChunkSteps>(acc, tRow(gated),
                                       SharedColumns{m, stride, first});
      prepared();
      for (int n = 0; n < Tiles; ++n)
        for (int r = 0; r < 4; r += 2)
          *reinterpret_cast<uint32_t *>(m + (rowBase + accRow(r)) * stride +
                                        first + n * 8 + accCol(r)) =
              packPair(acc[n][r], acc[n][r + 1]);
    };
    solved(std::integral_constant<int, V / 16>{}, buffer.u(), VS, false,
           !values);
    solved(std::integral_constant<int, K / 16>{}, buffer.w(), KS, true, false);
  }
  if constexpr (G != Gate::Vector) {
    // A warp's rows, a lane's channel pairs of each, the row's factors
    // taken once.
    const float last = lambda(C - 1);
    for (int i = p; i < C; i += GroupWarps) {
      const float queryFactor =
                      gateFactor(queryLambda<Layer>(lambda, i)) * scale,
                  keyFactor = gateFactor(last - lambda(i));
      for (int d = 2 * laneId(); d < K; d += 64) {
        auto rescale = [&](__nv_bfloat16 *m, float factor) {
          uint32_t *at = reinterpret_cast<uint32_t *>(m + i * KS + d);
          *at = scalePair(*at, factor, factor);
        };
        rescale(buffer.q(), queryFactor);
        if (G == Gate::Scalar)
          rescale(buffer.k(), keyFactor);
      }
    }
  }
  prepared();
}

/// One chunk through a state warp's columns of S^T, from a prepared
/// buffer: Delta^T = U'^T - S^T W^T (U' taken as zero unless `values`; U^T
/// without an erase);
/// with `reads`, O^T = S^T Q^T + Delta^T P^T into the reads' memory; then
/// S^T <- Gamma_C S^T + Delta^T K'. The state and Delta stay in the warp's
/// registers as A operands.
template <typename Layer, typename Layout>
LINAC_DEVICE void advanceState(StateTiles<Layer> &st,
                               const typename Layout::Buffer &buffer,
                               int column, bool reads, bool values) {
  constexpr int C = Layout::C, K = Layer::K;
  constexpr int KS = Layout::KS, VS = Layout::VS, PS = Layout::PS,
                OS = Layout::OS;
  constexpr int KeyTiles = K / 8, KeySteps = K / 16, ChunkTiles = C / 8,
                ChunkSteps = C / 16;
  // acc += S^T m^T for the Tiles tokens of m (rows of keys) from `first`:
  // the state's bf16 A fragments of each k-step (keys 16s..16s+15) made
  // from its registers.
  auto fromState = [&](auto &acc, const __nv_bfloat16 *m, int first) {
    constexpr int Tiles = std::extent_v<std::remove_reference_t<decltype(acc)>>;
#pragma unroll
    for (int ks = 0; ks < KeySteps; ++ks) {
      uint32_t a[4];
      accumulatorFragment(a, st, ks);
#pragma unroll
      for (int n = 0; n < Tiles; ++n) {
        uint32_t b[2];
        fragmentB(b, SharedRows{m, KS, first}, ks * 16, n * 8);
        mma(acc[n], a, b);
      }
    }
  };
  // Delta^T = U'^T - S^T W^T, 16 value columns by the chunk's tokens;
  // without an erase U^T, as the buffer has it.
  uint32_t deltaFragments[ChunkSteps][4];
  if constexpr (Layer::kErase) {
    float delta[ChunkTiles][4];
    zero(delta);
    fromState(delta, buffer.w(), 0);
#pragma unroll
    for (int ts = 0; ts < ChunkSteps; ++ts) {
      uint32_t u[4] = {0, 0, 0, 0};
      if (values)
        fragmentA(u, SharedColumns{buffer.u(), VS, column}, ts * 16);
      // Fragment register r holds tile 2ts + r / 2, rows +8 when odd.
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        __nv_bfloat162 pair;
        memcpy(&pair, &u[r], sizeof pair);
        const float2 x = __bfloat1622float2(pair);
        const int n = 2 * ts + r / 2, at = r % 2 * 2;
        delta[n][at] = x.x - delta[n][at];
        delta[n][at + 1] = x.y - delta[n][at + 1];
      }
    }
#pragma unroll
    for (int ts = 0; ts < ChunkSteps; ++ts)
      accumulatorFragment(deltaFragments[ts], delta, ts);
  } else {
#pragma unroll
    for (int ts = 0; ts < ChunkSteps; ++ts) {
      for (uint32_t &x : deltaFragments[ts])
        x = 0;
      if (values)
        fragmentA(deltaFragments[ts], SharedColumns{buffer.u(), VS, column},
                  ts * 16);
    }
  }
  // The state's bf16 fragments are made again for each product: kept from
  // the first, they would take 32 registers more.
  opaque(st);

  if (reads) {
    // O^T = S^T Q^T + Delta^T P^T, by halves of the chunk's tokens
    // (registers: the state, Delta and a half).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      constexpr int HalfTiles = ChunkTiles / 2;
      float out[HalfTiles][4];
      zero(out);
      fromState(out, buffer.q(), h * C / 2);
      warpProduct<HalfTiles, ChunkSteps>(
          out, RegisterA<ChunkSteps>{deltaFragments},
          SharedRows{buffer.p(), PS, h * C / 2});
      opaque(st);
#pragma unroll
      for (int n = 0; n < HalfTiles; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          Layout::o()[(h * C / 2 + n * 8 + accCol(r)) * OS + column +
                      accRow(r)] = out[n][r];
    }
  }
  // S^T <- Gamma_C S^T + Delta^T K', Gamma_C a factor a key with a
  // key-vector gate.
  if constexpr (Layer::kKeyGate == Gate::Vector) {
#pragma unroll
    for (int n = 0; n < KeyTiles; ++n) {
      const float2 logDecay = *reinterpret_cast<const float2 *>(
          buffer.logDecay() + n * 8 + accCol(0));
      const float low = gateFactor(logDecay.x), high = gateFactor(logDecay.y);
#pragma unroll
      for (int r = 0; r < 4; ++r)
        st[n][r] *= r % 2 ? high : low;
    }
  } else {
    const float decay = gateFactor(*buffer.logDecay());
#pragma unroll
    for (int n = 0; n < KeyTiles; ++n)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        st[n][r] *= decay;
  }
  warpProduct<KeyTiles, ChunkSteps>(st, RegisterA<ChunkSteps>{deltaFragments},
                                    SharedColumns{buffer.k(), KS, 0});
}

/// A token whose staged epilogue inputs are read from their rows in
/// shared memory (EpilogueRows), the rest from global memory.
template <typename Layer, typename T> struct EpilogueToken : Token<Layer, T> {
  const char *rows;
  int row;
  LINAC_DEVICE const T *input(int i) const {
    using Rows = EpilogueRows<Layer>;
    if (Rows::holds(i))
      return reinterpret_cast<const T *>(rows + Rows::offset(i) +
                                         row * Rows::rowBytes(i));
    return Token<Layer, T>::input(i);
  }
};

/// The generated epilogue of chunk c's reads (in the reads' memory), warp
/// `warp` of `warps` a token; a state block that stages the epilogue's
/// inputs has them in its rows.
template <typename Layer, typename T, typename Layout>
LINAC_DEVICE void chunkEpilogue(const linac_cuda_forward_args &args,
                                const ChunkWork &work, int64_t c, int length,
                                int warp, int warps) {
  T *output = static_cast<T *>(args.output);
  for (int i = warp; i < length; i += warps) {
    const int64_t token = work.begin + c * Layout::C + i;
    const Token<Layer, T> global{args, token, work.head};
    const WarpVec<Layer::V> read =
        WarpVec<Layer::V>::load(Layout::o() + i * Layout::OS);
    T *out = output + (token * args.num_heads + work.head) * Layer::V;
    if constexpr (Layout::kStagedEpilogue)
      Layer::Chunk::epilogue(
          EpilogueToken<Layer, T>{global, Layout::epilogueRows(), i}, read,
          out);
    else
      Layer::Chunk::epilogue(global, read, out);
  }
}

template <typename Layer, typename T>
LINAC_DEVICE void pipelineChunks(const linac_cuda_forward_args &args,
                                 const ChunkWork &work) {
  using Layout = PipelineLayout<Layer>;
  constexpr int C = Layout::C, K = Layer::K, V = Layer::V;
  constexpr int GroupWarps = kPipelineGroupWarps,
                GroupThreads = 32 * GroupWarps;
  constexpr Gate G = Layer::kKeyGate;
  static_assert(Layer::kErase && G != Gate::Vector && !Layer::kNormalizer &&
                    !Layer::kValueDecay && !Layer::kReadBefore,
                "the pipelined kernel takes an erase under no gate or a "
                "scalar one");
  static_assert(K % 16 == 0 && V % 16 == 0 && K <= 128 &&
                    V <= 16 * GroupWarps && C == 64,
                "a state warp holds 16 value columns of every key");

  const int warpIndex = threadIdx.x / 32;
  const int head = work.head;
  const int64_t begin = work.begin, end = work.end;
  const int64_t chunks = (end - begin + C - 1) / C;
  const bool reads = work.reads;
  auto chunkLength = [&](int64_t c) {
    const int64_t left = end - begin - c * C;
    return left < C ? int(left) : C;
  };

  if (warpIndex < GroupWarps) {
    //===------------------------------------------------------------===//
    // State warps.
    //===------------------------------------------------------------===//
    setRegisters<kStateRegisters, true>();
    const int w = warpIndex, column = 16 * w;
    const bool live = column < V;
    StateTiles<Layer> st;
    loadStateTiles<Layer>(st, work, column, live);
    // The generated prologue of chunk c into its buffer, a warp a token.
    // Each warp's next token's inputs are loaded a token ahead, across
    // chunks.
    const HeadInputs<Layer, T> inputs(args, begin, head);
    TokenInputs<Layer, T> next;
    if (w < end - begin)
      next.load(inputs.at(w));
    auto prologue = [&](int64_t c) {
      const typename Layout::Buffer buffer{int(c % 2)};
      const int L = chunkLength(c);
      const int64_t start = begin + c * C;
      if (c + 1 < chunks)
        prefetchInputs<Layer, T>(args, start + C, chunkLength(c + 1), head,
                                 threadIdx.x, GroupThreads);
      for (int i = w; i < C; i += GroupWarps) {
        ChunkOperands<K, V, G> ops = noOperands<Layer>();
        if (i < L) {
          const TokenInputs<Layer, T> current = next;
          if (start + i + GroupWarps < end)
            next.load(inputs.at(int(start - begin) + i + GroupWarps));
          Layer::Chunk::prologue(
              RegisterToken<Layer, T>{{args, start + i, head}, current}, ops);
          if (work.identityFrom >= 0)
            ops.u.u = WarpVec<V>::splat(0.0f);
        }
        storeOperands<Layer, Layout>(buffer, i, ops);
      }
      barrierArrive(kTokensIn + c % 2, kChunkThreads);
    };
    for (int64_t c = 0; c < chunks && c < 2; ++c)
      prologue(c);
    for (int64_t c = 0; c < chunks; ++c) {
      const typename Layout::Buffer buffer{int(c % 2)};
      barrierWait(kBufferFull + c % 2, kChunkThreads);
      if (live)
        advanceState<Layer, Layout>(st, buffer, column, reads, true);
      // Every warp is done with this buffer and has its columns of the
      // reads in: the generated epilogue, a warp a token, then chunk c +
      // 2's prologue into the buffer; the reads' memory is free again once
      // every warp is past both.
      barrierWait(kStateWarps, GroupThreads);
      if (reads)
        chunkEpilogue<Layer, T, Layout>(args, work, c, chunkLength(c), w,
                                        GroupWarps);
      if (c + 2 < chunks)
        prologue(c + 2);
      if (reads)
        barrierWait(kStateWarps, GroupThreads);
    }
    storeStateTiles<Layer>(st, work, column, live);
    return;
  }

  //===--------------------------------------------------------------===//
  // Preparing warps.
  //===--------------------------------------------------------------===//
  setRegisters<kPreparingRegisters, false>();
  const int p = warpIndex - GroupWarps;
  const int thread = threadIdx.x - GroupThreads;
  const float scale = readScale<Layer>(args);
  for (int64_t c = 0; c < chunks; ++c) {
    const typename Layout::Buffer buffer{int(c % 2)};
    barrierWait(kTokensIn + c % 2, kChunkThreads);
    prepareBuffer<Layer, Layout>(
        buffer, p, thread, scale, reads, work.identityFrom < 0,
        [&] { barrierWait(kPreparing, GroupThreads); });
    barrierArrive(kBufferFull + c % 2, kChunkThreads);
  }
}

} // namespace linac::cuda

#endif // LINAC_CUDA_PIPELINE_H
