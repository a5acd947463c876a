//===- geometry.h - sizes the plan and the chunkwise kernel share -*- C++ -*-===//
//
// Every number that both the plan (compiler/lib/Plan.cpp, on the host) and
// the chunkwise kernel (chunk.h, on the device) need, computed here once:
// the tile a state takes, the map of a chunk's shared memory, the bytes of
// staged input rows and parameters, the transition blocks of a segment, the
// compose kernel's memory, the warp-group kernels' buffers and the phased
// kernels' workspace slots, the scan's block and decode's split of a state.
// Plain constexpr C++, without CUDA, so that
// the compiler includes it too; the generated source checks the plan's
// numbers against it as it compiles.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CUDA_GEOMETRY_H
#define LINAC_CUDA_GEOMETRY_H

#include "linac/cuda/abi.h"

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define LINAC_GEOMETRY __host__ __device__ constexpr
#else
#define LINAC_GEOMETRY constexpr
#endif

namespace linac::cuda {

/// How a key-side gate enters the chunkwise kernel.
enum class Gate { None, Scalar, Vector };

/// Which kernel a layer's chunkwise entry (linac_chunk_*) is: every warp
/// on each chunk in turn (chunk.h), two groups of warps on two chunks at
/// once (pipeline.h), or producer warps and consumer warpgroups on wgmma
/// (warpgroup.h). The phased kernels (phased.h) have entries of their
/// own.
enum class ChunkKernel { Lockstep, Pipelined, Warpgroup };

/// Dynamic shared memory a block may have on sm_90a and on sm_80.
inline constexpr int64_t kSm90aSharedMemory = 227 * 1024;
inline constexpr int64_t kSm80SharedMemory = 163 * 1024;

/// Tokens of a chunk, and the threads of a chunkwise block: 16 warps, two
/// for each of eight roles of 16 key rows.
inline constexpr int kChunkSize = 64;
inline constexpr int kChunkWarps = 16, kChunkThreads = 32 * kChunkWarps;
/// The largest K and V the chunkwise kernel's registers hold.
inline constexpr int kMaxChunkDim = 128;

/// K or V as the kernel's tiles take it: padded to a multiple of 16.
LINAC_GEOMETRY int paddedDim(int n) { return (n + 15) / 16 * 16; }

/// Bytes a token's row of a staged 16-bit input takes, or 0 when its rows
/// are not whole 16-byte runs and it stays in registers.
LINAC_GEOMETRY int stagedRowBytes(int64_t elements) {
  return 2 * elements % 16 == 0 ? int(2 * elements) : 0;
}

/// Bytes a head's fp32 parameter of `elements` takes in shared memory, from
/// a 16-byte boundary.
LINAC_GEOMETRY int paramBytes(int64_t elements) {
  return int((4 * elements + 15) / 16 * 16);
}

/// What sizes a chunk's shared memory: the layer's K and V (padded here),
/// its normal form, and the bytes a token's staged input rows and the
/// head's parameters take.
struct ChunkShape {
  int keys = 0, values = 0;
  bool normalizer = false, erase = false;
  Gate gate = Gate::None;
  bool valueDecay = false;
  int64_t inputRowBytes = 0, paramBytes = 0;
};

/// Where each of a chunk's buffers starts in shared memory (ChunkLayout in
/// chunk.h), in bytes, and the padded strides of their rows.
struct ChunkMap {
  int C, K, V, U, KS, DS, US, AS, IS;
  int64_t q, k, e, values, state, delta, p, a, gates, lateRows, stateNormalizer,
      weights, inverses, valueGates, inputRows, params, bytes;
  /// Whether the bf16 state copy is published after the prologue (its
  /// memory then takes late input rows before).
  bool publishAfterPrologue;

  LINAC_GEOMETRY explicit ChunkMap(const ChunkShape &shape)
      : C(kChunkSize), K(paddedDim(shape.keys)), V(paddedDim(shape.values)),
        // Value columns: V, then the normaliser padded to a tile of 8.
        U(V + (shape.normalizer ? 8 : 0)),
        // Row strides, padded so fragment loads spread over the banks; the
        // inverses of the erase's 16 x 16 diagonal blocks take rows of 20.
        KS(K + 8), DS(U + 8), US(U + 4), AS(C + 4), IS(20), q(0), k(0), e(0),
        values(0), state(0), delta(0), p(0), a(0), gates(0), lateRows(0),
        stateNormalizer(0), weights(0), inverses(0), valueGates(0),
        inputRows(0), params(0), bytes(0),
        publishAfterPrologue(shape.gate != Gate::None || shape.valueDecay) {
    k = q + 2 * C * KS;                               // bf16 C x KS each
    e = k + 2 * C * KS;
    values = e + (shape.erase ? 2 * C * KS : 0);      // f32 C x US
    // The late input rows take P, A and what else is free from the
    // previous chunk's last barrier to this chunk's prologue barrier: with
    // an erase, Delta (the solve writes it after the prologue); with a
    // gate, the state copy (then published after the prologue, beside the
    // cumulative gates and before their barrier). The order keeps them
    // together.
    const int64_t stateBytes = 2 * K * DS, deltaBytes = 2 * C * DS;
    const int64_t afterValues = values + 4 * C * US;
    state = shape.erase ? afterValues : afterValues + deltaBytes; // bf16 K x DS
    delta = shape.erase ? afterValues + stateBytes : afterValues; // bf16 C x DS
    p = afterValues + stateBytes + deltaBytes;        // f32 C x AS
    a = p + 4 * C * AS;                               // f32 C x AS
    gates = a + (shape.erase ? 4 * C * AS : 0);
    lateRows = publishAfterPrologue ? state : shape.erase ? delta : p;
    // The gates: a key-vector gate's C x KS, or a scalar gate's cumulative
    // log-gates and then each token's factor to the chunk's end. After
    // them, with a normaliser, its column of the state and of Delta in
    // fp32.
    stateNormalizer = gates + 4 * C *
                                  (shape.gate == Gate::Vector   ? KS
                                   : shape.gate == Gate::Scalar ? 2
                                                                : 1);
    weights = stateNormalizer + 4 * K;
    inverses = shape.normalizer ? weights + 4 * C : stateNormalizer;
    // A value-side decay's cumulative log-gates, f32 C x US.
    valueGates = inverses + (shape.erase ? 4 * C * IS : 0);
    inputRows = valueGates + (shape.valueDecay ? 4 * C * US : 0);
    params = inputRows + C * shape.inputRowBytes;
    bytes = params + shape.paramBytes;
  }

  /// Bytes the late input rows may take.
  LINAC_GEOMETRY int64_t lateRowBytes() const { return gates - lateRows; }
};

/// Warps of each of a pipelined block's two groups (pipeline.h), and the
/// floats of the 16 x 8 tile each preparing warp keeps in shared memory.
inline constexpr int kPipelineGroupWarps = kChunkWarps / 2;
inline constexpr int kPipelineScratchFloats = 16 * 8;
/// Tokens of a half sub-chunk: under a key-vector gate a preparing warp
/// runs the prologue of one and sums its log-gates in registers.
inline constexpr int kHalfSubchunk = 8;

/// The blocks that work on prepared chunk buffers: the pipelined kernel's,
/// which prepares and consumes them; and the phased kernels', one that
/// prepares a chunk's buffer and stores it to global memory and one that
/// loads them by bulk copies and advances the state.
enum class PipelineBlock { Pipelined, Prepare, State };

/// Where each of a block's chunk buffers starts in shared memory
/// (PipelineLayout in pipeline.h), in bytes, and the padded strides of
/// their rows: the buffers of prepared operands (two, or one in a
/// preparing block), then the preparing warps' own memory, the state
/// warps' reads and a phased state block's two bulk-copy barriers. A
/// buffer's image is what a phased preparing block stores for each chunk;
/// its operands are in the order a state block needs them, so that a
/// block copies a prefix: to `u` for a transition, to `q` for a state
/// without reads, the whole image with them.
struct PipelineMap {
  int C, K, V, KS, VS, PS, AS, OS, IS;
  int64_t lambda, logDecay, k, w, u, q, p, bufferBytes, a, inverses, scratch,
      halfGates, o, epilogueRows, barriers, bytes;

  /// `gate` Vector: a gate per key channel (phased kernels only), whose
  /// chunk decay is a vector and whose preparing block keeps each half
  /// sub-chunk's total log-gates and their cumulative sums. Without an
  /// `erase` (phased kernels only) a buffer has no W and a preparing block
  /// no triangular solve: Delta is U. A state block stages the rows of the
  /// inputs its epilogue loads, `epilogueRowBytes` a token (phasedState).
  LINAC_GEOMETRY PipelineMap(int keys, int values,
                             PipelineBlock block = PipelineBlock::Pipelined,
                             Gate gate = Gate::Scalar, bool erase = true,
                             int64_t epilogueRowBytes = 0)
      : C(kChunkSize), K(keys), V(values), KS(K + 8), VS(V + 8), PS(C + 8),
        AS(C + 4), OS(V + 4), IS(20), lambda(0), logDecay(lambda + 4 * C),
        k(logDecay + (gate == Gate::Vector ? 4 * K : 16)), w(k + 2 * C * KS),
        u(w + (erase ? 2 * C * KS : 0)), q(u + 2 * C * VS), p(q + 2 * C * KS),
        bufferBytes(p + 2 * C * PS),
        // C log-gates and the chunk's total log-gate (a float, or K); bf16
        // C x KS: k, w (with an erase); C x VS: u; C x KS: q; C x PS: P;
        // then, in a block that prepares with an erase, fp32 T (C x AS),
        // the diagonal blocks' inverses (C x IS) and a 16 x 8 tile a
        // preparing warp; a key-vector gate's two K-vectors a half
        // sub-chunk, the reads (C x OS), a state block's epilogue input
        // rows and two mbarriers.
        a((block == PipelineBlock::Prepare ? 1 : 2) * bufferBytes),
        inverses(a + (block != PipelineBlock::State && erase ? 4 * C * AS : 0)),
        scratch(inverses +
                (block != PipelineBlock::State && erase ? 4 * C * IS : 0)),
        halfGates(scratch +
                  (block != PipelineBlock::State && erase
                       ? 4 * kPipelineGroupWarps * kPipelineScratchFloats
                       : 0)),
        o(halfGates + (block != PipelineBlock::State && gate == Gate::Vector
                           ? 4 * 2 * (C / kHalfSubchunk) * K
                           : 0)),
        epilogueRows(o + (block != PipelineBlock::Prepare ? 4 * C * OS : 0)),
        barriers(epilogueRows +
                 (block == PipelineBlock::State ? C * epilogueRowBytes : 0)),
        bytes(barriers + (block == PipelineBlock::State ? 16 : 0)) {}

  /// A phased state block's map: with the epilogue's input rows,
  /// `epilogueRowBytes` a token, where they fit in `sharedBytes`; else
  /// without, and the epilogue loads them from global memory.
  LINAC_GEOMETRY static PipelineMap phasedState(int keys, int values, Gate gate,
                                                bool erase,
                                                int64_t epilogueRowBytes,
                                                int64_t sharedBytes) {
    PipelineMap staged(keys, values, PipelineBlock::State, gate, erase,
                       epilogueRowBytes);
    return staged.bytes <= sharedBytes
               ? staged
               : PipelineMap(keys, values, PipelineBlock::State, gate, erase);
  }

  /// Whether a state block stages its epilogue's input rows.
  LINAC_GEOMETRY bool stagesEpilogue() const { return barriers > epilogueRows; }

  /// Bytes of a buffer's image a state block reads: with `values` (not a
  /// transition's identity) U', with `reads` Q and P too.
  LINAC_GEOMETRY int64_t imageBytes(bool values, bool reads) const {
    return reads ? bufferBytes : values ? q : u;
  }
};

/// Warps of a warpgroup block's producer (warpgroup.h): two warpgroups.
inline constexpr int kProducerWarps = 8;
/// Threads of a warpgroup block: the producer's, and a consumer warpgroup
/// for each 64 value columns.
LINAC_GEOMETRY int warpgroupThreads(int values) {
  return 32 * kProducerWarps + 128 * (values / 64);
}

/// Where each of a warpgroup block's buffers starts in shared memory, in
/// bytes from a 1024-byte boundary (the block aligns its base, so `bytes`
/// holds 1024 more): two buffers of operands, each Q, K and U as swizzled
/// bf16 tiles of 64 tokens, with an erase also W (E while the producer
/// works on it) and P, 64 x 64; both buffers' log-gates (cumulative with
/// an erase). Without an erase: under a gate, U scaled to the chunk's end
/// (the consumers') and each consumer's cumulative sums of the log-gates;
/// each consumer's bf16 copy of its state columns (K x 64); the reads as
/// 16-bit tiles of 64 tokens (with an erase the reads take U's tiles). With
/// one, from a 1024-byte boundary: the diagonal blocks' inverses (C rows of
/// `inverseStride`) and a scratch tile a producer warp, over which the
/// solved T lies as a swizzled bf16 tile of 64 x 64 for the consumers until
/// the next solve takes them back; the producer's A, then T, in fp32 (C
/// rows of `aStride` floats). Then the staged input rows (`inputRowBytes` a
/// token, at a 128-byte boundary as tensor copies need), the parameters,
/// and the rows' mbarrier.
struct WarpgroupMap {
  static constexpr int aStride = kChunkSize + 4, inverseStride = 20;
  int64_t q, k, v, w, p, bufferBytes, scaledV, gates, cumulativeGates, inverses,
      scratch, a, states, reads, inputRows, params, rowBarrier, bytes;

  LINAC_GEOMETRY WarpgroupMap(int keys, int values, Gate gate, bool erase,
                              int64_t inputRowBytes, int64_t paramBytes)
      : q(0), k(q + 2 * kChunkSize * keys), v(k + 2 * kChunkSize * keys),
        w(v + 2 * kChunkSize * values),
        p(w + (erase ? 2 * kChunkSize * keys : 0)),
        bufferBytes(p + (erase ? 2 * kChunkSize * kChunkSize : 0)),
        scaledV(2 * bufferBytes),
        gates(scaledV +
              (gate == Gate::None || erase ? 0 : 2 * kChunkSize * values)),
        cumulativeGates(gates + 2 * 4 * kChunkSize),
        inverses((cumulativeGates +
                  (erase ? 0 : (values / 64) * 4 * kChunkSize) + 1023) /
                 1024 * 1024),
        scratch(inverses + (erase ? 4 * kChunkSize * inverseStride : 0)),
        a(scratch + (erase ? 4 * kProducerWarps * kPipelineScratchFloats : 0)),
        states((a + (erase ? 4 * kChunkSize * aStride : 0) + 1023) / 1024 *
               1024),
        reads(states + (erase ? 0 : (values / 64) * 2 * keys * 64)),
        inputRows((reads + (erase ? 0 : 2 * kChunkSize * values) + 127) / 128 *
                  128),
        params(inputRows + kChunkSize * inputRowBytes),
        rowBarrier(params + paramBytes), bytes(rowBarrier + 8 + 1024) {}
};

/// Threads of either phased block: one group of warps.
inline constexpr int kPhasedThreads = 32 * kPipelineGroupWarps;

/// The phased kernels' slot of chunk c of a sequence from token `begin`:
/// every sequence's chunks in order, a sequence's first after the slots of
/// all tokens before it and one slot a sequence before it, so that slots
/// are distinct whatever the sequences' lengths.
LINAC_GEOMETRY int64_t preparedSlot(int64_t seq, int64_t begin, int64_t c) {
  return seq + begin / kChunkSize + c;
}
/// Slots a batch of `seqs` sequences and `tokens` tokens in all takes.
LINAC_GEOMETRY int64_t preparedSlots(int64_t seqs, int64_t tokens) {
  return seqs + (tokens + kChunkSize - 1) / kChunkSize;
}

/// Tokens between the states the scan's backward keeps (its checkpoints),
/// and the slot of sequence `seq`'s c-th checkpoint, its tokens from
/// `begin`, among the checkpointSlots of a batch.
inline constexpr int kCheckpointTokens = 64;
LINAC_GEOMETRY int64_t checkpointSlot(int64_t seq, int64_t begin, int64_t c) {
  return seq + begin / kCheckpointTokens + c;
}
LINAC_GEOMETRY int64_t checkpointSlots(int64_t seqs, int64_t tokens) {
  return seqs + (tokens + kCheckpointTokens - 1) / kCheckpointTokens;
}

/// The chunkwise backward (chunk_backward.h): its chunks' tokens, the value
/// columns a block of its state walks takes, its blocks' threads, and those
/// of the walks' blocks (which go chunk by chunk, so that more warps share
/// each chunk's steps).
inline constexpr int kBackwardChunk = 32;
inline constexpr int kBackwardColumns = 32;
inline constexpr int kBackwardThreads = 256;
inline constexpr int kBackwardWalkThreads = 512;
/// The log-gates of a token the chunkwise backward keeps: one a key under
/// a key-vector gate, else one.
LINAC_GEOMETRY int backwardGates(int keys, bool keyVector) {
  return keyVector ? keys : 1;
}
/// Floats of one (token, head)'s record of operands, or of their gradients,
/// in the chunkwise backward's workspace: q, k and e (K each), u (V) and the
/// key-side log-gates.
LINAC_GEOMETRY int64_t backwardRecordFloats(int keys, int values, int gates) {
  return 3 * int64_t(keys) + values + gates;
}
/// Floats of a chunk's prepared record (chunk_backward.h): P and T (C x C
/// each), W, Q' and K' (C x K each), the decay (K) and U' (C x V).
LINAC_GEOMETRY int64_t backwardPreparedFloats(int keys, int values) {
  return 2 * int64_t(kBackwardChunk) * kBackwardChunk +
         int64_t(kBackwardChunk) * (3 * keys + values) + keys;
}
/// The slot of sequence `seq`'s c-th backward chunk among backwardSlots, as
/// checkpointSlot's.
LINAC_GEOMETRY int64_t backwardSlot(int64_t seq, int64_t begin, int64_t c) {
  return seq + begin / kBackwardChunk + c;
}
LINAC_GEOMETRY int64_t backwardSlots(int64_t seqs, int64_t tokens) {
  return seqs + (tokens + kBackwardChunk - 1) / kBackwardChunk;
}
/// Column tiles of the chunkwise backward's state blocks.
LINAC_GEOMETRY int backwardColumnTiles(int values) {
  return (values + kBackwardColumns - 1) / kBackwardColumns;
}
/// The shared memory of a chunkwise backward block, in floats: the chunk's
/// q, k and e rows (K + 1 floats apart, so that a warp reading one column
/// of them meets every bank once), the state and its gradient (K rows of
/// kBackwardColumns + 1), the writes, the reads' gradient and the writes'
/// (C rows of kBackwardColumns + 1), three C x (C + 1) arrays of pairs, the
/// cumulative log-gates (C x gates doubles) and two floats a key.
LINAC_GEOMETRY int backwardSharedFloats(int keys, int gates) {
  return 3 * kBackwardChunk * (keys + 1) + 2 * keys * (kBackwardColumns + 1) +
         3 * kBackwardChunk * (kBackwardColumns + 1) +
         3 * kBackwardChunk * (kBackwardChunk + 1) +
         2 * kBackwardChunk * gates + 2 * keys;
}
LINAC_GEOMETRY int backwardSharedBytes(int keys, int gates) {
  return backwardSharedFloats(keys, gates) * 4;
}

/// Threads of the recurrent scan's block: thread j holds value column j,
/// and one more the normaliser's, in whole warps.
LINAC_GEOMETRY int scanThreads(int values, bool normalized) {
  return (values + (normalized ? 1 : 0) + 31) / 32 * 32;
}

/// Blocks of a segmented forward's LOCAL pass a segment takes besides its
/// state's: with an erase, its K x K transition's column blocks of the
/// kernel's padded V.
LINAC_GEOMETRY int transitionBlocks(int keys, int values, bool erase) {
  return erase ? (keys + paddedDim(values) - 1) / paddedDim(values) : 0;
}

/// Floats of one (segment, head) slot of a segmented forward's
/// transitions: with an erase a K x K matrix; otherwise each key channel's
/// total log-gate and then each of the state's columns'.
LINAC_GEOMETRY int64_t transitionFloats(int keys, int columns, bool erase) {
  return erase ? int64_t(keys) * keys : int64_t(keys) + columns;
}

/// Floats between the rows of a transition in a compose block's memory:
/// one past K, so that the rows a warp reads at one key fall in different
/// banks.
LINAC_GEOMETRY int composeTransitionStride(int keys) { return keys + 1; }

/// Where a compose block's column tile starts, in floats: after the
/// transition, at a multiple of four for its float4 reads.
LINAC_GEOMETRY int composeTileOffset(int keys) {
  return (keys * composeTransitionStride(keys) + 3) / 4 * 4;
}

/// Shared memory of a compose block: with an erase, a transition (rows
/// composeTransitionStride apart) and a column tile of the state before it.
LINAC_GEOMETRY int64_t composeSharedBytes(int keys, bool erase) {
  return erase ? 4 * (int64_t(composeTileOffset(keys)) +
                      int64_t(keys) * LINAC_CUDA_COMPOSE_COLUMNS)
               : 0;
}

/// How a decode group of `warps` warps splits a state's K key rows and a
/// strip of its value columns, one of `parts` (DecodeSplit and DecodeState
/// in decode.h). Two lanes side by side take a strip's runs of eight
/// columns, four each, where a warp has more than four columns, and the
/// lane pairs split the key rows.
struct DecodeShape {
  int keys, held, columns, columnLanes, rowLanes, rows, stripColumns, slots;

  LINAC_GEOMETRY DecodeShape(int keys, int values, int parts, int warps,
                             bool normalized)
      : keys(keys), held(values / parts),
        // A held row's columns: the normaliser, when kept, is last.
        columns(held + (normalized ? 1 : 0)),
        columnLanes((held + warps - 1) / warps > 4 ? 2 : 1),
        rowLanes(32 / columnLanes), rows((keys + rowLanes - 1) / rowLanes),
        // A warp's value columns, whole runs of four a column lane, and a
        // thread's.
        stripColumns(((held + warps - 1) / warps + 4 * columnLanes - 1) /
                     (4 * columnLanes) * (4 * columnLanes)),
        slots(stripColumns / columnLanes) {}

  /// Floats one state staged by bulk copies takes: each row lane's block
  /// of rows, 16 bytes a column lane further from the previous one than in
  /// memory, so that each quarter of a warp's 16-byte reads falls on
  /// different banks.
  LINAC_GEOMETRY int bulkStageFloats() const {
    return rowLanes * (rows * columns + 4 * columnLanes);
  }
  /// Whether the bulk copy engine can move a whole state: every block of
  /// rows is whole 16-byte runs.
  LINAC_GEOMETRY bool blocksAreRuns() const {
    return rows * columns % 4 == 0 && keys % rows * columns % 4 == 0;
  }
};

} // namespace linac::cuda

#undef LINAC_GEOMETRY

#endif // LINAC_CUDA_GEOMETRY_H
