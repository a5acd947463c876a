//===- CpuCodegen.cpp - C++ for the CPU target ----------------------------===//
//
// Lowers a planned layer to a `Layer` struct for templates/linac/cpu/layer.h:
// constants from the normal form and plan, and straight-line C++ for the
// prologue and epilogue (chunkwise families) or the whole step (recurrent).
//
//===----------------------------------------------------------------------===//

#include "linac/Compiler/Codegen.h"
#include "linac/Compiler/NormalForm.h"
#include "linac/Compiler/Passes.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <fmt/format.h>

using namespace mlir;
using namespace linac;

StringRef linac::kindOf(Type type) {
  if (isa<StateType>(type))
    return "state";
  if (isKeyVector(type))
    return "key";
  if (isValueVector(type))
    return "value";
  if (isMatrixGate(type))
    return "matrix";
  return "scalar";
}

namespace {

/// Elements one token of an argument holds.
int64_t elementsOf(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor ? tensor.getNumElements() : 1;
}

std::string cppType(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor ? fmt::format("Vec<{}>", tensor.getNumElements()) : "float";
}

std::string floatLiteral(double value) {
  std::string digits = fmt::format("{:.9g}", value);
  if (digits.find_first_of(".e") == std::string::npos)
    digits += ".0";
  return digits + "f";
}

class CpuEmitter {
public:
  explicit CpuEmitter(LayerOp layer) : layer(layer) {}

  FailureOr<std::string> emit();

private:
  bool failed = false;
  LayerOp layer;
  llvm::DenseMap<Value, std::string> names;
  std::string body;

  std::string name(Value value) { return names.lookup(value); }
  void line(const std::string &text) { body += "    " + text + "\n"; }

  /// Emits the ops that `roots` need, in body order; values already named
  /// (the read in the epilogue) are not recomputed.
  void emitSlice(ArrayRef<Value> roots);
  void emitArgument(BlockArgument arg);
  std::string expression(Operation *op);
  void emitStateOp(Operation *op);
  std::string function(StringRef signature);
  std::string sumOf(ArrayRef<Value> gates, int64_t length);
  /// `vector` scaled by a scalar or vector strength, or as is without one.
  std::string scaled(Value strength, const std::string &vector, int64_t length);
};

void CpuEmitter::emitArgument(BlockArgument arg) {
  std::string id = "arg_" + layer.getArgumentName(arg).str();
  unsigned index = arg.getArgNumber() - 1;
  bool param = layer.isParam(arg);
  if (param)
    index -= layer.getInputNames().size();
  std::string source =
      fmt::format("token.{}({})", param ? "param" : "input", index);
  if (arg.getType().isF32())
    line(fmt::format("const float {} = *{};", id, source));
  else
    line(fmt::format("const auto {} = {}::load({});", id,
                     cppType(arg.getType()), source));
  names[arg] = id;
}

std::string CpuEmitter::expression(Operation *op) {
  auto operand = [&](unsigned i) { return name(op->getOperand(i)); };
  auto call = [&](StringRef fn) {
    std::string args;
    for (unsigned i = 0; i < op->getNumOperands(); ++i)
      args += (i ? ", " : "") + operand(i);
    return fmt::format("{}({})", fn.str(), args);
  };
  auto binary = [&](StringRef symbol) {
    return fmt::format("{} {} {}", operand(0), symbol.str(), operand(1));
  };
  return llvm::TypeSwitch<Operation *, std::string>(op)
      .Case([&](arith::ConstantOp c) {
        auto splat = dyn_cast<SplatElementsAttr>(c.getValue());
        double value =
            splat ? splat.getSplatValue<APFloat>().convertToDouble()
                  : cast<FloatAttr>(c.getValue()).getValueAsDouble();
        return splat ? fmt::format("{}::splat({})", cppType(c.getType()),
                                   floatLiteral(value))
                     : floatLiteral(value);
      })
      .Case([&](arith::AddFOp) { return binary("+"); })
      .Case([&](arith::SubFOp) { return binary("-"); })
      .Case([&](arith::MulFOp) { return binary("*"); })
      .Case([&](arith::DivFOp) { return binary("/"); })
      .Case([&](arith::NegFOp) { return "-" + operand(0); })
      .Case([&](arith::MaximumFOp) { return call("maximum"); })
      .Case([&](arith::MinimumFOp) { return call("minimum"); })
      .Case([&](math::ExpOp) { return call("exp_"); })
      .Case([&](math::Exp2Op) { return call("exp2_"); })
      .Case([&](math::LogOp) { return call("log_"); })
      .Case([&](math::Log2Op) { return call("log2_"); })
      .Case([&](math::Log1pOp) { return call("log1p_"); })
      .Case([&](math::SqrtOp) { return call("sqrt_"); })
      .Case([&](math::RsqrtOp) { return call("rsqrt"); })
      .Case([&](math::TanhOp) { return call("tanh_"); })
      .Case([&](math::AbsFOp) { return call("abs_"); })
      .Case([&](math::PowFOp) { return call("pow_"); })
      .Case([&](SigmoidOp) { return call("sigmoid"); })
      .Case([&](SoftplusOp) { return call("softplus"); })
      .Case([&](DotOp) { return call("dot"); })
      .Case([&](L2NormOp l2) {
        return fmt::format("l2norm({}, {})", operand(0),
                           floatLiteral(l2.getEps().convertToDouble()));
      })
      .Case([&](BroadcastOp b) {
        return fmt::format("{}::splat({})", cppType(b.getType()), operand(0));
      })
      .Case([&](HeadIndexOp) { return std::string("float(token.head)"); })
      .Default([&](Operation *) { return std::string(); });
}

void CpuEmitter::emitStateOp(Operation *op) {
  unsigned keyDim = layer.getStateType().getKeyDim();
  unsigned valueDim = layer.getStateType().getValueDim();
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](DecayOp d) {
        Value gk = d.getKeyGate(), gv = d.getValueGate();
        std::string key = !gk ? fmt::format("Vec<{}>{{}}", keyDim)
                          : gk.getType().isF32()
                              ? fmt::format("Vec<{}>::splat({})", keyDim, name(gk))
                              : name(gk);
        std::string value =
            gv ? name(gv) : fmt::format("Vec<{}>{{}}", valueDim);
        line(fmt::format("state.decay({}, {});", key, value));
      })
      .Case([&](MatrixGateOp m) {
        line(fmt::format("state.matrixGate({});", name(m.getGate())));
      })
      .Case([&](EraseOp e) {
        line(fmt::format("state.erase({}, {});", name(e.getKey()),
                         scaled(e.getStrength(), name(e.getKey()), keyDim)));
      })
      .Case([&](WriteOp w) {
        Value strength = w.getStrength();
        std::string weight = strength && strength.getType().isF32()
                                 ? name(strength)
                                 : std::string("1.0f");
        line(fmt::format("state.write({}, {}, {});", name(w.getKey()),
                         scaled(strength, name(w.getValue()), valueDim), weight));
      })
      .Case([&](ReadOp r) {
        names[r.getOutput()] = fmt::format("v{}", names.size());
        line(fmt::format("const auto {} = state.read({}, scale);",
                         name(r.getOutput()), name(r.getQuery())));
      });
  for (Value result : op->getResults())
    if (isa<StateType>(result.getType()))
      names[result] = "state";
}

void CpuEmitter::emitSlice(ArrayRef<Value> roots) {
  llvm::SetVector<Operation *> needed;
  llvm::SetVector<BlockArgument> args;
  SmallVector<Value> worklist(roots.begin(), roots.end());
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    if (!value || names.count(value))
      continue;
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      if (arg != layer.getState())
        args.insert(arg);
      continue;
    }
    if (needed.insert(value.getDefiningOp()))
      llvm::append_range(worklist, value.getDefiningOp()->getOperands());
  }
  for (BlockArgument arg : layer.getBody().getArguments())
    if (args.contains(arg))
      emitArgument(arg);
  for (Operation &op : layer.getBody().front()) {
    if (!needed.contains(&op) || isa<YieldOp>(op))
      continue;
    if (op.getNumResults() == 1 && !isa<StateType>(op.getResult(0).getType()) &&
        !isa<ReadOp>(op)) {
      std::string id = fmt::format("v{}", names.size());
      std::string value = expression(&op);
      if (value.empty()) {
        op.emitError("the CPU backend cannot lower this op");
        failed = true;
      }
      line(fmt::format("const auto {} = {};", id, value));
      names[op.getResult(0)] = id;
    } else {
      emitStateOp(&op);
    }
  }
}

std::string CpuEmitter::sumOf(ArrayRef<Value> gates, int64_t length) {
  if (gates.empty())
    return fmt::format("Vec<{}>{{}}", length);
  std::string sum;
  for (Value gate : gates) {
    std::string term = gate.getType().isF32()
                           ? fmt::format("Vec<{}>::splat({})", length, name(gate))
                           : name(gate);
    sum += (sum.empty() ? "" : " + ") + term;
  }
  return sum;
}

std::string CpuEmitter::scaled(Value strength, const std::string &vector,
                               int64_t length) {
  return strength ? fmt::format("{} * {}", sumOf({strength}, length), vector)
                  : vector;
}

std::string CpuEmitter::function(StringRef signature) {
  std::string text = fmt::format("  static void {} {{\n{}  }}\n",
                                 signature.str(), body);
  body.clear();
  return text;
}

FailureOr<std::string> CpuEmitter::emit() {
  auto plan = layer->getAttrOfType<DictionaryAttr>(kPlanAttr);
  StateType state = layer.getStateType();
  NormalForm form = deriveNormalForm(layer);
  bool recurrent =
      plan.getAs<StringAttr>("family").getValue() == "recurrent";
  auto chunk = plan.getAs<IntegerAttr>("chunk_size");
  std::optional<APFloat> fixedScale = form.read.getScale();

  auto sizes = [&](Block::BlockArgListType args) {
    std::string list;
    for (BlockArgument arg : args)
      list += fmt::format("{}{}", list.empty() ? "" : ", ",
                          elementsOf(arg.getType()));
    // An empty array is ill-formed; the entry is never read.
    return list.empty() ? std::string("0") : list;
  };

  std::string out = fmt::format(
      "// Generated by linac from layer @{}; the plan is {}.\n"
      "#include \"linac/cpu/layer.h\"\n\n"
      "namespace {{\nusing namespace linac::cpu;\n\n"
      "struct Layer {{\n"
      "  static constexpr int K = {}, V = {};\n"
      "  static constexpr bool kRecurrent = {};\n"
      "  static constexpr int kChunkSize = {};\n"
      "  static constexpr bool kNormalizer = {}, kErase = {}, kValueDecay = {},\n"
      "                        kReadBefore = {};\n"
      "  static constexpr float kFixedScale = {};\n"
      "  static constexpr int64_t kInputSizes[] = {{{}}};\n"
      "  static constexpr int64_t kParamSizes[] = {{{}}};\n\n",
      layer.getSymName().str(), plan.getAs<StringAttr>("family").getValue().str(),
      state.getKeyDim(), state.getValueDim(), recurrent ? "true" : "false",
      chunk ? chunk.getInt() : 0, state.getNormalized() ? "true" : "false",
      form.erase != StrengthKind::None ? "true" : "false",
      form.valueDecay ? "true" : "false", form.readBefore ? "true" : "false",
      floatLiteral(fixedScale ? fixedScale->convertToDouble() : 0.0),
      sizes(layer.getInputs()), sizes(layer.getParams()));

  auto yield = cast<YieldOp>(layer.getBody().front().getTerminator());
  if (recurrent) {
    emitSlice({yield.getState(), yield.getOutput()});
    line(fmt::format("std::copy({0}.x.begin(), {0}.x.end(), out);",
                     name(yield.getOutput())));
    out += function("step(const Token<Layer> &token, "
                    "State<K, V, kNormalizer> &state, float scale, float *out)");
  } else {
    SmallVector<Value> roots{form.query, form.key, form.value};
    llvm::append_range(roots, form.keyGates);
    llvm::append_range(roots, form.valueGates);
    roots.push_back(form.eraseStrength);
    roots.push_back(form.writeStrength);
    emitSlice(roots);
    line(fmt::format("out.q = {};", name(form.query)));
    line(fmt::format("out.k = {};", name(form.key)));
    line(fmt::format("out.gk = {};", sumOf(form.keyGates, state.getKeyDim())));
    line(fmt::format("out.gv = {};",
                     sumOf(form.valueGates, state.getValueDim())));
    if (Value e = form.eraseStrength)
      line(fmt::format("out.e = {};", scaled(e, "out.k", state.getKeyDim())));
    Value w = form.writeStrength;
    std::string u = scaled(w, name(form.value), state.getValueDim());
    std::string weight = w && w.getType().isF32() ? name(w) : "1.0f";
    line(fmt::format("out.u = appendNormalizer<V, kNormalizer>({}, {});", u,
                     weight));
    out += function("prologue(const Token<Layer> &token, "
                    "Operands<K, V, kNormalizer> &out)");

    names.clear();
    names[form.read.getOutput()] = "read";
    emitSlice({yield.getOutput()});
    line(fmt::format("std::copy({0}.x.begin(), {0}.x.end(), out);",
                     name(yield.getOutput())));
    out += function("epilogue(const Token<Layer> &token, const Vec<V> &read, "
                    "float *out)");
  }
  out += "};\n\n} // namespace\n\n"
         "extern \"C\" int linac_cpu_abi_version(void) {\n"
         "  return LINAC_CPU_ABI_VERSION;\n}\n\n"
         "extern \"C\" int linac_cpu_forward(const linac_cpu_forward_args *args) {\n"
         "  return linac::cpu::forward<Layer>(*args);\n}\n";
  if (failed)
    return failure();
  return out;
}

} // namespace

FailureOr<std::string> linac::emitCpuSource(LayerOp layer) {
  return CpuEmitter(layer).emit();
}
