//===- decode.h - decode steps on a state pool ------------------*- C++ -*-===//
//
// A few new tokens per sequence, so the cost is reading and writing each
// head's state, and the kernel must keep memory busy. Each block of
// Layer::kDecodeWarps warps (the plan's decode_warps; two blocks per
// multiprocessor with 8) runs (head, sequence) items one after another;
// while it computes one, the next ones' states are already on their way
// into shared memory (cp.async, a ring of Layer::kDecodeStages states) and
// their tokens' inputs into L2.
// Warp w holds key rows [wR, wR + R) of the state, lane l value columns
// 4l..4l+3 (and 128 further on for wider values), so each row is one
// 16-byte access per lane. Key vectors are held by every lane of a warp as
// its rows (RowSlice), value vectors whole by every warp (LaneVec), and
// products over the key axis reduce across warps through shared memory.
// The normaliser's column, when kept, is held by every lane of a warp for
// its rows.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CUDA_DECODE_H
#define LINAC_CUDA_DECODE_H

#include "linac/cuda/token.h"

namespace linac::cuda {

template <typename Layer> constexpr int decodeThreads() {
  return Layer::kDecodeWarps * 32;
}
/// 8 warps run two blocks per multiprocessor, so that one computes while
/// the other waits on memory; 16 warps take a multiprocessor's registers.
template <typename Layer> constexpr int decodeBlocksPerMultiprocessor() {
  return Layer::kDecodeWarps == 8 ? 2 : 1;
}

LINAC_DEVICE int warpId() { return threadIdx.x / 32; }

/// table[0][entry] + table[1][entry] + ... + table[Rows - 1][entry].
template <int Rows, int Entries>
LINAC_DEVICE float sumOverRows(const float (&table)[Rows][Entries], int entry) {
  float total = 0.0f;
#pragma unroll
  for (int row = 0; row < Rows; ++row)
    total += table[row][entry];
  return total;
}

/// Sums over the block values every lane of each warp holds alike; every
/// thread of the block must call it.
template <int Warps, int Slots>
LINAC_DEVICE void sumOverWarps(float (&x)[Slots]) {
  __shared__ float partial[Warps][Slots];
  __syncthreads();
  if (laneId() == 0)
#pragma unroll
    for (int c = 0; c < Slots; ++c)
      partial[warpId()][c] = x[c];
  __syncthreads();
#pragma unroll
  for (int c = 0; c < Slots; ++c)
    x[c] = sumOverRows(partial, c);
}

/// Column sums over the block: x[c] is this warp's partial sum for entry
/// c * 32 + lane; every thread of the block must call it. Groups of four
/// warps' partials are added first, so each thread reads fewer of them.
template <int Warps, int Slots>
LINAC_DEVICE void sumColumnsOverWarps(float (&x)[Slots]) {
  static_assert(Warps % 4 == 0, "warps add up in groups of four");
  constexpr int kEntries = Slots * 32, kGroups = Warps / 4;
  __shared__ float partial[Warps][kEntries];
  __shared__ float grouped[kGroups][kEntries];
  __syncthreads();
#pragma unroll
  for (int c = 0; c < Slots; ++c)
    partial[warpId()][c * 32 + laneId()] = x[c];
  __syncthreads();
  for (int e = threadIdx.x; e < kGroups * kEntries; e += blockDim.x) {
    int group = e / kEntries, entry = e % kEntries;
    grouped[group][entry] =
        (partial[4 * group][entry] + partial[4 * group + 1][entry]) +
        (partial[4 * group + 2][entry] + partial[4 * group + 3][entry]);
  }
  __syncthreads();
#pragma unroll
  for (int c = 0; c < Slots; ++c)
    x[c] = sumOverRows(grouped, c * 32 + laneId());
}

/// The key rows of this warp's share of the state, R = ceil(N / Warps) of
/// them.
template <int N, int Warps>
struct RowSlice : Elements<RowSlice<N, Warps>, (N + Warps - 1) / Warps> {
  static constexpr int kRows = (N + Warps - 1) / Warps;
  LINAC_DEVICE static int index(int r) { return warpId() * kRows + r; }
  template <typename T> LINAC_DEVICE static RowSlice load(const T *p) {
    return loadSlots<RowSlice, N>(p);
  }
  /// Every thread of the block must call it.
  LINAC_DEVICE float sum() const {
    float s[1] = {sumOfSlots<N>(*this)};
    sumOverWarps<Warps>(s);
    return s[0];
  }
};

/// A value vector every warp holds whole: lane l has elements 4l..4l+3,
/// then 128 further on for each next group of four slots.
template <int N> struct LaneVec : Elements<LaneVec<N>, (N + 127) / 128 * 4> {
  static constexpr int kSlots = (N + 127) / 128 * 4;
  LINAC_DEVICE static int index(int slot) {
    return slot / 4 * 128 + laneId() * 4 + slot % 4;
  }
  template <typename T> LINAC_DEVICE static LaneVec load(const T *p) {
    return loadSlots<LaneVec, N>(p);
  }
  /// Warp 0 writes the vector for the block.
  template <typename T> LINAC_DEVICE void store(T *p) const {
    if (warpId() == 0)
#pragma unroll
      for (int i = 0; i < kSlots; ++i)
        if (index(i) < N)
          p[index(i)] = fromFloat<T>(this->x[i]);
  }
  LINAC_DEVICE float sum() const { return warpSum(sumOfSlots<N>(*this)); }
};

/// This thread's elements of a per-token K x V matrix, row-major in memory:
/// its warp's rows, its lane's columns.
template <int K, int V, int Warps>
struct MatrixTile : Elements<MatrixTile<K, V, Warps>,
                             RowSlice<K, Warps>::kRows * LaneVec<V>::kSlots> {
  static constexpr int kRows = RowSlice<K, Warps>::kRows,
                       kSlots = LaneVec<V>::kSlots;
  template <typename T> LINAC_DEVICE static MatrixTile load(const T *p) {
    MatrixTile m;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kSlots; ++c) {
        int i = RowSlice<K, Warps>::index(r), j = LaneVec<V>::index(c);
        m.x[r * kSlots + c] = i < K && j < V ? toFloat(p[i * V + j]) : 0.0f;
      }
    return m;
  }
};

template <int N, int Warps>
struct IsVector<RowSlice<N, Warps>> : std::true_type {};
template <int N> struct IsVector<LaneVec<N>> : std::true_type {};
template <int K, int V, int Warps>
struct IsVector<MatrixTile<K, V, Warps>> : std::true_type {};

/// Copies 4 or 16 bytes to shared memory without holding a register. The
/// 16-byte form bypasses L1, whose few kilobytes beside the staging area
/// would otherwise bound the bytes in flight.
template <int Bytes>
LINAC_DEVICE void copyAsync(void *shared, const void *global) {
  if constexpr (Bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                     unsigned(__cvta_generic_to_shared(shared))),
                 "l"(global));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(
                     unsigned(__cvta_generic_to_shared(shared))),
                 "l"(global), "n"(Bytes));
}
LINAC_DEVICE void commitCopies() { asm volatile("cp.async.commit_group;\n"); }
/// Waits until at most `Pending` of this thread's latest copy groups are
/// still on their way.
template <int Pending> LINAC_DEVICE void waitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

/// One thread's share of a head's state.
template <int K, int V, bool Normalized, int Warps> struct DecodeState {
  using Keys = RowSlice<K, Warps>;
  using GateTile = MatrixTile<K, V, Warps>;
  static constexpr int kRows = Keys::kRows, kSlots = LaneVec<V>::kSlots;
  /// Columns of a state row in memory; the normaliser, when kept, is last.
  static constexpr int kColumns = V + (Normalized ? 1 : 0);
  /// Whether each lane's four columns are one aligned 16-byte access.
  static constexpr bool kQuads = kColumns % 4 == 0;
  /// Floats one thread stages: its state elements, then its normaliser rows.
  static constexpr int kStaged = kRows * kSlots + (Normalized ? kRows : 0);

  float s[kRows][kSlots];
  float norm[Normalized ? kRows : 1];

  LINAC_DEVICE static int row(int r) { return Keys::index(r); }
  LINAC_DEVICE static int column(int c) { return LaneVec<V>::index(c); }
  LINAC_DEVICE static bool live(int r, int c) {
    return row(r) < K && column(c) < V;
  }
  /// This thread's float e of the staging area, interleaved over threads
  /// so that each access of a warp covers consecutive words.
  LINAC_DEVICE static float *staged(float *area, int e) {
    return area + (e / 4 * blockDim.x + threadIdx.x) * 4 + e % 4;
  }

  /// Floats of one staged state for the whole block.
  LINAC_HOST_DEVICE static constexpr int stageFloats(int threads) {
    return (kStaged + 3) / 4 * 4 * threads;
  }
  /// Calls f(r, c, offset) for each of this thread's live rows r and runs
  /// of four value columns from slot c, `offset` being the run's place in
  /// the state's memory.
  template <typename F> LINAC_DEVICE static void forEachQuad(F f) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kSlots; c += 4)
        if (live(r, c))
          f(r, c, row(r) * kColumns + column(c));
  }
  /// Starts copying the state at `p` into this thread's staging area.
  LINAC_DEVICE static void prefetch(const float *p, float *area) {
    forEachQuad([&](int r, int c, int offset) {
      float *to = staged(area, r * kSlots + c);
      if constexpr (kQuads) {
        copyAsync<16>(to, p + offset);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (column(c + i) < V)
            copyAsync<4>(to + i, p + offset + i);
      }
    });
    if constexpr (Normalized)
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (row(r) < K)
          copyAsync<4>(staged(area, kRows * kSlots + r), p + row(r) * kColumns + V);
  }
  /// Fills the registers with read(e, offset): this thread's staged float
  /// e, at `offset` in the state's memory.
  template <typename Read> LINAC_DEVICE void fill(Read read) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kSlots; ++c)
        s[r][c] = live(r, c) ? read(r * kSlots + c, row(r) * kColumns + column(c))
                             : 0.0f;
#pragma unroll
    for (int r = 0; r < (Normalized ? kRows : 0); ++r)
      norm[r] = row(r) < K ? read(kRows * kSlots + r, row(r) * kColumns + V)
                           : 0.0f;
  }
  /// Takes the state this thread staged, once its copies have landed.
  LINAC_DEVICE void loadStaged(float *area) {
    fill([&](int e, int) { return *staged(area, e); });
  }
  /// Reads the state at `p` straight into registers.
  LINAC_DEVICE void load(const float *p) {
    fill([&](int, int offset) { return p[offset]; });
  }
  LINAC_DEVICE void store(float *p) const {
    forEachQuad([&](int r, int c, int offset) {
      if constexpr (kQuads) {
        *reinterpret_cast<float4 *>(p + offset) =
            make_float4(s[r][c], s[r][c + 1], s[r][c + 2], s[r][c + 3]);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (column(c + i) < V)
            p[offset + i] = s[r][c + i];
      }
    });
    if constexpr (Normalized)
      if (laneId() == 0)
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          if (row(r) < K)
            p[row(r) * kColumns + V] = norm[r];
  }

  LINAC_DEVICE void decay(const Keys &gk, const LaneVec<V> &gv) {
    float columnFactor[kSlots];
#pragma unroll
    for (int c = 0; c < kSlots; ++c)
      columnFactor[c] = expf(gv.x[c]);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float rowFactor = expf(gk.x[r]);
#pragma unroll
      for (int c = 0; c < kSlots; ++c)
        s[r][c] *= rowFactor * columnFactor[c];
      if constexpr (Normalized)
        norm[r] *= rowFactor;
    }
  }
  LINAC_DEVICE void matrixGate(const GateTile &g) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kSlots; ++c)
        s[r][c] *= expf(g.x[r * kSlots + c]);
  }
  /// x^T S over the block: a value column per slot, then the normaliser.
  static constexpr int kProjections = kSlots + (Normalized ? 1 : 0);
  LINAC_DEVICE void project(const Keys &x,
                            float (&out)[kProjections]) const {
#pragma unroll
    for (int c = 0; c < kSlots; ++c) {
      float sum = 0.0f;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        sum += x.x[r] * s[r][c];
      out[c] = sum;
    }
    if constexpr (Normalized) {
      // Every lane holds the same normaliser rows; lane 0's sum stands for
      // the warp, the other lanes add zero.
      float sum = 0.0f;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        sum += x.x[r] * norm[r];
      out[kSlots] = laneId() == 0 ? sum : 0.0f;
    }
    sumColumnsOverWarps<Warps>(out);
    if constexpr (Normalized)
      out[kSlots] = warpSum(out[kSlots]);
  }
  /// S <- S - k (e^T S); every thread of the block must call it.
  LINAC_DEVICE void erase(const Keys &k, const Keys &e) {
    float projection[kProjections];
    project(e, projection);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int c = 0; c < kSlots; ++c)
        s[r][c] -= k.x[r] * projection[c];
      if constexpr (Normalized)
        norm[r] -= k.x[r] * projection[kSlots];
    }
  }
  /// S <- S + k u^T; the normaliser's column takes `normalizerWeight`.
  LINAC_DEVICE void write(const Keys &k, const LaneVec<V> &u,
                          float normalizerWeight) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int c = 0; c < kSlots; ++c)
        s[r][c] += k.x[r] * u.x[c];
      if constexpr (Normalized)
        norm[r] += k.x[r] * normalizerWeight;
    }
  }
  /// S^T q, whole in every warp; every thread of the block must call it.
  LINAC_DEVICE LaneVec<V> read(const Keys &q, float scale) const {
    float raw[kProjections];
    project(q, raw);
    float divisor = 1.0f;
    if constexpr (Normalized)
      divisor = fmaxf(fabsf(raw[kSlots] * scale), 1.0f);
    LaneVec<V> out;
#pragma unroll
    for (int c = 0; c < kSlots; ++c)
      out.x[c] = column(c) < V ? raw[c] * scale / divisor : 0.0f;
    return out;
  }
};

/// Dynamic shared memory of the decode kernel: the ring of staged states.
template <typename Layer> constexpr size_t decodeSharedBytes() {
  using State = DecodeState<Layer::K, Layer::V, Layer::kNormalizer,
                            Layer::kDecodeWarps>;
  return size_t(Layer::kDecodeStages) *
         State::stageFloats(decodeThreads<Layer>()) * sizeof(float);
}

/// Decode steps: each of the grid's blocks takes the (head, sequence) items
/// blockIdx.x, blockIdx.x + gridDim.x, ..., each sequence's few new tokens
/// from and back to its pool slot. Sequences whose slot is outside the pool
/// (-1) are skipped.
template <typename Layer, typename T>
LINAC_DEVICE void decodeKernel(const linac_cuda_decode_args &args) {
  using State = DecodeState<Layer::K, Layer::V, Layer::kNormalizer,
                            Layer::kDecodeWarps>;
  constexpr int kDecodeStages = Layer::kDecodeStages;
  extern __shared__ __align__(16) float stagingArea[];
  const int64_t items = args.num_seqs * args.num_heads;
  const int64_t headSize = int64_t(Layer::K) * stateColumns<Layer>();
  auto slotOf = [&](int64_t item) {
    int64_t slot = item < items ? args.state_indices[item / args.num_heads] : -1;
    return slot >= 0 && slot < args.pool_slots ? slot : int64_t(-1);
  };
  auto stateOf = [&](int64_t item, int64_t slot) {
    return args.state_pool + (slot * args.num_heads + item % args.num_heads) *
                                 headSize;
  };
  // The block's n-th item and its stage in the ring.
  auto itemAt = [&](int64_t n) { return blockIdx.x + n * int64_t(gridDim.x); };
  auto stageAt = [&](int64_t n) {
    return stagingArea + n % (kDecodeStages > 0 ? kDecodeStages : 1) *
                             State::stageFloats(blockDim.x);
  };
  // Starts item n's state towards its stage in shared memory and its
  // tokens' inputs towards L2; returns its slot. Every call commits one
  // group of copies, empty or not, so that waiting for all but the latest
  // kDecodeStages - 1 groups means the oldest item's state has landed.
  auto prefetch = [&](int64_t n) {
    int64_t item = itemAt(n), slot = slotOf(item);
    if (slot >= 0) {
      State::prefetch(stateOf(item, slot), stageAt(n));
      prefetchInputs<Layer, T>(args, item / args.num_heads * args.tokens,
                               int(args.tokens), int(item % args.num_heads));
    }
    commitCopies();
    return slot;
  };
  const float scale = readScale<Layer>(args);
  T *output = static_cast<T *>(args.output);
  constexpr int kRing = kDecodeStages > 0 ? kDecodeStages : 1;

  // Slots of the items in the ring, oldest first.
  int64_t slots[kRing];
  if constexpr (kDecodeStages > 0)
#pragma unroll
    for (int a = 0; a < kDecodeStages; ++a)
      slots[a] = prefetch(a);
  State state;
  for (int64_t n = 0; itemAt(n) < items; ++n) {
    const int64_t item = itemAt(n);
    int64_t slot;
    if constexpr (kDecodeStages > 0) {
      waitCopies<kRing - 1>();
      slot = slots[0];
#pragma unroll
      for (int a = 0; a + 1 < kRing; ++a)
        slots[a] = slots[a + 1];
      if (slot >= 0)
        state.loadStaged(stageAt(n));
      // This thread alone reads back what it staged, and has, so item
      // n + kDecodeStages may take the stage at once.
      slots[kRing - 1] = prefetch(n + kDecodeStages);
    } else {
      slot = slotOf(item);
      if (slot >= 0)
        state.load(stateOf(item, slot));
    }
    if (slot < 0)
      continue;
    int64_t seq = item / args.num_heads;
    int head = int(item % args.num_heads);
    for (int64_t t = seq * args.tokens; t < (seq + 1) * args.tokens; ++t)
      Layer::Decode::step(Token<Layer, T, linac_cuda_decode_args>{args, t, head},
                          state, scale,
                          output + (t * args.num_heads + head) * Layer::V);
    state.store(stateOf(item, slot));
  }
}

} // namespace linac::cuda

#endif // LINAC_CUDA_DECODE_H
