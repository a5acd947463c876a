//===- phased.h - the phased chunkwise kernels -------------------*- C++ -*-===//
//
// The chunkwise algorithm (docs/design.md), with an erase or without, in
// two phases:
//
//   prepare (linac_prepare_*), one block a chunk and head, every chunk of
//     the batch at once: the generated prologue of the chunk's tokens and
//     everything that does not depend on the state entering it, the
//     pipelined kernel's preparing steps (pipeline.h), into a buffer that
//     a bulk copy stores whole to its slot of args.prepared;
//   state (linac_phased_*), one block a (head, sequence) or segment as the
//     lockstep kernel's: each chunk's buffer loaded by one bulk copy two
//     chunks ahead, the state advanced through it by the pipelined kernel's
//     state steps (the state in the warps' registers), and the generated
//     epilogue of the reads.
//
// The sequential path then holds the state's products alone, and the
// state-independent work fills the GPU whatever the batch's shape.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CUDA_PHASED_H
#define LINAC_CUDA_PHASED_H

#include "linac/cuda/decode.h"
#include "linac/cuda/pipeline.h"

namespace linac::cuda {

/// Tokens a preparing warp runs the generated prologue on at once.
inline constexpr int kPrologueTokens = 2;

template <typename Layer> constexpr size_t phasedSharedBytes() {
  return size_t(PipelineLayout<Layer, PipelineBlock::State>::kMap.bytes);
}
template <typename Layer> constexpr size_t prepareSharedBytes() {
  return size_t(
      PipelineMap(Layer::K, Layer::V, PipelineBlock::Prepare, Layer::kKeyGate,
                  Layer::kErase)
          .bytes);
}
/// Blocks of the preparing phase a multiprocessor runs at once: two where
/// their shared memory fits, else one.
template <typename Layer> constexpr int prepareBlocksPerMultiprocessor() {
  constexpr int64_t fit =
      (kSm90aSharedMemory + 1024) / (prepareSharedBytes<Layer>() + 1024);
  static_assert(fit >= 1, "a preparing block fits a multiprocessor");
  return fit < 2 ? int(fit) : 2;
}
template <typename Layer> LINAC_HOST_DEVICE constexpr int64_t preparedChunkBytes() {
  return PipelineMap(Layer::K, Layer::V, PipelineBlock::Prepare,
                     Layer::kKeyGate, Layer::kErase)
      .bufferBytes;
}

template <typename Layer> LINAC_HOST_DEVICE constexpr void checkPhased() {
  static_assert(!Layer::kNormalizer && !Layer::kValueDecay,
                "the phased kernels take a key-side gate or none, with an "
                "erase or without, reading after the write or before it");
  static_assert(Layer::K % 16 == 0 && Layer::V % 16 == 0 && Layer::K <= 128 &&
                    Layer::V <= 16 * kPipelineGroupWarps,
                "a state warp holds 16 value columns of every key");
}

/// A layer as the phased kernels read its inputs: none staged in shared
/// rows (the plan's staging is the lockstep entry's), each warp's token's
/// inputs in registers.
template <typename Layer> struct UnstagedLayer : Layer {
  LINAC_HOST_DEVICE static constexpr bool sharedInput(int) { return false; }
  LINAC_HOST_DEVICE static constexpr bool lateSharedInput(int) { return false; }
};

/// Selects the inputs the generated epilogue loads from global memory (all
/// but those in its rows when they are `Staged`), which the state block
/// asks L2 for a chunk ahead.
template <typename Layer, bool Staged> struct UnstagedEpilogueInputs {
  LINAC_HOST_DEVICE static constexpr bool holds(int i) {
    return Layer::epilogueInput(i) &&
           !(Staged && EpilogueRows<Layer>::holds(i));
  }
};

/// Where the prepared buffer of slot `slot` (geometry.h, preparedSlot) and
/// `head` is in args.prepared.
template <typename Layer>
LINAC_DEVICE char *preparedBuffer(const linac_cuda_forward_args &args,
                                  int64_t slot, int head) {
  return static_cast<char *>(args.prepared) +
         (slot * args.num_heads + head) * preparedChunkBytes<Layer>();
}

/// A block of the preparing phase: grid (preparedSlots, heads), slots
/// between sequences idle.
template <typename Layer, typename T>
LINAC_DEVICE void prepareKernel(const linac_cuda_forward_args &args) {
  checkPhased<Layer>();
  using Layout = PipelineLayout<Layer, PipelineBlock::Prepare>;
  constexpr int C = Layout::C, Warps = kPipelineGroupWarps;
  const int64_t slot = blockIdx.x;
  const int head = blockIdx.y;
  int64_t begin, end;
  const int64_t seq = sequenceOfSlot(
      args, slot,
      [](int64_t s, int64_t first) { return preparedSlot(s, first, 0); }, begin,
      end);
  const int64_t start = begin + (slot - preparedSlot(seq, begin, 0)) * C;
  if (start >= end)
    return;
  const int length = end - start < C ? int(end - start) : C;
  prefetchInputs<Layer, T>(args, start, length, head, threadIdx.x, 32 * Warps);

  // The generated prologue, a warp kPrologueTokens tokens at once (their
  // latency chains interleave), each warp's next tokens' inputs loaded
  // while it runs these. Tokens past a partial chunk's end run on zero
  // inputs and store zero operands; a whole chunk takes no selects. Under a
  // key-vector gate warp w takes tokens 8w..8w+7, a half sub-chunk, and
  // sums their log-gates as it goes (prepareHalf); otherwise tokens w,
  // w + 8, ...
  const typename Layout::Buffer buffer{0};
  const int warp = threadIdx.x / 32;
  using Unstaged = UnstagedLayer<Layer>;
  using Inputs = TokenInputs<Unstaged, T>;
  constexpr int Tokens = kPrologueTokens, Rounds = C / (Tokens * Warps);
  constexpr bool kHalves = Layer::kKeyGate == Gate::Vector;
  static_assert(C % (Tokens * Warps) == 0, "whole rounds of tokens");
  static_assert(!kHalves || Rounds * Tokens == kHalfSubchunk,
                "a warp's rounds make its half sub-chunk");
  auto tokenOf = [&](int round, int j) {
    if (round == Rounds)
      return C;
    return kHalves ? warp * kHalfSubchunk + round * Tokens + j
                   : warp + (round * Tokens + j) * Warps;
  };
  const HeadInputs<Unstaged, T> inputs(args, start, head);
  auto loadToken = [&](Inputs &to, int i) {
    if (i < length)
      to.load(inputs.at(i));
    else
      to = Inputs{};
  };
  HalfGates<Layer::K> gates{};
  float running[HalfGates<Layer::K>::Slots] = {};
  auto prologueRounds = [&](auto partial) {
    Inputs next[Tokens];
#pragma unroll
    for (int j = 0; j < Tokens; ++j)
      loadToken(next[j], tokenOf(0, j));
#pragma unroll 1
    for (int round = 0; round < Rounds; ++round) {
      Inputs current[Tokens];
#pragma unroll
      for (int j = 0; j < Tokens; ++j) {
        current[j] = next[j];
        loadToken(next[j], tokenOf(round + 1, j));
      }
      ChunkOperands<Layer::K, Layer::V, Layer::kKeyGate> ops[Tokens];
#pragma unroll
      for (int j = 0; j < Tokens; ++j) {
        ops[j] = noOperands<Layer>();
        Layer::Chunk::prologue(
            RegisterToken<Unstaged, T>{{args, start + tokenOf(round, j), head},
                                       current[j]},
            ops[j]);
      }
#pragma unroll
      for (int j = 0; j < Tokens; ++j) {
        const int i = tokenOf(round, j);
        if (decltype(partial)::value && i >= length)
          ops[j] = noOperands<Layer>();
        storeOperands<Layer, Layout>(buffer, i, ops[j]);
        if constexpr (kHalves) {
#pragma unroll
          for (int s = 0; s < HalfGates<Layer::K>::Slots; ++s)
            running[s] += floorLogGate(ops[j].gk.x[s]);
          gates.set(round * Tokens + j, running);
        }
      }
    }
  };
  byChunkTail(length == C, prologueRounds);
  __syncthreads();
  bool midpoint = false;
  if constexpr (kHalves)
    midpoint = prepareHalf<Layer, Layout>(buffer, warp, threadIdx.x, gates,
                                          readScale<Layer>(args));
  prepareBuffer<Layer, Layout>(
      buffer, warp, threadIdx.x, readScale<Layer>(args), true, true,
      [] { __syncthreads(); }, midpoint);
  fenceSharedForBulkCopies();
  __syncthreads();
  if (threadIdx.x == 0) {
    bulkStore(preparedBuffer<Layer>(args, slot, head), buffer.image(),
              unsigned(Layout::kMap.bufferBytes));
    commitBulkStores();
    // The store needs the buffer until it has read it; the writes to
    // global memory finish before the kernel does, so the block need not
    // hold its multiprocessor for them.
    waitBulkStoresRead();
  }
}

/// A block of the state phase: `work`'s chunks from their prepared buffers.
template <typename Layer, typename T>
LINAC_DEVICE void phasedChunks(const linac_cuda_forward_args &args,
                               const ChunkWork &work) {
  checkPhased<Layer>();
  using Layout = PipelineLayout<Layer, PipelineBlock::State>;
  constexpr int C = Layout::C, Warps = kPipelineGroupWarps;
  // The part of each chunk's image this block's steps read.
  constexpr PipelineMap kMap = Layout::kMap;
  const unsigned imageBytes =
      unsigned(kMap.imageBytes(work.identityFrom < 0, work.reads));
  const int64_t chunks = (work.end - work.begin + C - 1) / C;
  int64_t seqBegin = 0, seqEnd = 0;
  sequenceBounds(args, work.seq, seqBegin, seqEnd);
  const int64_t firstSlot =
      preparedSlot(work.seq, seqBegin, (work.begin - seqBegin) / C);
  uint64_t *barriers = Layout::barriers();
  // Chunk c's buffer into buffer c % 2, by thread 0.
  auto load = [&](int64_t c) {
    const typename Layout::Buffer buffer{int(c % 2)};
    arriveExpecting(&barriers[c % 2], imageBytes);
    bulkCopy(buffer.image(),
             preparedBuffer<Layer>(args, firstSlot + c, work.head), imageBytes,
             &barriers[c % 2], readOncePolicy());
  };
  if (threadIdx.x == 0) {
    initBarrier(&barriers[0]);
    initBarrier(&barriers[1]);
    for (int64_t c = 0; c < chunks && c < 2; ++c)
      load(c);
  }
  __syncthreads();

  const int warp = threadIdx.x / 32, column = 16 * warp;
  const bool live = column < Layer::V;
  StateTiles<Layer> st;
  loadStateTiles<Layer>(st, work, column, live);
  // Thread d's key channel's total log-gate over the chunks, for
  // work.logGates.
  float logGate = 0.0f;
  const int channel = Layer::kKeyGate == Gate::Vector ? threadIdx.x : 0;
  for (int64_t c = 0; c < chunks; ++c) {
    const typename Layout::Buffer buffer{int(c % 2)};
    waitBarrier(&barriers[c % 2], unsigned(c / 2 % 2));
    if (work.logGates && threadIdx.x < Layer::K)
      logGate += buffer.logDecay()[channel];
    // The epilogue's inputs: this chunk's rows into each warp's while the
    // state advances (the warp's previous epilogue is done with them), the
    // next chunk's others asked of L2.
    if (work.reads) {
      const int64_t first = work.begin + c * C, next = first + C;
      if constexpr (Layout::kStagedEpilogue)
        EpilogueRows<Layer>::template copy<T>(
            args, first, int(min(work.end - first, int64_t(C))), work.head,
            warp, Layout::epilogueRows());
      if (next < work.end)
        prefetchInputs<Layer, T,
                       UnstagedEpilogueInputs<Layer, Layout::kStagedEpilogue>>(
            args, next, int(min(work.end - next, int64_t(C))), work.head,
            threadIdx.x, 32 * Warps);
    }
    if (live)
      advanceState<Layer, Layout>(st, buffer, column, work.reads,
                                  work.identityFrom < 0);
    // Every warp is done with the buffer, which takes chunk c + 2 while the
    // epilogue runs, and has its columns of the reads in.
    __syncthreads();
    if (threadIdx.x == 0 && c + 2 < chunks)
      load(c + 2);
    if (work.reads) {
      if constexpr (Layout::kStagedEpilogue)
        EpilogueRows<Layer>::wait();
      const int64_t left = work.end - work.begin - c * C;
      chunkEpilogue<Layer, T, Layout>(args, work, c, left < C ? int(left) : C,
                                      warp, Warps);
      __syncthreads();
    }
  }
  storeStateTiles<Layer>(st, work, column, live);
  if (work.logGates && threadIdx.x < Layer::K)
    work.logGates[threadIdx.x] = logGate;
}

/// A block of the phased forward's state kernel: its work in args' pass.
template <typename Layer, typename T>
LINAC_DEVICE void phasedKernel(const linac_cuda_forward_args &args) {
  ChunkWork work;
  if (chunkWork<Layer>(args, work))
    phasedChunks<Layer, T>(args, work);
}

} // namespace linac::cuda

#endif // LINAC_CUDA_PHASED_H
