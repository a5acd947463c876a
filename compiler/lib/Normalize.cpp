//===- Normalize.cpp - the normalize pass ---------------------------------===//
//
// -linac-normalize: proves every decay's log-gate at most 0 (or finds it
// marked may_grow), derives each layer's normal form and records it.
//
//===----------------------------------------------------------------------===//

#include "linac/Compiler/LayerAttributes.h"
#include "linac/Compiler/NormalForm.h"
#include "linac/Compiler/Passes.h"
#include "linac/Compiler/ValueRange.h"

#include "mlir/IR/Diagnostics.h"

namespace linac {
#define GEN_PASS_DEF_LINACNORMALIZE
#define GEN_PASS_DEF_LINACTESTROWSCALING
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
      setNormalForm(layer, form.summary());
    });
  }
};

struct TestRowScalingPass
    : public linac::impl::LinacTestRowScalingBase<TestRowScalingPass> {
  void runOnOperation() override {
    getOperation().walk([&](LayerOp layer) {
      NormalForm form = deriveNormalForm(layer);
      if (!form.chunkable)
        return;
      for (auto [role, operand] :
           {std::pair<StringRef, Value>{"query", form.query},
            {"key", form.key},
            {"value", form.value}}) {
        RowScaling scaling = rowScalingOf(layer, operand);
        if (!scaling) {
          scaling.blocker->emitRemark()
              << "the " << role << " is no scaled input row: " << scaling.reason;
          continue;
        }
        InFlightDiagnostic remark = layer.emitRemark()
                                    << "the " << role << " scales the row of "
                                    << layer.getArgumentName(scaling.input);
        for (Operation *op : scaling.path)
          remark << ", then " << op->getName();
      }
    });
  }
};

} // namespace
