//===- Plan.cpp - the plan pass -------------------------------------------===//
//
// -linac-plan: from a layer's normal form, its dimensions and the target,
// the algorithm family, chunk size, gate numerics, the forward kernels'
// launch shape and shared memory, and how decode splits and stages states;
// recorded as a manifest::Plan.
//
//===----------------------------------------------------------------------===//

#include "linac/Compiler/LayerAttributes.h"
#include "linac/Compiler/NormalForm.h"
#include "linac/Compiler/Passes.h"
#include "linac/cuda/abi.h"
#include "linac/cuda/geometry.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>

namespace linac {
#define GEN_PASS_DEF_LINACPLAN
#include "linac/Compiler/Passes.h.inc"
} // namespace linac

using namespace mlir;
using namespace linac;

namespace {

/// How the normal form's key-side gate enters the CUDA kernels.
cuda::Gate keyGate(const NormalForm &form) {
  return form.keyDecay == KeyDecay::Vector ? cuda::Gate::Vector
         : form.keyDecay == KeyDecay::None ? cuda::Gate::None
                                           : cuda::Gate::Scalar;
}

/// The shape of a chunk of the CUDA kernel (templates/linac/cuda/
/// geometry.h), without its staged input rows.
cuda::ChunkShape chunkShape(LayerOp layer, const NormalForm &form) {
  StateType state = layer.getStateType();
  cuda::ChunkShape shape;
  shape.keys = int(state.getKeyDim());
  shape.values = int(state.getValueDim());
  shape.normalizer = state.getNormalized();
  shape.erase = form.erase != Strength::None;
  shape.gate = keyGate(form);
  shape.valueDecay = form.valueDecay;
  for (BlockArgument param : layer.getParams())
    shape.paramBytes += cuda::paramBytes(elementsOf(param.getType()));
  return shape;
}

/// The warpgroup kernel's shared memory (templates/linac/cuda/warpgroup.h),
/// which stages the rows of every input but the scalars: at the K and V it
/// takes, each a whole number of 16-byte runs.
cuda::WarpgroupMap warpgroupMap(LayerOp layer, const cuda::ChunkShape &shape) {
  int64_t rowBytes = 0;
  for (BlockArgument input : layer.getInputs())
    rowBytes += cuda::stagedRowBytes(elementsOf(input.getType()));
  return cuda::WarpgroupMap(shape.keys, shape.values, shape.gate, shape.erase,
                            rowBytes, shape.paramBytes);
}

/// Inputs the chunkwise kernel copies into shared memory a chunk ahead
/// (SharedInputRows in templates/linac/cuda/chunk.h): those whose token rows
/// of 16-bit activations are whole 16-byte runs, in order, while `room`
/// bytes last. Adds their bytes to `bytes`; the rest stay in registers.
/// Inputs in `taken` are passed over.
SmallVector<int64_t> sharedInputs(LayerOp layer, int64_t chunkSize,
                                  int64_t room, int64_t &bytes,
                                  ArrayRef<int64_t> taken = {}) {
  SmallVector<int64_t> shared;
  for (auto [index, input] : llvm::enumerate(layer.getInputs())) {
    int64_t rowBytes = cuda::stagedRowBytes(elementsOf(input.getType()));
    if (!rowBytes || bytes + chunkSize * rowBytes > room ||
        llvm::is_contained(taken, int64_t(index)))
      continue;
    shared.push_back(index);
    bytes += chunkSize * rowBytes;
  }
  return shared;
}

/// Inputs the warpgroup kernel reads by tensor maps: every input whose rows
/// it stages (WarpgroupInputs in templates/linac/cuda/chunk.h), keys and
/// values of at most 128 elements, within a box's 256.
std::vector<int64_t> tensorInputs(LayerOp layer) {
  std::vector<int64_t> staged;
  for (auto [index, input] : llvm::enumerate(layer.getInputs()))
    if (cuda::stagedRowBytes(elementsOf(input.getType())))
      staged.push_back(index);
  return staged;
}

/// The operands the warpgroup kernel lands in its tiles as their input rows
/// are (manifest::Plan::rowInputs): rowScaledOperands without an erase,
/// where no other input is a tensor input. The kernel with an erase still
/// stages its operands through the prologue.
std::optional<RowScaledOperands> warpgroupRows(LayerOp layer,
                                               const NormalForm &form) {
  std::optional<RowScaledOperands> rows = rowScaledOperands(layer, form);
  if (!rows || form.erase != Strength::None)
    return std::nullopt;
  for (int64_t input : tensorInputs(layer))
    if (!llvm::is_contained(rows->inputs, input))
      return std::nullopt;
  return rows;
}

/// How a decode group of `warps` warps splits a state, or a strip of
/// `parts` of its value columns (templates/linac/cuda/geometry.h).
cuda::DecodeShape decodeShape(StateType state, int64_t warps, int64_t parts) {
  return cuda::DecodeShape(int(state.getKeyDim()), int(state.getValueDim()),
                           int(parts), int(warps), state.getNormalized());
}

/// Whether a tensor map can move a strip in boxes of
/// LINAC_CUDA_DECODE_BOX_COLUMNS columns by every key row, 128-byte
/// swizzled: rows of whole 16-byte runs, at most 256 of them, and row lanes
/// that take interleaved pairs of rows (row % 8 apart within a
/// quarter-warp) so that the swizzle keeps a quarter-warp's reads on
/// different banks.
bool stripsAreBoxes(StateType state, const cuda::DecodeShape &shape) {
  int64_t rowStride = state.getValueDim() + (state.getNormalized() ? 1 : 0);
  return shape.columns % LINAC_CUDA_DECODE_BOX_COLUMNS == 0 &&
         rowStride % 4 == 0 && shape.keys <= 256 && shape.columnLanes == 2 &&
         shape.keys % (2 * shape.rowLanes) == 0;
}

/// Floats a decode thread would hold at once if a step loaded every vector
/// argument before its first state op: its part of the state and of each
/// vector or matrix.
int64_t upFrontDecodeFloats(LayerOp layer, const cuda::DecodeShape &blocks) {
  int64_t floats = blocks.rows * blocks.slots;
  for (BlockArgument arg : layer.getBody().getArguments())
    if (isKeyVector(arg.getType()))
      floats += blocks.rows;
    else if (isValueVector(arg.getType()))
      floats += blocks.slots;
    else if (isMatrixGate(arg.getType()))
      floats += blocks.rows * blocks.slots;
  return floats;
}

/// Whether decode items may hold strips of a state's value columns: no
/// normaliser column, no full-matrix gate, and no sum over the value axis
/// in the step, which a strip would see only part of.
bool takesValueStrips(LayerOp layer) {
  if (layer.getStateType().getNormalized())
    return false;
  WalkResult found = layer.walk([](Operation *op) {
    bool valueSum =
        isa<L2NormOp, DotOp>(op) && isValueVector(op->getOperand(0).getType());
    return valueSum || isa<MatrixGateOp>(op) ? WalkResult::interrupt()
                                             : WalkResult::advance();
  });
  return !found.wasInterrupted();
}

/// Ops of the step that take a transcendental function of every element of
/// a key vector.
int64_t keySideTranscendentals(LayerOp layer) {
  int64_t count = 0;
  layer.walk([&](Operation *op) {
    if (op->getNumResults() == 1 && isKeyVector(op->getResult(0).getType()) &&
        isa<math::ExpOp, math::Exp2Op, math::LogOp, math::Log2Op, math::Log1pOp,
            math::TanhOp, math::PowFOp, SigmoidOp, SoftplusOp>(op))
      ++count;
  });
  return count;
}

/// The most dynamic shared memory one block may have.
int64_t sharedMemoryLimit(manifest::Target target) {
  return target == manifest::Target::Sm90a ? cuda::kSm90aSharedMemory
                                           : cuda::kSm80SharedMemory;
}

constexpr int64_t kDecodeBlockWarps = LINAC_CUDA_DECODE_BLOCK_WARPS;

/// How decode splits and stages its items (decodeKernel in
/// templates/linac/cuda/decode.h).
struct DecodeStagingPlan {
  manifest::DecodeStaging staging = manifest::DecodeStaging::Direct;
  int64_t parts = 1, itemWarps = 0, stages = 0, sharedBytes = 0;
};

/// decode-warps warps take a state, as decode-parts strips of
/// decode-warps / decode-parts warps each where a strip can hold the step
/// and a tensor map can move it; the block's groups of item warps each
/// have a ring of up to three stages, which sm_90a's copy engines fill and
/// drain. Measured on an H200 at K = V = 128 (bench/history/decode.md,
/// E19-E22): with no step, strips of 64 columns by tensor copies reached
/// 92% / 77% of the copy ceiling at B256 / B64, whole states by bulk copies
/// of row blocks 89% / 75%; with the steps, halves of 8 warps beat whole
/// states on a group of 16 by 1 to 12 points, and quarters of 4 warps (four
/// groups hiding each other's steps) beat halves by 1 to 4 (E22, E24).
/// Other states take whole-state items by bulk copies where their blocks of
/// rows are whole 16-byte runs, else load directly.
DecodeStagingPlan planDecodeStaging(LayerOp layer, manifest::Target target,
                                    int64_t decodeWarps, int64_t decodeParts) {
  constexpr int64_t kReductionBytes = 1024;
  constexpr int64_t kSwizzleAlignment = LINAC_CUDA_DECODE_STAGE_ALIGNMENT;
  constexpr int64_t kMaxGroupStages = 3;
  StateType state = layer.getStateType();
  int64_t room = sharedMemoryLimit(target) - kReductionBytes;
  auto groupsOf = [](int64_t itemWarps) {
    return kDecodeBlockWarps / itemWarps;
  };
  using manifest::DecodeStaging;
  if (target != manifest::Target::Sm90a)
    return {DecodeStaging::Direct, 1, decodeWarps, 0, 0};
  if (decodeParts > 1 && takesValueStrips(layer) &&
      state.getValueDim() % decodeParts == 0 &&
      decodeWarps % decodeParts == 0 &&
      stripsAreBoxes(state,
                     decodeShape(state, decodeWarps / decodeParts, decodeParts))) {
    int64_t itemWarps = decodeWarps / decodeParts;
    int64_t stageBytes =
        state.getKeyDim() * (state.getValueDim() / decodeParts) * 4;
    int64_t stages =
        groupsOf(itemWarps) *
        std::min(kMaxGroupStages, (room - kSwizzleAlignment) /
                                      (stageBytes * groupsOf(itemWarps)));
    if (stages > 0)
      return {DecodeStaging::Tensor, decodeParts, itemWarps, stages,
              stages * stageBytes + kSwizzleAlignment};
  }
  cuda::DecodeShape blocks = decodeShape(state, decodeWarps, 1);
  if (!blocks.blocksAreRuns())
    return {DecodeStaging::Direct, 1, decodeWarps, 0, 0};
  int64_t stageBytes = 4 * int64_t(blocks.bulkStageFloats());
  int64_t stages =
      groupsOf(decodeWarps) *
      std::min(kMaxGroupStages, room / (stageBytes * groupsOf(decodeWarps)));
  if (stages == 0)
    return {DecodeStaging::Direct, 1, decodeWarps, 0, 0};
  return {DecodeStaging::Bulk, 1, decodeWarps, stages, stages * stageBytes};
}

/// The plan of a normalised layer for `target`.
manifest::Plan planLayer(LayerOp layer, manifest::Target target,
                         int64_t decodeWarps, int64_t decodeParts,
                         StringRef chunkKernel) {
  using manifest::DecodeKeyRows, manifest::DecodePlacement, manifest::Family,
      manifest::GateNumerics, manifest::Plan, manifest::StateLayout,
      manifest::Target;
  NormalForm form = deriveNormalForm(layer);
  bool gpu = target != Target::Cpu;
  StateType state = layer.getStateType();
  int64_t valueDim = state.getValueDim();
  Plan plan;
  plan.target = target;
  // Decode reads and writes each head's state once per step, in blocks of
  // whole rows or in strips of every row, so the pool keeps the forward
  // pass's key-major layout.
  plan.decodeStateLayout = StateLayout::KeyMajor;
  if (gpu) {
    DecodeStagingPlan staging =
        planDecodeStaging(layer, target, decodeWarps, decodeParts);
    cuda::DecodeShape blocks =
        decodeShape(state, staging.itemWarps, staging.parts);
    // A decode thread has 128 registers (512 threads a multiprocessor);
    // with about 24 for addresses, indices and temporaries, a step whose
    // vector arguments would not fit beside the state loads and computes
    // each value just before its first use instead (measured on an H200:
    // GDN-2, 120 floats, 1.16x faster at B256 and 92 bytes of spills down
    // to 28; KDA, 104, and Gated DeltaNet, 88, 2% to 12% slower, their
    // loads' latency exposed).
    constexpr int64_t kDecodeRegisterFloats = 128 - 24;
    plan.decodePlacement =
        upFrontDecodeFloats(layer, blocks) > kDecodeRegisterFloats
            ? DecodePlacement::FirstUse
            : DecodePlacement::BodyOrder;
    plan.decodeStaging = staging.staging;
    // Both lanes of a column pair hold the same key rows. Where the key
    // side takes two or more transcendentals a row, each computes it for
    // half of them and the pair trades halves by shuffles before the state
    // ops (measured on an H200, bench/history/decode.md, E31: GDN-2, two,
    // 88.7% to 90.3% of the copy ceiling at B256; KDA, one, and Gated
    // DeltaNet, none, 0.4 to 0.8 points slower).
    plan.decodeKeyRows = keySideTranscendentals(layer) >= 2
                             ? DecodeKeyRows::Split
                             : DecodeKeyRows::Whole;
    plan.decodeWarps = staging.itemWarps;
    plan.decodeParts = staging.parts;
    plan.decodeBlockThreads = kDecodeBlockWarps * 32;
    plan.decodeStages = staging.stages;
    plan.decodeSharedMemory = staging.sharedBytes;
    // The scan: one program per (sequence, head), thread j holding column j
    // (and one more for the normaliser).
    plan.scanBlockThreads =
        cuda::scanThreads(int(valueDim), form.normalizer);
  }
  // Why a chunkable body still runs as a scan on GPUs: the chunkwise kernel
  // keeps a head's whole state in one block's registers, and takes a
  // value-side decay only without an erase (whose triangular system would
  // differ for every column).
  constexpr int64_t kChunkSize = cuda::kChunkSize;
  std::string scanReason;
  int64_t sharedBytes = 0;
  // A factor above 1 would overflow the chunkwise kernels' cumulative
  // decays; the scan applies each token's factor alone.
  if (form.chunkable && form.mayGrow)
    scanReason = "a decay marked may_grow";
  else if (gpu && form.chunkable) {
    sharedBytes = cuda::ChunkMap(chunkShape(layer, form)).bytes;
    if (form.valueDecay && form.erase != Strength::None)
      scanReason = "value-side decay with an erase";
    else if (state.getKeyDim() > cuda::kMaxChunkDim ||
             valueDim > cuda::kMaxChunkDim)
      scanReason = llvm::formatv("dimensions above {0}", cuda::kMaxChunkDim);
    else if (sharedBytes > sharedMemoryLimit(target))
      scanReason = llvm::formatv(
          "the chunk's {0} bytes exceed {1}'s {2} of shared memory",
          sharedBytes, manifest::nameOf(target).data(), sharedMemoryLimit(target));
  }
  if (!form.chunkable || !scanReason.empty()) {
    plan.family = Family::Recurrent;
    if (!scanReason.empty())
      plan.recurrentReason = scanReason;
    plan.blockThreads = plan.scanBlockThreads;
    if (gpu)
      plan.backwardFamily = Family::Recurrent;
    return plan;
  }
  plan.family = form.erase == Strength::None ? Family::Chunkwise
                                             : Family::DeltaChunkwise;
  plan.chunkSize = kChunkSize;
  if (gpu) {
    // The chunkwise backward (templates/linac/cuda/chunk_backward.h) takes
    // any key-side gate, reading after the write, without a normaliser or a
    // value-side decay; any other layer goes back token by token.
    int keyDim = int(state.getKeyDim());
    int64_t backwardBytes = cuda::backwardSharedBytes(
        keyDim, cuda::backwardGates(keyDim, form.keyDecay == KeyDecay::Vector));
    bool chunkBackward = !form.valueDecay && !form.normalizer &&
                         !form.readBefore &&
                         backwardBytes <= sharedMemoryLimit(target);
    plan.backwardFamily = chunkBackward ? plan.family : Family::Recurrent;
    if (chunkBackward)
      plan.backwardSharedMemory = backwardBytes;
    // A chunk's inputs go to shared memory by asynchronous copies while the
    // previous chunk computes, as far as the working set leaves room.
    SmallVector<int64_t> shared = sharedInputs(
        layer, kChunkSize, sharedMemoryLimit(target), sharedBytes);
    plan.sharedInputs = std::vector<int64_t>(shared.begin(), shared.end());
    // Of the others, those that fit go into P and A's memory (and with a
    // gate the state copy's), copied during the previous chunk's epilogue.
    int64_t lateBytes = 0;
    SmallVector<int64_t> late = sharedInputs(
        layer, kChunkSize, cuda::ChunkMap(chunkShape(layer, form)).lateRowBytes(),
        lateBytes, shared);
    plan.lateSharedInputs = std::vector<int64_t>(late.begin(), late.end());
  }
  // A scalar log-gate difference is safe to exponentiate on the whole tile;
  // per-channel gates need sub-chunks with a local reference point (GPUs),
  // reference points on the CPU's products, or per-pair differences (the
  // CPU, with a value-side decay).
  bool vectorGate = form.keyDecay == KeyDecay::Vector || form.valueDecay;
  plan.gateNumerics = !vectorGate && form.keyDecay == KeyDecay::None
                          ? GateNumerics::None
                      : !vectorGate    ? GateNumerics::ScalarTile
                      : gpu            ? GateNumerics::Subchunk
                      : form.valueDecay ? GateNumerics::Pairwise
                                        : GateNumerics::Reference;
  if (plan.gateNumerics == GateNumerics::Subchunk)
    plan.subchunkSize = 16;
  if (gpu) {
    // One program per (sequence, head): sixteen warps, the state in their
    // registers. A key-side gate or none also has kernels of warp groups
    // where their buffers fit: the phased ones, with an erase or without,
    // and with an erase under no gate or a scalar one the pipelined one.
    // chunk-kernel=pipelined makes the chunkwise entry the pipelined kernel:
    // one group of warps prepares the next chunk (the intra-chunk products and
    // the solve) while the other advances the state through the current one; on
    // an H200 it takes as long as the lockstep kernel (bench/history/
    // forward-chunkwise.md, version 17). The phased kernels prepare every
    // chunk at once in one kernel and then run the state through them in
    // another; they come beside the lockstep entry, taken by the runtime
    // for the shapes where they win (on an H200 1.46x faster for Gated
    // DeltaNet at B1 T32768 H16, 1.10x slower at B8 T4096 H16, version
    // 18), or always with chunk-kernel=phased.
    int keys = int(state.getKeyDim()), values = int(valueDim);
    bool erase = form.erase != Strength::None;
    // Reading before the write, the queries take the log-gates a token
    // short: the phased kernels' preparing block scales them so, while the
    // pipelined and warpgroup kernels' steps assume the read after it.
    bool tiled = target == manifest::Target::Sm90a && !form.normalizer &&
                 !form.valueDecay && keys % 16 == 0 && values % 16 == 0 &&
                 values <= 16 * cuda::kPipelineGroupWarps;
    bool grouped = tiled && !form.readBefore;
    cuda::Gate gate = keyGate(form);
    int64_t pipelinedBytes = cuda::PipelineMap(keys, values).bytes;
    // The phased state block stages the rows of the inputs its epilogue
    // loads itself where they fit (a bonus's r, k and v: EpilogueRows in
    // templates/linac/cuda/pipeline.h).
    int64_t epilogueRowBytes = 0;
    for (int64_t index : epilogueInputs(layer, form))
      epilogueRowBytes +=
          cuda::stagedRowBytes(elementsOf(layer.getInputs()[index].getType()));
    cuda::PipelineMap phasedState = cuda::PipelineMap::phasedState(
        keys, values, gate, erase, epilogueRowBytes, sharedMemoryLimit(target));
    cuda::PipelineMap prepare(keys, values, cuda::PipelineBlock::Prepare, gate,
                              erase);
    bool pipelined = grouped && erase && gate != cuda::Gate::Vector &&
                     chunkKernel == "pipelined" &&
                     pipelinedBytes <= sharedMemoryLimit(target);
    // Without an erase under a scalar gate or none, the chunkwise entry is
    // the warpgroup kernel: producer warps run the prologue into swizzled
    // tiles while a consumer warpgroup for each 64 value columns takes
    // every product by wgmma. On an H200 it is faster than the lockstep
    // kernel for whole sequences and than the phased kernels in segments
    // (linear attention 0.246 against 0.340 ms at B8 T4096 H16, 0.460
    // against 0.603 at B1 T32768; bench/history/forward-chunkwise.md,
    // version 24), so the phased kernels are not offered beside it.
    // With an erase it takes the same shapes: its producer solves each
    // chunk while the consumers stage the next one's prologue and advance
    // the state. On an H200 it is faster than the phased kernels for
    // whole sequences (Gated DeltaNet 0.557 against 0.770 ms at B8 T4096
    // H16) but not in segments, whose LOCAL, transition and FINISH passes
    // each solve every chunk again (1.406 against 1.086 at B1 T32768;
    // bench/history/forward-chunkwise.md, version 27): the phased kernels
    // stay beside it for the batches the runtime cuts into segments.
    cuda::WarpgroupMap warpgroupShared =
        warpgroupMap(layer, chunkShape(layer, form));
    bool warpgroup = grouped && gate != cuda::Gate::Vector &&
                     (keys == 64 || keys == 128) && values == 128 &&
                     (chunkKernel == "auto" || chunkKernel == "warpgroup") &&
                     warpgroupShared.bytes <= sharedMemoryLimit(target);
    bool phased = tiled && (!warpgroup || erase) &&
                  (chunkKernel == "auto" || chunkKernel == "phased") &&
                  phasedState.bytes <= sharedMemoryLimit(target);
    plan.chunkKernel = pipelined   ? manifest::ChunkKernel::Pipelined
                       : warpgroup ? manifest::ChunkKernel::Warpgroup
                                   : manifest::ChunkKernel::Lockstep;
    if (pipelined || warpgroup) {
      sharedBytes = pipelined ? pipelinedBytes : warpgroupShared.bytes;
      plan.sharedInputs.emplace();
      plan.lateSharedInputs.emplace();
    }
    if (warpgroup) {
      plan.tensorInputs = tensorInputs(layer);
      if (std::optional<RowScaledOperands> rows = warpgroupRows(layer, form))
        plan.rowInputs.emplace(rows->inputs.begin(), rows->inputs.end());
      // The read is the output: no epilogue but the store.
      auto yield = cast<YieldOp>(layer.getBody().front().getTerminator());
      plan.tensorOutput = yield.getOutput() == form.read.getOutput();
    }
    if (phased) {
      // Without an erase under a scalar gate or none, the preparing kernel
      // stores more than the lockstep kernel's prologue saves when the
      // batch's sequences fill the GPU whole (on an H200 at B8 T4096 H16,
      // linear attention 0.449 against 0.341 ms); they win once it is cut
      // into segments (bench/history/forward-chunkwise.md, version 23).
      // Beside the warpgroup kernel (with an erase) they take segments
      // only, as above.
      // Reading before the write, the lockstep kernel is the faster where
      // the batch fills the GPU (on an H100, the read-order spec with an
      // erase 0.828 against 0.896 ms at B8 T4096 H16; version 30), unless
      // the phased state block stages an epilogue's inputs, which the
      // lockstep kernel loads from global memory a token at a time
      // (RWKV-6's bonus: 1.044 against 1.125 ms; version 32, both in
      // bench/history/forward-chunkwise.md).
      bool cheapPrologue = !erase && gate != cuda::Gate::Vector;
      plan.phased = chunkKernel == "phased" ? manifest::PhasedUse::Always
                    : cheapPrologue || warpgroup ||
                            (form.readBefore && !phasedState.stagesEpilogue())
                        ? manifest::PhasedUse::Segmented
                        : manifest::PhasedUse::ByShape;
      plan.phasedBlockThreads = plan.prepareBlockThreads =
          cuda::kPhasedThreads;
      plan.phasedSharedMemory = phasedState.bytes;
      plan.prepareSharedMemory = prepare.bytes;
      plan.preparedChunkBytes = prepare.bufferBytes;
    }
    plan.blockThreads =
        warpgroup ? cuda::warpgroupThreads(values) : cuda::kChunkThreads;
    plan.sharedMemory = sharedBytes;
    // The kernel's operands are bf16 whatever the activations, so fp16
    // inputs lose 3 mantissa bits the reference keeps; a normaliser's
    // division amplifies that past the 16-bit tolerance where n^T q is a
    // small sum of large terms (bench/rounding_model.py --dtype float16).
    // Such layers take the exact scan for fp16.
    plan.chunkwiseFloat16 = !form.normalizer;
    // Segments: with an erase, the transition of a segment is a K x K
    // matrix, made by the chunkwise kernel from the identity in column
    // blocks, which the compose kernel multiplies in shared memory;
    // otherwise it is the segment's total log-gates (segmentComposeKernel
    // in templates/linac/cuda/chunk.h).
    int keyDim = int(state.getKeyDim());
    plan.transitionBlocks =
        cuda::transitionBlocks(keyDim, int(valueDim), erase);
    plan.composeBlockThreads = LINAC_CUDA_COMPOSE_THREADS;
    plan.composeSharedMemory = cuda::composeSharedBytes(keyDim, erase);
  }
  return plan;
}

struct PlanPass : public linac::impl::LinacPlanBase<PlanPass> {
  using LinacPlanBase::LinacPlanBase;

  void runOnOperation() override {
    std::optional<manifest::Target> parsed = manifest::parse<manifest::Target>(
        std::string(target.getValue()));
    if (!parsed) {
      getOperation().emitError()
          << "unknown target '" << target << "'; expected cpu, sm_90a or sm_80";
      return signalPassFailure();
    }
    bool gpu = *parsed != manifest::Target::Cpu;
    if (gpu && decodeWarps != 8 && decodeWarps != 16) {
      getOperation().emitError()
          << "decode-warps must be 8 or 16, got " << decodeWarps.getValue();
      return signalPassFailure();
    }
    if (gpu && decodeParts != 1 && decodeParts != 2 && decodeParts != 4) {
      getOperation().emitError()
          << "decode-parts must be 1, 2 or 4, got " << decodeParts.getValue();
      return signalPassFailure();
    }
    if (chunkKernel != "auto" && chunkKernel != "lockstep" &&
        chunkKernel != "pipelined" && chunkKernel != "phased" &&
        chunkKernel != "warpgroup") {
      getOperation().emitError() << "chunk-kernel must be auto, lockstep, "
                                    "pipelined, phased or warpgroup, got '"
                                 << chunkKernel << "'";
      return signalPassFailure();
    }
    getOperation().walk([&](LayerOp layer) {
      if (failed(getNormalForm(layer)))
        return signalPassFailure();
      manifest::Plan plan =
          planLayer(layer, *parsed, decodeWarps, decodeParts, chunkKernel);
      // A chunkable layer, whether its plan is chunkwise or a scan.
      bool chunkable = plan.chunkSize || plan.recurrentReason;
      // What was asked for by name must be what the plan took.
      bool asked = chunkKernel == "pipelined" || chunkKernel == "phased" ||
                   chunkKernel == "warpgroup";
      bool taken = chunkKernel == "pipelined"
                       ? plan.chunkKernel == manifest::ChunkKernel::Pipelined
                   : chunkKernel == "warpgroup"
                       ? plan.chunkKernel == manifest::ChunkKernel::Warpgroup
                       : plan.phased.has_value();
      if (gpu && asked && chunkable && !taken) {
        auto error = layer.emitError();
        error << "chunk-kernel=" << chunkKernel << ": the " << chunkKernel
              << " kernel takes ";
        if (chunkKernel == "warpgroup")
          error << "a scalar key-side gate or none, with an erase or "
                   "without, without a normaliser, a value-side decay, the "
                   "read after the write, K of 64 or 128 and V of 128, its "
                   "input rows within shared memory, on sm_90a (its "
                   "products are wgmma)";
        else
          error << (chunkKernel == "pipelined"
                        ? "an erase under no gate or a scalar one, without "
                          "a normaliser, a value-side decay, the read after "
                          "the write"
                        : "any key-side gate or none, without a normaliser "
                          "or a value-side decay")
                << ", K and V multiples of 16 with V at most "
                << 16 * cuda::kPipelineGroupWarps
                << ", on sm_90a (it sets each warp group's registers or "
                   "moves chunks by bulk copies)";
        return signalPassFailure();
      }
      setPlan(layer, plan);
    });
  }
};

} // namespace
