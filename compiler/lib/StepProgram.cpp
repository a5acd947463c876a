//===- StepProgram.cpp - the step as JSON for the fp64 reference ----------===//

#include "linac/Compiler/Codegen.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"

#include <nlohmann/json.hpp>

using namespace mlir;
using namespace linac;
using nlohmann::json;

std::string linac::emitStepProgram(LayerOp layer) {
  llvm::DenseMap<Value, int64_t> ids;
  json values = json::array();
  auto define = [&](Value value) {
    ids[value] = values.size();
    values.push_back({{"kind", manifest::nameOf(kindOf(value.getType()))}});
  };
  auto idOf = [&](Value value) -> int64_t {
    return value ? ids.lookup(value) : -1;
  };
  auto namedArguments = [&](Block::BlockArgListType args) {
    json list = json::array();
    for (BlockArgument arg : args)
      list.push_back(
          {{"name", layer.getArgumentName(arg).str()}, {"value", idOf(arg)}});
    return list;
  };

  for (BlockArgument arg : layer.getBody().getArguments())
    define(arg);

  json ops = json::array();
  for (Operation &op : layer.getBody().front()) {
    if (isa<YieldOp>(op))
      continue;
    json operands = json::array();
    json attrs = json::object();
    if (auto decay = dyn_cast<DecayOp>(op)) {
      operands = {idOf(decay.getState()), idOf(decay.getKeyGate()),
                  idOf(decay.getValueGate())};
    } else if (auto write = dyn_cast<WriteOp>(op)) {
      operands = {idOf(write.getState()), idOf(write.getKey()),
                  idOf(write.getValue()), idOf(write.getStrength())};
    } else {
      for (Value operand : op.getOperands())
        operands.push_back(idOf(operand));
    }
    if (auto read = dyn_cast<ReadOp>(op)) {
      attrs["normalized"] = read.getNormalized();
      if (std::optional<APFloat> scale = read.getScale())
        attrs["scale"] = scale->convertToDouble();
    } else if (auto l2 = dyn_cast<L2NormOp>(op)) {
      attrs["eps"] = l2.getEps().convertToDouble();
    } else if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
      auto splat = dyn_cast<SplatElementsAttr>(constant.getValue());
      attrs["value"] =
          splat ? splat.getSplatValue<APFloat>().convertToDouble()
                : cast<FloatAttr>(constant.getValue()).getValueAsDouble();
    }
    json entry = {{"op", op.getName().getStringRef().str()},
                  {"operands", std::move(operands)},
                  {"attrs", std::move(attrs)}};
    if (op.getNumResults() == 1) {
      define(op.getResult(0));
      entry["result"] = idOf(op.getResult(0));
    }
    ops.push_back(std::move(entry));
  }

  auto yield = cast<YieldOp>(layer.getBody().front().getTerminator());
  StateType state = layer.getStateType();
  json program = {
      {"key_dim", state.getKeyDim()},
      {"value_dim", state.getValueDim()},
      {"normalized", state.getNormalized()},
      {"values", std::move(values)},
      {"state", idOf(layer.getState())},
      {"inputs", namedArguments(layer.getInputs())},
      {"params", namedArguments(layer.getParams())},
      {"ops", std::move(ops)},
      {"yield",
       {{"state", idOf(yield.getState())}, {"output", idOf(yield.getOutput())}}},
  };
  return program.dump();
}
