//===- NormalForm.cpp - derive a layer's normal form ----------------------===//

#include "linac/Compiler/NormalForm.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace linac;

manifest::NormalForm NormalForm::summary() const {
  manifest::NormalForm summary;
  summary.chunkable = chunkable;
  summary.keyDecay = keyDecay;
  summary.valueDecay = valueDecay;
  summary.erase = erase;
  // A write without a strength is plain; no write at all is none.
  summary.write = write == Strength::Scalar   ? manifest::Write::Scalar
                  : write == Strength::Vector ? manifest::Write::Vector
                  : key                       ? manifest::Write::Plain
                                              : manifest::Write::None;
  summary.read =
      readBefore ? manifest::ReadOrder::Before : manifest::ReadOrder::After;
  summary.normalizer = normalizer;
  return summary;
}

int64_t linac::elementsOf(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor ? tensor.getNumElements() : 1;
}

bool linac::isPerHead(LayerOp layer, Value value) {
  SmallVector<Value> worklist{value};
  llvm::SmallPtrSet<Value, 16> visited;
  while (!worklist.empty()) {
    Value current = worklist.pop_back_val();
    if (!visited.insert(current).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(current)) {
      if (!layer.isParam(arg))
        return false;
      continue;
    }
    llvm::append_range(worklist, current.getDefiningOp()->getOperands());
  }
  return true;
}

static Strength strengthKindOf(Value strength) {
  if (!strength)
    return Strength::None;
  return strength.getType().isF32() ? Strength::Scalar
                                    : Strength::Vector;
}

/// The transitions from the incoming state to the yield, in order.
static SmallVector<Operation *> stateChain(LayerOp layer) {
  SmallVector<Operation *> chain;
  Value state = layer.getState();
  while (true) {
    auto consumer = llvm::find_if(state.getUsers(), [](Operation *user) {
      return !isa<ReadOp>(user);
    });
    Operation *op = *consumer;
    if (isa<YieldOp>(op))
      return chain;
    chain.push_back(op);
    state = op->getResult(0);
  }
}

/// Whether `value` is computed from `source`.
static bool dependsOn(Value value, Value source) {
  SmallVector<Value> worklist{value};
  llvm::SmallPtrSet<Value, 16> visited;
  while (!worklist.empty()) {
    Value current = worklist.pop_back_val();
    if (current == source)
      return true;
    if (!visited.insert(current).second)
      continue;
    if (Operation *def = current.getDefiningOp())
      llvm::append_range(worklist, def->getOperands());
  }
  return false;
}

static NormalForm outside(NormalForm form, Operation *blocker,
                          std::string reason) {
  form.chunkable = false;
  form.blocker = blocker;
  form.reason = std::move(reason);
  return form;
}

NormalForm linac::deriveNormalForm(LayerOp layer) {
  NormalForm form;
  form.normalizer = layer.getStateType().getNormalized();
  form.read = *layer.getBody().getOps<ReadOp>().begin();
  form.query = form.read.getQuery();

  SmallVector<Operation *> chain = stateChain(layer);
  form.mayGrow = llvm::any_of(chain, [](Operation *op) {
    if (auto decay = dyn_cast<DecayOp>(op))
      return decay.getMayGrow();
    if (auto matrix = dyn_cast<MatrixGateOp>(op))
      return matrix.getMayGrow();
    return false;
  });
  // Where the read sits: 0 is before every transition.
  Value readState = form.read.getState();
  size_t readPosition =
      readState == layer.getState()
          ? 0
          : llvm::find(chain, readState.getDefiningOp()) - chain.begin() + 1;
  if (readPosition != 0 && readPosition != chain.size())
    return outside(form, form.read,
                   "the read sits between two transitions; the normal form "
                   "reads before or after all of them");
  form.readBefore = readPosition == 0 && !chain.empty();

  // The normal form's order: decays, at most one erase, one write.
  enum Stage { Decays, Erased, Written } stage = Decays;
  EraseOp erase;
  for (Operation *op : chain) {
    if (auto matrix = dyn_cast<MatrixGateOp>(op))
      return outside(form, op,
                     "a full matrix gate has no chunkwise form");
    if (auto decay = dyn_cast<DecayOp>(op)) {
      if (stage != Decays)
        return outside(form, op,
                       "a decay after an erase or write is outside the "
                       "normal form (decays come first)");
      if (Value gate = decay.getKeyGate())
        form.keyGates.push_back(gate);
      if (Value gate = decay.getValueGate())
        form.valueGates.push_back(gate);
      continue;
    }
    if (auto eraseOp = dyn_cast<EraseOp>(op)) {
      if (stage != Decays)
        return outside(form, op,
                       "a second erase, or an erase after the write, is "
                       "outside the normal form");
      erase = eraseOp;
      stage = Erased;
      continue;
    }
    auto write = cast<WriteOp>(op);
    if (stage == Written)
      return outside(form, op, "a second write is outside the normal form");
    form.key = write.getKey();
    form.value = write.getValue();
    form.writeStrength = write.getStrength();
    stage = Written;
  }
  if (stage != Written)
    return outside(form, chain.empty() ? form.read.getOperation()
                                       : chain.back(),
                   "the step never writes; the normal form ends in a write");
  if (erase) {
    if (erase.getKey() != form.key)
      return outside(form, erase,
                     "the erase key differs from the write key; the delta "
                     "rule's normal form erases along the written key");
    form.eraseStrength = erase.getStrength();
  }

  // The chunkwise kernels compute a token's operands from its inputs before
  // any state exists; one taken from the read needs the scan.
  SmallVector<Value> operands{form.key, form.value, form.eraseStrength,
                              form.writeStrength};
  llvm::append_range(operands, form.keyGates);
  llvm::append_range(operands, form.valueGates);
  for (Value operand : operands)
    if (operand && dependsOn(operand, form.read.getOutput()))
      return outside(form, operand.getDefiningOp(),
                     "a transition's operand depends on the read; the normal "
                     "form computes them from the token's inputs alone");

  form.erase = strengthKindOf(form.eraseStrength);
  form.write = strengthKindOf(form.writeStrength);
  form.valueDecay = !form.valueGates.empty();
  if (form.keyGates.empty()) {
    form.keyDecay = KeyDecay::None;
  } else if (llvm::any_of(form.keyGates,
                          [](Value g) { return !g.getType().isF32(); })) {
    form.keyDecay = KeyDecay::Vector;
  } else {
    form.keyDecay = llvm::all_of(form.keyGates,
                                 [&](Value g) { return isPerHead(layer, g); })
                        ? KeyDecay::Fixed
                        : KeyDecay::Scalar;
  }
  return form;
}

std::vector<int64_t> linac::epilogueInputs(LayerOp layer,
                                           const NormalForm &form) {
  std::vector<int64_t> inputs;
  if (!form.read)
    return inputs;
  auto yield = cast<YieldOp>(layer.getBody().front().getTerminator());
  Value read = ReadOp(form.read).getOutput();
  llvm::DenseSet<Value> seen;
  SmallVector<Value> pending{yield.getOutput()};
  auto layerInputs = layer.getInputs();
  while (!pending.empty()) {
    Value value = pending.pop_back_val();
    if (value == read || !seen.insert(value).second)
      continue;
    if (Operation *op = value.getDefiningOp()) {
      llvm::append_range(pending, op->getOperands());
      continue;
    }
    auto input = llvm::find(layerInputs, value);
    if (input != layerInputs.end())
      inputs.push_back(std::distance(layerInputs.begin(), input));
  }
  llvm::sort(inputs);
  return inputs;
}

/// The scalar that `vector` broadcasts, or null.
static Value broadcastScalar(Value vector) {
  auto broadcast = vector.getDefiningOp<BroadcastOp>();
  return broadcast ? broadcast.getInput() : Value();
}

RowScaling linac::rowScalingOf(LayerOp layer, Value operand) {
  RowScaling scaling;
  auto blocked = [&](Operation *op, std::string reason) {
    scaling.path.clear();
    scaling.scalars.clear();
    scaling.blocker = op;
    scaling.reason = std::move(reason);
    return scaling;
  };
  Value row = operand;
  while (true) {
    if (auto arg = dyn_cast<BlockArgument>(row)) {
      if (layer.isParam(arg))
        return blocked(layer, "a per-head vector parameter is no input row");
      scaling.input = arg;
      std::reverse(scaling.path.begin(), scaling.path.end());
      std::reverse(scaling.scalars.begin(), scaling.scalars.end());
      return scaling;
    }
    Operation *op = row.getDefiningOp();
    if (auto norm = dyn_cast<L2NormOp>(op)) {
      scaling.path.push_back(op);
      scaling.scalars.push_back({});
      row = norm.getInput();
      continue;
    }
    if (auto negate = dyn_cast<arith::NegFOp>(op)) {
      scaling.path.push_back(op);
      scaling.scalars.push_back({});
      row = negate.getOperand();
      continue;
    }
    if (isa<arith::MulFOp, arith::DivFOp>(op)) {
      Value lhs = op->getOperand(0), rhs = op->getOperand(1);
      if (Value scalar = broadcastScalar(rhs)) {
        scaling.path.push_back(op);
        scaling.scalars.push_back(scalar);
        row = lhs;
        continue;
      }
      if (Value scalar = broadcastScalar(lhs); scalar && isa<arith::MulFOp>(op)) {
        scaling.path.push_back(op);
        scaling.scalars.push_back(scalar);
        row = rhs;
        continue;
      }
      return blocked(op, "a product or quotient of two vectors scales each "
                         "channel by its own factor");
    }
    if (isa<BroadcastOp>(op))
      return blocked(op, "a broadcast scalar is no input row");
    return blocked(op, "the op acts on each channel, not on the row as a "
                       "whole");
  }
}

/// Whether `value` is a scalar computed from scalar inputs and parameters
/// alone, so that a kernel has it without any input row.
static bool fromScalarInputs(LayerOp layer, Value value) {
  if (!value.getType().isF32())
    return false;
  SmallVector<Value> pending{value};
  llvm::SmallPtrSet<void *, 16> seen;
  while (!pending.empty()) {
    Value next = pending.pop_back_val();
    if (!seen.insert(next.getAsOpaquePointer()).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(next)) {
      if (arg == layer.getState() ||
          (!layer.isParam(arg) && elementsOf(arg.getType()) != 1))
        return false;
      continue;
    }
    llvm::append_range(pending, next.getDefiningOp()->getOperands());
  }
  return true;
}

std::optional<RowScaledOperands>
linac::rowScaledOperands(LayerOp layer, const NormalForm &form) {
  if (!form.chunkable || form.normalizer || !form.valueGates.empty())
    return std::nullopt;
  SmallVector<Value> scalars(form.keyGates);
  for (Value strength : {form.eraseStrength, form.writeStrength})
    if (strength)
      scalars.push_back(strength);
  RowScaledOperands operands;
  std::array<bool, 3> unit;
  for (auto [index, operand] :
       llvm::enumerate(std::array{form.query, form.key, form.value})) {
    RowScaling scaling = rowScalingOf(layer, operand);
    if (!scaling)
      return std::nullopt;
    for (Value by : scaling.scalars)
      if (by)
        scalars.push_back(by);
    // Block argument 0 is the state.
    operands.inputs[index] = int64_t(scaling.input.getArgNumber()) - 1;
    unit[index] = scaling.path.empty();
  }
  if (!llvm::all_of(scalars,
                    [&](Value v) { return fromScalarInputs(layer, v); }))
    return std::nullopt;
  operands.unitQuery = unit[0];
  operands.unitWrite = unit[1] && unit[2] && !form.writeStrength;
  return operands;
}
