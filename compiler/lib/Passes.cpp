//===- Passes.cpp - the normalize and plan passes -------------------------===//

#include "linac/Compiler/Passes.h"
#include "linac/Compiler/NormalForm.h"
#include "linac/Compiler/ValueRange.h"
#include "linac/cuda/abi.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>

namespace linac {
#define GEN_PASS_DEF_LINACNORMALIZE
#define GEN_PASS_DEF_LINACPLAN
#include "linac/Compiler/Passes.h.inc"
} // namespace linac

using namespace mlir;
using namespace linac;

namespace {

/// Fails where a log-gate is not provably at most 0, naming it, unless its
/// op admits growth (`may_grow`): a factor above 1 makes the chunkwise
/// kernels' cumulative products overflow.
LogicalResult checkGateSigns(LayerOp layer) {
  llvm::DenseMap<Value, Range> ranges = computeRanges(layer);
  for (Operation &op : layer.getBody().front()) {
    SmallVector<std::pair<Value, StringRef>, 2> gates;
    if (auto decay = dyn_cast<DecayOp>(op); decay && !decay.getMayGrow()) {
      if (Value gate = decay.getKeyGate())
        gates.push_back({gate, "key-side"});
      if (Value gate = decay.getValueGate())
        gates.push_back({gate, "value-side"});
    } else if (auto matrix = dyn_cast<MatrixGateOp>(op);
               matrix && !matrix.getMayGrow()) {
      gates.push_back({matrix.getGate(), "matrix"});
    }
    for (auto [gate, side] : gates) {
      Range range = ranges.lookup(gate);
      if (range.hi <= 0.0)
        continue;
      InFlightDiagnostic diag =
          op.emitError() << "the " << side << " log-gate may be positive (it "
                         << "lies in " << range.str()
                         << "), a decay factor above 1 that grows the state; "
                            "bound it at most 0 (arith.minimumf with 0.0, "
                            "-softplus(x), which is log(sigmoid(-x)), or "
                            "-exp(x), for instance) or mark the op `may_grow` "
                            "to run the layer as a recurrent scan";
      if (auto arg = dyn_cast<BlockArgument>(gate))
        diag.attachNote(layer.getLoc())
            << "the gate is " << (layer.isParam(arg) ? "parameter" : "input")
            << " '" << layer.getArgumentName(arg) << "' itself";
      else
        diag.attachNote(gate.getLoc()) << "the gate is computed here";
      return failure();
    }
  }
  return success();
}

struct NormalizePass : public linac::impl::LinacNormalizeBase<NormalizePass> {
  using LinacNormalizeBase::LinacNormalizeBase;

  void runOnOperation() override {
    getOperation().walk([&](LayerOp layer) {
      if (failed(checkGateSigns(layer)))
        return signalPassFailure();
      NormalForm form = deriveNormalForm(layer);
      if (!form.chunkable) {
        if (requireChunkable) {
          form.blocker->emitError("outside the normal form: ") << form.reason;
          return signalPassFailure();
        }
        form.blocker->emitRemark("outside the normal form, so the layer "
                                 "runs as a recurrent scan: ")
            << form.reason;
      }
      // A write without a strength is "plain"; no write at all is "none".
      StringRef writeKind = form.write == StrengthKind::None && form.key
                                ? "plain"
                                : stringifyStrength(form.write);
      Builder b(layer.getContext());
      layer->setAttr(
          kNormalFormAttr,
          b.getDictionaryAttr({
              b.getNamedAttr("chunkable", b.getBoolAttr(form.chunkable)),
              b.getNamedAttr("key_decay",
                             b.getStringAttr(stringifyKeyDecay(form.keyDecay))),
              b.getNamedAttr("value_decay", b.getBoolAttr(form.valueDecay)),
              b.getNamedAttr("erase",
                             b.getStringAttr(stringifyStrength(form.erase))),
              b.getNamedAttr("write", b.getStringAttr(writeKind)),
              b.getNamedAttr("read", b.getStringAttr(form.readBefore
                                                         ? "before"
                                                         : "after")),
              b.getNamedAttr("normalizer", b.getBoolAttr(form.normalizer)),
          }));
    });
  }
};

/// Bytes of the chunkwise kernel's intra-chunk matrices P and A (fp32, C x
/// (C + 4) each), free from a chunk's epilogue to the next chunk's products.
int64_t productBytes(const NormalForm &form, int64_t chunkSize) {
  return 4 * chunkSize * (chunkSize + 4) *
         (form.erase != StrengthKind::None ? 2 : 1);
}

/// Bytes of the chunkwise kernel's bf16 state copy (K x (U + 8)).
int64_t stateCopyBytes(StateType state) {
  return 2 * state.getKeyDim() *
         (state.getValueDim() + (state.getNormalized() ? 16 : 8));
}

/// Bytes of the chunkwise kernel's bf16 Delta (C x (U + 8)).
int64_t deltaBytes(StateType state, int64_t chunkSize) {
  return 2 * chunkSize *
         (state.getValueDim() + (state.getNormalized() ? 16 : 8));
}

/// Memory the late input rows may take (ChunkLayout's kLateRows): P and A;
/// with an erase Delta, which the solve writes after the prologue; with a
/// gate the state copy, published then after the prologue.
int64_t lateRowBytes(LayerOp layer, const NormalForm &form,
                     int64_t chunkSize) {
  StateType state = layer.getStateType();
  return productBytes(form, chunkSize) +
         (form.erase != StrengthKind::None ? deltaBytes(state, chunkSize) : 0) +
         (form.keyDecay != KeyDecayKind::None ? stateCopyBytes(state) : 0);
}

/// Bytes of the per-head parameters the chunkwise kernel keeps in shared
/// memory (ChunkParams in templates/linac/cuda/chunk.h): fp32, each from a
/// 16-byte boundary.
int64_t paramBytes(LayerOp layer) {
  int64_t bytes = 0;
  for (BlockArgument param : layer.getParams())
    bytes += llvm::alignTo(4 * elementsOf(param.getType()), 16);
  return bytes;
}

/// Dynamic shared memory of the chunkwise CUDA kernel: the layout of
/// ChunkLayout in templates/linac/cuda/chunk.h, which the generated source
/// checks against this number.
int64_t chunkSharedBytes(LayerOp layer, const NormalForm &form,
                         int64_t chunkSize) {
  StateType state = layer.getStateType();
  int64_t c = chunkSize;
  int64_t u = state.getValueDim() + (state.getNormalized() ? 8 : 0);
  int64_t ks = state.getKeyDim() + 8, us = u + 4;
  bool erase = form.erase != StrengthKind::None;
  return 2 * c * ks * (erase ? 3 : 2) + stateCopyBytes(state) +
         deltaBytes(state, c) + 4 * c * us + productBytes(form, c) +
         4 * c *
             (form.keyDecay == KeyDecayKind::Vector ? ks
              : form.keyDecay == KeyDecayKind::None ? 1
                                                    : 2) +
         (state.getNormalized() ? 4 * (state.getKeyDim() + c) : 0) +
         (erase ? 4 * c * 20 : 0) + paramBytes(layer);
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
    int64_t rowBytes = 2 * elementsOf(input.getType());
    if (rowBytes % 16 || bytes + chunkSize * rowBytes > room ||
        llvm::is_contained(taken, int64_t(index)))
      continue;
    shared.push_back(index);
    bytes += chunkSize * rowBytes;
  }
  return shared;
}

/// How a decode group splits a state, or a strip of `parts` of its value
/// columns (DecodeSplit and DecodeState in templates/linac/cuda/decode.h).
struct DecodeBlocks {
  int64_t keys, columns, rowStride, columnLanes, rowLanes, rows;
  /// Value columns a thread holds: its share of its warp's strip, whole
  /// runs of four per column lane.
  int64_t slots;

  DecodeBlocks(StateType state, int64_t warps, int64_t parts)
      : keys(state.getKeyDim()),
        columns(state.getValueDim() / parts + (state.getNormalized() ? 1 : 0)),
        rowStride(state.getValueDim() + (state.getNormalized() ? 1 : 0)),
        columnLanes(
            llvm::divideCeil(state.getValueDim() / parts, warps) > 4 ? 2 : 1),
        rowLanes(32 / columnLanes), rows(llvm::divideCeil(keys, rowLanes)),
        slots(llvm::divideCeil(
                  llvm::divideCeil(state.getValueDim() / parts, warps),
                  4 * columnLanes) *
              4) {}
  /// Shared memory one state staged by bulk copies takes: each row lane's
  /// block of rows, 16 bytes per column lane apart.
  int64_t bulkStageBytes() const {
    return rowLanes * (rows * columns + 4 * columnLanes) * 4;
  }
  /// Whether the bulk copy engine can move a whole state: every block of
  /// rows is whole 16-byte runs.
  bool blocksAreRuns() const {
    return rows * columns % 4 == 0 && keys % rows * columns % 4 == 0;
  }
  /// Whether a tensor map can move a strip in boxes of kBoxColumns columns
  /// by every key row, 128-byte swizzled: rows of whole 16-byte runs, at
  /// most 256 of them, and row lanes that take interleaved pairs of rows
  /// (row % 8 apart within a quarter-warp) so that the swizzle keeps a
  /// quarter-warp's reads on different banks.
  static constexpr int64_t kBoxColumns = LINAC_CUDA_DECODE_BOX_COLUMNS;
  bool stripsAreBoxes() const {
    return columns % kBoxColumns == 0 && rowStride % 4 == 0 && keys <= 256 &&
           columnLanes == 2 && keys % (2 * rowLanes) == 0;
  }
};

/// Floats a decode thread would hold at once if a step loaded every vector
/// argument before its first state op: its part of the state and of each
/// vector or matrix.
int64_t upFrontDecodeFloats(LayerOp layer, const DecodeBlocks &blocks) {
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
int64_t sharedMemoryLimit(StringRef target) {
  return target == "sm_90a" ? 227 * 1024 : 163 * 1024;
}

constexpr int64_t kDecodeBlockWarps = LINAC_CUDA_DECODE_BLOCK_WARPS;

/// How decode splits and stages its items (decodeKernel in
/// templates/linac/cuda/decode.h).
struct DecodeStagingPlan {
  StringRef staging = "direct";
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
DecodeStagingPlan planDecodeStaging(LayerOp layer, StringRef target,
                                    int64_t decodeWarps, int64_t decodeParts) {
  constexpr int64_t kReductionBytes = 1024;
  constexpr int64_t kSwizzleAlignment = LINAC_CUDA_DECODE_STAGE_ALIGNMENT;
  constexpr int64_t kMaxGroupStages = 3;
  StateType state = layer.getStateType();
  int64_t room = sharedMemoryLimit(target) - kReductionBytes;
  auto groupsOf = [](int64_t itemWarps) {
    return kDecodeBlockWarps / itemWarps;
  };
  if (target != "sm_90a")
    return {"direct", 1, decodeWarps, 0, 0};
  if (decodeParts > 1 && takesValueStrips(layer) &&
      state.getValueDim() % decodeParts == 0 &&
      decodeWarps % decodeParts == 0 &&
      DecodeBlocks(state, decodeWarps / decodeParts, decodeParts)
          .stripsAreBoxes()) {
    int64_t itemWarps = decodeWarps / decodeParts;
    int64_t stageBytes =
        state.getKeyDim() * (state.getValueDim() / decodeParts) * 4;
    int64_t stages =
        groupsOf(itemWarps) *
        std::min(kMaxGroupStages, (room - kSwizzleAlignment) /
                                      (stageBytes * groupsOf(itemWarps)));
    if (stages > 0)
      return {"tensor", decodeParts, itemWarps, stages,
              stages * stageBytes + kSwizzleAlignment};
  }
  DecodeBlocks blocks(state, decodeWarps, 1);
  if (!blocks.blocksAreRuns())
    return {"direct", 1, decodeWarps, 0, 0};
  int64_t stageBytes = blocks.bulkStageBytes();
  int64_t stages =
      groupsOf(decodeWarps) *
      std::min(kMaxGroupStages, room / (stageBytes * groupsOf(decodeWarps)));
  if (stages == 0)
    return {"direct", 1, decodeWarps, 0, 0};
  return {"bulk", 1, decodeWarps, stages, stages * stageBytes};
}

struct PlanPass : public linac::impl::LinacPlanBase<PlanPass> {
  using LinacPlanBase::LinacPlanBase;

  void runOnOperation() override {
    bool gpu = target == "sm_90a" || target == "sm_80";
    if (!gpu && target != "cpu") {
      getOperation().emitError()
          << "unknown target '" << target << "'; expected cpu, sm_90a or sm_80";
      return signalPassFailure();
    }
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
    getOperation().walk([&](LayerOp layer) {
      if (!layer->hasAttr(kNormalFormAttr)) {
        layer.emitError("has no normal form; run -linac-normalize first");
        return signalPassFailure();
      }
      NormalForm form = deriveNormalForm(layer);
      Builder b(layer.getContext());
      SmallVector<NamedAttribute> plan{
          b.getNamedAttr("target", b.getStringAttr(target))};
      auto add = [&](StringRef name, Attribute value) {
        plan.push_back(b.getNamedAttr(name, value));
      };
      StateType state = layer.getStateType();
      int64_t valueDim = state.getValueDim();
      // Decode reads and writes each head's state once per step, in blocks
      // of whole rows or in strips of every row, so the pool keeps the
      // forward pass's key-major layout.
      add("decode_state_layout", b.getStringAttr("key_major"));
      if (gpu) {
        DecodeStagingPlan staging =
            planDecodeStaging(layer, target, decodeWarps, decodeParts);
        DecodeBlocks blocks(state, staging.itemWarps, staging.parts);
        // A decode thread has 128 registers (512 threads a multiprocessor);
        // with about 24 for addresses, indices and temporaries, a step
        // whose vector arguments would not fit beside the state loads and
        // computes each value just before its first use instead (measured
        // on an H200: GDN-2, 120 floats, 1.16x faster at B256 and 92 bytes
        // of spills down to 28; KDA, 104, and Gated DeltaNet, 88, 2% to 12%
        // slower, their loads' latency exposed).
        constexpr int64_t kDecodeRegisterFloats = 128 - 24;
        bool firstUse =
            upFrontDecodeFloats(layer, blocks) > kDecodeRegisterFloats;
        add("decode_placement",
            b.getStringAttr(firstUse ? "first_use" : "body_order"));
        add("decode_staging", b.getStringAttr(staging.staging));
        // Both lanes of a column pair hold the same key rows. Where the key
        // side takes two or more transcendentals a row, each computes it for
        // half of them and the pair trades halves by shuffles before the
        // state ops (measured on an H200, bench/history/decode.md, E31:
        // GDN-2, two, 88.7% to 90.3% of the copy ceiling at B256; KDA, one,
        // and Gated DeltaNet, none, 0.4 to 0.8 points slower).
        add("decode_key_rows",
            b.getStringAttr(keySideTranscendentals(layer) >= 2 ? "split"
                                                               : "whole"));
        add("decode_warps", b.getI64IntegerAttr(staging.itemWarps));
        add("decode_parts", b.getI64IntegerAttr(staging.parts));
        add("decode_block_threads",
            b.getI64IntegerAttr(kDecodeBlockWarps * 32));
        add("decode_stages", b.getI64IntegerAttr(staging.stages));
        add("decode_shared_memory", b.getI64IntegerAttr(staging.sharedBytes));
      }
      // Why a chunkable body still runs as a scan on GPUs: the chunkwise
      // kernel keeps a head's whole state in one block's registers and
      // takes gate factors on the key side only.
      constexpr int64_t kChunkSize = 64;
      std::string scanReason;
      int64_t sharedBytes = 0;
      // A factor above 1 would overflow the chunkwise kernels' cumulative
      // decays; the scan applies each token's factor alone.
      if (form.chunkable && form.mayGrow)
        scanReason = "a decay marked may_grow";
      else if (gpu && form.chunkable) {
        sharedBytes = chunkSharedBytes(layer, form, kChunkSize);
        if (form.valueDecay)
          scanReason = "value-side decay";
        else if (state.getKeyDim() % 16 || valueDim % 16 ||
                 state.getKeyDim() > 128 || valueDim > 128)
          scanReason = "dimensions not multiples of 16 up to 128";
        else if (sharedBytes > sharedMemoryLimit(target))
          scanReason = llvm::formatv("the chunk's {0} bytes exceed {1}'s {2} "
                                     "of shared memory",
                                     sharedBytes, target,
                                     sharedMemoryLimit(target));
      }
      if (!form.chunkable || !scanReason.empty()) {
        add("family", b.getStringAttr("recurrent"));
        if (!scanReason.empty())
          add("recurrent_reason", b.getStringAttr(scanReason));
        // One program per (sequence, head), thread j holding column j (and
        // one more for the normaliser).
        if (gpu)
          add("block_threads",
              b.getI64IntegerAttr((valueDim + form.normalizer + 31) / 32 * 32));
        add("grid", b.getStringAttr("heads,sequences"));
        layer->setAttr(kPlanAttr, b.getDictionaryAttr(plan));
        return;
      }
      add("family", b.getStringAttr(form.erase == StrengthKind::None
                                        ? "chunkwise"
                                        : "delta_chunkwise"));
      add("chunk_size", b.getI64IntegerAttr(kChunkSize));
      if (gpu) {
        // A chunk's inputs go to shared memory by asynchronous copies while
        // the previous chunk computes, as far as the working set leaves room.
        SmallVector<int64_t> shared = sharedInputs(
            layer, kChunkSize, sharedMemoryLimit(target), sharedBytes);
        add("shared_inputs", b.getDenseI64ArrayAttr(shared));
        // Of the others, those that fit go into P and A's memory (and with
        // a gate the state copy's), copied during the previous chunk's
        // epilogue.
        int64_t lateBytes = 0;
        add("late_shared_inputs",
            b.getDenseI64ArrayAttr(sharedInputs(
                layer, kChunkSize, lateRowBytes(layer, form, kChunkSize),
                lateBytes, shared)));
      }
      // A scalar log-gate difference is safe to exponentiate on the whole
      // tile; per-channel gates need per-pair differences (the CPU) or
      // sub-chunks with a local reference point (GPUs).
      bool vectorGate =
          form.keyDecay == KeyDecayKind::Vector || form.valueDecay;
      StringRef numerics = !vectorGate && form.keyDecay == KeyDecayKind::None
                               ? "none"
                           : !vectorGate ? "scalar_tile"
                           : gpu         ? "subchunk"
                                         : "pairwise";
      add("gate_numerics", b.getStringAttr(numerics));
      if (numerics == "subchunk")
        add("subchunk_size", b.getI64IntegerAttr(16));
      // One program per (sequence, head): sixteen warps, the state in their
      // registers.
      if (gpu) {
        add("block_threads", b.getI64IntegerAttr(512));
        add("shared_memory", b.getI64IntegerAttr(sharedBytes));
        // The kernel's operands are bf16 whatever the activations, so fp16
        // inputs lose 3 mantissa bits the reference keeps; a normaliser's
        // division amplifies that past the 16-bit tolerance where n^T q is
        // a small sum of large terms (bench/rounding_model.py --dtype
        // float16). Such layers take the exact scan for fp16.
        add("chunkwise_float16", b.getBoolAttr(!form.normalizer));
      }
      add("grid", b.getStringAttr("heads,sequences"));
      layer->setAttr(kPlanAttr, b.getDictionaryAttr(plan));
    });
  }
};

} // namespace
