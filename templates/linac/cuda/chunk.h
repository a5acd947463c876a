//===- chunk.h - the chunkwise kernel on tensor cores ------------*- C++ -*-===//
//
// The chunkwise algorithm (docs/design.md) for one (head, sequence) per
// block of 16 warps, chunk by chunk. Warp w holds the state's value columns
// of half w / 8 in the role of warp w % 8: in registers in fp32 (role r
// holds key rows 16r..16r+15), and in shared memory as bf16 for the
// products that read it.
// The other products are spread over all 16 warps. Per chunk:
//   1. each warp runs the generated prologue on its tokens, whose inputs
//      it copied into shared memory during the previous chunk (as far as
//      the plan found room; SharedInputRows);
//   2. cumulative log-gates over the chunk;
//   3. R = U - (E (.) Lambda) S0;
//   4. the masked intra-chunk matrices P (query-key) and A (erase-key);
//   5. Delta = (I + A)^-1 R by blocks, through the diagonal blocks'
//      inverses, on tensor cores;
//   6. O = (Q (.) Lambda) S0 + P Delta and
//      S <- Lambda_C (.) S + (K (.) Lambda_C / Lambda)^T Delta;
//   7. each warp normalises its tokens' reads and runs the generated epilogue.
// Gate factors are exponentials of differences of cumulative log-gates that
// are never positive, each token's log-gate first raised to gates.h's
// floor: a scalar gate scales rows and columns of a product; a key-vector
// gate takes the factorised product across 16-token sub-chunks (referenced
// to the end of the earlier sub-chunk) and pairs inside one. A value-side
// decay (without an erase) scales columns the same way: the reads of S0 by
// e^(psiQ), P's product with Delta by sub-chunks, halves of one and pairs
// inside a half, and Delta's rows to the chunk's end before the update.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CUDA_CHUNK_H
#define LINAC_CUDA_CHUNK_H

#include "linac/cuda/geometry.h"
#include "linac/cuda/token.h"
#include "linac/gates.h"

#include <cstdint>
#include <type_traits>
#include <utility>

namespace linac::cuda {

/// u with the normaliser's weight beside it when the state carries one.
template <int V> struct NormalizedValue {
  WarpVec<V> u;
  float weight;
};
template <int V, bool Normalized>
LINAC_DEVICE NormalizedValue<V> appendNormalizer(const WarpVec<V> &u,
                                                 float weight) {
  return {u, Normalized ? weight : 0.0f};
}

/// Stands for an operand the layer has none of.
struct NoOperand {};

template <int K, int V, Gate G, bool ValueDecay = false> struct ChunkOperands {
  WarpVec<K> q, k, e;
  std::conditional_t<G == Gate::Vector, WarpVec<K>, float> gk;
  std::conditional_t<ValueDecay, WarpVec<V>, NoOperand> gv;
  NormalizedValue<V> u;
};

/// A token's chunk operands as scalars of its input rows (the generated
/// rowScales, for a layer whose q, k and v are each an input's row times a
/// scalar): q = q_row * q, k = k_row * k, u = v_row * u, and the key
/// log-gate.
struct RowScales {
  float q, k, u, gk;
};

/// The operands the generated prologue of Layer fills, at the kernel's
/// (padded) K and V.
template <typename Layer, int K = Layer::K, int V = Layer::V>
using LayerOperands = ChunkOperands<K, V, Layer::kKeyGate, Layer::kValueDecay>;

/// The inputs the plan stages in shared memory (rows of whole 16-byte runs
/// of 16-bit activations), each input's C token rows together. Each warp
/// copies the rows of the tokens its prologue takes, asynchronously: those
/// of Layer::sharedInput into their own memory as soon as its prologue has
/// read the previous chunk's, so the copies overlap the rest of that chunk;
/// those of Layer::lateSharedInput (Late) into the memory of P and A (and,
/// with an erase, of Delta; with a gate, of the state copy) once the
/// previous chunk's products are done, so they overlap its epilogue. A
/// block's Warps warps take every Warps-th token each.
template <typename Layer, bool Late = false, int Warps = kChunkWarps>
struct SharedInputRows {
  static constexpr int C = Layer::kChunkSize;
  LINAC_HOST_DEVICE static constexpr bool holds(int i) {
    return Late ? Layer::lateSharedInput(i) : Layer::sharedInput(i);
  }
  LINAC_HOST_DEVICE static constexpr int rowBytes(int i) {
    return holds(i) ? stagedRowBytes(Layer::inputSize(i)) : 0;
  }
  /// Where each input's rows start: a table, so that an index known only
  /// after inlining folds.
  struct Offsets {
    int at[Layer::kNumInputs + 1];
    LINAC_HOST_DEVICE constexpr Offsets() : at() {
      for (int i = 0; i < Layer::kNumInputs; ++i)
        at[i + 1] = at[i] + C * rowBytes(i);
    }
  };
  LINAC_HOST_DEVICE static constexpr int offset(int i) {
    constexpr Offsets offsets{};
    return offsets.at[i];
  }
  static constexpr int kBytes = offset(Layer::kNumInputs);

  /// Starts the copies of warp `warp`'s tokens of the chunk of `length`
  /// tokens from `start` into `rows`.
  template <typename T>
  LINAC_DEVICE static void copy(const linac_cuda_forward_args &args,
                                int64_t start, int length, int head, int warp,
                                char *rows) {
    forEachIndex(
        [&](auto input) {
          constexpr int i = decltype(input)::value;
          if constexpr (holds(i)) {
            static_assert(rowBytes(i) % 16 == 0, "rows of whole 16-byte runs");
            constexpr int Rows = C / Warps, pieces = rowBytes(i) / 16;
            // The warp's rows are Warps tokens apart in both places.
            const char *first = reinterpret_cast<const char *>(
                Token<Layer, T>{args, start + warp, head}.input(i));
            const int64_t stride = args.input_heads[i] * rowBytes(i) * Warps;
            char *target = rows + offset(i) + warp * rowBytes(i);
            auto each = [&](auto move) {
#pragma unroll
              for (int j = 0; j < (Rows * pieces + 31) / 32; ++j) {
                const int f = laneId() + 32 * j, r = f / pieces,
                          piece = f % pieces;
                if (f < Rows * pieces && warp + r * Warps < length)
                  move(first + r * stride + piece * 16,
                       target + r * Warps * rowBytes(i) + piece * 16);
              }
            };
            // Rows move in 16-byte pieces when the input is 16-byte aligned
            // (then so is every row), else 16 bits at a time.
            if (isAligned(args.inputs[i], 16))
              each([](const char *from, char *to) {
                asm volatile(
                    "cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                        static_cast<uint32_t>(__cvta_generic_to_shared(to))),
                    "l"(from));
              });
            else
              each([](const char *from, char *to) {
                for (int b = 0; b < 16; b += 2)
                  *reinterpret_cast<unsigned short *>(to + b) =
                      *reinterpret_cast<const unsigned short *>(from + b);
              });
          }
        },
        std::make_integer_sequence<int, Layer::kNumInputs>{});
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  /// Waits for this warp's copies; the warp's lanes then read each other's.
  LINAC_DEVICE static void wait() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncwarp();
  }
};

/// The per-head parameters in shared memory, fp32, each from a 16-byte
/// boundary: every token's prologue reads them, the block copies them once.
template <typename Layer> struct ChunkParams {
  LINAC_HOST_DEVICE static constexpr int bytes(int i) {
    return paramBytes(Layer::paramSize(i));
  }
  /// Where each parameter starts: a table, so that an index known only
  /// after inlining folds.
  struct Offsets {
    int at[Layer::kNumParams + 1];
    LINAC_HOST_DEVICE constexpr Offsets() : at() {
      for (int i = 0; i < Layer::kNumParams; ++i)
        at[i + 1] = at[i] + bytes(i);
    }
  };
  LINAC_HOST_DEVICE static constexpr int offset(int i) {
    constexpr Offsets offsets{};
    return offsets.at[i];
  }
  static constexpr int kBytes = offset(Layer::kNumParams);

  /// Copies head `head`'s parameters to `to`, every thread of the block
  /// taking a share; the block synchronises before they are read.
  template <typename T>
  LINAC_DEVICE static void copy(const linac_cuda_forward_args &args, int head,
                                char *to) {
    for (int i = 0; i < Layer::kNumParams; ++i) {
      const float *from = Token<Layer, T>{args, 0, head}.param(i);
      for (int e = threadIdx.x; e < Layer::paramSize(i); e += blockDim.x)
        reinterpret_cast<float *>(to + offset(i))[e] = from[e];
    }
  }
};

/// Whether input i of Layer is in SharedInputRows, early or late.
template <typename Layer> LINAC_HOST_DEVICE constexpr bool inSharedRows(int i) {
  return Layer::sharedInput(i) || Layer::lateSharedInput(i);
}

/// The scalar inputs (those not in SharedInputRows) of a warp's tokens of a
/// chunk: lane r holds those of row warp + Warps r, loaded with the rows, a
/// chunk ahead, and kept as loaded until read (a conversion at the load
/// would wait for it there).
template <typename Layer, typename T, int Warps = kChunkWarps>
struct ChunkScalars {
  LINAC_HOST_DEVICE static constexpr bool holds(int i) {
    return !inSharedRows<Layer>(i) && Layer::inputSize(i) == 1;
  }
  T value[Layer::kNumInputs > 0 ? Layer::kNumInputs : 1];

  LINAC_DEVICE void load(const linac_cuda_forward_args &args, int64_t start,
                         int length, int head, int warp) {
    const int row = warp + laneId() * Warps;
    const bool live = laneId() < Layer::kChunkSize / Warps && row < length;
    forEachIndex(
        [&](auto input) {
          constexpr int i = decltype(input)::value;
          if constexpr (holds(i))
            if (live)
              value[i] = *Token<Layer, T>{args, start + row, head}.input(i);
        },
        std::make_integer_sequence<int, Layer::kNumInputs>{});
  }
  /// Input i of the warp's row `row`, on every lane.
  LINAC_DEVICE float at(int i, int row) const {
    return __shfl_sync(0xffffffffu, toFloat(value[i]), row / Warps);
  }
};

/// A token's inputs that stay in registers (neither in SharedInputRows nor
/// in ChunkScalars), each lane holding its run of each (WarpVec's layout):
/// loaded a token ahead of the prologue that reads them, so that a warp's
/// memory latency overlaps its previous token's work.
template <typename Layer, typename T> struct StagedInputs {
  LINAC_HOST_DEVICE static constexpr bool holds(int i) {
    return !inSharedRows<Layer>(i) && !ChunkScalars<Layer, T>::holds(i);
  }
  LINAC_HOST_DEVICE static constexpr int slotsOf(int i) {
    return holds(i) ? int((Layer::inputSize(i) + 31) / 32) : 0;
  }
  /// Where each input's slots start: a table, so that an index known only
  /// after inlining folds. Inputs of an even number of slots come first,
  /// so that each starts a register and loads into whole registers.
  struct FirstSlots {
    int at[Layer::kNumInputs], total;
    LINAC_HOST_DEVICE constexpr FirstSlots() : at(), total(0) {
      for (int odd = 0; odd < 2; ++odd)
        for (int i = 0; i < Layer::kNumInputs; ++i)
          if (slotsOf(i) % 2 == odd) {
            at[i] = total;
            total += slotsOf(i);
          }
    }
  };
  LINAC_HOST_DEVICE static constexpr int firstSlot(int i) {
    constexpr FirstSlots slots{};
    return slots.at[i];
  }
  static constexpr int kSlots = FirstSlots{}.total;
  static constexpr auto kInputs = std::make_integer_sequence<int, Layer::kNumInputs>{};

  static_assert(sizeof(T) == 2, "chunkwise kernels take 16-bit activations");
  /// Two slots a register: staging holds a token beside the one the
  /// prologue reads, so registers are scarce here.
  uint32_t words[(kSlots + 1) / 2 > 0 ? (kSlots + 1) / 2 : 1];

  LINAC_DEVICE float at(int slot) const {
    auto bits = static_cast<unsigned short>(words[slot / 2] >> (slot % 2 * 16));
    T value;
    memcpy(&value, &bits, sizeof value);
    return toFloat(value);
  }

  /// From `token`: a Token, or HeadInputs' At.
  template <typename Source> LINAC_DEVICE void load(const Source &token) {
    for (uint32_t &word : words)
      word = 0;
    forEachIndex(
        [&](auto input) {
          constexpr int i = decltype(input)::value;
          if constexpr (slotsOf(i) > 0)
            loadInput<i>(token);
        },
        kInputs);
  }

private:
  template <int i, typename Source>
  LINAC_DEVICE void loadInput(const Source &token) {
    constexpr int first = firstSlot(i), size = int(Layer::inputSize(i));
    constexpr int slots = slotsOf(i);
    const auto *p = reinterpret_cast<const unsigned short *>(token.input(i));
    // WarpVec's layout: lane l holds elements l * slots onwards.
    if constexpr (WarpVec<size>::kRuns)
      if (isAligned(p, sizeof(Run<uint32_t, slots / 2>))) {
        auto run =
            reinterpret_cast<const Run<uint32_t, slots / 2> *>(p)[laneId()];
#pragma unroll
        for (int w = 0; w < slots / 2; ++w)
          words[first / 2 + w] = run.x[w];
        return;
      }
#pragma unroll
    for (int s = 0; s < slots; ++s) {
      int index = laneId() * slots + s;
      uint32_t bits = index < size ? p[index] : 0u;
      words[(first + s) / 2] |= bits << ((first + s) % 2 * 16);
    }
  }
};

/// Input i of a staged token, read back in WarpVec's layout: from its row
/// in shared memory, or from the registers StagedInputs loaded it into.
template <typename Layer, typename T, int Warps = kChunkWarps>
struct StagedInput {
  using Staged = StagedInputs<Layer, T>;
  using Scalars = ChunkScalars<Layer, T, Warps>;
  const Staged &staged;
  const Scalars &scalars;
  int i;
  /// The chunk's rows in SharedInputRows (early and late), and the token's.
  const char *rows, *lateRows;
  int row;

  LINAC_DEVICE const T *sharedRow() const {
    auto at = [&](auto rowsOf, const char *base) {
      using Rows = decltype(rowsOf);
      return reinterpret_cast<const T *>(base + Rows::offset(i) +
                                         row * Rows::rowBytes(i));
    };
    return Layer::sharedInput(i) ? at(SharedInputRows<Layer>{}, rows)
                                 : at(SharedInputRows<Layer, true>{}, lateRows);
  }
  template <int N> LINAC_DEVICE WarpVec<N> warpVec() const {
    if (inSharedRows<Layer>(i))
      return WarpVec<N>::loadAligned(sharedRow());
    if (Scalars::holds(i)) {
      // A vector of one: lane 0's first slot.
      WarpVec<N> v = WarpVec<N>::splat(0.0f);
      float x = scalars.at(i, row);
      if (laneId() == 0)
        v.x[0] = x;
      return v;
    }
    WarpVec<N> v;
#pragma unroll
    for (int s = 0; s < WarpVec<N>::kSlots; ++s)
      v.x[s] = staged.at(Staged::firstSlot(i) + s);
    return v;
  }
  /// A scalar input is lane 0's first slot.
  LINAC_DEVICE float scalar() const {
    if (inSharedRows<Layer>(i))
      return toFloat(sharedRow()[0]);
    if (Scalars::holds(i))
      return scalars.at(i, row);
    return __shfl_sync(0xffffffffu, staged.at(Staged::firstSlot(i)), 0);
  }
};

/// A token whose inputs the prologue reads from shared memory and from its
/// warp's registers.
template <typename Layer, typename T, int Warps = kChunkWarps>
struct StagedToken : Token<Layer, T> {
  const StagedInputs<Layer, T> &staged;
  const ChunkScalars<Layer, T, Warps> &scalars;
  const char *rows, *lateRows, *params;
  int row;
  /// The generated prologue passes constant indices, so slots fold.
  LINAC_DEVICE StagedInput<Layer, T, Warps> input(int i) const {
    return {staged, scalars, i, rows, lateRows, row};
  }
  /// Parameters from ChunkParams' copy.
  LINAC_DEVICE const float *param(int i) const {
    return reinterpret_cast<const float *>(params +
                                           ChunkParams<Layer>::offset(i));
  }
};

//===----------------------------------------------------------------------===//
// Tensor-core tiles: mma.sync m16n8k16, bf16 operands, fp32 accumulators.
// An operand is either a functor returning a packed pair of consecutive
// reduction-axis elements, so that it can be scaled as it is loaded, or a
// bf16 matrix in shared memory that ldmatrix reads as it is.
//===----------------------------------------------------------------------===//

/// A bf16 matrix in shared memory, row-major, rows 16-byte aligned. As the
/// A operand its rows from `first` are the tile's rows, the reduction along
/// them; as the B operand its rows from `first` are the tile's columns.
struct SharedRows {
  const __nv_bfloat16 *m;
  int stride, first;
};
/// A bf16 matrix in shared memory read across its rows: as the A operand
/// A[r][k] = m[k][first + r], as the B operand B[k][n] = m[k][first + n].
struct SharedColumns {
  const __nv_bfloat16 *m;
  int stride, first;
};
/// SharedColumns with row k of m scaled by rowScales[k] as it is loaded.
struct ScaledSharedColumns {
  SharedColumns columns;
  const float *rowScales;
};

LINAC_DEVICE void mma(float (&d)[4], const uint32_t (&a)[4],
                      const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                 "r"(b[1]));
}

LINAC_DEVICE uint32_t sharedAddress(const __nv_bfloat16 *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// The A fragment of k-step k0 (lanes 8i..8i+7 address 8 x 8 matrix i:
/// rows +0/+8, then the reduction +0/+8, in the order the fragment takes).
LINAC_DEVICE void fragmentA(uint32_t (&a)[4], const SharedRows &x, int k0) {
  int lane = laneId();
  const __nv_bfloat16 *p =
      x.m + (x.first + lane % 16) * x.stride + k0 + lane / 16 * 8;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, "
               "[%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(sharedAddress(p)));
}
LINAC_DEVICE void fragmentA(uint32_t (&a)[4], const SharedColumns &x, int k0) {
  int lane = laneId(), matrix = lane / 8;
  const __nv_bfloat16 *p = x.m + (k0 + matrix / 2 * 8 + lane % 8) * x.stride +
                           x.first + matrix % 2 * 8;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
               "{%0, %1, %2, %3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(sharedAddress(p)));
}
LINAC_DEVICE uint32_t scalePair(uint32_t pair, float low, float high) {
  __nv_bfloat162 v;
  memcpy(&v, &pair, sizeof v);
  float2 x = __bfloat1622float2(v);
  return packPair(x.x * low, x.y * high);
}
LINAC_DEVICE void fragmentA(uint32_t (&a)[4], const ScaledSharedColumns &x,
                            int k0) {
  fragmentA(a, x.columns, k0);
  int k = k0 + (laneId() & 3) * 2;
  float low = x.rowScales[k], high = x.rowScales[k + 1];
  float low8 = x.rowScales[k + 8], high8 = x.rowScales[k + 9];
  a[0] = scalePair(a[0], low, high);
  a[1] = scalePair(a[1], low, high);
  a[2] = scalePair(a[2], low8, high8);
  a[3] = scalePair(a[3], low8, high8);
}
template <typename PairA>
LINAC_DEVICE void fragmentA(uint32_t (&a)[4], const PairA &pairA, int k0) {
  int g = laneId() >> 2, k = k0 + (laneId() & 3) * 2;
  a[0] = pairA(g, k);
  a[1] = pairA(g + 8, k);
  a[2] = pairA(g, k + 8);
  a[3] = pairA(g + 8, k + 8);
}

/// The B fragment of k-step k0 and columns n0..n0+7.
LINAC_DEVICE void fragmentB(uint32_t (&b)[2], const SharedRows &x, int k0,
                            int n0) {
  int lane = laneId();
  const __nv_bfloat16 *p =
      x.m + (x.first + n0 + lane % 8) * x.stride + k0 + lane / 8 % 2 * 8;
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(b[0]), "=r"(b[1])
               : "r"(sharedAddress(p)));
}
LINAC_DEVICE void fragmentB(uint32_t (&b)[2], const SharedColumns &x, int k0,
                            int n0) {
  const __nv_bfloat16 *p = x.m + (k0 + laneId() % 16) * x.stride + x.first + n0;
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, "
               "[%2];\n"
               : "=r"(b[0]), "=r"(b[1])
               : "r"(sharedAddress(p)));
}
template <typename PairB>
LINAC_DEVICE void fragmentB(uint32_t (&b)[2], const PairB &pairB, int k0,
                            int n0) {
  int g = laneId() >> 2, k = k0 + (laneId() & 3) * 2;
  b[0] = pairB(k, n0 + g);
  b[1] = pairB(k + 8, n0 + g);
}

/// Row and column of accumulator element r of this lane in a 16 x 8 tile.
LINAC_DEVICE int accRow(int r) { return (laneId() >> 2) + (r >= 2 ? 8 : 0); }
LINAC_DEVICE int accCol(int r) { return (laneId() & 3) * 2 + (r & 1); }

/// acc[n] += A (16 x 16 Steps) B (16 Steps x 8 Tiles); a pair functor
/// pairA(row, k) or pairB(k, col) gives elements (k, k + 1). Tiles
/// n >= liveTiles are skipped.
template <int Tiles, int Steps, typename SourceA, typename SourceB>
LINAC_DEVICE void warpProduct(float (&acc)[Tiles][4], const SourceA &sourceA,
                              const SourceB &sourceB, int liveSteps = Steps,
                              int liveTiles = Tiles) {
#pragma unroll
  for (int s = 0; s < Steps; ++s) {
    if (s >= liveSteps)
      break;
    uint32_t a[4];
    fragmentA(a, sourceA, s * 16);
#pragma unroll
    for (int n = 0; n < Tiles; ++n) {
      if (n >= liveTiles)
        break;
      uint32_t b[2];
      fragmentB(b, sourceB, s * 16, n * 8);
      mma(acc[n], a, b);
    }
  }
}

/// fp32 tiles on tensor cores as tf32 (mma.sync m16n8k8), rounded to
/// nearest.
LINAC_DEVICE uint32_t tf32(float x) {
  uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(bits) : "f"(x));
  return bits;
}

/// acc += sign A B for A (16 x 8 steps) and B (8 steps x 8), both fp32 and
/// row-major in shared memory; at most MaxSteps steps.
template <int MaxSteps>
LINAC_DEVICE void tf32Product(float (&acc)[4], const float *a, int aStride,
                              const float *b, int bStride, int steps,
                              float sign) {
  const int g = laneId() >> 2, t = laneId() & 3;
#pragma unroll
  for (int s = 0; s < MaxSteps; ++s) {
    if (s >= steps)
      break;
    const int k = s * 8;
    uint32_t fa[4] = {tf32(sign * a[g * aStride + k + t]),
                      tf32(sign * a[(g + 8) * aStride + k + t]),
                      tf32(sign * a[g * aStride + k + t + 4]),
                      tf32(sign * a[(g + 8) * aStride + k + t + 4])};
    uint32_t fb[2] = {tf32(b[(k + t) * bStride + g]),
                      tf32(b[(k + t + 4) * bStride + g])};
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(fa[0]), "r"(fa[1]), "r"(fa[2]), "r"(fa[3]), "r"(fb[0]),
                   "r"(fb[1]));
  }
}

template <int Tiles> LINAC_DEVICE void zero(float (&acc)[Tiles][4]) {
#pragma unroll
  for (int n = 0; n < Tiles; ++n)
    for (int r = 0; r < 4; ++r)
      acc[n][r] = 0.0f;
}

//===----------------------------------------------------------------------===//
// Shared memory
//===----------------------------------------------------------------------===//

template <typename Layer> struct ChunkLayout {
  static constexpr ChunkMap kMap{ChunkShape{
      Layer::K, Layer::V, Layer::kNormalizer, Layer::kErase, Layer::kKeyGate,
      Layer::kValueDecay, SharedInputRows<Layer>::kBytes / Layer::kChunkSize,
      ChunkParams<Layer>::kBytes}};
  static constexpr int C = kMap.C, K = kMap.K, V = kMap.V, U = kMap.U;
  static constexpr int KS = kMap.KS, DS = kMap.DS, US = kMap.US, AS = kMap.AS,
                       IS = kMap.IS;
  static constexpr bool kVectorGate = Layer::kKeyGate == Gate::Vector;
  static constexpr bool kPublishAfterPrologue = kMap.publishAfterPrologue;
  static constexpr size_t kBytes = kMap.bytes;
  static_assert(C == Layer::kChunkSize, "the plan's chunk");
  static_assert(SharedInputRows<Layer, true>::kBytes <= kMap.lateRowBytes(),
                "the late input rows fit their memory");
  static_assert(kBytes <= kSm90aSharedMemory,
                "the chunk's working set exceeds shared memory");

  __nv_bfloat16 *q, *k, *e, *state, *delta;
  float *values, *p, *a, *gates, *stateNormalizer, *weights, *inverses,
      *valueGates;
  char *inputRows, *lateInputRows, *params;

  LINAC_DEVICE explicit ChunkLayout(char *base)
      : q(reinterpret_cast<__nv_bfloat16 *>(base + kMap.q)),
        k(reinterpret_cast<__nv_bfloat16 *>(base + kMap.k)),
        e(reinterpret_cast<__nv_bfloat16 *>(base + kMap.e)),
        state(reinterpret_cast<__nv_bfloat16 *>(base + kMap.state)),
        delta(reinterpret_cast<__nv_bfloat16 *>(base + kMap.delta)),
        values(reinterpret_cast<float *>(base + kMap.values)),
        p(reinterpret_cast<float *>(base + kMap.p)),
        a(reinterpret_cast<float *>(base + kMap.a)),
        gates(reinterpret_cast<float *>(base + kMap.gates)),
        stateNormalizer(reinterpret_cast<float *>(base + kMap.stateNormalizer)),
        weights(reinterpret_cast<float *>(base + kMap.weights)),
        inverses(reinterpret_cast<float *>(base + kMap.inverses)),
        valueGates(reinterpret_cast<float *>(base + kMap.valueGates)),
        inputRows(base + kMap.inputRows), lateInputRows(base + kMap.lateRows),
        params(base + kMap.params) {}

  /// Cumulative key-side log-gate of token i at channel d (any d for a
  /// scalar gate); 0 before the chunk and without a gate.
  LINAC_DEVICE float lambda(int i, int d) const {
    if constexpr (Layer::kKeyGate == Gate::None)
      return 0.0f;
    if (i < 0)
      return 0.0f;
    return kVectorGate ? gates[i * KS + d] : gates[i];
  }
  /// The log-gate the query of token i sees.
  LINAC_DEVICE float lambdaQ(int i, int d) const {
    return lambda(Layer::kReadBefore ? i - 1 : i, d);
  }
  /// Cumulative value-side log-gate of token i at column j; 0 before the
  /// chunk and without a value-side decay.
  LINAC_DEVICE float psi(int i, int j) const {
    if constexpr (!Layer::kValueDecay)
      return 0.0f;
    return i < 0 ? 0.0f : valueGates[i * US + j];
  }
  /// The value-side log-gate the query of token i sees.
  LINAC_DEVICE float psiQ(int i, int j) const {
    return psi(Layer::kReadBefore ? i - 1 : i, j);
  }
  LINAC_DEVICE static float at(const __nv_bfloat16 *m, int stride, int row,
                               int col) {
    return __bfloat162float(m[row * stride + col]);
  }
};

/// A layer as the warpgroup kernel stages its inputs: every input whose
/// rows are whole 16-byte runs, the whole chunk's, by the producer's warps.
template <typename Layer> struct WarpgroupInputs : Layer {
  LINAC_HOST_DEVICE static constexpr bool sharedInput(int i) {
    return stagedRowBytes(Layer::inputSize(i)) > 0;
  }
  LINAC_HOST_DEVICE static constexpr bool lateSharedInput(int) { return false; }
};

template <typename Layer>
LINAC_HOST_DEVICE constexpr WarpgroupMap warpgroupMap() {
  return WarpgroupMap(Layer::K, Layer::V, Layer::kKeyGate, Layer::kErase,
                      SharedInputRows<WarpgroupInputs<Layer>>::kBytes /
                          Layer::kChunkSize,
                      ChunkParams<Layer>::kBytes);
}

template <typename Layer> constexpr int chunkThreads() {
  return Layer::kChunkKernel == ChunkKernel::Warpgroup
             ? warpgroupThreads(Layer::V)
             : kChunkThreads;
}

/// v over the same lanes and slots as a vector of N, zero past the shorter
/// of the two.
template <int N, int M> LINAC_DEVICE WarpVec<N> resized(const WarpVec<M> &v) {
  static_assert(WarpVec<N>::kSlots == WarpVec<M>::kSlots,
                "a tile of 16 never takes another slot");
  WarpVec<N> r;
#pragma unroll
  for (int i = 0; i < WarpVec<N>::kSlots; ++i)
    r.x[i] = WarpVec<N>::index(i) < (N < M ? N : M) ? v.x[i] : 0.0f;
  return r;
}

/// A layer whose K or V is not a multiple of 16, as the chunkwise kernel
/// holds it: both padded to whole tiles of 16, the generated prologue's
/// operands widened with zeros (a zero key channel or log-gate changes no
/// product) and the reads narrowed back for the generated epilogue. Only
/// the kernel's tiles take the padded sizes; tokens, states and outputs in
/// memory keep the layer's.
template <typename Layer> struct PaddedLayer : Layer {
  static constexpr int K = paddedDim(Layer::K), V = paddedDim(Layer::V);
  struct Chunk {
    template <typename Token>
    LINAC_DEVICE static void prologue(const Token &token,
                                      LayerOperands<Layer, K, V> &out) {
      LayerOperands<Layer> ops;
      Layer::Chunk::prologue(token, ops);
      out.q = resized<K>(ops.q);
      out.k = resized<K>(ops.k);
      out.e = resized<K>(ops.e);
      if constexpr (Layer::kKeyGate == Gate::Vector)
        out.gk = resized<K>(ops.gk);
      else
        out.gk = ops.gk;
      if constexpr (Layer::kValueDecay)
        out.gv = resized<V>(ops.gv);
      out.u = {resized<V>(ops.u.u), ops.u.weight};
    }
    template <typename Token, typename Out>
    LINAC_DEVICE static void epilogue(const Token &token, const WarpVec<V> &read,
                                      Out *out) {
      Layer::Chunk::epilogue(token, resized<Layer::V>(read), out);
    }
  };
};

/// The layer the chunkwise kernel's tiles take: Layer itself when K and V
/// are whole tiles of 16.
template <typename Layer>
using ChunkTile = std::conditional_t<Layer::K % 16 == 0 && Layer::V % 16 == 0,
                                     Layer, PaddedLayer<Layer>>;

template <typename Layer> constexpr size_t chunkSharedBytes() {
  if constexpr (Layer::kChunkKernel == ChunkKernel::Pipelined)
    return size_t(PipelineMap(Layer::K, Layer::V).bytes);
  else if constexpr (Layer::kChunkKernel == ChunkKernel::Warpgroup)
    return size_t(warpgroupMap<Layer>().bytes);
  else
    return ChunkLayout<ChunkTile<Layer>>::kBytes;
}

//===----------------------------------------------------------------------===//
// The kernel
//===----------------------------------------------------------------------===//

/// What one block of the chunkwise kernel runs: tokens [begin, end) of one
/// head, from one state into another.
struct ChunkWork {
  int64_t begin = 0, end = 0;
  int64_t seq = 0;
  int head = 0;
  /// The entering state, rows of stateColumns floats; null for zeros.
  const float *initial = nullptr;
  /// At least 0: the entering state is the identity's columns from this
  /// one and every value is zero, so that the state leaving is the same
  /// columns of the tokens' transition.
  int identityFrom = -1;
  /// Where the state leaving goes, rows of `finalStride` floats (its
  /// columns, or the transition's from identityFrom); null for nowhere.
  float *final = nullptr;
  int64_t finalStride = 0;
  /// Whether the block writes the tokens' outputs.
  bool reads = true;
  /// Where each key channel's total log-gate over the tokens goes, or null.
  float *logGates = nullptr;
};

/// Blocks of the LOCAL pass each segment may take besides its state's: the
/// column blocks of the kernel's (padded) V of its K x K transition, with
/// an erase.
template <typename Layer> constexpr int transitionBlocks() {
  return cuda::transitionBlocks(Layer::K, Layer::V, Layer::kErase);
}

/// A head's slot for segment `segment` in args.segment_states.
template <typename Layer>
LINAC_DEVICE float *segmentState(const linac_cuda_forward_args &args,
                                 int64_t segment, int head) {
  return args.segment_states + (segment * args.num_heads + head) *
                                   int64_t(Layer::K) * stateColumns<Layer>();
}

/// This block's work in args' pass (abi.h); false when it has none.
template <typename Layer>
LINAC_DEVICE bool chunkWork(const linac_cuda_forward_args &args,
                            ChunkWork &work) {
  constexpr int K = Layer::K, V = ChunkTile<Layer>::V;
  work.head = blockIdx.x;
  work.finalStride = stateColumns<Layer>();
  auto wholeSequence = [&](int64_t seq) {
    work.seq = seq;
    const int64_t offset = stateOffset<Layer>(args, seq, work.head);
    work.initial = args.initial_state ? args.initial_state + offset : nullptr;
    work.final = args.final_state ? args.final_state + offset : nullptr;
  };
  if (args.segment_pass == LINAC_CUDA_WHOLE) {
    sequenceBounds(args, blockIdx.y, work.begin, work.end);
    wholeSequence(blockIdx.y);
    return true;
  }
  const int64_t s = blockIdx.y;
  const linac_cuda_segment segment = args.segments[s];
  work.begin = segment.begin;
  work.end = segment.end;
  work.seq = segment.seq;
  if (args.segment_pass == LINAC_CUDA_SEGMENT_FINISH) {
    if (segment.index == 0)
      return false;
    wholeSequence(segment.seq);
    work.initial = segmentState<Layer>(args, s - 1, work.head);
    if (!segment.last)
      work.final = nullptr;
    return true;
  }
  if (segment.index == 0) {
    // From the true initial state: the first segment is final here.
    if (blockIdx.z != 0)
      return false;
    wholeSequence(segment.seq);
    if (!segment.last)
      work.final = segmentState<Layer>(args, s, work.head);
    return true;
  }
  if (segment.last)
    return false;
  work.reads = false;
  const int64_t slot = s * args.num_heads + work.head;
  if (blockIdx.z == 0) {
    work.final = segmentState<Layer>(args, s, work.head);
    if (!Layer::kErase && (Layer::kKeyGate != Gate::None || Layer::kValueDecay))
      work.logGates = args.segment_transitions +
                      slot * transitionFloats(K, stateColumns<Layer>(), false);
    return true;
  }
  work.identityFrom = (blockIdx.z - 1) * V;
  work.final = args.segment_transitions + slot * K * K + work.identityFrom;
  work.finalStride = K;
  return true;
}

template <typename Layer, typename T>
LINAC_DEVICE void runChunks(const linac_cuda_forward_args &args,
                            const ChunkWork &work) {
  using Tile = ChunkTile<Layer>;
  using Layout = ChunkLayout<Tile>;
  constexpr int C = Layout::C, K = Layout::K, V = Layout::V, U = Layout::U;
  constexpr int KS = Layout::KS, DS = Layout::DS, US = Layout::US,
                AS = Layout::AS;
  constexpr int ValueTiles = U / 8, KeySteps = K / 16, ChunkSteps = C / 16;
  // Each half of the warps takes HalfTiles value tiles (the second half one
  // fewer when their number is odd).
  constexpr int HalfTiles = (ValueTiles + 1) / 2;
  constexpr bool kErase = Layer::kErase, kNormalizer = Layer::kNormalizer,
                 kValueDecay = Layer::kValueDecay;
  constexpr Gate G = Layer::kKeyGate;
  static_assert(!kValueDecay || !kErase,
                "an erase under a value-side decay takes the scan");
  // The reads and the erase residual split the value tiles into ReadParts:
  // halves where roles 0-3 read and roles 4-7 take the residual (step 3).
  constexpr bool kSplitRoles = G == Gate::Vector && kErase;
  constexpr int ReadParts = kSplitRoles ? 2 : 4;
  constexpr int PartTiles = (ValueTiles + ReadParts - 1) / ReadParts;
  static_assert(C == 64, "four roles of 16 rows cover a chunk, one warp's "
                         "lanes two tokens each");
  static_assert(K % 16 == 0 && V % 16 == 0 && K <= 128 && V <= 128,
                "eight roles of 16 key rows hold the state");

  extern __shared__ __align__(16) char shared[];
  Layout s(shared);
  const int warpIndex = threadIdx.x / 32;
  // The role below; `tiles` value tiles from column `columnBase`.
  const int warp = warpIndex % 8;
  const int columnBase = warpIndex / 8 * HalfTiles * 8;
  const int tiles = warpIndex < 8 ? HalfTiles : ValueTiles - HalfTiles;
  const int head = work.head;
  const int64_t begin = work.begin, end = work.end;
  const float scale = readScale<Layer>(args);
  T *output = static_cast<T *>(args.output);

  // The fp32 state: role w holds key rows 16w..16w+15 of its columns.
  const bool stateWarp = warp < K / 16;
  const int stateRow = warp * 16;
  float state[HalfTiles][4];
  // Where column `col` of the tiles is in memory (-1: nowhere): padded
  // rows and columns are not, and the normaliser's column follows V there.
  auto memoryColumn = [&](int row, int col) {
    if (row >= Layer::K)
      return -1;
    if (work.identityFrom >= 0)
      return col < V && work.identityFrom + col < Layer::K ? col : -1;
    return col < Layer::V                     ? col
           : Layer::kNormalizer && col == V ? Layer::V
                                              : -1;
  };
  for (int n = 0; n < HalfTiles; ++n)
    for (int r = 0; r < 4; ++r) {
      int row = stateRow + accRow(r), col = columnBase + n * 8 + accCol(r);
      int at = memoryColumn(row, col);
      float x = 0.0f;
      if (work.identityFrom >= 0)
        x = at >= 0 && row == work.identityFrom + col ? 1.0f : 0.0f;
      else if (work.initial && at >= 0)
        x = work.initial[row * stateColumns<Layer>() + at];
      state[n][r] = stateWarp && n < tiles ? x : 0.0f;
    }
  // Each state warp's two rows' total log-gates, and thread j's column's
  // under a value-side decay, for work.logGates.
  float logGates[2] = {0.0f, 0.0f};
  float columnLogGate = 0.0f;
  // Accumulators r and r + 1 are neighbouring columns of one row: a pair
  // a store.
  auto publishState = [&] {
    if (stateWarp)
      for (int n = 0; n < tiles; ++n)
        for (int r = 0; r < 4; r += 2) {
          int row = stateRow + accRow(r), col = columnBase + n * 8 + accCol(r);
          *reinterpret_cast<uint32_t *>(s.state + row * DS + col) =
              packPair(state[n][r], state[n][r + 1]);
          if (kNormalizer && col == V)
            s.stateNormalizer[row] = state[n][r];
        }
  };
  if constexpr (!Layout::kPublishAfterPrologue)
    publishState();

  // Each warp's next token, loaded a token ahead of its prologue (for a
  // chunk's first tokens, during the previous chunk's epilogue).
  const HeadInputs<Layer, T> inputs(args, begin, head);
  StagedInputs<Layer, T> next;
  if (begin + warpIndex < end)
    next.load(inputs.at(warpIndex));
  using Rows = SharedInputRows<Layer>;
  auto chunkLength = [&](int64_t start) {
    return end - start < C ? int(end - start) : C;
  };
  Rows::template copy<T>(args, begin, chunkLength(begin), head, warpIndex,
                         s.inputRows);
  using LateRows = SharedInputRows<Layer, true>;
  char *const lateRows = s.lateInputRows;
  LateRows::template copy<T>(args, begin, chunkLength(begin), head, warpIndex,
                             lateRows);
  ChunkScalars<Layer, T> scalars;
  scalars.load(args, begin, chunkLength(begin), head, warpIndex);
  if constexpr (Layer::kNumParams > 0) {
    ChunkParams<Layer>::template copy<T>(args, head, s.params);
    __syncthreads();
  }
  for (int64_t start = begin; start < end; start += C) {
    const int L = chunkLength(start);
    // With an erase the prologue writes `values`, which the previous
    // chunk's epilogue reads; without, nothing it writes is read after the
    // previous chunk's last barrier.
    if constexpr (kErase)
      __syncthreads();

    // 1. Prologue: token operands into shared memory, zeros past the end.
    Rows::wait();
    for (int i = warpIndex; i < C; i += kChunkWarps) {
      LayerOperands<Layer, K, V> ops;
      if (i < L) {
        StagedInputs<Layer, T> current = next;
        if (i + kChunkWarps < L)
          next.load(inputs.at(int(start - begin) + i + kChunkWarps));
        Tile::Chunk::prologue(
            StagedToken<Layer, T>{{args, start + i, head}, current, scalars,
                                  s.inputRows, lateRows, s.params, i},
            ops);
        if (work.identityFrom >= 0)
          ops.u = {WarpVec<V>::splat(0.0f), 0.0f};
      } else {
        ops.q = ops.k = ops.e = WarpVec<K>::splat(0.0f);
        ops.u = {WarpVec<V>::splat(0.0f), 0.0f};
        if constexpr (G == Gate::Vector)
          ops.gk = WarpVec<K>::splat(0.0f);
        else
          ops.gk = 0.0f;
        if constexpr (kValueDecay)
          ops.gv = WarpVec<V>::splat(0.0f);
      }
      ops.q.storeAligned(s.q + i * KS);
      ops.k.storeAligned(s.k + i * KS);
      if constexpr (kErase)
        ops.e.storeAligned(s.e + i * KS);
      // Floored before the cumulative sums: a zero decay factor (-inf)
      // would make their differences NaN.
      if constexpr (G == Gate::Vector)
        ops.gk.map([](float g) { return floorLogGate(g); })
            .storeAligned(s.gates + i * KS);
      if constexpr (G == Gate::Scalar)
        if (laneId() == 0)
          s.gates[i] = floorLogGate(ops.gk);
      if constexpr (kValueDecay)
        ops.gv.map([](float g) { return floorLogGate(g); })
            .storeAligned(s.valueGates + i * US);
      // Without an erase Delta is U, stored as the products read it.
      if constexpr (kErase)
        ops.u.u.storeAligned(s.values + i * US);
      else
        ops.u.u.storeAligned(s.delta + i * DS);
      for (int j = V + laneId(); j < U; j += 32) {
        float x = j == V ? ops.u.weight : 0.0f;
        if constexpr (kErase)
          s.values[i * US + j] = x;
        else
          s.delta[i * DS + j] = __float2bfloat16(x);
      }
      if (kNormalizer && !kErase && laneId() == 0)
        s.weights[i] = ops.u.weight;
    }
    // This warp's rows are read: the next chunk's may replace them.
    __syncwarp();
    if (start + C < end) {
      Rows::template copy<T>(args, start + C, chunkLength(start + C), head,
                             warpIndex, s.inputRows);
      scalars.load(args, start + C, chunkLength(start + C), head, warpIndex);
    }
    __syncthreads();
    if (start + C < end)
      prefetchInputs<Layer, T, StagedInputs<Layer, T>>(
          args, start + C, chunkLength(start + C), head, threadIdx.x,
          blockDim.x);
    // Every warp has read its late input rows; the gates' barrier below
    // orders this before the products that read the state.
    if constexpr (Layout::kPublishAfterPrologue)
      publishState();

    // 2. Cumulative log-gates.
    // Four lanes a channel, each summing a run of 16 tokens, then adding
    // the runs before its own.
    auto cumulate = [&](float *gates, int stride, int channels) {
      constexpr int Runs = 4, RunLength = C / Runs;
      for (int t = threadIdx.x; t < channels * Runs; t += blockDim.x) {
        const int d = t / Runs, run = t % Runs;
        float *column = gates + run * RunLength * stride + d;
        float x[RunLength];
#pragma unroll
        for (int i = 0; i < RunLength; ++i)
          x[i] = column[i * stride];
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < RunLength; ++i)
          x[i] = sum += x[i];
        float inclusive = sum;
#pragma unroll
        for (int offset = 1; offset < Runs; offset *= 2) {
          float below = __shfl_up_sync(0xffffffffu, inclusive, offset, Runs);
          if (run >= offset)
            inclusive += below;
        }
        const float before = inclusive - sum;
#pragma unroll
        for (int i = 0; i < RunLength; ++i)
          column[i * stride] = x[i] + before;
      }
    };
    static_assert(K % 8 == 0 && V % 8 == 0, "whole warps take the channels");
    if constexpr (kValueDecay)
      cumulate(s.valueGates, US, V);
    if constexpr (G == Gate::Vector) {
      cumulate(s.gates, KS, K);
    } else if constexpr (G == Gate::Scalar) {
      // Warp 0 scans: two tokens per lane, then across lanes.
      if (warpIndex == 0) {
        int lane = laneId();
        float first = s.gates[2 * lane], both = first + s.gates[2 * lane + 1];
        float inclusive = both;
        for (int offset = 1; offset < 32; offset *= 2) {
          float below = __shfl_up_sync(0xffffffffu, inclusive, offset);
          if (lane >= offset)
            inclusive += below;
        }
        float before = inclusive - both;
        float last = __shfl_sync(0xffffffffu, inclusive, 31);
        s.gates[2 * lane] = before + first;
        s.gates[2 * lane + 1] = inclusive;
        s.gates[C + 2 * lane] = __expf(last - (before + first));
        s.gates[C + 2 * lane + 1] = __expf(last - inclusive);
      }
    }
    if constexpr (G != Gate::None || kValueDecay)
      __syncthreads();

    // 3. The erase residual R = U - (E (.) Lambda) S0. This and the reads in
    // step 6 take 16 tokens from readRows and the value tiles of one part of
    // the columns. A key-vector gate scales each warp's rows by exponentials
    // of its own, so with an erase roles 0-3 read and roles 4-7 take the
    // residual, on half the columns each; otherwise every warp does both
    // (or reads) on a quarter.
    // What the state gives the queries waits until step 6, so that its
    // accumulators are not live across the solve.
    const int readRows = (warpIndex % 4) * 16;
    const int readColumns =
        warpIndex / (kChunkWarps / ReadParts) * PartTiles * 8;
    const int readTiles = min(PartTiles, ValueTiles - readColumns / 8);
    const bool reads = !kSplitRoles || warp < 4;
    auto stateProduct = [&](float (&acc)[PartTiles][4],
                            const __nv_bfloat16 *x, bool query) {
      auto decay = [&](int i, int d) {
        return query ? s.lambdaQ(i, d) : s.lambda(i, d);
      };
      zero(acc);
      const SharedColumns state{s.state, DS, readColumns};
      if constexpr (G == Gate::Vector)
        warpProduct<PartTiles, KeySteps>(
            acc,
            [&](int r, int d) {
              int i = readRows + r;
              return packPair(Layout::at(x, KS, i, d) * __expf(decay(i, d)),
                              Layout::at(x, KS, i, d + 1) *
                                  __expf(decay(i, d + 1)));
            },
            state, KeySteps, readTiles);
      else
        warpProduct<PartTiles, KeySteps>(acc, SharedRows{x, KS, readRows},
                                         state, KeySteps, readTiles);
      for (int n = 0; n < PartTiles; ++n)
        for (int r = 0; r < 4; ++r) {
          float factor = query ? scale : 1.0f;
          if constexpr (G == Gate::Scalar)
            factor *= __expf(decay(readRows + accRow(r), 0));
          if constexpr (kValueDecay)
            factor *= __expf(
                s.psiQ(readRows + accRow(r), readColumns + n * 8 + accCol(r)));
          acc[n][r] *= factor;
        }
    };
    if (kErase && (G != Gate::Vector || !reads)) {
      float fromState[PartTiles][4];
      stateProduct(fromState, s.e, false);
      for (int n = 0; n < readTiles; ++n)
        for (int r = 0; r < 4; ++r)
          s.values[(readRows + accRow(r)) * US + readColumns + n * 8 +
                   accCol(r)] -= fromState[n][r];
    }

    // 4. The intra-chunk matrices, masked before any exponential:
    // P_ij = sum_d q_id k_jd e^(lambdaQ_id - lambda_jd), j <= i (j < i when
    // reading first); A_ij likewise with e and lambda, j < i.
    const int rowBase = (warp % 4) * 16;
    const bool queryWarp = warp < 4;
    const bool firstHalf = warpIndex < 8;
    if constexpr (G != Gate::Vector) {
      // One task a warp: 16 rows of P (then of A) against 16 keys, the
      // tasks above the diagonal skipped (the products never read them).
      constexpr int Tasks = kErase ? 32 : 16;
      for (int task = warpIndex; task < Tasks; task += kChunkWarps) {
        const bool query = task < 16;
        const int rows = task % 4 * 16, keys = task / 4 % 4 * 16;
        // P serves the reads alone.
        if (keys > rows || (query && !work.reads))
          continue;
        const __nv_bfloat16 *x = query ? s.q : s.e;
        float *target = query ? s.p : s.a;
        const bool strict = !query || Layer::kReadBefore;
        float acc[2][4];
        zero(acc);
        warpProduct<2, KeySteps>(acc, SharedRows{x, KS, rows},
                                 SharedRows{s.k, KS, keys});
        for (int n = 0; n < 2; ++n)
          for (int r = 0; r < 4; ++r) {
            int i = rows + accRow(r), j = keys + n * 8 + accCol(r);
            bool live = strict ? j < i : j <= i;
            float from = query ? s.lambdaQ(i, 0) : s.lambda(i, 0);
            float factor = query ? scale : 1.0f;
            if constexpr (G == Gate::Scalar)
              factor *= __expf(from - s.lambda(j, 0));
            target[i * AS + j] = live ? acc[n][r] * factor : 0.0f;
          }
      }
    } else if (queryWarp && (firstHalf || kErase)) {
      // Sub-chunks before this warp's: factorised through the log-gate at
      // the end of the previous sub-chunk, so both factors are at most 1.
      // The first half of the warps takes P, the second A.
      const int ref = rowBase - 1;
      float acc[C / 8][4];
      zero(acc);
      auto pairB = [&](int d, int j) {
        return packPair(Layout::at(s.k, KS, j, d) *
                            __expf(s.lambda(ref, d) - s.lambda(j, d)),
                        Layout::at(s.k, KS, j, d + 1) *
                            __expf(s.lambda(ref, d + 1) - s.lambda(j, d + 1)));
      };
      int liveTiles = rowBase / 8;
      // x_i (.) e^(decay_i - lambda_ref) against pairB, for P and for A.
      auto offDiagonal = [&](float (&acc)[C / 8][4], const __nv_bfloat16 *x,
                             bool query) {
        auto factor = [&](int i, int d) {
          return __expf((query ? s.lambdaQ(i, d) : s.lambda(i, d)) -
                        s.lambda(ref, d));
        };
        warpProduct<C / 8, KeySteps>(
            acc,
            [&](int r, int d) {
              int i = rowBase + r;
              return packPair(Layout::at(x, KS, i, d) * factor(i, d),
                              Layout::at(x, KS, i, d + 1) * factor(i, d + 1));
            },
            pairB, KeySteps, liveTiles);
      };
      if (liveTiles > 0 && (work.reads || !firstHalf))
        offDiagonal(acc, firstHalf ? s.q : s.e, firstHalf);
      float *target = firstHalf ? s.p : s.a;
      for (int n = 0; n < C / 8; ++n)
        for (int r = 0; r < 4; ++r) {
          int i = rowBase + accRow(r), j = n * 8 + accCol(r);
          if (j >= rowBase && j < rowBase + 16)
            continue; // the diagonal sub-chunk, below
          target[i * AS + j] =
              n < liveTiles ? acc[n][r] * (firstHalf ? scale : 1.0f) : 0.0f;
        }
    } else if (!queryWarp) {
      // The diagonal sub-chunk of role w - 4, by halves of 8 tokens. A pair
      // (i, j <= i) inside a half is taken whole by a lane, the key channels
      // four at a time, so that no pair needs a reduction across lanes: the
      // second half of the warps takes the first 64 of those 72 pairs, the
      // first half the last 8 and the pairs across the halves, a product
      // factorised through the log-gate at the end of the first half (both
      // factors at most 1), P's rows and A's rows the two halves of a tile.
      constexpr int kHalfPairs = 8 * 9 / 2;
      const int half = warpIndex / 8;
      auto pairwise = [&](int i, int j) {
        float pSum = 0.0f, aSum = 0.0f;
        for (int d = 0; d < K; d += 4) {
          float4 li = *reinterpret_cast<const float4 *>(s.gates + i * KS + d);
          float4 lj = *reinterpret_cast<const float4 *>(s.gates + j * KS + d);
          float4 lq = li;
          if constexpr (Layer::kReadBefore)
            lq = i > 0 ? *reinterpret_cast<const float4 *>(s.gates + (i - 1) * KS + d)
                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          auto four = [&](const __nv_bfloat16 *m, int row) {
            const __nv_bfloat162 *p2 =
                reinterpret_cast<const __nv_bfloat162 *>(m + row * KS + d);
            float2 lo = __bfloat1622float2(p2[0]), hi = __bfloat1622float2(p2[1]);
            return make_float4(lo.x, lo.y, hi.x, hi.y);
          };
          float4 k = four(s.k, j), q = four(s.q, i);
          pSum += q.x * k.x * __expf(lq.x - lj.x) + q.y * k.y * __expf(lq.y - lj.y) +
                  q.z * k.z * __expf(lq.z - lj.z) + q.w * k.w * __expf(lq.w - lj.w);
          if constexpr (kErase) {
            float4 e = four(s.e, i);
            aSum += e.x * k.x * __expf(li.x - lj.x) + e.y * k.y * __expf(li.y - lj.y) +
                    e.z * k.z * __expf(li.z - lj.z) + e.w * k.w * __expf(li.w - lj.w);
          }
        }
        s.p[i * AS + j] = !Layer::kReadBefore || j < i ? pSum * scale : 0.0f;
        if constexpr (kErase)
          s.a[i * AS + j] = j < i ? aSum : 0.0f;
      };
      for (int pair = laneId() + (half ? 0 : 64);
           pair < (half ? 64 : 2 * kHalfPairs); pair += 32) {
        const int first = rowBase + pair / kHalfPairs * 8,
                  t = pair % kHalfPairs;
        int ii = int((sqrtf(8.0f * t + 1.0f) - 1.0f) * 0.5f);
        ii += (ii + 1) * (ii + 2) / 2 <= t;
        pairwise(first + ii, first + t - ii * (ii + 1) / 2);
      }
      if (half == 0) {
        const int ref = rowBase + 7;
        float acc[1][4];
        zero(acc);
        warpProduct<1, KeySteps>(
            acc,
            [&](int r, int d) {
              const int i = rowBase + 8 + r % 8;
              const bool query = r < 8;
              if (!kErase && !query)
                return 0u;
              auto factor = [&](int c) {
                return __expf((query ? s.lambdaQ(i, c) : s.lambda(i, c)) -
                              s.lambda(ref, c));
              };
              const __nv_bfloat16 *x = query ? s.q : s.e;
              return packPair(Layout::at(x, KS, i, d) * factor(d),
                              Layout::at(x, KS, i, d + 1) * factor(d + 1));
            },
            [&](int d, int j) {
              const int key = rowBase + j;
              return packPair(
                  Layout::at(s.k, KS, key, d) *
                      __expf(s.lambda(ref, d) - s.lambda(key, d)),
                  Layout::at(s.k, KS, key, d + 1) *
                      __expf(s.lambda(ref, d + 1) - s.lambda(key, d + 1)));
            });
        for (int r = 0; r < 4; ++r) {
          const int row = accRow(r), i = rowBase + 8 + row % 8,
                    j = rowBase + accCol(r);
          if (row < 8)
            s.p[i * AS + j] = acc[0][r] * scale;
          else if constexpr (kErase)
            s.a[i * AS + j] = acc[0][r];
        }
      }
      for (int index = laneId() + 32 * half; index < 256; index += 64) {
        int i = rowBase + index / 16, j = rowBase + index % 16;
        if (j > i) {
          s.p[i * AS + j] = 0.0f;
          if constexpr (kErase)
            s.a[i * AS + j] = 0.0f;
        }
      }
    }
    __syncthreads();

    // 5. Delta = (I + A)^-1 R by blocks of 16 rows on tensor cores, in
    // tf32 since each block feeds the next: first the inverses T_b of the
    // diagonal blocks of I + A, all at once; then for each block t in turn
    // Delta_t = T_t (R_t - A_t,<t Delta_<t), every warp on its value tiles.
    // Delta goes to `values` in fp32 (the next blocks read it) and to
    // `delta` in bf16 (the products of step 6).
    if constexpr (kErase) {
      constexpr int Rows = 16, Blocks = C / Rows, IS = Layout::IS;
      static_assert(Blocks * Rows == 4 * kChunkWarps,
                    "each warp inverts four columns of a diagonal block");
      {
        // Warp w: columns 4(w % 4).. of block w / 4, two a half-warp, lane
        // i of a half holding row i; forward substitution down the rows.
        const int b = warpIndex / 4, i = laneId() % 16;
        const int column = warpIndex % 4 * 4 + laneId() / 16;
        const float *row = s.a + (b * Rows + i) * AS + b * Rows;
        float a[Rows];
#pragma unroll
        for (int m = 0; m < Rows; m += 4) {
          float4 four = *reinterpret_cast<const float4 *>(row + m);
          a[m] = four.x, a[m + 1] = four.y, a[m + 2] = four.z,
          a[m + 3] = four.w;
        }
        float x0 = i == column ? 1.0f : 0.0f,
              x1 = i == column + 2 ? 1.0f : 0.0f;
#pragma unroll
        for (int m = 0; m < Rows - 1; ++m) {
          float y0 = __shfl_sync(0xffffffffu, x0, m, 16);
          float y1 = __shfl_sync(0xffffffffu, x1, m, 16);
          if (i > m) {
            x0 -= a[m] * y0;
            x1 -= a[m] * y1;
          }
        }
        s.inverses[(b * Rows + i) * IS + column] = x0;
        s.inverses[(b * Rows + i) * IS + column + 2] = x1;
      }
      __syncthreads();
      const int g = laneId() >> 2, pair = (laneId() & 3) * 2;
      for (int t = 0; t < Blocks; ++t) {
        const int rows = t * Rows;
        for (int n = warpIndex; n < ValueTiles; n += kChunkWarps) {
          const int cols = n * 8;
          float *low = s.values + (rows + g) * US + cols + pair;
          float *high = low + 8 * US;
          float y[4] = {low[0], low[1], high[0], high[1]};
          tf32Product<2 * (Blocks - 1)>(y, s.a + rows * AS, AS, s.values + cols,
                                        US, 2 * t, -1.0f);
          // Y where only this warp works, to be read back as a B operand.
          low[0] = y[0], low[1] = y[1], high[0] = y[2], high[1] = y[3];
          __syncwarp();
          float d[4] = {};
          tf32Product<2>(d, s.inverses + rows * IS, IS,
                         s.values + rows * US + cols, US, 2, 1.0f);
          __syncwarp();
          low[0] = d[0], low[1] = d[1], high[0] = d[2], high[1] = d[3];
          __nv_bfloat16 *out = s.delta + (rows + g) * DS + cols + pair;
          *reinterpret_cast<uint32_t *>(out) = packPair(d[0], d[1]);
          *reinterpret_cast<uint32_t *>(out + 8 * DS) = packPair(d[2], d[3]);
          if (kNormalizer && cols + pair == V) {
            s.weights[rows + g] = d[0];
            s.weights[rows + g + 8] = d[2];
          }
        }
        __syncthreads();
      }
    }

    // 6. O = (Q (.) Lambda) S0 + P Delta (into shared memory for the
    // epilogue, split as in step 3) and the state update (every state warp).
    if (reads && work.reads) {
      float out[PartTiles][4];
      // Where this lane's accumulator element r of tile n goes.
      auto valueAt = [&](int n, int r) -> float & {
        return s.values[(readRows + accRow(r)) * US + readColumns + n * 8 +
                        accCol(r)];
      };
      auto pRows = [&](int r, int j) {
        const float *row = s.p + (readRows + r) * AS + j;
        return packPair(row[0], row[1]);
      };
      if constexpr (kValueDecay) {
        // Each pair (i, j) takes column c's factor e^(psiQ_i - psi_j). The
        // sub-chunks before the warp's 16 rows go through the log-gate at
        // the end of the previous one, and the pairs across the halves of
        // its own through the end of its first half (both factors at most
        // 1 either way); the pairs inside a half of 8 are taken one by one.
        // This part goes to the lane's elements of `values` first, two
        // tiles at a time, so that few accumulators are live beside the
        // state's (`out` live beside them spilled).
        const int before = readRows - 1, middle = readRows + 7;
        // U's rows from `first` scaled by e^(psi_ref - psi_j), those from
        // `end` on zero, at the columns of tile group g.
        auto scaledValues = [&](int first, int end, int ref, int g) {
          return [=, &s](int k, int col) {
            const int c = readColumns + g * 8 + col;
            auto term = [&](int j) {
              return j < end ? Layout::at(s.delta, DS, j, c) *
                                   __expf(s.psi(ref, c) - s.psi(j, c))
                             : 0.0f;
            };
            return packPair(term(first + k), term(first + k + 1));
          };
        };
        // P's rows of the second half against the columns of the first.
        auto acrossHalves = [&](int r, int k) {
          const float *row = s.p + (readRows + r) * AS + readRows + k;
          return r >= 8 && k < 8 ? packPair(row[0], row[1]) : 0u;
        };
        constexpr int Group = PartTiles % 2 == 0 ? 2 : 1;
#pragma unroll
        for (int g = 0; g < PartTiles; g += Group) {
          if (g >= readTiles)
            break;
          float across[Group][4], halves[Group][4];
          zero(across);
          zero(halves);
          if (readRows > 0)
            warpProduct<Group, ChunkSteps>(
                across, pRows, scaledValues(0, readRows, before, g),
                readRows / 16, readTiles - g);
          warpProduct<Group, 1>(halves, acrossHalves,
                                scaledValues(readRows, readRows + 8, middle, g),
                                1, readTiles - g);
#pragma unroll
          for (int n = 0; n < Group; ++n)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              const int i = readRows + accRow(r),
                        c = readColumns + (g + n) * 8 + accCol(r);
              const float top = s.psiQ(i, c);
              float sum = 0.0f;
              if (readRows > 0)
                sum += across[n][r] * __expf(top - s.psi(before, c));
              // Rows of the first half have no pairs across the halves
              // (and e^(psiQ_i - psi_middle) may overflow there).
              if (r >= 2)
                sum += halves[n][r] * __expf(top - s.psi(middle, c));
              // P is zero above the diagonal, where the exponent is
              // clamped.
              const int half = readRows + (r >= 2 ? 8 : 0);
#pragma unroll
              for (int t = 0; t < 8; ++t) {
                const int j = half + t;
                sum += s.p[i * AS + j] *
                       __expf(fminf(top - s.psi(j, c), 0.0f)) *
                       Layout::at(s.delta, DS, j, c);
              }
              valueAt(g + n, r) = sum;
            }
        }
        stateProduct(out, s.q, true);
        for (int n = 0; n < readTiles; ++n)
          for (int r = 0; r < 4; ++r)
            out[n][r] += valueAt(n, r);
      } else {
        stateProduct(out, s.q, true);
        warpProduct<PartTiles, ChunkSteps>(
            out, pRows, SharedColumns{s.delta, DS, readColumns},
            readRows / 16 + 1, readTiles);
      }
      for (int n = 0; n < readTiles; ++n)
        for (int r = 0; r < 4; ++r)
          valueAt(n, r) = out[n][r];
      if (kNormalizer && readColumns <= V && V < readColumns + readTiles * 8) {
        // The normaliser's read again in fp32, two lanes a token: it divides
        // the values, and where it is a small sum of large terms just above
        // the clamp, bf16 products leave it too few correct bits.
        // Four partial sums and unrolled loops keep the shared loads in
        // flight (one chain of dependent loads was 2% slower for mLSTM).
        const int i = readRows + laneId() / 2, half = laneId() % 2;
        float partial[4] = {};
#pragma unroll 16
        for (int t = 0; t < (K + 1) / 2; ++t) {
          int d = 2 * t + half;
          if (d >= K)
            continue;
          float term = Layout::at(s.q, KS, i, d) * s.stateNormalizer[d];
          if constexpr (G == Gate::Vector)
            term *= __expf(s.lambdaQ(i, d));
          partial[t % 4] += term;
        }
        float sum = (partial[0] + partial[1]) + (partial[2] + partial[3]);
        sum *= scale * (G == Gate::Scalar ? __expf(s.lambdaQ(i, 0)) : 1.0f);
        for (float &x : partial)
          x = 0.0f;
#pragma unroll 16
        for (int t = 0; t < (C + 1) / 2; ++t) {
          int j = 2 * t + half;
          if (j <= i)
            partial[t % 4] += s.p[i * AS + j] * s.weights[j];
        }
        sum += (partial[0] + partial[1]) + (partial[2] + partial[3]);
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        __syncwarp();
        if (half == 0)
          s.values[i * US + V] = sum;
      }
    }
    constexpr int last = C - 1;
    if constexpr (kValueDecay) {
      // Once every read of Delta is done, its rows (and, under a
      // key-vector gate, K's) are scaled in place by their factors to the
      // chunk's end, once for all the state warps that read them rather
      // than as each loads its operands.
      __syncthreads();
      auto toChunkEnd = [&](__nv_bfloat16 *m, int stride, int channels,
                            auto logGate) {
        for (int x = threadIdx.x; x < C * channels / 2; x += blockDim.x) {
          const int j = x / (channels / 2), c = 2 * (x % (channels / 2));
          auto *pair = reinterpret_cast<__nv_bfloat162 *>(m + j * stride + c);
          const float2 f = __bfloat1622float2(*pair);
          *pair = __floats2bfloat162_rn(
              f.x * __expf(logGate(last, c) - logGate(j, c)),
              f.y * __expf(logGate(last, c + 1) - logGate(j, c + 1)));
        }
      };
      toChunkEnd(s.delta, DS, V, [&](int i, int c) { return s.psi(i, c); });
      if constexpr (G == Gate::Vector)
        toChunkEnd(s.k, KS, K, [&](int i, int d) { return s.lambda(i, d); });
      __syncthreads();
    }
    if (stateWarp) {
      float update[HalfTiles][4];
      zero(update);
      const SharedColumns keys{s.k, KS, stateRow};
      const SharedColumns delta{s.delta, DS, columnBase};
      if constexpr (G == Gate::None || (G == Gate::Vector && kValueDecay))
        warpProduct<HalfTiles, ChunkSteps>(update, keys, delta, ChunkSteps,
                                           tiles);
      else if constexpr (G == Gate::Scalar)
        warpProduct<HalfTiles, ChunkSteps>(
            update, ScaledSharedColumns{keys, s.gates + C}, delta, ChunkSteps,
            tiles);
      else
        warpProduct<HalfTiles, ChunkSteps>(
            update,
            [&](int r, int j) {
              int d = stateRow + r;
              float end = s.lambda(last, d);
              return packPair(Layout::at(s.k, KS, j, d) *
                                  __expf(end - s.lambda(j, d)),
                              Layout::at(s.k, KS, j + 1, d) *
                                  __expf(end - s.lambda(j + 1, d)));
            },
            delta, ChunkSteps, tiles);
      for (int n = 0; n < tiles; ++n)
        for (int r = 0; r < 4; ++r) {
          int d = stateRow + accRow(r);
          float carry = __expf(s.lambda(last, d));
          if constexpr (kValueDecay)
            carry *= __expf(s.psi(last, columnBase + n * 8 + accCol(r)));
          state[n][r] = state[n][r] * carry + update[n][r];
        }
      if constexpr (G != Gate::None)
        for (int h = 0; h < 2; ++h)
          logGates[h] += s.lambda(last, stateRow + accRow(2 * h));
    }
    if constexpr (kValueDecay)
      if (threadIdx.x < V)
        columnLogGate += s.psi(last, threadIdx.x);
    __syncthreads();
    if (start + C < end)
      LateRows::template copy<T>(args, start + C, chunkLength(start + C), head,
                                 warpIndex, lateRows);
    if constexpr (!Layout::kPublishAfterPrologue)
      publishState();
    if (start + C + warpIndex < end)
      next.load(inputs.at(int(start - begin) + C + warpIndex));

    // 7. Epilogue: normalised reads through the generated code.
    for (int i = warpIndex; work.reads && i < L; i += kChunkWarps) {
      WarpVec<V> read = WarpVec<V>::load(s.values + i * US);
      if constexpr (kNormalizer)
        read = read / WarpVec<V>::splat(fmaxf(fabsf(s.values[i * US + V]), 1.0f));
      int64_t token = start + i;
      Tile::Chunk::epilogue(Token<Layer, T>{args, token, head}, read,
                            output + (token * args.num_heads + head) * Layer::V);
    }
  }

  if (work.final && stateWarp)
    for (int n = 0; n < tiles; ++n)
      for (int r = 0; r < 4; ++r) {
        int row = stateRow + accRow(r), col = columnBase + n * 8 + accCol(r);
        int at = memoryColumn(row, col);
        if (at >= 0)
          work.final[row * work.finalStride + at] = state[n][r];
      }
  if (work.logGates && stateWarp && warpIndex < 8 && laneId() % 4 == 0)
    for (int h = 0; h < 2; ++h)
      if (stateRow + accRow(2 * h) < Layer::K)
        work.logGates[stateRow + accRow(2 * h)] = logGates[h];
  if constexpr (kValueDecay)
    if (work.logGates && threadIdx.x < Layer::V)
      work.logGates[Layer::K + threadIdx.x] = columnLogGate;
}

//===----------------------------------------------------------------------===//
// Composing segments
//===----------------------------------------------------------------------===//

template <typename Layer> constexpr int composeThreads() {
  return LINAC_CUDA_COMPOSE_THREADS;
}

/// A compose block's shared memory: with an erase, a transition and its
/// column tile of the state before.
template <typename Layer> constexpr size_t composeSharedBytes() {
  return size_t(cuda::composeSharedBytes(Layer::K, Layer::kErase));
}

/// The COMPOSE pass (abi.h): the block of a sequence's first segment walks
/// the sequence's segments in order, for one head and one tile of columns,
/// taking each slot from the state its segment made from zeros to the true
/// state after it: the transition times the true state before, plus the
/// slot. The first segment's slot is true already; the last has none.
template <typename Layer>
LINAC_DEVICE void segmentComposeKernel(const linac_cuda_forward_args &args) {
  constexpr int K = Layer::K, Columns = stateColumns<Layer>();
  constexpr int W = LINAC_CUDA_COMPOSE_COLUMNS;
  const int64_t first = blockIdx.y;
  if (args.segments[first].index != 0 || args.segments[first].last)
    return;
  const int head = blockIdx.x, firstColumn = blockIdx.z * W;
  extern __shared__ __align__(16) float composeShared[];
  for (int64_t s = first + 1; !args.segments[s].last; ++s) {
    const float *before = segmentState<Layer>(args, s - 1, head);
    float *after = segmentState<Layer>(args, s, head);
    const int64_t slot = s * args.num_heads + head;
    if constexpr (Layer::kErase) {
      // Each thread a run of Rows rows by four columns.
      constexpr int Threads = LINAC_CUDA_COMPOSE_THREADS,
                    ColumnGroups = W / 4, RowGroups = Threads / ColumnGroups;
      static_assert(W % 4 == 0 && Threads % ColumnGroups == 0,
                    "groups of rows by whole runs of four columns");
      constexpr int TS = composeTransitionStride(K);
      float *rowsOfT = composeShared,
            *tile = composeShared + composeTileOffset(K);
      const float *transition = args.segment_transitions + slot * K * K;
      // Copies with their loads unrolled, so that many are in flight: the
      // walk over segments is sequential, and a load at a time would leave
      // it waiting on each.
#pragma unroll 8
      for (int i = threadIdx.x; i < K * K; i += Threads)
        rowsOfT[i / K * TS + i % K] = __ldg(transition + i);
#pragma unroll 8
      for (int i = threadIdx.x; i < K * W; i += Threads) {
        const int col = firstColumn + i % W;
        tile[i] = col < Columns ? before[i / W * Columns + col] : 0.0f;
      }
      __syncthreads();
      constexpr int Rows = (K + RowGroups - 1) / RowGroups;
      const int rows = Rows * (threadIdx.x / ColumnGroups),
                cols = 4 * (threadIdx.x % ColumnGroups);
      float acc[Rows][4] = {};
      for (int k = 0; k < K; ++k) {
        const float4 x = *reinterpret_cast<const float4 *>(tile + k * W + cols);
#pragma unroll
        for (int i = 0; i < Rows; ++i) {
          const float m = rows + i < K ? rowsOfT[(rows + i) * TS + k] : 0.0f;
          acc[i][0] += m * x.x;
          acc[i][1] += m * x.y;
          acc[i][2] += m * x.z;
          acc[i][3] += m * x.w;
        }
      }
#pragma unroll
      for (int i = 0; i < Rows; ++i)
        for (int j = 0; j < 4; ++j)
          if (rows + i < K && firstColumn + cols + j < Columns)
            after[(rows + i) * Columns + firstColumn + cols + j] += acc[i][j];
    } else {
      // Each key channel's total log-gate, then each column's.
      const float *logGates =
          args.segment_transitions + slot * transitionFloats(K, Columns, false);
      for (int i = threadIdx.x; i < K * W; i += blockDim.x) {
        const int row = i / W, col = firstColumn + i % W;
        if (col >= Columns)
          continue;
        float logDecay = 0.0f;
        if constexpr (Layer::kKeyGate != Gate::None)
          logDecay += logGates[row];
        if constexpr (Layer::kValueDecay)
          logDecay += logGates[K + col];
        after[row * Columns + col] +=
            __expf(logDecay) * before[row * Columns + col];
      }
    }
    // The next segment reads this slot, and the shared tiles are reused.
    __syncthreads();
  }
}

} // namespace linac::cuda

#endif // LINAC_CUDA_CHUNK_H
