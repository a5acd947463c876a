//===- decode.h - decode steps on a state pool ------------------*- C++ -*-===//
//
// A few new tokens per sequence, so the cost is reading and writing each
// head's state, and the kernel must keep memory busy. A block of 16 warps
// runs on each multiprocessor, in groups of Layer::kDecodeWarps warps; a
// group takes one (head, sequence) item at a time and holds its state in
// registers: warp w of a group owns a strip of value columns and every key
// row of it, so the products over the key axis (erase, read) reduce across
// the lanes of a warp, never across warps, and a step has no barrier. The
// states move through a ring of Layer::kDecodeStages stages in shared memory
// shared by the groups, both ways by the bulk copy engine: while the groups
// compute, the next items' states are on their way in and the last ones'
// on their way out.
//
// DecodeSplit says who holds what: a thread holds kRows consecutive key
// rows of kSlots of its warp's columns. Key vectors are held as the
// thread's rows (KeyRows), value vectors as its columns (ValueColumns),
// the normaliser's column as its rows.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CUDA_DECODE_H
#define LINAC_CUDA_DECODE_H

#include "linac/cuda/token.h"

namespace linac::cuda {

/// Warps of a decode block, one block per multiprocessor: with 8 warps an
/// item, two groups compute at once, so one computes while the other waits.
constexpr int kDecodeBlockWarps = 16;
template <typename Layer> constexpr int decodeThreads() {
  return kDecodeBlockWarps * 32;
}
template <typename Layer> constexpr int decodeBlocksPerMultiprocessor() {
  return 1;
}

LINAC_DEVICE int warpId() { return threadIdx.x / 32; }

/// How the threads of a group of `Warps` warps split a K x V state.
template <int K, int V, int Warps> struct DecodeSplit {
  static constexpr int kWarps = Warps;
  static constexpr int kGroups = kDecodeBlockWarps / Warps;
  static_assert(kDecodeBlockWarps % Warps == 0, "groups fill the block");
  static_assert(kGroups < 16, "a named barrier a group");
  /// Two lanes side by side take a strip's runs of eight columns, four
  /// each, so that a warp's access to a row is 32-byte sectors whole, and the
  /// lane pairs split the key rows: a thread holds as many rows as
  /// columns at K = V, which keeps the key and value vectors it holds
  /// short.
  static constexpr int kColumnLanes = (V + Warps - 1) / Warps > 4 ? 2 : 1;
  static constexpr int kRowLanes = 32 / kColumnLanes;
  static constexpr int kRows = (K + kRowLanes - 1) / kRowLanes;
  /// Value columns of a warp, and of a thread.
  static constexpr int kStripColumns =
      ((V + Warps - 1) / Warps + 4 * kColumnLanes - 1) / (4 * kColumnLanes) *
      (4 * kColumnLanes);
  static constexpr int kSlots = kStripColumns / kColumnLanes;

  LINAC_DEVICE static int group() { return warpId() / Warps; }
  /// This warp within its group.
  LINAC_DEVICE static int warp() { return warpId() % Warps; }
  /// Waits for every thread of this group.
  LINAC_DEVICE static void sync() {
    asm volatile("bar.sync %0, %1;\n" ::"r"(1 + group()), "r"(Warps * 32)
                 : "memory");
  }
  LINAC_DEVICE static int rowLane() { return laneId() / kColumnLanes; }
  LINAC_DEVICE static int columnLane() { return laneId() % kColumnLanes; }
  /// The key row of this thread's row r: each row lane takes a block of
  /// kRows consecutive rows.
  LINAC_DEVICE static int row(int r) { return rowLane() * kRows + r; }
  LINAC_DEVICE static int column(int slot) {
    return warp() * kStripColumns + slot / 4 * (4 * kColumnLanes) +
           columnLane() * 4 + slot % 4;
  }
  /// Sums x over the lanes that hold the other rows of the same columns.
  LINAC_DEVICE static float sumOverRowLanes(float x) {
#pragma unroll
    for (int offset = kColumnLanes; offset < 32; offset *= 2)
      x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
  }
  /// Sums x over the lanes that hold the other columns of the same rows.
  LINAC_DEVICE static float sumOverColumnLanes(float x) {
#pragma unroll
    for (int offset = 1; offset < kColumnLanes; offset *= 2)
      x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
  }
};

/// Sums over a group a value every lane of each of its warps holds alike;
/// every thread of the group must call it.
template <typename Split> LINAC_DEVICE float sumOverWarps(float x) {
  if constexpr (Split::kWarps == 1) {
    return x;
  } else {
    __shared__ float partial[Split::kGroups][Split::kWarps];
    Split::sync();
    if (laneId() == 0)
      partial[Split::group()][Split::warp()] = x;
    Split::sync();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < Split::kWarps; ++w)
      total += partial[Split::group()][w];
    return total;
  }
}

/// A key vector of N: this thread's rows of it.
template <int N, typename Split>
struct KeyRows : Elements<KeyRows<N, Split>, (N + Split::kRowLanes - 1) /
                                                 Split::kRowLanes> {
  static constexpr int kRows = (N + Split::kRowLanes - 1) / Split::kRowLanes;
  LINAC_DEVICE static int index(int r) { return Split::row(r); }
  template <typename T> LINAC_DEVICE static KeyRows load(const T *p) {
    return loadSlots<KeyRows, N>(p);
  }
  LINAC_DEVICE float sum() const {
    return Split::sumOverRowLanes(sumOfSlots<N>(*this));
  }
};

/// A value vector of N: this thread's columns of it.
template <int N, typename Split>
struct ValueColumns : Elements<ValueColumns<N, Split>, Split::kSlots> {
  LINAC_DEVICE static int index(int slot) { return Split::column(slot); }
  template <typename T> LINAC_DEVICE static ValueColumns load(const T *p) {
    return loadSlots<ValueColumns, N>(p);
  }
  /// The first row lane of each warp writes the warp's columns.
  template <typename T> LINAC_DEVICE void store(T *p) const {
    if (Split::rowLane() == 0)
#pragma unroll
      for (int i = 0; i < Split::kSlots; ++i)
        if (index(i) < N)
          p[index(i)] = fromFloat<T>(this->x[i]);
  }
  /// Every thread of the group must call it.
  LINAC_DEVICE float sum() const {
    return sumOverWarps<Split>(
        Split::sumOverColumnLanes(sumOfSlots<N>(*this)));
  }
};

/// This thread's elements of a per-token K x V matrix, row-major in memory.
template <int K, int V, typename Split>
struct MatrixTile
    : Elements<MatrixTile<K, V, Split>, Split::kRows * Split::kSlots> {
  template <typename T> LINAC_DEVICE static MatrixTile load(const T *p) {
    MatrixTile m;
#pragma unroll
    for (int r = 0; r < Split::kRows; ++r)
#pragma unroll
      for (int c = 0; c < Split::kSlots; ++c) {
        int i = Split::row(r), j = Split::column(c);
        m.x[r * Split::kSlots + c] =
            i < K && j < V ? toFloat(p[i * V + j]) : 0.0f;
      }
    return m;
  }
};

template <int N, typename Split>
struct IsVector<KeyRows<N, Split>> : std::true_type {};
template <int N, typename Split>
struct IsVector<ValueColumns<N, Split>> : std::true_type {};
template <int K, int V, typename Split>
struct IsVector<MatrixTile<K, V, Split>> : std::true_type {};

LINAC_DEVICE unsigned sharedAddress(const void *p) {
  return unsigned(__cvta_generic_to_shared(p));
}
/// An mbarrier that one arrival, and the bytes it expects, complete.
LINAC_DEVICE void initBarrier(uint64_t *barrier) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(
      sharedAddress(barrier)));
}
/// Arrives on `barrier`, whose phase then completes once `bytes` more
/// have landed.
LINAC_DEVICE void arriveExpecting(uint64_t *barrier, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   sharedAddress(barrier)),
               "r"(bytes)
               : "memory");
}
/// Copies `bytes` (a multiple of 16, both ends 16-byte aligned) to shared
/// memory with the bulk copy engine, counted on `barrier`.
LINAC_DEVICE void bulkCopy(void *shared, const void *global, unsigned bytes,
                           uint64_t *barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
               "bytes [%0], [%1], %2, [%3];\n" ::"r"(sharedAddress(shared)),
               "l"(global), "r"(bytes), "r"(sharedAddress(barrier))
               : "memory");
}
/// Copies `bytes` (as bulkCopy) from shared memory back to global memory,
/// in this thread's current bulk group.
LINAC_DEVICE void bulkStore(void *global, const void *shared, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group "
               "[%0], [%1], %2;\n" ::"l"(global),
               "r"(sharedAddress(shared)), "r"(bytes)
               : "memory");
}
/// Closes this thread's bulk group and waits until its stores have read
/// their shared memory.
LINAC_DEVICE void waitBulkStoresRead() {
  asm volatile("cp.async.bulk.commit_group;\n"
               "cp.async.bulk.wait_group.read 0;\n" ::
                   : "memory");
}
/// Waits until this thread's bulk stores are done.
LINAC_DEVICE void waitBulkStores() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
/// Orders this thread's writes to shared memory before bulk copies that
/// read it.
LINAC_DEVICE void fenceSharedForBulkCopies() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/// Waits until the phase of `barrier` with this parity has completed.
LINAC_DEVICE void waitBarrier(uint64_t *barrier, unsigned parity) {
  asm volatile("{\n"
               ".reg .pred done;\n"
               "WAIT%=:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra WAIT%=;\n"
               "}\n" ::"r"(sharedAddress(barrier)),
               "r"(parity)
               : "memory");
}

/// One thread's share of a head's state.
template <int K, int V, bool Normalized, typename Split> struct DecodeState {
  using Keys = KeyRows<K, Split>;
  using Values = ValueColumns<V, Split>;
  static constexpr int kRows = Split::kRows, kSlots = Split::kSlots;
  /// Columns of a state row in memory; the normaliser, when kept, is last.
  static constexpr int kColumns = V + (Normalized ? 1 : 0);
  /// Whether each run of four columns is one aligned 16-byte access.
  static constexpr bool kQuads = kColumns % 4 == 0;
  /// Whether each row lane's block of rows is whole 16-byte runs, as the
  /// bulk copy engine moves them (a normaliser's column may leave rows
  /// that are not, in blocks that are).
  static constexpr bool kBulkBlocks =
      kRows * kColumns % 4 == 0 && K % kRows * kColumns % 4 == 0;

  float s[kRows][kSlots];
  float norm[Normalized ? kRows : 1];

  LINAC_DEVICE static int row(int r) { return Split::row(r); }
  LINAC_DEVICE static int column(int c) { return Split::column(c); }
  LINAC_DEVICE static bool live(int r, int c) {
    return row(r) < K && column(c) < V;
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
  /// A staged state keeps each row lane's block of rows 16 bytes per
  /// column lane further from the previous one than in memory, so that
  /// each quarter of a warp's 16-byte reads, eight lanes, falls on
  /// different banks.
  static constexpr int kBlockFloats = kRows * kColumns,
                       kBlockGap = 4 * Split::kColumnLanes;
  LINAC_HOST_DEVICE static constexpr int stageFloats() {
    return Split::kRowLanes * (kBlockFloats + kBlockGap);
  }
  /// Where row i of a staged state starts.
  LINAC_DEVICE static int stagedRow(int i) {
    return i * kColumns + i / kRows * kBlockGap;
  }
  /// Calls f(b, rows) for the blocks of rows of a staged state, one per
  /// lane of a warp.
  template <typename F> LINAC_DEVICE static void forEachBlock(F f) {
    static_assert(kBulkBlocks, "bulk copies move 16-byte runs");
    for (int b = laneId(); b * kRows < K; b += 32)
      f(b * kRows, K - b * kRows < kRows ? K - b * kRows : kRows);
  }
  /// Starts the bulk copy of the state at `p` into a staging area, a block
  /// of rows per copy, counted on `barrier`; every lane of one warp must
  /// call it.
  LINAC_DEVICE static void prefetch(const float *p, float *area,
                                    uint64_t *barrier) {
    forEachBlock([&](int first, int rows) {
      bulkCopy(area + stagedRow(first), p + first * kColumns,
               rows * kColumns * sizeof(float), barrier);
    });
  }
  /// Copies a staged state back to `p`, returning once the copies have read
  /// the staging area; every lane of one warp must call it.
  LINAC_DEVICE static void drain(float *p, const float *area) {
    forEachBlock([&](int first, int rows) {
      bulkStore(p + first * kColumns, area + stagedRow(first),
                rows * kColumns * sizeof(float));
    });
    waitBulkStoresRead();
  }
  /// Fills the registers from a state whose row i starts at p + rowAt(i),
  /// each run of four columns at once.
  template <typename RowAt> LINAC_DEVICE void fill(const float *p, RowAt rowAt) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kSlots; ++c)
        s[r][c] = 0.0f;
    forEachQuad([&](int r, int c, int) {
      const float *run = p + rowAt(row(r)) + column(c);
      if constexpr (kQuads) {
        float4 quad = *reinterpret_cast<const float4 *>(run);
        s[r][c] = quad.x;
        s[r][c + 1] = quad.y;
        s[r][c + 2] = quad.z;
        s[r][c + 3] = quad.w;
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (column(c + i) < V)
            s[r][c + i] = run[i];
      }
    });
#pragma unroll
    for (int r = 0; r < (Normalized ? kRows : 0); ++r)
      norm[r] = row(r) < K ? p[rowAt(row(r)) + V] : 0.0f;
  }
  /// Takes this thread's part of a staged state, once it has landed.
  LINAC_DEVICE void loadStaged(const float *area) {
    fill(area, [](int i) { return stagedRow(i); });
  }
  /// Reads the state at `p` straight into registers.
  LINAC_DEVICE void load(const float *p) {
    fill(p, [](int i) { return i * kColumns; });
  }
  /// Writes the registers to a state whose row i starts at p + rowAt(i).
  template <typename RowAt> LINAC_DEVICE void put(float *p, RowAt rowAt) const {
    forEachQuad([&](int r, int c, int) {
      float *run = p + rowAt(row(r)) + column(c);
      if constexpr (kQuads) {
        *reinterpret_cast<float4 *>(run) =
            make_float4(s[r][c], s[r][c + 1], s[r][c + 2], s[r][c + 3]);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (column(c + i) < V)
            run[i] = s[r][c + i];
      }
    });
    // Every lane of a row group holds the same normaliser rows.
    if constexpr (Normalized)
      if (Split::warp() == 0 && Split::columnLane() == 0)
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          if (row(r) < K)
            p[rowAt(row(r)) + V] = norm[r];
  }
  /// Puts this thread's part back into the staging area it came from.
  LINAC_DEVICE void storeStaged(float *area) const {
    put(area, [](int i) { return stagedRow(i); });
    fenceSharedForBulkCopies();
  }
  LINAC_DEVICE void store(float *p) const {
    put(p, [](int i) { return i * kColumns; });
  }

  LINAC_DEVICE void decay(const Keys &gk, const Values &gv) {
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
  /// A key-side gate alone: a factor per row.
  LINAC_DEVICE void decay(const Keys &gk) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float rowFactor = expf(gk.x[r]);
#pragma unroll
      for (int c = 0; c < kSlots; ++c)
        s[r][c] *= rowFactor;
      if constexpr (Normalized)
        norm[r] *= rowFactor;
    }
  }
  LINAC_DEVICE void matrixGate(const MatrixTile<K, V, Split> &g) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kSlots; ++c)
        s[r][c] *= expf(g.x[r * kSlots + c]);
  }
  /// x^T S: a value column per slot, then the normaliser; the sums over
  /// the key rows stay within the warp.
  static constexpr int kProjections = kSlots + (Normalized ? 1 : 0);
  LINAC_DEVICE void project(const Keys &x, float (&out)[kProjections]) const {
#pragma unroll
    for (int c = 0; c < kSlots; ++c) {
      float sum = 0.0f;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        sum += x.x[r] * s[r][c];
      out[c] = Split::sumOverRowLanes(sum);
    }
    if constexpr (Normalized) {
      float sum = 0.0f;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        sum += x.x[r] * norm[r];
      out[kSlots] = Split::sumOverRowLanes(sum);
    }
  }
  /// S <- S - k (e^T S).
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
  /// erase(k, e) then write(k, u, normalizerWeight), in one pass:
  /// S <- S + k (u - e^T S)^T.
  LINAC_DEVICE void eraseWrite(const Keys &k, const Keys &e, const Values &u,
                               float normalizerWeight) {
    float projection[kProjections];
    project(e, projection);
    float delta[kSlots];
#pragma unroll
    for (int c = 0; c < kSlots; ++c)
      delta[c] = u.x[c] - projection[c];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int c = 0; c < kSlots; ++c)
        s[r][c] += k.x[r] * delta[c];
      if constexpr (Normalized)
        norm[r] += k.x[r] * (normalizerWeight - projection[kSlots]);
    }
  }
  /// S <- S + k u^T; the normaliser's column takes `normalizerWeight`.
  LINAC_DEVICE void write(const Keys &k, const Values &u,
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
  /// S^T q: this thread's columns of it.
  LINAC_DEVICE Values read(const Keys &q, float scale) const {
    float raw[kProjections];
    project(q, raw);
    float divisor = 1.0f;
    if constexpr (Normalized)
      divisor = fmaxf(fabsf(raw[kSlots] * scale), 1.0f);
    Values out;
#pragma unroll
    for (int c = 0; c < kSlots; ++c)
      out.x[c] = column(c) < V ? raw[c] * scale / divisor : 0.0f;
    return out;
  }
};

/// Dynamic shared memory of the decode kernel: the ring of staged states.
template <typename Layer> constexpr size_t decodeSharedBytes() {
  using State = DecodeState<Layer::K, Layer::V, Layer::kNormalizer,
                            typename Layer::Decode::Split>;
  return size_t(Layer::kDecodeStages) * State::stageFloats() * sizeof(float);
}

/// Decode steps: each of the grid's blocks takes the (head, sequence) items
/// blockIdx.x, blockIdx.x + gridDim.x, ..., its groups in turn, each
/// sequence's few new tokens from and back to its pool slot. Sequences
/// whose slot is outside the pool (-1) are skipped.
template <typename Layer, typename T>
LINAC_DEVICE void decodeKernel(const linac_cuda_decode_args &args) {
  using Split = typename Layer::Decode::Split;
  using State = DecodeState<Layer::K, Layer::V, Layer::kNormalizer, Split>;
  constexpr int kStages = Layer::kDecodeStages;
  constexpr int kRing = kStages > 0 ? kStages : 1;
  extern __shared__ __align__(16) float stagingArea[];
  __shared__ uint64_t landed[kRing];
  const int64_t items = args.num_seqs * args.num_heads;
  const int64_t headSize = int64_t(Layer::K) * stateColumns<Layer>();
  // Item i is head i % H of sequence i / H; its slot, or -1 to skip it.
  auto slotOf = [&](int64_t seq) {
    int64_t slot = seq < args.num_seqs ? args.state_indices[seq] : -1;
    return slot >= 0 && slot < args.pool_slots ? slot : int64_t(-1);
  };
  auto stateOf = [&](int64_t slot, int head) {
    return args.state_pool + (slot * args.num_heads + head) * headSize;
  };
  // The block's n-th item and its stage in the ring.
  auto itemAt = [&](int64_t n) { return blockIdx.x + n * int64_t(gridDim.x); };
  auto stageAt = [&](int64_t n) {
    return stagingArea + n % kRing * State::stageFloats();
  };
  // One warp starts item n's state towards its stage. The stage's barrier
  // completes a phase per item, skipped ones included: an arrival that
  // expects the state's bytes, or none.
  auto prefetch = [&](int64_t n) {
    int64_t item = itemAt(n), seq = item / args.num_heads;
    int64_t slot = slotOf(seq);
    uint64_t *barrier = &landed[n % kRing];
    if (laneId() == 0)
      arriveExpecting(barrier, slot >= 0 ? unsigned(headSize * sizeof(float))
                                         : 0u);
    __syncwarp();
    if constexpr (kStages > 0)
      if (slot >= 0)
        State::prefetch(stateOf(slot, int(item - seq * args.num_heads)),
                        stageAt(n), barrier);
  };
  if constexpr (kStages > 0) {
    if (threadIdx.x == 0) {
#pragma unroll
      for (int a = 0; a < kStages; ++a)
        initBarrier(&landed[a]);
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (warpId() == 0)
#pragma unroll
      for (int a = 0; a < kStages; ++a)
        prefetch(a);
  }
  const float scale = readScale<Layer>(args);
  T *output = static_cast<T *>(args.output);
  State state;
  for (int64_t n = Split::group(); itemAt(n) < items; n += Split::kGroups) {
    const int64_t item = itemAt(n), seq = item / args.num_heads;
    const int head = int(item - seq * args.num_heads);
    const int64_t slot = slotOf(seq);
    // The group's next item's inputs, asked of L2 while this one computes.
    if (Split::warp() == 0 && itemAt(n + Split::kGroups) < items) {
      int64_t next = itemAt(n + Split::kGroups);
      int64_t nextSeq = next / args.num_heads;
      prefetchInputs<Layer, T>(args, nextSeq * args.tokens, int(args.tokens),
                               int(next - nextSeq * args.num_heads), laneId(),
                               32);
    }
    if constexpr (kStages > 0)
      waitBarrier(&landed[n % kRing], unsigned(n / kRing) & 1u);
    if (slot >= 0) {
      if constexpr (kStages > 0)
        state.loadStaged(stageAt(n));
      else
        state.load(stateOf(slot, head));
      for (int64_t t = seq * args.tokens; t < (seq + 1) * args.tokens; ++t)
        Layer::Decode::step(
            Token<Layer, T, linac_cuda_decode_args>{args, t, head}, state,
            scale, output + (t * args.num_heads + head) * Layer::V);
      if constexpr (kStages > 0)
        state.storeStaged(stageAt(n));
      else
        state.store(stateOf(slot, head));
    }
    if constexpr (kStages > 0) {
      // Once the group has written the state back, warp 0 copies the stage
      // out, and once the copies have read it, gives it to item n + kStages.
      Split::sync();
      if (Split::warp() == 0) {
        if (slot >= 0)
          State::drain(stateOf(slot, head), stageAt(n));
        prefetch(n + kStages);
      }
    }
  }
  if constexpr (kStages > 0)
    waitBulkStores();
}

} // namespace linac::cuda

#endif // LINAC_CUDA_DECODE_H
