//===- warpgroup.h - the warpgroup chunkwise kernel on sm_90a ----*- C++
//-*-===//
//
// The chunkwise algorithm (docs/design.md) under a scalar key-side gate or
// none, for one (head, sequence) or segment per block, on Hopper's
// warpgroup products (wgmma.h). The block's first two warpgroups produce,
// the others consume, one for each 64 value columns. Without an erase:
//
//   producer: the generated prologue of a chunk's tokens from their input
//     rows (copied into shared memory a chunk ahead), into one of two
//     buffers of swizzled bf16 tiles Q, K and U; the cumulative log-gates
//     and U scaled to the chunk's end, U (.) Gamma_C / Gamma;
//   consumer g: the state's columns 64g..64g+63 in fp32 accumulators (a
//     bf16 copy in shared memory for the reads),
//       P = Q K^T and X = Q S0, then O = scale (Gamma (.) X + M(P) U),
//       S <- Gamma_C S0 + K^T (U (.) Gamma_C / Gamma),
//     every product a wgmma, and the generated epilogue of the reads.
//
// With one the producer also solves each chunk (prepareErase) and the
// consumers hold the state transposed as their products' operands
// (consumeErase). The producer fills one buffer while the consumers read
// the other, the two sides meeting at named barriers.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CUDA_WARPGROUP_H
#define LINAC_CUDA_WARPGROUP_H

#include "linac/cuda/decode.h"
#include "linac/cuda/pipeline.h"
#include "linac/cuda/wgmma.h"

namespace linac::cuda {

/// The named barriers of a warpgroup block (0 is __syncthreads').
enum WarpgroupBarrier : int {
  kOperandsIn = 1,    // and 2: the producer arrives, the consumers wait
  kOperandsRead = 3,  // and 4: the consumers arrive, the producer waits
  kConsumers = 5,     // every consumer
  kConsumerGroup = 6, // and 7: one consumer warpgroup
  kRowsRead = 8,      // every producer warp
  kProducer = 9,      // every producer warp, with an erase
  kSolvedRead = 10    // the consumers arrive, the producer waits
};

/// Registers a producer and a consumer thread take (setmaxnreg), within
/// the launch's 128 a thread.
constexpr int kProducerRegisters = 80, kConsumerRegisters = 176;

/// v as bf16 into row `row` of swizzled tiles of `rows` rows.
template <int N>
LINAC_DEVICE void storeSwizzled(const WarpVec<N> &v, char *tiles, int rows,
                                int row) {
  static_assert(WarpVec<N>::kRuns, "a lane's run in one 16-byte piece");
  constexpr int S = WarpVec<N>::kSlots;
  Run<__nv_bfloat16, S> run;
#pragma unroll
  for (int i = 0; i < S; ++i)
    run.x[i] = __float2bfloat16(v.x[i]);
  *reinterpret_cast<Run<__nv_bfloat16, S> *>(
      tiles + wgmma::swizzledOffset(rows, row, laneId() * S)) = run;
}
/// Row `row` of swizzled tiles of `rows` rows of T, as a WarpVec.
template <int N, typename T>
LINAC_DEVICE WarpVec<N> loadSwizzled(const char *tiles, int rows, int row) {
  static_assert(WarpVec<N>::kRuns, "a lane's run in one 16-byte piece");
  constexpr int S = WarpVec<N>::kSlots;
  const Run<T, S> run = *reinterpret_cast<const Run<T, S> *>(
      tiles + wgmma::swizzledOffset(rows, row, laneId() * S));
  WarpVec<N> v;
#pragma unroll
  for (int i = 0; i < S; ++i)
    v.x[i] = toFloat(run.x[i]);
  return v;
}

/// Every element of `d` times `factor` (while no wgmma writes them).
template <int Tiles>
LINAC_DEVICE void scaleAccumulators(wgmma::Accumulator (&d)[Tiles],
                                    float factor) {
#pragma unroll
  for (int t = 0; t < Tiles; ++t)
#pragma unroll
    for (int i = 0; i < 32; ++i)
      d[t].x[i] *= factor;
}

/// The shared address of this lane's row of the 8 x 8 matrices that hold
/// columns 8j..8j+15 of a warp's 16 rows of a 64 x 64 accumulator, in
/// swizzled tiles (rows of 64 columns from `firstRow`, tile `tile`):
/// matrix m = lane / 8 is the warp's top or bottom 8 rows (m % 2) of
/// column tile j + m / 2. Transposed, the accumulator's rows are the
/// tiles' columns and its columns their rows (stmatrix and ldmatrix
/// .trans).
template <bool Transposed>
LINAC_DEVICE uint32_t accumulatorAddress(const char *tiles, int rows,
                                         int firstRow, int tile, int j) {
  const int lane = laneId(), matrix = lane / 8;
  const int warpRows = 16 * (threadIdx.x / 32 % 4) + 8 * (matrix % 2);
  const int across = 8 * (j + matrix / 2);
  const int row =
      firstRow + (Transposed ? across + lane % 8 : warpRows + lane % 8);
  const int col = tile * wgmma::kTileColumns + (Transposed ? warpRows : across);
  return uint32_t(__cvta_generic_to_shared(tiles)) +
         wgmma::swizzledOffset(rows, row, col);
}

/// A 64 x 64 accumulator into swizzled tiles as T, 16 columns a stmatrix
/// (accumulatorAddress).
template <typename T, bool Transposed = false>
LINAC_DEVICE void storeAccumulator(const wgmma::Accumulator &d, char *tiles,
                                   int rows, int firstRow, int tile) {
  static_assert(sizeof(T) == 2, "16-bit tiles");
#pragma unroll
  for (int j = 0; j < 8; j += 2) {
    uint32_t r[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      r[k] = packPair<T>(d.x[4 * j + 2 * k], d.x[4 * j + 2 * k + 1]);
    const uint32_t at =
        accumulatorAddress<Transposed>(tiles, rows, firstRow, tile, j);
    if constexpr (Transposed)
      asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], "
                   "{%1, %2, %3, %4};\n" ::"r"(at),
                   "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                   : "memory");
    else
      asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, "
                   "%3, %4};\n" ::"r"(at),
                   "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                   : "memory");
  }
}

/// Calls f(i, x) with each element x of a 64 x 64 accumulator's layout
/// read from bf16 swizzled tiles, 16 columns an ldmatrix
/// (accumulatorAddress).
template <bool Transposed, typename F>
LINAC_DEVICE void forAccumulatorOf(const char *tiles, int rows, int firstRow,
                                   int tile, F f) {
#pragma unroll
  for (int j = 0; j < 8; j += 2) {
    uint32_t r[4];
    const uint32_t at =
        accumulatorAddress<Transposed>(tiles, rows, firstRow, tile, j);
    if constexpr (Transposed)
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, "
                   "%2, %3}, [%4];\n"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                   : "r"(at)
                   : "memory");
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, "
                   "%3}, [%4];\n"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                   : "r"(at)
                   : "memory");
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      __nv_bfloat162 pair;
      memcpy(&pair, &r[k], sizeof pair);
      f(4 * j + 2 * k, __low2float(pair));
      f(4 * j + 2 * k + 1, __high2float(pair));
    }
  }
}

/// Tokens a staging warp runs the prologue on at once, their chains of
/// latency interleaved: on the producer one, since two spilled more within
/// its 80 registers (bench/history/forward-chunkwise.md, 24d); on the
/// consumers (with an erase) four, 1.13x faster than one (version 27).
template <typename Layer>
inline constexpr int kStagingTokens = Layer::kErase ? 4 : 1;

/// Whether the warpgroup kernel may read every input whose rows it stages
/// by tensor maps: the plan's tensor_inputs name exactly those, each within
/// a box's 256 elements.
template <typename Layer> LINAC_HOST_DEVICE constexpr bool tensorRows() {
  bool all = true;
  for (int i = 0; i < Layer::kNumInputs; ++i)
    all = all && Layer::tensorInput(i) == Layer::sharedInput(i) &&
          (!Layer::tensorInput(i) || Layer::inputSize(i) <= 256);
  return all;
}

/// Starts the copies of a chunk's input rows from token `start`, one tensor
/// copy an input, counted on `barrier`: the calling thread's alone.
template <typename Rows, typename Layer, typename T>
LINAC_DEVICE void copyRowsByTensor(const linac_cuda_forward_args &args,
                                   int64_t start, int head, char *rows,
                                   uint64_t *barrier) {
  arriveExpecting(barrier, unsigned(Rows::kBytes));
  forEachIndex(
      [&](auto input) {
        constexpr int i = decltype(input)::value;
        if constexpr (Rows::holds(i))
          tensorCopyRows(
              rows + Rows::offset(i), args.input_maps[i], 0,
              Token<Layer, T>{args, start, head}.groupHead(args.input_heads[i]),
              int(start), barrier);
      },
      std::make_integer_sequence<int, Layer::kNumInputs>{});
}

/// Whether a row-scaled layer's query scalars, or the products of its key's
/// and written value's, are 1 for every token, so that their rows stay as
/// loaded; true for any other layer.
template <typename Layer> LINAC_DEVICE constexpr bool unitQuery() {
  if constexpr (Layer::kRowScaled)
    return Layer::Chunk::kUnitQuery;
  else
    return true;
}
template <typename Layer> LINAC_DEVICE constexpr bool unitWrite() {
  if constexpr (Layer::kRowScaled)
    return Layer::Chunk::kUnitWrite;
  else
    return true;
}

/// Starts the tensor copies of a chunk's query (when `reads`), key and
/// value rows from token `start`, as the inputs hold them, into the operand
/// tiles of buffer `b`, counted on `barrier`: the calling thread's alone.
/// Each map's 128-byte swizzled box is a tile's 64 columns, in the layout
/// the products read.
template <typename Layer, typename T>
LINAC_DEVICE void copyOperandRows(const linac_cuda_forward_args &args,
                                  int64_t start, int head, char *b, bool reads,
                                  uint64_t *barrier) {
  constexpr int C = Layer::kChunkSize, K = Layer::K, V = Layer::V;
  constexpr WarpgroupMap kMap = warpgroupMap<Layer>();
  constexpr int Box = LINAC_CUDA_SWIZZLED_BOX_COLUMNS;
  static_assert(Box == wgmma::kTileColumns && K % Box == 0 && V % Box == 0,
                "the boxes are the operands' tiles");
  arriveExpecting(barrier, unsigned(C * sizeof(T) * ((reads ? K : 0) + K + V)));
  auto copy = [&](int input, int64_t tiles, int columns) {
    const int inputHead =
        Token<Layer, T>{args, start, head}.groupHead(args.input_heads[input]);
    for (int t = 0; t < columns / Box; ++t)
      tensorCopyRows(b + tiles + t * C * wgmma::kRowBytes,
                     args.input_maps[input], t * Box, inputHead, int(start),
                     barrier);
  };
  if (reads)
    copy(Layer::kQueryRow, kMap.q, K);
  copy(Layer::kKeyRow, kMap.k, K);
  copy(Layer::kValueRow, kMap.v, V);
}

/// The squared norm of row `row` of swizzled bf16 tiles of C rows, on every
/// lane of the warp.
template <int N, int C>
LINAC_DEVICE float squaredNorm(const char *tiles, int row) {
  const WarpVec<N> v = loadSwizzled<N, __nv_bfloat16>(tiles, C, row);
  return dot(v, v);
}

/// Row `row` of swizzled bf16 tiles of `rows` rows times `factor`, in place.
template <int N>
LINAC_DEVICE void scaleSwizzledRow(char *tiles, int rows, int row,
                                   float factor) {
  storeSwizzled(loadSwizzled<N, __nv_bfloat16>(tiles, rows, row) *
                    WarpVec<N>::splat(factor),
                tiles, rows, row);
}

/// A consumer's part in writing a chunk's reads, staged as 16-bit tiles of
/// 64 tokens (consumer g's columns in tile g) from token `start`, L of
/// them: where the reads are the output and the chunk is whole, each
/// consumer's tile by one tensor copy, read before the group's next
/// barrier (a partial chunk's box would overwrite the next sequence's
/// first rows); otherwise the generated epilogue, a token a warp.
template <typename Layer, typename T>
LINAC_DEVICE void writeReads(const linac_cuda_forward_args &args, char *tiles,
                             int head, int64_t start, int L,
                             bool tensorOutput) {
  constexpr int C = Layer::kChunkSize, V = Layer::V;
  constexpr int ProducerThreads = 32 * kProducerWarps;
  constexpr int Consumers = warpgroupThreads(V) - ProducerThreads;
  const int consumerThread = threadIdx.x - ProducerThreads;
  const int g = consumerThread / 128;
  if (tensorOutput && L == C) {
    fenceSharedForBulkCopies();
    barrierWait(kConsumerGroup + g, 128);
    if (consumerThread % 128 == 0) {
      static_assert(LINAC_CUDA_SWIZZLED_BOX_COLUMNS == wgmma::kTileColumns,
                    "the output map's box is a consumer's tile");
      tensorStoreRows(args.output_map, LINAC_CUDA_SWIZZLED_BOX_COLUMNS * g,
                      head, int(start), tiles + g * C * wgmma::kRowBytes);
      commitBulkStores();
      waitBulkStoresRead();
    }
    return;
  }
  barrierWait(kConsumers, Consumers);
  T *const output = static_cast<T *>(args.output);
  for (int i = consumerThread / 32; i < L; i += Consumers / 32) {
    const int64_t token = start + i;
    Layer::Chunk::epilogue(Token<Layer, T>{args, token, head},
                           loadSwizzled<V, T>(tiles, C, i),
                           output + (token * args.num_heads + head) * V);
  }
}

/// The producer's steps with an erase, once a chunk's tiles (Q, K, U and
/// E in W's place) and raw log-gates are in buffer offset `b`, by its eight
/// warps (warp `warp`): the cumulative log-gates in place; A = E K^T
/// (first warpgroup) and, when `reads`, P = scale Q K^T (second), masked
/// and scaled by e^(lambda_t - lambda_s); T = (I + A)^-1 (invertUnitLower),
/// once the consumers have read the previous chunk's T (`afterSolved`);
/// then T as a bf16 tile over the inverses, for the consumers.
template <typename Layer>
LINAC_DEVICE void prepareErase(char *base, uint32_t b, float *lambda,
                               bool reads, bool afterSolved, float scale,
                               int warp) {
  constexpr int C = Layer::kChunkSize, K = Layer::K, V = Layer::V;
  constexpr Gate G = Layer::kKeyGate;
  constexpr WarpgroupMap kMap = warpgroupMap<Layer>();
  constexpr int AS = WarpgroupMap::aStride, IS = WarpgroupMap::inverseStride;
  constexpr int Tile = C * wgmma::kRowBytes;
  static_assert(kPipelineGroupWarps == kProducerWarps,
                "the producer solves as a pipelined group does");
  auto sync = [] { barrierWait(kProducer, 32 * kProducerWarps); };
  if constexpr (G == Gate::Scalar) {
    if (warp == 0)
      cumulativeLogGates(lambda, lambda);
    sync();
  }
  auto gateOf = [&](int i) { return G == Gate::Scalar ? lambda[i] : 0.0f; };
  const int group = warp / 4, warpRow = 16 * (warp % 4);
  float *const a = reinterpret_cast<float *>(base + kMap.a);
  const uint64_t keys = wgmma::descriptor(base + kMap.k);
  if (group == 0 || reads) {
    const uint64_t rows =
        wgmma::descriptor(base + (group == 0 ? kMap.w : kMap.q));
    wgmma::Accumulator x;
    wgmma::fence();
#pragma unroll
    for (int s = 0; s < K / 16; ++s) {
      const uint32_t keyPart = b + s / 4 * Tile + s % 4 * 32;
      wgmma::mma<false, false>(x, wgmma::advance(rows, keyPart),
                               wgmma::advance(keys, keyPart), s > 0);
    }
    wgmma::commit();
    // The log-gates of this thread's two rows and sixteen columns, read
    // while the products run and before any store to A (which the compiler
    // could not tell apart from them).
    float rowGates[2], columnGates[16];
#pragma unroll
    for (int r = 0; r < 2; ++r)
      rowGates[r] = gateOf(warpRow + wgmma::accumulatorRow(2 * r));
#pragma unroll
    for (int c = 0; c < 16; ++c)
      columnGates[c] = gateOf(wgmma::accumulatorColumn(c / 2 * 4 + c % 2));
    wgmma::wait<0>();
    x.pin();
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int t = warpRow + wgmma::accumulatorRow(i);
      const int s = wgmma::accumulatorColumn(i);
      const float factor = gateFactor(rowGates[(i >> 1) & 1] -
                                      columnGates[(i >> 2) * 2 + (i & 1)]);
      if (group == 0)
        a[t * AS + s] = s < t ? x.x[i] * factor : 0.0f;
      else
        x.x[i] = s <= t ? x.x[i] * factor * scale : 0.0f;
    }
    if (group == 1) {
      storeAccumulator<__nv_bfloat16>(x, base + b + kMap.p, C, 0, 0);
      wgmma::fenceShared();
    }
  }
  sync();
  if (afterSolved)
    barrierWait(kSolvedRead, warpgroupThreads(V));
  invertUnitLower<AS, IS, true>(
      a, reinterpret_cast<float *>(base + kMap.inverses),
      reinterpret_cast<float *>(base + kMap.scratch), warp, sync);
  // T into its tile, eight columns (a 16-byte piece) a step, each piece
  // from two 16-byte loads. Consecutive threads take consecutive rows of
  // one column run: their loads (rows 4 banks apart) and their swizzled
  // stores are free of bank conflicts.
  static_assert(kMap.a - kMap.inverses >= C * wgmma::kRowBytes &&
                    kMap.inverses % wgmma::kAtomBytes == 0,
                "T's tile fits over the inverses and the scratch");
  constexpr int ProducerThreads = 32 * kProducerWarps;
  static_assert(AS % 4 == 0 && kMap.a % 16 == 0 &&
                    C * C / 8 % ProducerThreads == 0,
                "rows of whole 16-byte runs; every thread as many pieces");
#pragma unroll
  for (int n = 0; n < C * C / 8 / ProducerThreads; ++n) {
    const int piece = threadIdx.x + n * ProducerThreads;
    const int t = piece % C, s = piece / C * 8;
    const float4 lo = *reinterpret_cast<const float4 *>(a + t * AS + s),
                 hi = *reinterpret_cast<const float4 *>(a + t * AS + s + 4);
    Run<__nv_bfloat16, 8> run;
    run.x[0] = __float2bfloat16(lo.x);
    run.x[1] = __float2bfloat16(lo.y);
    run.x[2] = __float2bfloat16(lo.z);
    run.x[3] = __float2bfloat16(lo.w);
    run.x[4] = __float2bfloat16(hi.x);
    run.x[5] = __float2bfloat16(hi.y);
    run.x[6] = __float2bfloat16(hi.z);
    run.x[7] = __float2bfloat16(hi.w);
    *reinterpret_cast<Run<__nv_bfloat16, 8> *>(
        base + kMap.inverses + wgmma::swizzledOffset(C, t, s)) = run;
  }
  wgmma::fenceShared();
}

/// The consumers with an erase: consumer g holds S^T's rows 64g..64g+63
/// (value columns) by every key in fp32 accumulators and feeds them to
/// the products as A fragments, so no copy of the state is in shared
/// memory. A chunk: D^T = S0^T E^T, Y^T = U^T - D^T (.) Gamma and Delta^T =
/// Y^T T^T (so that Delta = U' - W S0 with U' = T U and W = T (Gamma (.)
/// E), which no one forms); X^T = S0^T Q^T, then O^T = scale Gamma (.) X^T
/// + Delta^T P^T and S^T <- Gamma_C S^T + (Delta (.) Gamma_C / Gamma)^T K
/// with Delta^T as A fragments too. The reads replace U in the buffer's
/// tile, stored by a tensor copy or read by the generated epilogue; then
/// `stage(c + 2)` fills the buffer with chunk c + 2's operands for the
/// producer to solve.
template <typename Layer, typename T, typename Length, typename Stage>
LINAC_DEVICE void consumeErase(const linac_cuda_forward_args &args,
                               const ChunkWork &work, char *base,
                               const float *gates, int64_t chunks,
                               Length chunkLength, Stage stage) {
  constexpr int C = Layer::kChunkSize, K = Layer::K, V = Layer::V;
  constexpr Gate G = Layer::kKeyGate;
  constexpr int KeyTiles = K / wgmma::kTileColumns;
  constexpr WarpgroupMap kMap = warpgroupMap<Layer>();
  constexpr int Threads = warpgroupThreads(V);
  constexpr int ProducerThreads = 32 * kProducerWarps;
  constexpr int Tile = C * wgmma::kRowBytes, Step = 16 * wgmma::kRowBytes;
  const int consumerThread = threadIdx.x - ProducerThreads;
  const int g = consumerThread / 128, warp = consumerThread / 32 % 4;
  const int head = work.head;
  const float scale = readScale<Layer>(args);
  const bool tensorOutput = Layer::kTensorOutput && args.maps_encoded;
  const bool values = work.identityFrom < 0;

  // S^T's element i of key tile t: value column 64g + 16 warp + row,
  // key 64t + column; where it is in memory (-1: nowhere).
  wgmma::Accumulator state[KeyTiles];
  auto valueOf = [&](int i) {
    return 64 * g + 16 * warp + wgmma::accumulatorRow(i);
  };
  auto keyOf = [&](int t, int i) {
    return 64 * t + wgmma::accumulatorColumn(i);
  };
#pragma unroll
  for (int t = 0; t < KeyTiles; ++t)
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int value = valueOf(i), key = keyOf(t, i);
      float x = 0.0f;
      if (!values)
        x = stateMemoryColumn<Layer>(work, value) >= 0 &&
                    key == work.identityFrom + value
                ? 1.0f
                : 0.0f;
      else if (work.initial)
        x = work.initial[key * stateColumns<Layer>() + value];
      state[t].x[i] = x;
    }
  const uint64_t queries = wgmma::descriptor(base + kMap.q);
  const uint64_t keys = wgmma::descriptor(base + kMap.k);
  const uint64_t erased = wgmma::descriptor(base + kMap.w);
  const uint64_t pairs = wgmma::descriptor(base + kMap.p);
  const uint64_t solved = wgmma::descriptor(base + kMap.inverses);

  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t start = work.begin + c * C;
    const int L = chunkLength(c);
    const uint32_t b = uint32_t(c % 2 * kMap.bufferBytes);
    char *const tiles = base + b + kMap.v;
    barrierWait(kOperandsIn + int(c % 2), Threads);
    const float *const lambda = gates + c % 2 * C;
    const float last = G == Gate::Scalar ? lambda[C - 1] : 0.0f;
    auto gateOf = [&](int i) { return G == Gate::Scalar ? lambda[i] : 0.0f; };

    // Rounds of products, so that no more than 144 accumulator and
    // fragment registers are live at once beside the state's 64 (more made
    // ptxas serialise every wgmma): D^T; Delta^T; then O^T; then the state.
    uint32_t entering[K / 16][4];
#pragma unroll
    for (int s = 0; s < K / 16; ++s)
      wgmma::fragmentOf(entering[s], state[s / 4], s % 4);
    wgmma::Accumulator d;
    wgmma::fence();
#pragma unroll
    for (int s = 0; s < K / 16; ++s)
      wgmma::mma<false>(d, entering[s],
                        wgmma::advance(erased, b + s / 4 * Tile + s % 4 * 32),
                        s > 0);
    wgmma::commit();
    wgmma::wait<0>();
    d.pin();
    // Y^T = U^T - D^T (.) Gamma, a factor a token (a column of D^T; the
    // identity's transition has no values), then Delta^T = Y^T T^T.
#pragma unroll
    for (int i = 0; i < 32; ++i)
      d.x[i] *= G == Gate::Scalar
                    ? -gateFactor(gateOf(wgmma::accumulatorColumn(i)))
                    : -1.0f;
    if (values)
      forAccumulatorOf<true>(tiles, C, 0, g,
                             [&](int i, float u) { d.x[i] += u; });
    uint32_t writes[C / 16][4];
#pragma unroll
    for (int s = 0; s < C / 16; ++s)
      wgmma::fragmentOf(writes[s], d, s);
    wgmma::fence();
#pragma unroll
    for (int s = 0; s < C / 16; ++s)
      wgmma::mma<false>(d, writes[s], wgmma::advance(solved, s * 32), s > 0);
    wgmma::commit();
    wgmma::wait<0>();
    d.pin();
    // The producer may solve the next chunk over T's tile.
    if (c + 1 < chunks)
      barrierArrive(kSolvedRead, Threads);
    uint32_t delta[C / 16][4];
#pragma unroll
    for (int s = 0; s < C / 16; ++s)
      wgmma::fragmentOf(delta[s], d, s);
    if (work.reads) {
      wgmma::Accumulator o;
      wgmma::fence();
#pragma unroll
      for (int s = 0; s < K / 16; ++s)
        wgmma::mma<false>(
            o, entering[s],
            wgmma::advance(queries, b + s / 4 * Tile + s % 4 * 32), s > 0);
      wgmma::commit();
      wgmma::wait<0>();
      o.pin();
#pragma unroll
      for (int i = 0; i < 32; ++i)
        o.x[i] *= scale * gateFactor(gateOf(wgmma::accumulatorColumn(i)));
      wgmma::fence();
#pragma unroll
      for (int s = 0; s < C / 16; ++s)
        wgmma::mma<false>(o, delta[s], wgmma::advance(pairs, b + s * 32));
      wgmma::commit();
      wgmma::wait<0>();
      o.pin();
      // Each warp's value columns, every token: where it read U'.
      storeAccumulator<T, true>(o, tiles, C, 0, g);
    }
    // Delta (.) Gamma_C / Gamma, a factor a token (a column of Delta^T).
    if constexpr (G == Gate::Scalar) {
#pragma unroll
      for (int s = 0; s < C / 16; ++s)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int t = 16 * s + 8 * (r / 2) + 2 * (laneId() % 4);
          delta[s][r] = scalePair(delta[s][r], gateFactor(last - gateOf(t)),
                                  gateFactor(last - gateOf(t + 1)));
        }
      scaleAccumulators(state, gateFactor(last));
    }
    wgmma::fence();
#pragma unroll
    for (int t = 0; t < KeyTiles; ++t)
#pragma unroll
      for (int s = 0; s < C / 16; ++s)
        wgmma::mma<true>(state[t], delta[s],
                         wgmma::advance(keys, b + t * Tile + s * Step));
    wgmma::commit();
    // While the state's products run: the reads out.
    if (work.reads)
      writeReads<Layer, T>(args, tiles, head, start, L, tensorOutput);
    wgmma::wait<0>();
#pragma unroll
    for (int t = 0; t < KeyTiles; ++t)
      state[t].pin();
    // The buffer takes chunk c + 2 once every consumer is past its reads
    // (and each group's tensor copy has read them).
    if (c + 2 < chunks) {
      barrierWait(kConsumers, Threads - ProducerThreads);
      stage(c + 2);
    }
  }

  if (work.final)
#pragma unroll
    for (int t = 0; t < KeyTiles; ++t)
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int at = stateMemoryColumn<Layer>(work, valueOf(i));
        if (at >= 0)
          work.final[keyOf(t, i) * work.finalStride + at] = state[t].x[i];
      }
}

/// A block of the warpgroup kernel: `work`'s chunks.
template <typename Layer, typename T>
LINAC_DEVICE void warpgroupChunks(const linac_cuda_forward_args &args,
                                  const ChunkWork &work) {
  constexpr int C = Layer::kChunkSize, K = Layer::K, V = Layer::V;
  constexpr Gate G = Layer::kKeyGate;
  constexpr int KeyTiles = K / wgmma::kTileColumns;
  static_assert(G != Gate::Vector && !Layer::kNormalizer &&
                    !Layer::kValueDecay && !Layer::kReadBefore,
                "the warpgroup kernel takes a scalar key gate or none");
  static_assert(C == 64 && (K == 64 || K == 128) && V == 128,
                "tiles of 64 keys, two consumers of 64 value columns");
  using Staged = WarpgroupInputs<Layer>;
  using Rows = SharedInputRows<Staged, false, kProducerWarps>;
  using Scalars = ChunkScalars<Staged, T, kProducerWarps>;
  static_assert(StagedInputs<Staged, T>::kSlots == 0,
                "every input staged in rows or a scalar");
  constexpr WarpgroupMap kMap = warpgroupMap<Layer>();
  constexpr int Threads = warpgroupThreads(V);
  constexpr int ProducerThreads = 32 * kProducerWarps;
  static_assert(kProducerRegisters * ProducerThreads +
                        kConsumerRegisters * (Threads - ProducerThreads) <=
                    65536 / Threads / 8 * 8 * Threads,
                "the split stays within the launch's registers");

  extern __shared__ __align__(16) char shared[];
  // wgmma's swizzle is of the address: tiles start at 1024-byte boundaries.
  char *const base =
      shared + ((1024 - (__cvta_generic_to_shared(shared) & 1023)) & 1023);
  auto buffer = [&](int64_t c) { return base + c % 2 * kMap.bufferBytes; };
  float *const gates = reinterpret_cast<float *>(base + kMap.gates);
  char *const inputRows = base + kMap.inputRows;
  char *const params = base + kMap.params;
  uint64_t *const rowBarrier =
      reinterpret_cast<uint64_t *>(base + kMap.rowBarrier);
  static_assert(kMap.inputRows % 128 == 0 && C * 16 % 128 == 0,
                "tensor copies land on 128-byte boundaries");

  const int head = work.head;
  const int64_t begin = work.begin, end = work.end;
  const int64_t chunks = (end - begin + C - 1) / C;
  auto chunkLength = [&](int64_t c) {
    const int64_t left = end - begin - c * C;
    return left < C ? int(left) : C;
  };
  if constexpr (Layer::kNumParams > 0)
    ChunkParams<Layer>::template copy<T>(args, head, params);
  if (threadIdx.x == 0)
    initBarrier(rowBarrier);
  __syncthreads();

  // The warps that stage a chunk's operands from its input rows: the
  // producer's without an erase; with one the consumers', between their
  // chunks' products, so that the producer's solve of one chunk overlaps
  // the prologue of the next. Rows move by one tensor copy an input a chunk
  // when the runtime encoded the maps, else by each warp's 16-bit copies of
  // its tokens'.
  static_assert(Threads - ProducerThreads == ProducerThreads,
                "either side stages on as many warps");
  const int stagingThread = threadIdx.x % ProducerThreads;
  const int stagingWarp = stagingThread / 32;
  constexpr bool kTensorRows = tensorRows<Staged>();
  const bool tensor = kTensorRows && args.maps_encoded;
  Scalars scalars;
  // Token i of the chunk from `start`, its inputs from the staged rows and
  // scalars (no input stays in registers).
  const StagedInputs<Staged, T> none{};
  auto stagedToken = [&](int64_t start, int i) {
    return StagedToken<Staged, T, kProducerWarps>{
        {args, start + i, head}, none, scalars, inputRows, nullptr, params, i};
  };
  auto copyRows = [&](int64_t c) {
    const int64_t start = begin + c * C;
    if (!tensor)
      Rows::template copy<T>(args, start, chunkLength(c), head, stagingWarp,
                             inputRows);
    else if (stagingThread == 0)
      copyRowsByTensor<Rows, Layer, T>(args, start, head, inputRows,
                                       rowBarrier);
  };
  auto startStaging = [&] {
    if (chunks > 0) {
      copyRows(0);
      scalars.load(args, begin, chunkLength(0), head, stagingWarp);
    }
  };
  // Chunk c's operands into buffer c % 2, then the next chunk's rows on
  // their way; arrives at barrier `staged` (of c's parity) once in.
  auto stage = [&](int64_t c, int staged) {
    const int64_t start = begin + c * C;
    const int L = chunkLength(c);
    char *const b = buffer(c);
    float *const logGates = gates + c % 2 * C;
    if (tensor) {
      waitBarrier(rowBarrier, unsigned(c % 2));
    } else {
      Rows::wait();
    }
    // Rows past a partial chunk's end run the prologue on stale rows and
    // then store zeros; a whole chunk (nearly every one) takes no selects.
    auto stageTokens = [&](auto partial) {
#pragma unroll 1
      for (int first = stagingWarp; first < C;
           first += kProducerWarps * kStagingTokens<Layer>) {
        ChunkOperands<K, V, G> ops[kStagingTokens<Layer>];
#pragma unroll
        for (int j = 0; j < kStagingTokens<Layer>; ++j) {
          const int i = first + j * kProducerWarps;
          ops[j] = noOperands<Layer>();
          Layer::Chunk::prologue(stagedToken(start, i), ops[j]);
        }
#pragma unroll
        for (int j = 0; j < kStagingTokens<Layer>; ++j) {
          const int i = first + j * kProducerWarps;
          if (decltype(partial)::value && i >= L)
            ops[j] = noOperands<Layer>();
          storeSwizzled(ops[j].q, b + kMap.q, C, i);
          storeSwizzled(ops[j].k, b + kMap.k, C, i);
          storeSwizzled(ops[j].u.u, b + kMap.v, C, i);
          if constexpr (Layer::kErase)
            storeSwizzled(ops[j].e, b + kMap.w, C, i);
          if (laneId() == 0)
            logGates[i] = G == Gate::Scalar ? floorLogGate(ops[j].gk) : 0.0f;
        }
      }
    };
    byChunkTail(L == C, stageTokens);
    // This warp's rows are read: the next chunk's may replace them, once
    // every staging warp's are under tensor copies.
    __syncwarp();
    if (tensor && c + 1 < chunks) {
      if (stagingThread < 32)
        barrierWait(kRowsRead, ProducerThreads);
      else
        barrierArrive(kRowsRead, ProducerThreads);
    }
    if (c + 1 < chunks) {
      copyRows(c + 1);
      scalars.load(args, start + C, chunkLength(c + 1), head, stagingWarp);
    }
    wgmma::fenceShared();
    barrierArrive(staged + int(c % 2), Threads);
  };

  // Row-scaled operands (bf16 activations, the maps encoded): the query,
  // key and value rows land in chunk c's tiles as the inputs hold them; the
  // producer then scales the query's rows by their scalars and the value's
  // by the write's (the key's times the value's: P's column s and the
  // state's product both take key s and value s together), so that the
  // consumers read the operands as the prologue would have staged them.
  constexpr bool kRowScaledKernel =
      Layer::kRowScaled && std::is_same_v<T, __nv_bfloat16>;
  const bool rowScaled = kRowScaledKernel && tensor;
  auto stageRowScaled = [&](int64_t c) {
    if constexpr (kRowScaledKernel) {
      const int64_t start = begin + c * C;
      const int L = chunkLength(c);
      char *const b = buffer(c);
      float *const logGates = gates + c % 2 * C;
      if (stagingThread == 0)
        copyOperandRows<Layer, T>(args, start, head, b, work.reads, rowBarrier);
      scalars.load(args, start, L, head, stagingWarp);
      // Each of the warp's tokens' scalars, its log-gate stored: before the
      // rows land where no norm needs them, so that the math overlaps the
      // copies.
      constexpr bool kRowNorms = Layer::Chunk::kQueryNorm ||
                                 Layer::Chunk::kKeyNorm ||
                                 Layer::Chunk::kValueNorm;
      constexpr int Tokens = C / kProducerWarps;
      float queryScales[Tokens], writeScales[Tokens];
      auto scalesOf = [&](int j) {
        const int i = stagingWarp + j * kProducerWarps;
        float norms[3] = {};
        if constexpr (Layer::Chunk::kQueryNorm)
          norms[0] = squaredNorm<K, C>(b + kMap.q, i);
        if constexpr (Layer::Chunk::kKeyNorm)
          norms[1] = squaredNorm<K, C>(b + kMap.k, i);
        if constexpr (Layer::Chunk::kValueNorm)
          norms[2] = squaredNorm<V, C>(b + kMap.v, i);
        RowScales scales;
        Layer::Chunk::rowScales(stagedToken(start, i), norms[0], norms[1],
                                norms[2], scales);
        queryScales[j] = scales.q;
        writeScales[j] = scales.k * scales.u;
        if (laneId() == 0)
          logGates[i] =
              G == Gate::Scalar && i < L ? floorLogGate(scales.gk) : 0.0f;
      };
      if constexpr (!kRowNorms)
#pragma unroll
        for (int j = 0; j < Tokens; ++j)
          scalesOf(j);
      waitBarrier(rowBarrier, unsigned(c % 2));
#pragma unroll
      for (int j = 0; j < Tokens; ++j) {
        if constexpr (kRowNorms)
          scalesOf(j);
        const int i = stagingWarp + j * kProducerWarps;
        if (!unitQuery<Layer>() && work.reads)
          scaleSwizzledRow<K>(b + kMap.q, C, i, queryScales[j]);
        // Rows past a partial chunk's end (the next sequence's, or zeros
        // past the batch) enter nothing: their log-gates are zero and their
        // key and value rows zeroed, so that no value of another sequence
        // reaches the state.
        if (i >= L) {
          storeSwizzled(WarpVec<K>::splat(0.0f), b + kMap.k, C, i);
          storeSwizzled(WarpVec<V>::splat(0.0f), b + kMap.v, C, i);
        } else if (!unitWrite<Layer>()) {
          scaleSwizzledRow<V>(b + kMap.v, C, i, writeScales[j]);
        }
      }
      wgmma::fenceShared();
      barrierArrive(kOperandsIn + int(c % 2), Threads);
    }
  };

  if (threadIdx.x < ProducerThreads) {
    //===------------------------------------------------------------===//
    // Producer
    //===------------------------------------------------------------===//
    setRegisters<kProducerRegisters, false>();
    if (rowScaled) {
      for (int64_t c = 0; c < chunks; ++c) {
        if (c >= 2)
          barrierWait(kOperandsRead + int(c % 2), Threads);
        stageRowScaled(c);
      }
      return;
    }
    if constexpr (Layer::kErase) {
      // The consumers stage each chunk (kOperandsRead) and take it back
      // solved (kOperandsIn).
      const float scale = readScale<Layer>(args);
      for (int64_t c = 0; c < chunks; ++c) {
        barrierWait(kOperandsRead + int(c % 2), Threads);
        prepareErase<Layer>(base, uint32_t(c % 2 * kMap.bufferBytes),
                            gates + c % 2 * C, work.reads, c > 0, scale,
                            threadIdx.x / 32);
        barrierArrive(kOperandsIn + int(c % 2), Threads);
      }
    } else {
      startStaging();
      for (int64_t c = 0; c < chunks; ++c) {
        if (c >= 2)
          barrierWait(kOperandsRead + int(c % 2), Threads);
        stage(c, kOperandsIn);
      }
    }
    return;
  }

  //===--------------------------------------------------------------===//
  // Consumer g: value columns 64g..64g+63
  //===--------------------------------------------------------------===//
  setRegisters<kConsumerRegisters, true>();
  if constexpr (Layer::kErase) {
    startStaging();
    for (int64_t c = 0; c < chunks && c < 2; ++c)
      stage(c, kOperandsRead);
    consumeErase<Layer, T>(args, work, base, gates, chunks, chunkLength,
                           [&](int64_t c) { stage(c, kOperandsRead); });
    return;
  }
  const int consumerThread = threadIdx.x - ProducerThreads;
  const int g = consumerThread / 128, warp = consumerThread / 32 % 4;
  const float scale = readScale<Layer>(args);
  // A chunk whole in its sequence stores its output by the tensor map (a
  // partial one would overwrite the next sequence's first rows).
  const bool tensorOutput = Layer::kTensorOutput && args.maps_encoded;
  char *const stateCopy = base + kMap.states + g * K * 64 * 2;
  char *const reads = base + kMap.reads;

  // The state's key rows 64t..64t+63 in accumulator t; element i's offset
  // in a state of rows `stride` floats apart.
  wgmma::Accumulator state[KeyTiles];
  const int warpRow = 16 * warp;
  auto offsetOf = [&](int t, int i, int64_t stride) {
    return (64 * t + warpRow + wgmma::accumulatorRow(i)) * stride + 64 * g +
           wgmma::accumulatorColumn(i);
  };
#pragma unroll
  for (int t = 0; t < KeyTiles; ++t)
#pragma unroll
    for (int i = 0; i < 32; ++i)
      state[t].x[i] = work.initial
                          ? work.initial[offsetOf(t, i, stateColumns<Layer>())]
                          : 0.0f;

  auto publishState = [&] {
#pragma unroll
    for (int t = 0; t < KeyTiles; ++t)
      storeAccumulator<__nv_bfloat16>(state[t], stateCopy, K, 64 * t, 0);
    wgmma::fenceShared();
    barrierWait(kConsumerGroup + g, 128);
  };
  publishState();
  float logGate = 0.0f;
  // Descriptors of the first buffer's tiles and of the state copy, which
  // each k-step advances.
  constexpr int Tile = C * wgmma::kRowBytes, Step = 16 * wgmma::kRowBytes;
  const uint64_t queries = wgmma::descriptor(base + kMap.q);
  const uint64_t keys = wgmma::descriptor(base + kMap.k);
  const uint64_t values = wgmma::descriptor(base + kMap.v + g * Tile);
  // Under a gate U (.) Gamma_C / Gamma is this consumer's, one copy for
  // every chunk.
  char *const scaledTile = base + kMap.scaledV + g * Tile;
  const uint64_t scaledValues =
      G == Gate::Scalar ? wgmma::descriptor(scaledTile) : values;
  float *const lambda =
      reinterpret_cast<float *>(base + kMap.cumulativeGates) + g * C;
  const uint64_t stateColumns = wgmma::descriptor(stateCopy);

  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t start = begin + c * C;
    const int L = chunkLength(c);
    const uint32_t b = uint32_t(c % 2 * kMap.bufferBytes);
    const uint32_t scaledBuffer = G == Gate::Scalar ? 0 : b;
    barrierWait(kOperandsIn + int(c % 2), Threads);
    // While the products run: the cumulative log-gates (warp 0 scans, two
    // tokens a lane).
    float last = 0.0f;
    if constexpr (G == Gate::Scalar) {
      if (warp == 0)
        cumulativeLogGates(gates + c % 2 * C, lambda);
      barrierWait(kConsumerGroup + g, 128);
      last = lambda[C - 1];
    }
    wgmma::Accumulator o, p;
    if (work.reads) {
      wgmma::fence();
#pragma unroll
      for (int s = 0; s < K / 16; ++s) {
        // K-major tiles: 16 keys are 32 bytes along a row.
        const uint32_t keyPart = b + s / 4 * Tile + s % 4 * 32;
        const uint64_t q = wgmma::advance(queries, keyPart);
        wgmma::mma<false, false>(p, q, wgmma::advance(keys, keyPart), s > 0);
        wgmma::mma<false, true>(o, q, wgmma::advance(stateColumns, s * Step),
                                s > 0);
      }
      wgmma::commit();
    }
    if (work.reads) {
      wgmma::wait<0>();
      p.pin();
      o.pin();
    }
    // The state decayed to the chunk's end, while no product is in flight
    // (a write to an accumulator under one serialises every wgmma).
    if constexpr (G == Gate::Scalar) {
      scaleAccumulators(state, gateFactor(last));
      logGate += last;
    }
    if (work.reads) {
      // Rows t of O and P, and the mask and gate factors of each pair.
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int t = warpRow + wgmma::accumulatorRow(i);
        const int s = wgmma::accumulatorColumn(i);
        const float lt = G == Gate::Scalar ? lambda[t] : 0.0f;
        const float ls = G == Gate::Scalar ? lambda[s] : 0.0f;
        o.x[i] *= G == Gate::Scalar ? scale * gateFactor(lt) : scale;
        const float factor =
            G == Gate::Scalar ? scale * gateFactor(lt - ls) : scale;
        p.x[i] = s <= t ? p.x[i] * factor : 0.0f;
      }
      uint32_t a[C / 16][4];
#pragma unroll
      for (int s = 0; s < C / 16; ++s)
        wgmma::fragmentOf(a[s], p, s);
      wgmma::fence();
#pragma unroll
      for (int s = 0; s < C / 16; ++s)
        wgmma::mma<true>(o, a[s], wgmma::advance(values, b + s * Step));
      wgmma::commit();
    }
    // While they run: this consumer's columns of U scaled to the chunk's
    // end, a row's factor on each 16-byte piece of it.
    if constexpr (G == Gate::Scalar) {
      const char *const unscaled = base + b + kMap.v + g * Tile;
      for (int piece = consumerThread % 128; piece < Tile / 16; piece += 128) {
        const int row = piece / (wgmma::kRowBytes / 16);
        const float factor = gateFactor(last - lambda[row]);
        Run<__nv_bfloat16, 8> run =
            reinterpret_cast<const Run<__nv_bfloat16, 8> *>(unscaled)[piece];
#pragma unroll
        for (int e = 0; e < 8; ++e)
          run.x[e] = __float2bfloat16(__bfloat162float(run.x[e]) * factor);
        reinterpret_cast<Run<__nv_bfloat16, 8> *>(scaledTile)[piece] = run;
      }
      wgmma::fenceShared();
      barrierWait(kConsumerGroup + g, 128);
    }
    // The state: plus K^T (U (.) Gamma_C / Gamma).
    wgmma::fence();
#pragma unroll
    for (int s = 0; s < C / 16; ++s)
#pragma unroll
      for (int t = 0; t < KeyTiles; ++t)
        wgmma::mma<true, true>(
            state[t], wgmma::advance(keys, b + t * Tile + s * Step),
            wgmma::advance(scaledValues, scaledBuffer + s * Step), true);
    wgmma::commit();
    wgmma::wait<0>();
#pragma unroll
    for (int t = 0; t < KeyTiles; ++t)
      state[t].pin();
    if (c + 2 < chunks)
      barrierArrive(kOperandsRead + int(c % 2), Threads);
    if (work.reads) {
      o.pin();
      storeAccumulator<T>(o, reads, C, 0, g);
      writeReads<Layer, T>(args, reads, head, start, L, tensorOutput);
    }
    publishState();
  }

  if (work.final)
#pragma unroll
    for (int t = 0; t < KeyTiles; ++t)
#pragma unroll
      for (int i = 0; i < 32; ++i)
        work.final[offsetOf(t, i, work.finalStride)] = state[t].x[i];
  if (work.logGates && g == 0)
    for (int key = consumerThread; key < K; key += 128)
      work.logGates[key] = logGate;
}

/// A block of the chunkwise forward (linac_chunk_*): its work in args'
/// pass, on the kernel the plan chose.
template <typename Layer, typename T>
LINAC_DEVICE void chunkKernel(const linac_cuda_forward_args &args) {
  ChunkWork work;
  if (!chunkWork<Layer>(args, work))
    return;
  if constexpr (Layer::kChunkKernel == ChunkKernel::Pipelined)
    pipelineChunks<Layer, T>(args, work);
  else if constexpr (Layer::kChunkKernel == ChunkKernel::Warpgroup)
    warpgroupChunks<Layer, T>(args, work);
  else
    runChunks<Layer, T>(args, work);
}

} // namespace linac::cuda

#endif // LINAC_CUDA_WARPGROUP_H
