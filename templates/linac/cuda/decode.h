//===- decode.h - decode steps on a state pool ------------------*- C++ -*-===//
//
// A few new tokens per sequence, so the cost is reading and writing each
// head's state, and the kernel must keep memory busy. A block of 16 warps
// runs on each multiprocessor, in groups of Layer::kDecodeWarps warps; a
// group takes one item at a time, a (head, sequence) state or, with
// Layer::kDecodeParts > 1, one of that many strips of its value columns,
// and holds it in registers: warp w of a group owns a strip of value
// columns and every key row of it, so the products over the key axis
// (erase, read) reduce across the lanes of a warp, never across warps, and
// a step has no barrier. Each group's states move through its own ring of
// stages in shared memory, both ways by the copy engines: while the group
// computes, its next items' states are on their way in and its last one's
// on its way out. Groups take items from a counter the grid shares, so
// that a multiprocessor memory serves more slowly takes fewer.
//
// DecodeSplit says who holds what: a thread holds kRows key rows of kSlots
// of its warp's columns. Key vectors are held as the thread's rows
// (KeyRows) or, computed by the step, as half of them, the other half with
// the thread's column-lane partner (SplitKeyRows); value vectors as its
// columns (ValueColumns), the normaliser's column as its rows.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CUDA_DECODE_H
#define LINAC_CUDA_DECODE_H

#include "linac/cuda/geometry.h"
#include "linac/cuda/token.h"

namespace linac::cuda {

/// Warps of a decode block, one block per multiprocessor: with 4 or 8 warps
/// an item, several groups compute at once, so some compute while others
/// wait.
constexpr int kDecodeBlockWarps = LINAC_CUDA_DECODE_BLOCK_WARPS;
template <typename Layer> constexpr int decodeThreads() {
  return kDecodeBlockWarps * 32;
}
template <typename Layer> constexpr int decodeBlocksPerMultiprocessor() {
  return 1;
}

LINAC_DEVICE int warpId() { return threadIdx.x / 32; }

/// How the threads of a group of `Warps` warps split a K x V state. With
/// InterleavedRows, row lane l holds rows 2 l + 2 kRowLanes i + {0, 1}
/// instead of a block of consecutive rows: the rows a quarter-warp holds
/// then differ by row % 8, which tensor staging's swizzle needs.
template <int K, int V, int Warps, bool InterleavedRows = false>
struct DecodeSplit {
  static constexpr int kWarps = Warps;
  static constexpr bool kInterleavedRows = InterleavedRows;
  static constexpr int kGroups = kDecodeBlockWarps / Warps;
  static_assert(kDecodeBlockWarps % Warps == 0, "groups fill the block");
  static_assert(kGroups < 16, "a named barrier a group");
  /// Two lanes side by side take a strip's runs of eight columns, four
  /// each, so that a warp's access to a row is 32-byte sectors whole, and the
  /// lane pairs split the key rows: a thread holds as many rows as
  /// columns at K = V, which keeps the key and value vectors it holds
  /// short (geometry.h's DecodeShape, which the plan reads too).
  static constexpr DecodeShape kShape{K, V, 1, Warps, false};
  static constexpr int kColumnLanes = kShape.columnLanes;
  static constexpr int kRowLanes = kShape.rowLanes;
  static constexpr int kRows = kShape.rows;
  /// Value columns of a warp, and of a thread.
  static constexpr int kStripColumns = kShape.stripColumns;
  static constexpr int kSlots = kShape.slots;
  /// Rows and columns past which no thread holds any.
  static constexpr int kRowSpan = kRowLanes * kRows,
                       kColumnSpan = Warps * kStripColumns;

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
  static_assert(!InterleavedRows || K % (2 * kRowLanes) == 0,
                "whole pairs of rows a row lane");
  /// The key row of this thread's row r.
  LINAC_DEVICE static int row(int r) {
    if constexpr (InterleavedRows)
      return 2 * rowLane() + 2 * kRowLanes * (r / 2) + r % 2;
    else
      return rowLane() * kRows + r;
  }
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
  static constexpr int kSpan = Split::kRowSpan;
  LINAC_DEVICE static int index(int r) { return Split::row(r); }
  template <typename T> LINAC_DEVICE static KeyRows load(const T *p) {
    return loadSlots<KeyRows, N>(p);
  }
  LINAC_DEVICE float sum() const {
    return Split::sumOverRowLanes(sumOfSlots<N>(*this));
  }
};

/// A key vector of N as the generated step computes it: the rows of this
/// thread's KeyRows split with its column-lane partner, which holds the
/// same rows, so that each computes the key side (loads, gates, norms) of
/// half of them; rows() gives the state ops the whole share. Rows that do
/// not split evenly stay whole.
template <int N, typename Split> constexpr int keyRowShare() {
  return Split::kColumnLanes == 2 && KeyRows<N, Split>::kRows % 2 == 0 ? 2 : 1;
}
template <int N, typename Split>
struct SplitKeyRows
    : Elements<SplitKeyRows<N, Split>,
               KeyRows<N, Split>::kRows / keyRowShare<N, Split>()> {
  using Rows = KeyRows<N, Split>;
  /// Lanes that share a thread's rows: its column-lane pair, or itself.
  static constexpr int kShare = keyRowShare<N, Split>();
  static constexpr int kSlots = Rows::kRows / kShare;
  static constexpr int kSpan = Split::kRowSpan;
  /// Which of the two halves this thread holds.
  LINAC_DEVICE static int half() {
    return kShare == 2 ? Split::columnLane() : 0;
  }
  LINAC_DEVICE static int index(int i) {
    return Split::row(half() * kSlots + i);
  }
  template <typename T> LINAC_DEVICE static SplitKeyRows load(const T *p) {
    return loadSlots<SplitKeyRows, N>(p);
  }
  LINAC_DEVICE float sum() const {
    float x = sumOfSlots<N>(*this);
    return kShare == 2 ? warpSum(x) : Split::sumOverRowLanes(x);
  }
  /// This thread's whole share: its half, and its partner's by shuffles.
  LINAC_DEVICE Rows rows() const {
    Rows whole;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      if constexpr (kShare == 2) {
        float other = __shfl_xor_sync(0xffffffffu, this->x[i], 1);
        bool first = half() == 0;
        whole.x[i] = first ? this->x[i] : other;
        whole.x[kSlots + i] = first ? other : this->x[i];
      } else {
        whole.x[i] = this->x[i];
      }
    }
    return whole;
  }
};

/// The rows of a key vector a state op takes, whole.
template <int N, typename Split>
LINAC_DEVICE const KeyRows<N, Split> &wholeRows(const KeyRows<N, Split> &x) {
  return x;
}
template <int N, typename Split>
LINAC_DEVICE KeyRows<N, Split> wholeRows(const SplitKeyRows<N, Split> &x) {
  return x.rows();
}

/// A value vector of N: this thread's columns of it.
template <int N, typename Split>
struct ValueColumns : Elements<ValueColumns<N, Split>, Split::kSlots> {
  static constexpr int kSpan = Split::kColumnSpan;
  LINAC_DEVICE static int index(int slot) { return Split::column(slot); }
  template <typename T> LINAC_DEVICE static ValueColumns load(const T *p) {
    return loadSlots<ValueColumns, N>(p);
  }
  /// The first row lane of each warp writes the warp's columns.
  template <typename T> LINAC_DEVICE void store(T *p) const {
    if (Split::rowLane() == 0)
#pragma unroll
      for (int i = 0; i < Split::kSlots; ++i)
        if (holdsElement<ValueColumns, N>(i))
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
struct IsVector<SplitKeyRows<N, Split>> : std::true_type {};
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
/// L2 policies for a state's copies. A state is read and then overwritten
/// in place a few microseconds later: its lines are kept in L2 from the
/// read until the write-back, which returns them to the normal order of
/// eviction (bench/history/decode.md, E44 to E46).
LINAC_DEVICE uint64_t keepUntilWrittenPolicy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
LINAC_DEVICE uint64_t writtenBackPolicy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
/// For data read once: its lines are the first L2 evicts.
LINAC_DEVICE uint64_t readOncePolicy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
/// Copies `bytes` (a multiple of 16, both ends 16-byte aligned) to shared
/// memory with the bulk copy engine, counted on `barrier`; a state's by
/// default, kept in L2 until written back.
LINAC_DEVICE void bulkCopy(void *shared, const void *global, unsigned bytes,
                           uint64_t *barrier,
                           uint64_t policy = keepUntilWrittenPolicy()) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
               "bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(
                   sharedAddress(shared)),
               "l"(global), "r"(bytes), "r"(sharedAddress(barrier)),
               "l"(policy)
               : "memory");
}
/// Copies `bytes` (as bulkCopy) of a state from shared memory back to
/// global memory, in this thread's current bulk group.
LINAC_DEVICE void bulkStore(void *global, const void *shared, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint "
               "[%0], [%1], %2, %3;\n" ::"l"(global),
               "r"(sharedAddress(shared)), "r"(bytes), "l"(writtenBackPolicy())
               : "memory");
}
/// Closes this thread's bulk group of stores.
LINAC_DEVICE void commitBulkStores() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
/// Waits until this thread's committed bulk stores have read their shared
/// memory.
LINAC_DEVICE void waitBulkStoresRead() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
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

/// How a decode item's state reaches shared memory (the plan's
/// decode_staging): not at all (loaded straight into registers), by bulk
/// copies of each row lane's block of rows, or by a tensor map's boxes.
enum class DecodeStaging { Direct, Bulk, Tensor };

/// Where an item's state is: its first element, and in the pool's tensor
/// map (rows of V floats) its first row and column.
struct StateAt {
  float *p;
  int row, column;
};

/// Copies box (column, row) of a state pool's `map` to shared memory,
/// counted on `barrier`.
LINAC_DEVICE void tensorCopy(void *shared, const linac_cuda_tensor_map &map,
                             int column, int row, uint64_t *barrier) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
               "complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], [%4], "
               "%5;\n" ::"r"(sharedAddress(shared)),
               "l"(&map), "r"(column), "r"(row), "r"(sharedAddress(barrier)),
               "l"(keepUntilWrittenPolicy())
               : "memory");
}
/// Copies box (column, head, token) of an input's `map` ([tokens, heads,
/// size], boxes of one head's tokens) to shared memory, counted on
/// `barrier`, its lines the first L2 evicts.
LINAC_DEVICE void tensorCopyRows(void *shared, const linac_cuda_tensor_map &map,
                                 int column, int head, int token,
                                 uint64_t *barrier) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::"
               "complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, %4}], "
               "[%5], %6;\n" ::"r"(sharedAddress(shared)),
               "l"(&map), "r"(column), "r"(head), "r"(token),
               "r"(sharedAddress(barrier)), "l"(readOncePolicy())
               : "memory");
}
/// Stores shared memory to box (column, head, token) of an output's `map`
/// ([tokens, heads, size]), in this thread's current bulk group.
LINAC_DEVICE void tensorStoreRows(const linac_cuda_tensor_map &map, int column,
                                  int head, int token, const void *shared) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group "
               "[%0, {%1, %2, %3}], [%4];\n" ::"l"(&map),
               "r"(column), "r"(head), "r"(token), "r"(sharedAddress(shared))
               : "memory");
}
/// Copies shared memory back to box (column, row) of a state pool's `map`,
/// in this thread's current bulk group.
LINAC_DEVICE void tensorStore(const linac_cuda_tensor_map &map, int column,
                              int row, const void *shared) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::"
               "cache_hint [%0, {%1, %2}], [%3], %4;\n" ::"l"(&map),
               "r"(column), "r"(row), "r"(sharedAddress(shared)),
               "l"(writtenBackPolicy())
               : "memory");
}

/// One thread's share of a K x V state in registers, or with Parts > 1 of
/// one of that many strips of its value columns.
template <int K, int V, int Parts, bool Normalized, typename Split,
          DecodeStaging Staging>
struct DecodeState {
  using Keys = KeyRows<K, Split>;
  using Values = ValueColumns<V, Split>;
  static constexpr int kRows = Split::kRows, kSlots = Split::kSlots;
  static_assert(Parts == 1 || Staging == DecodeStaging::Tensor,
                "strips move by tensor maps");
  static_assert(Staging != DecodeStaging::Tensor || Split::kInterleavedRows,
                "the swizzle needs a quarter-warp's rows to differ by row % 8");
  /// Value columns held, and columns of a held row; the normaliser, when
  /// kept, is last.
  static constexpr int kHeld = V / Parts;
  static constexpr int kColumns = kHeld + (Normalized ? 1 : 0);
  /// Floats from a row of the state in memory to the next.
  static constexpr int kRowStride = V + (Normalized ? 1 : 0);
  /// Whether each run of four columns is one aligned 16-byte access.
  static constexpr bool kQuads = kColumns % 4 == 0 && kRowStride % 4 == 0;

  float s[kRows][kSlots];
  float norm[Normalized ? kRows : 1];

  LINAC_DEVICE static int row(int r) { return Split::row(r); }
  LINAC_DEVICE static int column(int c) { return Split::column(c); }
  /// Whether this thread's row r and column slot c are in the state; no
  /// check where no thread's reach past it.
  LINAC_DEVICE static bool liveRow(int r) {
    return Split::kRowSpan <= K || row(r) < K;
  }
  LINAC_DEVICE static bool liveColumn(int c) {
    return Split::kColumnSpan <= kHeld || column(c) < kHeld;
  }
  LINAC_DEVICE static bool live(int r, int c) {
    return liveRow(r) && liveColumn(c);
  }
  /// Calls f(r, c) for each of this thread's live rows r and runs of four
  /// value columns from slot c.
  template <typename F> LINAC_DEVICE static void forEachQuad(F f) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kSlots; c += 4)
        if (live(r, c))
          f(r, c);
  }

  /// Bulk staging keeps each row lane's block of rows 16 bytes per column
  /// lane further from the previous one than in memory, so that each
  /// quarter of a warp's 16-byte reads, eight lanes, falls on different
  /// banks.
  static constexpr int kBlockGap = 4 * Split::kColumnLanes;
  /// Tensor staging keeps boxes of kBoxColumns columns by K rows, each row
  /// 128 bytes whose 16-byte chunks the swizzle permutes by row % 8; Split
  /// gives a quarter-warp's row lanes rows with different row % 8.
  static constexpr int kBoxColumns = LINAC_CUDA_DECODE_BOX_COLUMNS,
                       kBoxFloats = K * kBoxColumns;
  static_assert(Staging != DecodeStaging::Tensor ||
                    (kHeld % kBoxColumns == 0 && !Normalized),
                "a strip is whole boxes, without a normaliser");
  static constexpr DecodeShape kShape{K, V, Parts, Split::kWarps, Normalized};
  static_assert(kShape.rows == kRows && kShape.columns == kColumns &&
                    kShape.columnLanes == Split::kColumnLanes,
                "the plan's split of a state");
  static_assert(Staging != DecodeStaging::Bulk || kShape.blocksAreRuns(),
                "bulk copies move 16-byte runs");
  LINAC_HOST_DEVICE static constexpr int stageFloats() {
    return Staging == DecodeStaging::Tensor ? K * kHeld
                                            : kShape.bulkStageFloats();
  }
  /// Where the run of four columns from `column` of row i of a staged
  /// state starts.
  LINAC_DEVICE static int staged(int i, int column) {
    if constexpr (Staging == DecodeStaging::Tensor) {
      int chunk = column % kBoxColumns / 4;
      return column / kBoxColumns * kBoxFloats + i * kBoxColumns +
             (chunk ^ (i % 8)) * 4;
    } else {
      return i * kColumns + i / kRows * kBlockGap + column;
    }
  }
  /// Calls f(first, rows) for the blocks of rows of a bulk-staged state,
  /// one per lane of a warp.
  template <typename F> LINAC_DEVICE static void forEachBlock(F f) {
    for (int b = laneId(); b * kRows < K; b += 32)
      f(b * kRows, K - b * kRows < kRows ? K - b * kRows : kRows);
  }
  /// Starts the copy of the state at `at` into a staging area, counted on
  /// `barrier`; every lane of one warp must call it.
  LINAC_DEVICE static void prefetch(const StateAt &at,
                                    const linac_cuda_tensor_map &map,
                                    float *area, uint64_t *barrier) {
    if constexpr (Staging == DecodeStaging::Tensor) {
      if (laneId() == 0)
#pragma unroll
        for (int b = 0; b < kHeld / kBoxColumns; ++b)
          tensorCopy(area + b * kBoxFloats, map, at.column + b * kBoxColumns,
                     at.row, barrier);
    } else {
      forEachBlock([&](int first, int rows) {
        bulkCopy(area + staged(first, 0), at.p + first * kRowStride,
                 rows * kColumns * sizeof(float), barrier);
      });
    }
  }
  /// Copies a staged state back to `at`, returning once the copies have
  /// read the staging area if `waitForRead`; every lane of one warp must
  /// call it.
  LINAC_DEVICE static void drain(const StateAt &at,
                                 const linac_cuda_tensor_map &map,
                                 const float *area, bool waitForRead) {
    if constexpr (Staging == DecodeStaging::Tensor) {
      if (laneId() == 0)
#pragma unroll
        for (int b = 0; b < kHeld / kBoxColumns; ++b)
          tensorStore(map, at.column + b * kBoxColumns, at.row,
                      area + b * kBoxFloats);
    } else {
      forEachBlock([&](int first, int rows) {
        bulkStore(at.p + first * kRowStride, area + staged(first, 0),
                  rows * kColumns * sizeof(float));
      });
    }
    commitBulkStores();
    if (waitForRead)
      waitBulkStoresRead();
  }
  /// Fills the registers from a state whose run of four columns from
  /// `column` of row i is at p + at(i, column).
  template <typename At> LINAC_DEVICE void fill(const float *p, At at) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kSlots; ++c)
        s[r][c] = 0.0f;
    forEachQuad([&](int r, int c) {
      const float *run = p + at(row(r), column(c));
      if constexpr (kQuads) {
        float4 quad = *reinterpret_cast<const float4 *>(run);
        s[r][c] = quad.x;
        s[r][c + 1] = quad.y;
        s[r][c + 2] = quad.z;
        s[r][c + 3] = quad.w;
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (liveColumn(c + i))
            s[r][c + i] = run[i];
      }
    });
#pragma unroll
    for (int r = 0; r < (Normalized ? kRows : 0); ++r)
      norm[r] = liveRow(r) ? p[at(row(r), kHeld)] : 0.0f;
  }
  /// Takes this thread's part of a staged state, once it has landed.
  LINAC_DEVICE void loadStaged(const float *area) { fill(area, staged); }
  /// Reads the state at `p` straight into registers.
  LINAC_DEVICE void load(const float *p) {
    fill(p, [](int i, int column) { return i * kRowStride + column; });
  }
  /// Writes the registers to a state whose run of four columns from
  /// `column` of row i is at p + at(i, column).
  template <typename At> LINAC_DEVICE void put(float *p, At at) const {
    forEachQuad([&](int r, int c) {
      float *run = p + at(row(r), column(c));
      if constexpr (kQuads) {
        *reinterpret_cast<float4 *>(run) =
            make_float4(s[r][c], s[r][c + 1], s[r][c + 2], s[r][c + 3]);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (liveColumn(c + i))
            run[i] = s[r][c + i];
      }
    });
    // Every lane of a row group holds the same normaliser rows.
    if constexpr (Normalized)
      if (Split::warp() == 0 && Split::columnLane() == 0)
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          if (liveRow(r))
            p[at(row(r), kHeld)] = norm[r];
  }
  /// Puts this thread's part back into the staging area it came from.
  LINAC_DEVICE void storeStaged(float *area) const {
    put(area, staged);
    fenceSharedForBulkCopies();
  }
  LINAC_DEVICE void store(float *p) const {
    put(p, [](int i, int column) { return i * kRowStride + column; });
  }

  template <typename KeyVector>
  LINAC_DEVICE void decay(const KeyVector &keyGate, const Values &gv) {
    const Keys &gk = wholeRows(keyGate);
    float columnFactor[kSlots];
#pragma unroll
    for (int c = 0; c < kSlots; ++c)
      columnFactor[c] = __expf(gv.x[c]);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float rowFactor = __expf(gk.x[r]);
#pragma unroll
      for (int c = 0; c < kSlots; ++c)
        s[r][c] *= rowFactor * columnFactor[c];
      if constexpr (Normalized)
        norm[r] *= rowFactor;
    }
  }
  /// A key-side gate alone: a factor per row.
  template <typename KeyVector>
  LINAC_DEVICE void decay(const KeyVector &keyGate) {
    const Keys &gk = wholeRows(keyGate);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float rowFactor = __expf(gk.x[r]);
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
        s[r][c] *= __expf(g.x[r * kSlots + c]);
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
  template <typename KeyVector>
  LINAC_DEVICE void erase(const KeyVector &key, const KeyVector &eraser) {
    const Keys &k = wholeRows(key), &e = wholeRows(eraser);
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
  template <typename KeyVector>
  LINAC_DEVICE void eraseWrite(const KeyVector &key, const KeyVector &eraser,
                               const Values &u, float normalizerWeight) {
    const Keys &k = wholeRows(key), &e = wholeRows(eraser);
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
  template <typename KeyVector>
  LINAC_DEVICE void write(const KeyVector &key, const Values &u,
                          float normalizerWeight) {
    const Keys &k = wholeRows(key);
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
  template <typename KeyVector>
  LINAC_DEVICE Values read(const KeyVector &query, float scale) const {
    float raw[kProjections];
    project(wholeRows(query), raw);
    float divisor = 1.0f;
    if constexpr (Normalized)
      divisor = fmaxf(fabsf(raw[kSlots] * scale), 1.0f);
    Values out;
#pragma unroll
    for (int c = 0; c < kSlots; ++c)
      out.x[c] = liveColumn(c) ? raw[c] * scale / divisor : 0.0f;
    return out;
  }
};

/// What one decode item holds: a state, or a strip of its value columns.
template <typename Layer>
using DecodeItemState =
    DecodeState<Layer::K, Layer::V, Layer::kDecodeParts, Layer::kNormalizer,
                typename Layer::Decode::Split, Layer::kDecodeStaging>;

constexpr size_t kSwizzleAlignment = LINAC_CUDA_DECODE_STAGE_ALIGNMENT;

/// Dynamic shared memory of the decode kernel: the groups' rings of staged
/// states.
template <typename Layer> constexpr size_t decodeSharedBytes() {
  return size_t(Layer::kDecodeStages) * DecodeItemState<Layer>::stageFloats() *
             sizeof(float) +
         (Layer::kDecodeStaging == DecodeStaging::Tensor ? kSwizzleAlignment
                                                         : 0);
}

/// A decode item: strip `part` of the state of `head` of sequence `seq`,
/// which lives in pool slot `slot` (-1: the sequence is skipped); `seq` is
/// -1 past the last item.
struct DecodeItem {
  int64_t seq, slot;
  int head, part;
};

/// Where a group's leader gets its items from. Each of the grid's leaders
/// is dealt the first item of each stage of its ring (leader l items l,
/// l + leaders, ...), so a launch's first copies wait for their pool slots
/// alone; the rest are tickets of the grid's counter args.work[0], taken an
/// item ahead, so that neither the atomic's nor the index's latency is
/// waited for when a stage is refilled. The counter is never reset, so a
/// launch ends without a barrier across the grid: its tickets count from
/// args.work[1], every leader takes a known number of them (two up front,
/// then one for each item it takes), and the leader whose ticket is the
/// launch's last moves args.work[1] past them for the next launch.
template <int Parts, int Ring> class DecodeItemSource {
public:
  /// Only a leader's source takes items.
  LINAC_DEVICE DecodeItemSource(const linac_cuda_decode_args &args, bool leader,
                                int leaderIndex, int leaders)
      : args(args), items(uint64_t(args.num_seqs * args.num_heads * Parts)),
        dealtItems(uint64_t(leaders) * Ring),
        tickets(items + 2 * uint64_t(leaders)) {
    if (leader) {
      ahead = atomicAdd(args.work, 1ull);
      first = *reinterpret_cast<volatile unsigned long long *>(args.work + 1);
#pragma unroll
      for (int k = 0; k < Ring; ++k) {
        dealt[k] = uint64_t(leaderIndex) + uint64_t(k) * leaders;
        dealtSlot[k] = slotOf(dealt[k]);
      }
    }
  }
  /// The item dealt to stage k of the ring.
  LINAC_DEVICE DecodeItem dealtItem(int k) const {
    return item(dealt[k], dealtSlot[k]);
  }
  /// Once the dealt items are out: starts taking tickets.
  LINAC_DEVICE void start() { advance(); }
  /// The next ticket's item; starts taking the one after it.
  LINAC_DEVICE DecodeItem next() {
    DecodeItem taken = item(takenItem, takenSlot);
    advance();
    return taken;
  }
  /// Once the leader takes no more items: the ticket still ahead may be the
  /// launch's last.
  LINAC_DEVICE void finish() const { settle(ahead - first); }

private:
  const linac_cuda_decode_args &args;
  uint64_t items, dealtItems, tickets;
  uint64_t dealt[Ring];
  int64_t dealtSlot[Ring];
  /// The launch's first ticket, the item taken (its pool slot still on its
  /// way) and the counter's ticket still on its way for the one after.
  unsigned long long first, takenItem, ahead;
  int64_t takenSlot;

  /// Starts loading the pool slot of item `index`'s sequence.
  LINAC_DEVICE int64_t slotOf(uint64_t index) const {
    return index < items
               ? args.state_indices[int64_t(index) / Parts / args.num_heads]
               : -1;
  }
  LINAC_DEVICE DecodeItem item(uint64_t index, int64_t slot) const {
    if (index >= items)
      return DecodeItem{-1, -1, 0, 0};
    int64_t state = int64_t(index) / Parts, seq = state / args.num_heads;
    return DecodeItem{seq, slot >= 0 && slot < args.pool_slots ? slot : -1,
                      int(state - seq * args.num_heads),
                      int(int64_t(index) - state * Parts)};
  }
  LINAC_DEVICE void settle(uint64_t ticket) const {
    if (ticket == tickets - 1)
      args.work[1] = first + tickets;
  }
  LINAC_DEVICE void advance() {
    uint64_t ticket = ahead - first;
    settle(ticket);
    takenItem = dealtItems + ticket;
    takenSlot = slotOf(takenItem);
    ahead = atomicAdd(args.work, 1ull);
  }
};

/// Decode steps. Items are (sequence, head, strip) in that order, a state
/// making Layer::kDecodeParts strips; the grid's groups share them out
/// through the counter args.work[0]. A group stages its next items in its
/// own ring of stages and, where it has more than one, writes its states
/// back through a stage of their own, so that an item's stage takes the
/// next item as soon as the group holds it in registers. Each item's
/// sequence's few new tokens run on its state from and back to its pool
/// slot; sequences whose slot is outside the pool (-1) are skipped.
template <typename Layer, typename T>
LINAC_DEVICE void decodeKernel(const linac_cuda_decode_args &args) {
  using Split = typename Layer::Decode::Split;
  using State = DecodeItemState<Layer>;
  constexpr int kParts = Layer::kDecodeParts, kHeld = State::kHeld;
  constexpr bool kStaged = Layer::kDecodeStaging != DecodeStaging::Direct;
  constexpr int kGroupStages =
      kStaged ? Layer::kDecodeStages / Split::kGroups : 0;
  static_assert(!kStaged || (Layer::kDecodeStages % Split::kGroups == 0 &&
                             kGroupStages > 0),
                "a ring a group");
  constexpr bool kWriteStage = kGroupStages > 1;
  constexpr int kRing = kWriteStage ? kGroupStages - 1 : 1;
  static_assert(Layer::V % kParts == 0, "strips of equal width");
  extern __shared__ __align__(16) unsigned char decodeShared[];
  // An offset from decodeShared, not a rounded generic address, so that the
  // compiler still knows the stages are shared memory.
  unsigned stagingPad = 0;
  if constexpr (Layer::kDecodeStaging == DecodeStaging::Tensor)
    stagingPad =
        (kSwizzleAlignment - sharedAddress(decodeShared) % kSwizzleAlignment) %
        kSwizzleAlignment;
  float *stagingArea = reinterpret_cast<float *>(decodeShared + stagingPad);
  __shared__ uint64_t landed[Split::kGroups][kRing];
  __shared__ DecodeItem stagedItem[Split::kGroups][kRing];
  const int group = Split::group();
  const bool leader = Split::warp() == 0 && laneId() == 0;
  const bool leadWarp = Split::warp() == 0;
  auto stateAt = [&](const DecodeItem &item) {
    int64_t row = (item.slot * args.num_heads + item.head) * Layer::K;
    return StateAt{args.state_pool + row * stateColumns<Layer>() +
                       item.part * kHeld,
                   int(row), item.part * kHeld};
  };
  // Stage s of this group's ring; kRing is its write-back stage.
  auto stage = [&](int s) {
    return stagingArea + (group * kGroupStages + s) * State::stageFloats();
  };
  float *writeStage = stage(kWriteStage ? kRing : 0);
  DecodeItemSource<kParts, kRing> source(args, leader,
                                         blockIdx.x * Split::kGroups + group,
                                         gridDim.x * Split::kGroups);
  // Warp 0 takes an item (`take`, on lane 0) into ring slot s and starts
  // its state towards the slot's stage; the slot's barrier completes a
  // phase per item: an arrival that expects the state's bytes, or none.
  // Unstaged, the group's barrier hands the item over.
  auto fill = [&](int s, auto take) {
    if (laneId() == 0) {
      DecodeItem item = take();
      stagedItem[group][s] = item;
      if constexpr (kStaged)
        arriveExpecting(&landed[group][s],
                        item.slot >= 0 ? unsigned(Layer::K * State::kColumns *
                                                  sizeof(float))
                                       : 0u);
    }
    __syncwarp();
    if constexpr (kStaged) {
      DecodeItem item = stagedItem[group][s];
      if (item.slot >= 0)
        State::prefetch(stateAt(item), args.state_map, stage(s),
                        &landed[group][s]);
    }
  };
  auto takeNext = [&] { return source.next(); };
  if constexpr (kStaged) {
    if (threadIdx.x == 0) {
      for (int g = 0; g < Split::kGroups; ++g)
        for (int s = 0; s < kRing; ++s)
          initBarrier(&landed[g][s]);
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
  }
  if (leadWarp) {
#pragma unroll
    for (int s = 0; s < kRing; ++s)
      fill(s, [&] { return source.dealtItem(s); });
    if (laneId() == 0)
      source.start();
  }
  const float scale = readScale<Layer>(args);
  T *output = static_cast<T *>(args.output);
  State state;
  for (int64_t j = 0;; ++j) {
    const int s = int(j % kRing);
    if constexpr (kStaged)
      waitBarrier(&landed[group][s], unsigned(j / kRing) & 1u);
    else
      Split::sync();
    const DecodeItem item = stagedItem[group][s];
    if (item.seq < 0)
      break;
    if (item.slot >= 0) {
      const StateAt at = stateAt(item);
      if constexpr (kStaged) {
        state.loadStaged(stage(s));
        if constexpr (kWriteStage) {
          // Once the group holds the state, its stage takes the next
          // item, and the last write-back has read the write stage.
          if (leadWarp)
            waitBulkStoresRead();
          Split::sync();
          if (leadWarp)
            fill(s, takeNext);
        }
      } else {
        state.load(at.p);
      }
      const int firstColumn = item.part * kHeld;
      for (int64_t t = item.seq * args.tokens; t < (item.seq + 1) * args.tokens;
           ++t)
        Layer::Decode::step(
            Token<Layer, T, linac_cuda_decode_args>{args, t, item.head,
                                                    firstColumn},
            state, scale,
            output + (t * args.num_heads + item.head) * Layer::V + firstColumn);
      if constexpr (kStaged)
        state.storeStaged(writeStage);
      else
        state.store(at.p);
    } else if constexpr (kWriteStage) {
      Split::sync();
      if (leadWarp)
        fill(s, takeNext);
    }
    if constexpr (kStaged) {
      // Once the group has written the state back, warp 0 copies it out;
      // without a write stage, once the copies have read the item's stage
      // it takes the next item.
      Split::sync();
      if (leadWarp && item.slot >= 0)
        State::drain(stateAt(item), args.state_map, writeStage,
                     /*waitForRead=*/!kWriteStage);
    } else {
      Split::sync();
    }
    if constexpr (!kWriteStage)
      if (leadWarp)
        fill(s, takeNext);
  }
  // The stages must outlive the copies' reads of them; the writes land
  // before the launch ends.
  if constexpr (kStaged)
    if (leadWarp)
      waitBulkStoresRead();
  if (leader)
    source.finish();
}

} // namespace linac::cuda

#endif // LINAC_CUDA_DECODE_H
