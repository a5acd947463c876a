//===- warpgroup.h - the warpgroup chunkwise kernel on sm_90a ----*- C++
//-*-===//
//
// The chunkwise algorithm (docs/design.md) without an erase, under a
// scalar key-side gate or none, for one (head, sequence) or segment per
// block, on Hopper's warpgroup products (wgmma.h). The block's first
// warpgroup produces, the others consume, one for each 64 value columns:
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
// The producer fills one buffer while the consumers read the other, the
// two sides meeting at named barriers.
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
  kRowsRead = 8       // every producer warp
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

/// A 64 x 64 accumulator into swizzled tiles (rows of 64 columns from
/// `firstRow`, tile `tile`) as T, 16 columns a stmatrix: its four 8 x 8
/// matrices are the warp's top and bottom 8 rows of two column tiles.
template <typename T>
LINAC_DEVICE void storeAccumulator(const wgmma::Accumulator &d, char *tiles,
                                   int rows, int firstRow, int tile) {
  static_assert(sizeof(T) == 2, "16-bit tiles");
  const int lane = laneId(), matrix = lane / 8;
  const int row =
      firstRow + 16 * (threadIdx.x / 32 % 4) + lane % 8 + 8 * (matrix % 2);
  const uint32_t at = uint32_t(__cvta_generic_to_shared(tiles));
#pragma unroll
  for (int j = 0; j < 8; j += 2) {
    const int col = tile * wgmma::kTileColumns + 8 * (j + matrix / 2);
    uint32_t r[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      r[k] = packPair<T>(d.x[4 * j + 2 * k], d.x[4 * j + 2 * k + 1]);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, "
                 "%3, %4};\n" ::"r"(at + wgmma::swizzledOffset(rows, row, col)),
                 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
  }
}

/// Tokens a producer warp runs the prologue on at once: one, since two
/// (their chains of latency interleaved) spilled more within the
/// producer's 80 registers (bench/history/forward-chunkwise.md, 24d).
inline constexpr int kProducerTokens = 1;

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
              rows + Rows::offset(i), args.input_maps[i],
              Token<Layer, T>{args, start, head}.groupHead(args.input_heads[i]),
              int(start), barrier);
      },
      std::make_integer_sequence<int, Layer::kNumInputs>{});
}

/// A block of the warpgroup kernel: `work`'s chunks.
template <typename Layer, typename T>
LINAC_DEVICE void warpgroupChunks(const linac_cuda_forward_args &args,
                                  const ChunkWork &work) {
  constexpr int C = Layer::kChunkSize, K = Layer::K, V = Layer::V;
  constexpr Gate G = Layer::kKeyGate;
  constexpr int KeyTiles = K / wgmma::kTileColumns;
  static_assert(!Layer::kErase && G != Gate::Vector && !Layer::kNormalizer &&
                    !Layer::kValueDecay && !Layer::kReadBefore,
                "the warpgroup kernel takes no erase, a scalar key gate or "
                "none");
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

  if (threadIdx.x < ProducerThreads) {
    const int warp = threadIdx.x / 32;
    //===------------------------------------------------------------===//
    // Producer
    //===------------------------------------------------------------===//
    setRegisters<kProducerRegisters, false>();
    // Rows move by one tensor copy an input a chunk when the runtime
    // encoded the maps, else by each warp's 16-bit copies of its tokens'.
    constexpr bool kTensorRows = tensorRows<Staged>();
    const bool tensor = kTensorRows && args.maps_encoded;
    auto copyRows = [&](int64_t c) {
      const int64_t start = begin + c * C;
      if (!tensor)
        Rows::template copy<T>(args, start, chunkLength(c), head, warp,
                               inputRows);
      else if (threadIdx.x == 0)
        copyRowsByTensor<Rows, Layer, T>(args, start, head, inputRows,
                                         rowBarrier);
    };
    Scalars scalars;
    if (chunks > 0) {
      copyRows(0);
      scalars.load(args, begin, chunkLength(0), head, warp);
    }
    StagedInputs<Staged, T> none;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t start = begin + c * C;
      const int L = chunkLength(c);
      char *const b = buffer(c);
      float *const logGates = gates + c % 2 * C;
      if (c >= 2)
        barrierWait(kOperandsRead + int(c % 2), Threads);
      if (tensor) {
        waitBarrier(rowBarrier, unsigned(c % 2));
      } else {
        Rows::wait();
      }
      // Rows past the chunk's end run the prologue on stale rows and then
      // store zeros: no branch splits the tokens' code.
#pragma unroll 1
      for (int first = warp; first < C;
           first += kProducerWarps * kProducerTokens) {
        ChunkOperands<K, V, G> ops[kProducerTokens];
#pragma unroll
        for (int j = 0; j < kProducerTokens; ++j) {
          const int i = first + j * kProducerWarps;
          ops[j] = noOperands<Layer>();
          Layer::Chunk::prologue(
              StagedToken<Staged, T, kProducerWarps>{{args, start + i, head},
                                                     none,
                                                     scalars,
                                                     inputRows,
                                                     nullptr,
                                                     params,
                                                     i},
              ops[j]);
        }
#pragma unroll
        for (int j = 0; j < kProducerTokens; ++j) {
          const int i = first + j * kProducerWarps;
          if (i >= L)
            ops[j] = noOperands<Layer>();
          storeSwizzled(ops[j].q, b + kMap.q, C, i);
          storeSwizzled(ops[j].k, b + kMap.k, C, i);
          storeSwizzled(ops[j].u.u, b + kMap.v, C, i);
          if (laneId() == 0)
            logGates[i] = G == Gate::Scalar ? floorLogGate(ops[j].gk) : 0.0f;
        }
      }
      // This warp's rows are read: the next chunk's may replace them, once
      // every producer warp's are under tensor copies.
      __syncwarp();
      if (tensor && c + 1 < chunks) {
        if (threadIdx.x < 32)
          barrierWait(kRowsRead, ProducerThreads);
        else
          barrierArrive(kRowsRead, ProducerThreads);
      }
      if (c + 1 < chunks) {
        copyRows(c + 1);
        scalars.load(args, start + C, chunkLength(c + 1), head, warp);
      }
      wgmma::fenceShared();
      barrierArrive(kOperandsIn + int(c % 2), Threads);
    }
    return;
  }

  //===--------------------------------------------------------------===//
  // Consumer g: value columns 64g..64g+63
  //===--------------------------------------------------------------===//
  setRegisters<kConsumerRegisters, true>();
  const int consumerThread = threadIdx.x - ProducerThreads;
  const int g = consumerThread / 128, warp = consumerThread / 32 % 4;
  const int consumerWarp = consumerThread / 32;
  const float scale = readScale<Layer>(args);
  // A chunk whole in its sequence stores its output by the tensor map (a
  // partial one would overwrite the next sequence's first rows).
  const bool tensorOutput = Layer::kTensorOutput && args.maps_encoded;
  char *const stateCopy = base + kMap.states + g * K * 64 * 2;
  char *const reads = base + kMap.reads;
  T *const output = static_cast<T *>(args.output);

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
      if (warp == 0) {
        const float *const raw = gates + c % 2 * C;
        const int lane = laneId();
        const float first = raw[2 * lane], both = first + raw[2 * lane + 1];
        float inclusive = both;
#pragma unroll
        for (int offset = 1; offset < 32; offset *= 2) {
          const float below = __shfl_up_sync(0xffffffffu, inclusive, offset);
          if (lane >= offset)
            inclusive += below;
        }
        lambda[2 * lane] = inclusive - both + first;
        lambda[2 * lane + 1] = inclusive;
      }
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
      const float decay = gateFactor(last);
#pragma unroll
      for (int t = 0; t < KeyTiles; ++t)
#pragma unroll
        for (int i = 0; i < 32; ++i)
          state[t].x[i] *= decay;
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
      if (tensorOutput && L == C) {
        // The reads are the output: this consumer's tile goes out whole,
        // its bytes read before the group's next barrier.
        fenceSharedForBulkCopies();
        barrierWait(kConsumerGroup + g, 128);
        if (consumerThread % 128 == 0) {
          static_assert(LINAC_CUDA_OUTPUT_BOX_COLUMNS == wgmma::kTileColumns,
                        "the output map's box is a consumer's tile");
          tensorStoreRows(args.output_map, LINAC_CUDA_OUTPUT_BOX_COLUMNS * g,
                          head, int(start), reads + g * Tile);
          commitBulkStores();
          waitBulkStoresRead();
        }
      } else {
        barrierWait(kConsumers, Threads - ProducerThreads);
        for (int i = consumerWarp; i < L;
             i += (Threads - ProducerThreads) / 32) {
          const int64_t token = start + i;
          Layer::Chunk::epilogue(Token<Layer, T>{args, token, head},
                                 loadSwizzled<V, T>(reads, C, i),
                                 output + (token * args.num_heads + head) * V);
        }
      }
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
