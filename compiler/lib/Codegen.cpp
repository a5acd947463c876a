//===- Codegen.cpp - C++ and CUDA C++ from a planned layer ----------------===//
//
// Lowers a planned layer to a `Layer` struct for templates/linac/cpu/layer.h
// or templates/linac/cuda/layer.h: constants from the normal form and plan,
// and straight-line code for the prologue and epilogue (chunkwise families)
// and the whole step (recurrent scan, decode). The bodies are the same text
// on every target; a Flavor names the vector types each function computes
// with.
//
//===----------------------------------------------------------------------===//

#include "linac/Compiler/Codegen.h"
#include "linac/Compiler/NormalForm.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <fmt/format.h>

using namespace mlir;
using namespace linac;

manifest::Kind linac::kindOf(Type type) {
  if (isa<StateType>(type))
    return manifest::Kind::State;
  if (isKeyVector(type))
    return manifest::Kind::Key;
  if (isValueVector(type))
    return manifest::Kind::Value;
  if (isMatrixGate(type))
    return manifest::Kind::Matrix;
  return manifest::Kind::Scalar;
}

namespace {

/// How one generated function spells its types.
struct Flavor {
  /// Key-side, value-side and matrix vector types; `{}` is the length.
  std::string key, value, matrix;
  /// A key log-gate that is a sum of scalars stays a float.
  bool scalarKeyGate = false;
  /// The state offers eraseWrite(k, e, u, weight): an erase and then a
  /// write with the same key in one pass.
  bool fusedEraseWrite = false;
  /// Value vectors are read from the token's first column on (a decode
  /// item may hold a strip of the value columns).
  bool valueStrips = false;
};

const Flavor kCpuFlavor{"Vec<{}>", "Vec<{}>", "Vec<{}>"};
const Flavor kWarpFlavor{"WarpVec<{}>", "WarpVec<{}>", "", true};
const Flavor kScanFlavor{"FullVec<{}>", "ColumnVec<{}>", "MatrixColumn<K, V>"};
const Flavor kDecodeFlavor{"KeyRows<{}, Split>",
                           "ValueColumns<{}, Split>",
                           "MatrixTile<K, V, Split>",
                           /*scalarKeyGate=*/false,
                           /*fusedEraseWrite=*/true,
                           /*valueStrips=*/true};

std::string floatLiteral(double value) {
  std::string digits = fmt::format("{:.9g}", value);
  if (digits.find_first_of(".e") == std::string::npos)
    digits += ".0";
  return digits + "f";
}

/// Names generated code may not give a value: C++'s keywords and the names
/// it uses itself in a function body.
bool isReservedIdentifier(StringRef name) {
  static const llvm::StringSet<> reserved = {
      // C++ keywords.
      "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor",
      "bool", "break", "case", "catch", "char", "char8_t", "char16_t",
      "char32_t", "class", "compl", "concept", "const", "consteval",
      "constexpr", "constinit", "const_cast", "continue", "co_await",
      "co_return", "co_yield", "decltype", "default", "delete", "do", "double",
      "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false",
      "float", "for", "friend", "goto", "if", "inline", "int", "long",
      "mutable", "namespace", "new", "noexcept", "not", "not_eq", "nullptr",
      "operator", "or", "or_eq", "private", "protected", "public", "register",
      "reinterpret_cast", "requires", "return", "short", "signed", "sizeof",
      "static", "static_assert", "static_cast", "struct", "switch", "template",
      "this", "thread_local", "throw", "true", "try", "typedef", "typeid",
      "typename", "union", "unsigned", "using", "virtual", "void", "volatile",
      "wchar_t", "while", "xor", "xor_eq",
      // The generated functions' parameters and the names their bodies use.
      "state", "out", "token", "scale", "read", "Layer", "Token", "Out",
      "State", "K", "V", "Split", "Gate", "Vec", "WarpVec", "FullVec",
      "ColumnVec", "MatrixColumn", "KeyRows", "ValueColumns", "MatrixTile",
      "SplitKeyRows", "loadScalar", "store", "appendNormalizer", "maximum",
      "minimum", "exp_", "exp2_", "log_", "log2_", "log1p_", "sqrt_", "rsqrt",
      "tanh_", "abs_", "pow_", "sigmoid", "softplus", "dot", "l2norm",
      // The backward functions' parameters and helpers (adjoint.h).
      "d", "dOut", "dRead", "dState", "grad", "Operands", "TokenGradients",
      "sum", "whereAtLeast", "sign_", "l2normGradient", "addGradient",
      "decayBackward", "matrixGateBackward", "eraseBackward", "writeBackward",
      "readBackward"};
  return reserved.contains(name);
}

/// Whether `name` has the form of a name the generated code or C++ keeps for
/// itself: an argument's (arg_q), an adjoint's (grad_kn), a state op's in
/// a backward step (step_before_3), a constant's (kErase), or one with a
/// leading or double underscore.
bool hasReservedForm(StringRef name) {
  bool constantName =
      name.size() > 1 && name[0] == 'k' && llvm::isUpper(name[1]);
  return name.starts_with("arg_") || name.starts_with("grad_") ||
         name.starts_with("step_") || constantName || name.starts_with("_") ||
         name.contains("__");
}

/// The name the spec gave an op's result, which the front end keeps as the
/// op's NameLoc; empty where it has none.
StringRef specNameOf(Operation *op) {
  if (auto named = dyn_cast<NameLoc>(op->getLoc()))
    return named.getName().getValue();
  return {};
}

/// A C++ identifier for each value an op of `layer` makes: the spec's name
/// where it is one (`kn`), made one where it is not (`v7` for %7, `a_b` for
/// %a.b, `v_arg_q` for %arg_q, `state_1` for %state), else v<N>; never a
/// reserved name and never twice.
llvm::DenseMap<Value, std::string> identifiersOf(LayerOp layer) {
  llvm::DenseMap<Value, std::string> identifiers;
  llvm::StringSet<> taken;
  for (Operation &op : layer.getBody().front()) {
    if (op.getNumResults() != 1)
      continue;
    std::string base;
    for (char c : specNameOf(&op))
      base += llvm::isAlnum(c) ? c : '_';
    if (base.empty())
      base = "v" + std::to_string(taken.size());
    else if (llvm::isDigit(base[0]))
      base = "v" + base;
    else if (hasReservedForm(base))
      base = "v_" + base;
    std::string id = base;
    for (int n = 1; isReservedIdentifier(id) || taken.contains(id); ++n)
      id = base + "_" + std::to_string(n);
    taken.insert(id);
    identifiers[op.getResult(0)] = id;
  }
  return identifiers;
}

/// Where generated code puts the values that are not state ops.
enum class Placement {
  /// Arguments first, then every op in body order.
  BodyOrder,
  /// Each just before its first use, so that fewer are live beside a state
  /// held in registers (the plan's decode_placement = "first_use").
  FirstUse,
};

class BodyEmitter {
public:
  BodyEmitter(LayerOp layer, const manifest::Plan &plan)
      : layer(layer), plan(plan), form(deriveNormalForm(layer)),
        identifiers(identifiersOf(layer)) {}

  /// The Layer struct's constants.
  std::string constants(StringRef keyGateConstant);
  /// prologue and epilogue of the chunkwise families.
  std::string chunkFunctions(const Flavor &flavor, StringRef prologueSignature,
                             StringRef epilogueSignature);
  /// For a layer of rowScaledOperands: which operands' scalars take their
  /// row's norm, and which are 1 for every token.
  std::string rowScaleConstants();
  /// rowScales: each chunk operand's scalar given its input row's squared
  /// norm, and the key log-gate.
  std::string rowScalesFunction(StringRef signature);
  /// The reverse of prologue and epilogue, for the chunkwise backward:
  /// prologueBackward and epilogueBackward.
  std::string chunkBackwardFunctions(const Flavor &flavor,
                                     StringRef prologueSignature,
                                     StringRef epilogueSignature);
  /// The reverse of the whole step, token by token: stepBackward.
  std::string stepBackwardFunction(const Flavor &flavor, StringRef signature);
  /// The whole step, for the recurrent scan.
  std::string stepFunction(const Flavor &flavor, StringRef signature,
                           Placement placement = Placement::BodyOrder);
  bool failed = false;
  LayerOp layer;
  const manifest::Plan &plan;
  NormalForm form;

private:
  Flavor flavor = kCpuFlavor;
  /// Each value's C++ identifier in every function.
  llvm::DenseMap<Value, std::string> identifiers;
  /// What the function being emitted calls the values it has so far.
  llvm::DenseMap<Value, std::string> names;
  std::string body;
  /// The arguments, pure ops, state ops (their results) and reads (their
  /// outputs) the function being emitted computes, in order: what its
  /// reverse walks back through.
  SmallVector<Value> computed;
  /// Whether each state op but a write, and each read, first keeps the
  /// state it takes (step_before_N, N its place in `computed`), for a
  /// backward step.
  bool tapeStates = false;
  /// The read whose value is the function's argument `read` (the
  /// epilogue's), its adjoint the argument dRead; null for none.
  Value readArgument;

  std::string name(Value value) { return names.lookup(value); }
  /// How the spec names `value`, with its %.
  std::string specName(Value value);
  /// A comment holding `ops` as the spec writes them, without types.
  std::string specComment(ArrayRef<Operation *> ops);
  std::string cppType(Type type) const;
  std::string keyVec();
  std::string valueVec();
  void line(const std::string &text, const std::string &comment = "") {
    body += "    " + text + (comment.empty() ? "" : "  " + comment) + "\n";
  }

  /// Emits the ops that `roots` need, state ops in body order; values
  /// already named (the read in the epilogue) are not recomputed.
  void emitSlice(ArrayRef<Value> roots, Placement placement);
  /// The prologue's values: the normal form's operands and what they need.
  void emitOperandSlice();
  /// The epilogue's values: the output from the read, named `read`.
  YieldOp emitReadSlice();
  /// Emits `value` and what it needs, unless already named.
  void emitOnDemand(Value value);
  void emitPure(Operation *op);
  void emitArgument(BlockArgument arg);
  std::string expression(Operation *op);
  void emitStateOp(Operation *op);
  void emitEraseWrite(EraseOp e, WriteOp w);
  std::pair<std::string, std::string> written(WriteOp w);
  std::string function(StringRef signature);
  /// The adjoint of `value` (grad_<name>), or empty for a value that has
  /// none (a constant, the head index).
  std::string adjoint(Value value);
  /// Declares, zeroed, the adjoint of every value `computed` holds.
  void declareAdjoints();
  /// Adds `term` (an expression of the adjoint's type) to `value`'s adjoint.
  void accumulate(Value value, const std::string &term);
  /// The adjoints of `op`'s operands from its result's.
  void emitAdjoint(Operation *op);
  /// The reverse of state op or read `op`, the `index`th value computed:
  /// dState from its result's gradient to its operand's, and its other
  /// operands' adjoints.
  void emitStateAdjoint(Operation *op, size_t index);
  /// Adds the adjoints of `vector` and its strength from `d`, the gradient
  /// of strength (.) vector (a scalar strength taken by every element).
  void accumulateScaled(Value strength, Value vector, StringRef d);
  /// Walks `computed` back: each op's adjoint, then each argument's into
  /// its gradient.
  void emitReverse();
  std::string sumOf(ArrayRef<Value> gates, bool keySide);
  /// A decay's key-side gate as a key vector: zeros for none, a scalar's
  /// splat.
  std::string keyGateVector(Value gate);
  /// `vector` scaled by a scalar or vector strength, or as is without one.
  std::string scaled(Value strength, const std::string &vector, bool keySide);
};

std::string BodyEmitter::cppType(Type type) const {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return "float";
  const std::string &pattern = isKeyVector(type)     ? flavor.key
                               : isValueVector(type) ? flavor.value
                                                     : flavor.matrix;
  return fmt::format(fmt::runtime(pattern), tensor.getNumElements());
}

std::string BodyEmitter::keyVec() {
  return fmt::format(fmt::runtime(flavor.key),
                     layer.getStateType().getKeyDim());
}

std::string BodyEmitter::valueVec() {
  return fmt::format(fmt::runtime(flavor.value),
                     layer.getStateType().getValueDim());
}

std::string BodyEmitter::specName(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value))
    return "%" + (arg == layer.getState() ? std::string("S")
                                          : layer.getArgumentName(arg).str());
  StringRef name = specNameOf(value.getDefiningOp());
  return "%" + (name.empty() ? identifiers.lookup(value) : name.str());
}

std::string BodyEmitter::specComment(ArrayRef<Operation *> ops) {
  std::string text;
  for (Operation *op : ops) {
    std::string operands;
    for (Value operand : op->getOperands())
      operands += (operands.empty() ? " " : ", ") + specName(operand);
    text += fmt::format("{}{}{}{}", text.empty() ? "// " : "; ",
                        op->getNumResults() == 1
                            ? specName(op->getResult(0)) + " = "
                            : std::string(),
                        op->getName().getStringRef().str(), operands);
  }
  return text;
}

void BodyEmitter::emitArgument(BlockArgument arg) {
  std::string id = "arg_" + layer.getArgumentName(arg).str();
  unsigned index = arg.getArgNumber() - 1;
  bool param = layer.isParam(arg);
  if (param)
    index -= layer.getInputNames().size();
  std::string source =
      fmt::format("token.{}({}){}", param ? "param" : "input", index,
                  flavor.valueStrips && isValueVector(arg.getType())
                      ? " + token.firstColumn"
                      : "");
  if (arg.getType().isF32())
    line(fmt::format("const float {} = loadScalar({});", id, source));
  else
    line(fmt::format("const auto {} = {}::load({});", id,
                     cppType(arg.getType()), source));
  names[arg] = id;
  computed.push_back(arg);
}

std::string BodyEmitter::expression(Operation *op) {
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

/// The write's value with its strength, and the normaliser column's weight.
std::pair<std::string, std::string> BodyEmitter::written(WriteOp w) {
  Value strength = w.getStrength();
  std::string weight = strength && strength.getType().isF32()
                           ? name(strength)
                           : std::string("1.0f");
  return {scaled(strength, name(w.getValue()), false), weight};
}

void BodyEmitter::emitEraseWrite(EraseOp e, WriteOp w) {
  auto [value, weight] = written(w);
  line(fmt::format("state.eraseWrite({}, {}, {}, {});", name(e.getKey()),
                   scaled(e.getStrength(), name(e.getKey()), true), value,
                   weight),
       specComment({e, w}));
  names[w.getResult()] = "state";
}

void BodyEmitter::emitStateOp(Operation *op) {
  // A write's reverse needs none.
  if (tapeStates && !isa<WriteOp>(op))
    line(fmt::format("const auto step_before_{} = state.copy();",
                     computed.size()));
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](DecayOp d) {
        Value gk = d.getKeyGate(), gv = d.getValueGate();
        std::string key = keyGateVector(gk);
        if (!gv)
          line(fmt::format("state.decay({});", key), specComment(op));
        else
          line(fmt::format("state.decay({}, {});", key, name(gv)),
               specComment(op));
      })
      .Case([&](MatrixGateOp m) {
        line(fmt::format("state.matrixGate({});", name(m.getGate())),
             specComment(op));
      })
      .Case([&](EraseOp e) {
        line(fmt::format("state.erase({}, {});", name(e.getKey()),
                         scaled(e.getStrength(), name(e.getKey()), true)),
             specComment(op));
      })
      .Case([&](WriteOp w) {
        auto [value, weight] = written(w);
        line(fmt::format("state.write({}, {}, {});", name(w.getKey()), value,
                         weight),
             specComment(op));
      })
      .Case([&](ReadOp r) {
        names[r.getOutput()] = identifiers.lookup(r.getOutput());
        line(fmt::format("const auto {} = state.read({}, scale);",
                         name(r.getOutput()), name(r.getQuery())),
             specComment(op));
      });
  for (Value result : op->getResults())
    if (isa<StateType>(result.getType()))
      names[result] = "state";
  computed.push_back(op->getResult(0));
}

/// Whether `op` computes a value from values alone (no state in or out).
static bool isPure(Operation &op) {
  return op.getNumResults() == 1 &&
         !isa<StateType>(op.getResult(0).getType()) && !isa<ReadOp>(op);
}

void BodyEmitter::emitPure(Operation *op) {
  std::string id = identifiers.lookup(op->getResult(0));
  std::string value = expression(op);
  if (value.empty()) {
    op->emitError("no backend can lower this op");
    failed = true;
  }
  line(fmt::format("const auto {} = {};", id, value), specComment(op));
  names[op->getResult(0)] = id;
  computed.push_back(op->getResult(0));
}

void BodyEmitter::emitOnDemand(Value value) {
  if (names.count(value))
    return;
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    if (arg != layer.getState())
      emitArgument(arg);
    return;
  }
  Operation *op = value.getDefiningOp();
  for (Value operand : op->getOperands())
    emitOnDemand(operand);
  emitPure(op);
}

void BodyEmitter::emitSlice(ArrayRef<Value> roots, Placement placement) {
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
  bool firstUse = placement == Placement::FirstUse;
  if (!firstUse)
    for (BlockArgument arg : layer.getBody().getArguments())
      if (args.contains(arg))
        emitArgument(arg);
  // The state ops update one state in place, so the read goes where the
  // state it names exists, wherever the body writes it: before every
  // transition for the incoming state, else just after the transition that
  // made its state. Its query comes along.
  ReadOp read = needed.contains(form.read) ? form.read : ReadOp();
  auto emitReadOf = [&](Value state) {
    if (!read || read.getState() != state)
      return;
    emitOnDemand(read.getQuery());
    emitStateOp(read);
  };
  emitReadOf(layer.getState());
  // An erase whose state only a write with the same key takes.
  EraseOp pendingErase;
  for (Operation &op : layer.getBody().front()) {
    if (!needed.contains(&op) || isa<YieldOp, ReadOp>(op))
      continue;
    if (isPure(op)) {
      // A read's query may already be out.
      if (!firstUse && !names.count(op.getResult(0)))
        emitPure(&op);
      continue;
    }
    if (firstUse)
      for (Value operand : op.getOperands())
        emitOnDemand(operand);
    if (auto erase = dyn_cast<EraseOp>(op);
        erase && flavor.fusedEraseWrite && erase.getResult().hasOneUse()) {
      auto next = dyn_cast<WriteOp>(*erase.getResult().getUsers().begin());
      if (next && next.getKey() == erase.getKey()) {
        pendingErase = erase;
        names[erase.getResult()] = "state";
        continue;
      }
    }
    if (auto write = dyn_cast<WriteOp>(op);
        write && pendingErase && write.getState() == pendingErase.getResult()) {
      emitEraseWrite(pendingErase, write);
      pendingErase = nullptr;
    } else {
      emitStateOp(&op);
    }
    emitReadOf(op.getResult(0));
  }
  if (firstUse)
    for (Value root : roots)
      if (root)
        emitOnDemand(root);
}

std::string BodyEmitter::sumOf(ArrayRef<Value> gates, bool keySide) {
  std::string vec = keySide ? keyVec() : valueVec();
  if (gates.empty())
    return vec + "{}";
  std::string sum;
  for (Value gate : gates) {
    std::string term = gate.getType().isF32()
                           ? fmt::format("{}::splat({})", vec, name(gate))
                           : name(gate);
    sum += (sum.empty() ? "" : " + ") + term;
  }
  return sum;
}

std::string BodyEmitter::keyGateVector(Value gate) {
  if (!gate)
    return keyVec() + "{}";
  return gate.getType().isF32()
             ? fmt::format("{}::splat({})", keyVec(), name(gate))
             : name(gate);
}

std::string BodyEmitter::scaled(Value strength, const std::string &vector,
                                bool keySide) {
  return strength ? fmt::format("{} * {}", sumOf({strength}, keySide), vector)
                  : vector;
}

std::string BodyEmitter::function(StringRef signature) {
  std::string text = fmt::format("  {} {{\n{}  }}\n", signature.str(), body);
  body.clear();
  computed.clear();
  return text;
}

std::string BodyEmitter::adjoint(Value value) {
  if (value == readArgument)
    return "dRead";
  if (isa<StateType>(value.getType()))
    return {};
  if (Operation *op = value.getDefiningOp();
      op && isa<arith::ConstantOp, HeadIndexOp>(op))
    return {};
  return "grad_" + name(value);
}

void BodyEmitter::declareAdjoints() {
  for (Value value : computed) {
    std::string id = adjoint(value);
    if (id.empty())
      continue;
    if (value.getType().isF32())
      line(fmt::format("float {} = 0.0f;", id));
    else
      line(fmt::format("{} {}{{}};", cppType(value.getType()), id));
  }
}

void BodyEmitter::accumulate(Value value, const std::string &term) {
  std::string id = adjoint(value);
  if (!id.empty())
    line(fmt::format("{0} = {0} + {1};", id, term));
}

void BodyEmitter::emitAdjoint(Operation *op) {
  Value result = op->getResult(0);
  const std::string r = name(result), dr = adjoint(result);
  auto a = [&](unsigned i) { return name(op->getOperand(i)); };
  auto toA = [&](const std::string &term) {
    accumulate(op->getOperand(0), term);
  };
  auto toB = [&](const std::string &term) {
    accumulate(op->getOperand(1), term);
  };
  if (!isa<arith::ConstantOp, HeadIndexOp>(op))
    line("// back through " + specComment(op).substr(3));
  // ln 2, for exp2 and log2.
  const std::string ln2 = floatLiteral(0.69314718055994531);
  // The first operand's share of a maximum's or minimum's gradient, given
  // as whereAtLeast(...); the rest is the second's.
  auto extremum = [&](const std::string &first) {
    toA(first);
    toB(fmt::format("({} - {})", dr, first));
  };
  bool known = true;
  llvm::TypeSwitch<Operation *>(op)
      .Case<arith::ConstantOp, HeadIndexOp>([](auto) {})
      .Case([&](arith::AddFOp) {
        toA(dr);
        toB(dr);
      })
      .Case([&](arith::SubFOp) {
        toA(dr);
        toB("-" + dr);
      })
      .Case([&](arith::MulFOp) {
        toA(dr + " * " + a(1));
        toB(dr + " * " + a(0));
      })
      .Case([&](arith::DivFOp) {
        toA(dr + " / " + a(1));
        toB(fmt::format("-{} * {} / {}", dr, r, a(1)));
      })
      .Case([&](arith::NegFOp) { toA("-" + dr); })
      // The gradient goes to the operand the result is, the first on a
      // tie (a NaN's to the second), as the reference's.
      .Case([&](arith::MaximumFOp) {
        extremum(fmt::format("whereAtLeast({}, {}, {})", a(0), a(1), dr));
      })
      .Case([&](arith::MinimumFOp) {
        extremum(fmt::format("whereAtLeast({}, {}, {})", a(1), a(0), dr));
      })
      .Case([&](math::ExpOp) { toA(dr + " * " + r); })
      .Case([&](math::Exp2Op) { toA(fmt::format("{} * {} * {}", dr, r, ln2)); })
      .Case([&](math::LogOp) { toA(dr + " / " + a(0)); })
      .Case([&](math::Log2Op) {
        toA(fmt::format("{} / ({} * {})", dr, a(0), ln2));
      })
      .Case([&](math::Log1pOp) {
        toA(fmt::format("{} / (1.0f + {})", dr, a(0)));
      })
      .Case([&](math::SqrtOp) { toA(fmt::format("{} * 0.5f / {}", dr, r)); })
      .Case([&](math::RsqrtOp) {
        toA(fmt::format("{0} * -0.5f * {1} * {1} * {1}", dr, r));
      })
      .Case([&](math::TanhOp) {
        toA(fmt::format("{0} * (1.0f - {1} * {1})", dr, r));
      })
      .Case([&](math::AbsFOp) { toA(fmt::format("{} * sign_({})", dr, a(0))); })
      .Case([&](math::PowFOp) {
        toA(fmt::format("{} * {} * pow_({}, {} - 1.0f)", dr, a(1), a(0), a(1)));
        toB(fmt::format("{} * {} * log_({})", dr, r, a(0)));
      })
      .Case([&](SigmoidOp) {
        toA(fmt::format("{0} * {1} * (1.0f - {1})", dr, r));
      })
      .Case([&](SoftplusOp) { toA(fmt::format("{} * sigmoid({})", dr, a(0))); })
      .Case([&](DotOp) {
        toA(dr + " * " + a(1));
        toB(dr + " * " + a(0));
      })
      .Case([&](L2NormOp l2) {
        toA(fmt::format("l2normGradient({}, {}, {}, {})", a(0), r, dr,
                        floatLiteral(l2.getEps().convertToDouble())));
      })
      .Case([&](BroadcastOp) { toA(fmt::format("sum({})", dr)); })
      .Default([&](Operation *) { known = false; });
  if (!known) {
    op->emitError("the backward pass has no derivative of this op");
    failed = true;
  }
}

void BodyEmitter::accumulateScaled(Value strength, Value vector, StringRef d) {
  accumulate(vector, fmt::format("{} * {}", name(strength), d.str()));
  accumulate(strength, strength.getType().isF32()
                           ? fmt::format("dot({}, {})", d.str(), name(vector))
                           : fmt::format("{} * {}", d.str(), name(vector)));
}

void BodyEmitter::emitStateAdjoint(Operation *op, size_t index) {
  const std::string before = fmt::format("step_before_{}", index);
  auto local = [&](StringRef what) {
    return fmt::format("step_{}_{}", what.str(), index);
  };
  line("// back through " + specComment(op).substr(3));
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](DecayOp d) {
        Value gk = d.getKeyGate(), gv = d.getValueGate();
        std::string key = keyGateVector(gk);
        std::string value = gv ? name(gv) : valueVec() + "{}";
        line(fmt::format("{} {}{{}};", keyVec(), local("dgk")));
        line(fmt::format("{} {}{{}};", valueVec(), local("dgv")));
        line(fmt::format("decayBackward(dState, {}, {}, {}, {}, {});", before,
                         key, value, local("dgk"), local("dgv")));
        if (gk)
          accumulate(gk, gk.getType().isF32()
                             ? fmt::format("sum({})", local("dgk"))
                             : local("dgk"));
        if (gv)
          accumulate(gv, local("dgv"));
      })
      .Case([&](MatrixGateOp m) {
        line(fmt::format("const auto {} = matrixGateBackward(dState, {}, {});",
                         local("dg"), before, name(m.getGate())));
        accumulate(m.getGate(), local("dg"));
      })
      .Case([&](EraseOp e) {
        line(fmt::format("{} {}{{}}, {}{{}};", keyVec(), local("dk"),
                         local("de")));
        line(fmt::format("eraseBackward(dState, {}, {}, {}, {}, {});", before,
                         name(e.getKey()),
                         scaled(e.getStrength(), name(e.getKey()), true),
                         local("dk"), local("de")));
        accumulate(e.getKey(), local("dk"));
        accumulateScaled(e.getStrength(), e.getKey(), local("de"));
      })
      .Case([&](WriteOp w) {
        auto [value, weight] = written(w);
        line(fmt::format("{} {}{{}};", keyVec(), local("dk")));
        line(fmt::format("{} {}{{}};", valueVec(), local("du")));
        line(fmt::format("float {} = 0.0f;", local("dweight")));
        line(fmt::format("writeBackward(dState, {}, {}, {}, {}, {}, {});",
                         name(w.getKey()), value, weight, local("dk"),
                         local("du"), local("dweight")));
        accumulate(w.getKey(), local("dk"));
        Value strength = w.getStrength();
        if (!strength) {
          accumulate(w.getValue(), local("du"));
          return;
        }
        accumulateScaled(strength, w.getValue(), local("du"));
        // A scalar strength is the normaliser's weight too.
        if (strength.getType().isF32())
          accumulate(strength, local("dweight"));
      })
      .Case([&](ReadOp r) {
        line(fmt::format(
            "const auto {} = readBackward(dState, {}, {}, scale, {});",
            local("dq"), before, name(r.getQuery()), adjoint(r.getOutput())));
        accumulate(r.getQuery(), local("dq"));
      });
}

void BodyEmitter::emitReverse() {
  for (size_t at = computed.size(); at-- > 0;) {
    Value value = computed[at];
    auto arg = dyn_cast<BlockArgument>(value);
    if (!arg) {
      Operation *op = value.getDefiningOp();
      if (isPure(*op))
        emitAdjoint(op);
      else
        emitStateAdjoint(op, at);
      continue;
    }
    unsigned index = arg.getArgNumber() - 1;
    bool param = layer.isParam(arg);
    if (param)
      index -= layer.getInputNames().size();
    line(fmt::format("addGradient(grad.{}({}), {});", param ? "param" : "input",
                     index, adjoint(arg)));
  }
}

std::string BodyEmitter::constants(StringRef keyGateConstant) {
  StateType state = layer.getStateType();
  std::optional<APFloat> fixedScale = form.read.getScale();
  auto sizes = [&](Block::BlockArgListType args) {
    std::string list;
    for (BlockArgument arg : args)
      list += fmt::format("{}{}", list.empty() ? "" : ", ",
                          elementsOf(arg.getType()));
    // An empty array is ill-formed; the entry is never read.
    return list.empty() ? std::string("0") : list;
  };
  return fmt::format(
      "  static constexpr int K = {}, V = {};\n"
      "  static constexpr bool kRecurrent = {};\n"
      "  static constexpr int kChunkSize = {};\n"
      "  static constexpr bool kNormalizer = {}, kErase = {}, kValueDecay = {},\n"
      "                        kReadBefore = {};\n"
      "{}"
      "  static constexpr float kFixedScale = {};\n"
      "  static constexpr int kNumInputs = {}, kNumParams = {};\n"
      "  LINAC_HOST_DEVICE static constexpr int64_t inputSize(int i) {{\n"
      "    constexpr int64_t sizes[] = {{{}}};\n    return sizes[i];\n  }}\n"
      "  LINAC_HOST_DEVICE static constexpr int64_t paramSize(int i) {{\n"
      "    constexpr int64_t sizes[] = {{{}}};\n    return sizes[i];\n  }}\n\n",
      state.getKeyDim(), state.getValueDim(),
      plan.family == manifest::Family::Recurrent ? "true" : "false",
      plan.chunkSize.value_or(0), state.getNormalized() ? "true" : "false",
      form.erase != Strength::None ? "true" : "false",
      form.valueDecay ? "true" : "false", form.readBefore ? "true" : "false",
      keyGateConstant.str(),
      floatLiteral(fixedScale ? fixedScale->convertToDouble() : 0.0),
      layer.getInputs().size(), layer.getParams().size(),
      sizes(layer.getInputs()),
      sizes(layer.getParams()));
}

void BodyEmitter::emitOperandSlice() {
  names.clear();
  SmallVector<Value> roots{form.query, form.key, form.value};
  llvm::append_range(roots, form.keyGates);
  llvm::append_range(roots, form.valueGates);
  roots.push_back(form.eraseStrength);
  roots.push_back(form.writeStrength);
  emitSlice(roots, Placement::BodyOrder);
}

YieldOp BodyEmitter::emitReadSlice() {
  names.clear();
  names[form.read.getOutput()] = "read";
  auto yield = cast<YieldOp>(layer.getBody().front().getTerminator());
  emitSlice({yield.getOutput()}, Placement::BodyOrder);
  return yield;
}

std::string BodyEmitter::chunkFunctions(const Flavor &bodyFlavor,
                                        StringRef prologueSignature,
                                        StringRef epilogueSignature) {
  flavor = bodyFlavor;
  emitOperandSlice();
  line(fmt::format("out.q = {};", name(form.query)));
  line(fmt::format("out.k = {};", name(form.key)));
  bool scalarGate = llvm::all_of(
      form.keyGates, [](Value gate) { return gate.getType().isF32(); });
  if (flavor.scalarKeyGate && scalarGate) {
    std::string sum;
    for (Value gate : form.keyGates)
      sum += (sum.empty() ? "" : " + ") + name(gate);
    line(fmt::format("out.gk = {};", sum.empty() ? "0.0f" : sum));
  } else {
    line(fmt::format("out.gk = {};", sumOf(form.keyGates, true)));
  }
  if (!flavor.scalarKeyGate || form.valueDecay)
    line(fmt::format("out.gv = {};", sumOf(form.valueGates, false)));
  if (Value e = form.eraseStrength)
    line(fmt::format("out.e = {};", scaled(e, "out.k", true)));
  Value w = form.writeStrength;
  std::string u = scaled(w, name(form.value), false);
  std::string weight = w && w.getType().isF32() ? name(w) : "1.0f";
  line(fmt::format("out.u = appendNormalizer<V, kNormalizer>({}, {});", u,
                   weight));
  std::string text = function(prologueSignature);

  YieldOp yield = emitReadSlice();
  line(fmt::format("store(out, {});", name(yield.getOutput())));
  return text + function(epilogueSignature);
}

std::string BodyEmitter::rowScaleConstants() {
  auto normed = [&](Value operand) {
    return llvm::any_of(rowScalingOf(layer, operand).path,
                        llvm::IsaPred<L2NormOp>)
               ? "true"
               : "false";
  };
  RowScaledOperands operands = rowScaledOperands(layer, form).value();
  return fmt::format(
      "  static constexpr bool kQueryNorm = {}, kKeyNorm = {}, kValueNorm = "
      "{};\n  static constexpr bool kUnitQuery = {}, kUnitWrite = {};\n",
      normed(form.query), normed(form.key), normed(form.value),
      operands.unitQuery ? "true" : "false",
      operands.unitWrite ? "true" : "false");
}

std::string BodyEmitter::rowScalesFunction(StringRef signature) {
  flavor = kWarpFlavor;
  names.clear();
  auto scaleOf = [&](Value operand, StringRef scale, StringRef norm2) {
    RowScaling scaling = rowScalingOf(layer, operand);
    line(fmt::format("{} = 1.0f;", scale));
    for (auto [op, by] : llvm::zip(scaling.path, scaling.scalars)) {
      if (by)
        emitOnDemand(by);
      if (auto norm = dyn_cast<L2NormOp>(op))
        line(fmt::format("{0} = {0} / sqrtf({0} * {0} * {1} + {2});", scale,
                         norm2, floatLiteral(norm.getEps().convertToDouble())),
             specComment({op}));
      else if (isa<arith::NegFOp>(op))
        line(fmt::format("{0} = -{0};", scale), specComment({op}));
      else
        line(fmt::format("{} {}= {};", scale,
                         isa<arith::DivFOp>(op) ? "/" : "*", name(by)),
             specComment({op}));
    }
  };
  scaleOf(form.query, "out.q", "qNorm2");
  scaleOf(form.key, "out.k", "kNorm2");
  scaleOf(form.value, "out.u", "vNorm2");
  if (form.writeStrength) {
    emitOnDemand(form.writeStrength);
    line(fmt::format("out.u *= {};", name(form.writeStrength)));
  }
  for (Value gate : form.keyGates)
    emitOnDemand(gate);
  std::string gates;
  for (Value gate : form.keyGates)
    gates += (gates.empty() ? "" : " + ") + name(gate);
  line(fmt::format("out.gk = {};", gates.empty() ? "0.0f" : gates));
  return function(signature);
}

std::string BodyEmitter::chunkBackwardFunctions(const Flavor &bodyFlavor,
                                                StringRef prologueSignature,
                                                StringRef epilogueSignature) {
  flavor = bodyFlavor;
  // The prologue again, then its operands' gradients d back to the
  // arguments'.
  emitOperandSlice();
  declareAdjoints();
  accumulate(form.query, "d.q");
  accumulate(form.key, "d.k");
  // A scalar gate is every key channel's.
  for (Value gate : form.keyGates)
    accumulate(gate, gate.getType().isF32() ? "sum(d.gk)" : "d.gk");
  for (Value gate : form.valueGates)
    accumulate(gate, "d.gv");
  if (Value e = form.eraseStrength)
    accumulateScaled(e, form.key, "d.e");
  // d.u holds the normaliser's weight's gradient last, when there is one.
  const std::string du = "valuesOf<V>(d.u)";
  Value w = form.writeStrength;
  if (w)
    accumulateScaled(w, form.value, du);
  else
    accumulate(form.value, du);
  if (w && w.getType().isF32() && layer.getStateType().getNormalized())
    accumulate(w, "d.u[V]");
  emitReverse();
  std::string text = function(prologueSignature);

  // The epilogue again, then the output's gradient dOut back to the read's
  // (dRead) and the arguments'.
  YieldOp yield = emitReadSlice();
  // The read is the function's argument, its adjoint dRead.
  readArgument = form.read.getOutput();
  line("dRead = {};");
  declareAdjoints();
  accumulate(yield.getOutput(), "dOut");
  emitReverse();
  readArgument = nullptr;
  return text + function(epilogueSignature);
}

std::string BodyEmitter::stepBackwardFunction(const Flavor &bodyFlavor,
                                              StringRef signature) {
  flavor = bodyFlavor;
  // The step again, keeping the state each state op and read takes; then
  // the output's gradient dOut and the leaving state's dState back to the
  // arguments' and the entering state's.
  names.clear();
  auto yield = cast<YieldOp>(layer.getBody().front().getTerminator());
  tapeStates = true;
  emitSlice({yield.getState(), yield.getOutput()}, Placement::BodyOrder);
  tapeStates = false;
  declareAdjoints();
  accumulate(yield.getOutput(), "dOut");
  emitReverse();
  return function(signature);
}

std::string BodyEmitter::stepFunction(const Flavor &bodyFlavor,
                                      StringRef signature,
                                      Placement placement) {
  flavor = bodyFlavor;
  names.clear();
  auto yield = cast<YieldOp>(layer.getBody().front().getTerminator());
  emitSlice({yield.getState(), yield.getOutput()}, placement);
  line(fmt::format("store(out, {});", name(yield.getOutput())));
  return function(signature);
}

/// The DecodeStaging enumerator (templates/linac/cuda/decode.h) of the
/// plan's decode_staging.
StringRef decodeStagingName(manifest::DecodeStaging staging) {
  switch (staging) {
  case manifest::DecodeStaging::Tensor:
    return "Tensor";
  case manifest::DecodeStaging::Bulk:
    return "Bulk";
  case manifest::DecodeStaging::Direct:
    return "Direct";
  }
  llvm_unreachable("a decode staging of the schema");
}

std::string header(LayerOp layer, const manifest::Plan &plan,
                   StringRef include) {
  return fmt::format("// Generated by linac from layer @{}; the plan is {}.\n"
                     "#include \"{}\"\n\n",
                     layer.getSymName().str(),
                     std::string(manifest::nameOf(plan.family)),
                     include.str());
}

} // namespace

FailureOr<std::string>
linac::emitCpuSource(LayerOp layer, const manifest::Plan &plan, bool backward) {
  BodyEmitter emitter(layer, plan);
  bool recurrent = plan.family == manifest::Family::Recurrent;
  // A key-side gate the same on every channel (or none) lets the kernel
  // take one exponential a pair of tokens instead of one a channel.
  std::string out =
      header(layer, plan,
             backward ? "linac/cpu/backward.h" : "linac/cpu/layer.h") +
      "namespace {\nusing namespace linac::cpu;\n\n"
      "struct Layer {\n" +
      emitter.constants(fmt::format(
          "  static constexpr bool kUniformKeyGate = {};\n",
          emitter.form.keyDecay == KeyDecay::Vector ? "false" : "true"));
  if (!recurrent)
    out += emitter.chunkFunctions(
        kCpuFlavor,
        "static void prologue(const Token<Layer> &token, "
        "Operands<K, V, kNormalizer> &out)",
        "static void epilogue(const Token<Layer> &token, const Vec<V> &read, "
        "float *out)");
  // The backward of a chunkwise layer (but a value-side decay with an
  // erase) runs by chunks, reversing the prologue and the epilogue; any
  // other's reverses the step, token by token.
  bool byChunks = !recurrent && !(emitter.form.valueDecay &&
                                  emitter.form.erase != Strength::None);
  if (backward && byChunks)
    out += emitter.chunkBackwardFunctions(
        kCpuFlavor,
        "static void prologueBackward(const Token<Layer> &token, "
        "const Operands<K, V, kNormalizer> &d, "
        "const TokenGradients<Layer> &grad)",
        "static void epilogueBackward(const Token<Layer> &token, "
        "const Vec<V> &read, const Vec<V> &dOut, Vec<V> &dRead, "
        "const TokenGradients<Layer> &grad)");
  else if (backward)
    out += emitter.stepBackwardFunction(
        kCpuFlavor, "static void stepBackward(const Token<Layer> &token, "
                    "State<K, V, kNormalizer> &state, float scale, "
                    "State<K, V, kNormalizer> &dState, const Vec<V> &dOut, "
                    "const TokenGradients<Layer> &grad)");
  // Every layer has the step: the recurrent scan runs it, and so does decode.
  out += emitter.stepFunction(
      kCpuFlavor, "template <typename Token> static void step(const Token &token, "
                  "State<K, V, kNormalizer> &state, float scale, float *out)");
  out +=
      "};\n\n} // namespace\n\n"
      "extern \"C\" int linac_cpu_abi_version(void) {\n"
      "  return LINAC_CPU_ABI_VERSION;\n}\n\n"
      "extern \"C\" int linac_cpu_forward(const linac_cpu_forward_args *args) "
      "{\n"
      "  return linac::cpu::forward<Layer>(*args);\n}\n\n"
      "extern \"C\" int linac_cpu_decode(const linac_cpu_decode_args *args) {\n"
      "  return linac::cpu::decode<Layer>(*args);\n}\n";
  if (backward)
    out += "\nextern \"C\" int linac_cpu_backward("
           "const linac_cpu_backward_args *args) {\n"
           "  return linac::cpu::backward<Layer>(*args);\n}\n";
  if (emitter.failed)
    return failure();
  return out;
}

FailureOr<std::string> linac::emitCudaSource(LayerOp layer,
                                             const manifest::Plan &plan,
                                             bool backward) {
  BodyEmitter emitter(layer, plan);
  bool recurrent = plan.family == manifest::Family::Recurrent;
  KeyDecay decay = emitter.form.keyDecay;
  StringRef gate = decay == KeyDecay::None     ? "None"
                   : decay == KeyDecay::Vector ? "Vector"
                                               : "Scalar";
  // Which inputs the chunkwise kernel stages in shared memory (the plan's
  // shared_inputs and late_shared_inputs) and which it reads by tensor maps
  // (tensor_inputs), as a function of one flag an input.
  auto inputFlags = [&](StringRef function,
                        const std::optional<std::vector<int64_t>> &list) {
    std::string flags;
    for (int64_t i = 0, e = layer.getInputs().size(); i < e; ++i)
      flags += fmt::format(
          "{}{}", i ? ", " : "",
          list && llvm::is_contained(*list, i) ? "true" : "false");
    return fmt::format(
        "  LINAC_HOST_DEVICE static constexpr bool {}(int i) {{\n"
        "    constexpr bool flags[] = {{{}}};\n"
        "    return flags[i];\n  }}\n",
        function.str(), flags.empty() ? "false" : flags);
  };
  // The inputs whose rows the query, key and value scale (-1: none).
  auto rowInput = [&](int operand) {
    return plan.rowInputs ? (*plan.rowInputs)[operand] : int64_t(-1);
  };
  std::string out =
      header(layer, plan, "linac/cuda/layer.h") +
      "namespace {\nusing namespace linac::cuda;\n\n"
      "struct Layer {\n" +
      emitter.constants(fmt::format(
          "  static constexpr Gate kKeyGate = Gate::{};\n"
          "  static constexpr ChunkKernel kChunkKernel = ChunkKernel::{};\n"
          "  static constexpr int kDecodeWarps = {}, kDecodeStages = {}, "
          "kDecodeParts = {};\n"
          "  static constexpr DecodeStaging kDecodeStaging = "
          "DecodeStaging::{};\n"
          "  static constexpr bool kTensorOutput = {};\n"
          "  static constexpr bool kRowScaled = {};\n"
          "  static constexpr int kQueryRow = {}, kKeyRow = {}, kValueRow = "
          "{};\n{}{}{}{}",
          gate.str(),
          plan.chunkKernel == manifest::ChunkKernel::Pipelined   ? "Pipelined"
          : plan.chunkKernel == manifest::ChunkKernel::Warpgroup ? "Warpgroup"
                                                                 : "Lockstep",
          plan.decodeWarps.value(), plan.decodeStages.value(),
          plan.decodeParts.value(),
          decodeStagingName(plan.decodeStaging.value()).str(),
          plan.tensorOutput.value_or(false) ? "true" : "false",
          plan.rowInputs ? "true" : "false", rowInput(0), rowInput(1),
          rowInput(2), inputFlags("sharedInput", plan.sharedInputs),
          inputFlags("lateSharedInput", plan.lateSharedInputs),
          inputFlags("tensorInput", plan.tensorInputs),
          inputFlags("epilogueInput", recurrent ? std::nullopt
                                                : std::optional(epilogueInputs(
                                                      layer, emitter.form)))));
  // The functions run by the chunkwise kernels and by the scan, each set in
  // a struct nested in Layer.
  auto nested = [](StringRef name, const std::string &functions) {
    std::string text = fmt::format("  struct {} {{\n", name.str());
    for (StringRef line : llvm::split(StringRef(functions).rtrim('\n'), '\n'))
      text += line.empty() ? "\n" : "  " + line.str() + "\n";
    return text + "  };\n";
  };
  if (!recurrent)
    out += nested(
        "Chunk",
        emitter.chunkFunctions(
            kWarpFlavor,
            "template <typename Token> LINAC_DEVICE static void "
            "prologue(const Token &token, ChunkOperands<K, V, kKeyGate, "
            "kValueDecay> &out)",
            "template <typename Token, typename Out> LINAC_DEVICE static "
            "void epilogue(const Token &token, const WarpVec<V> &read, "
            "Out *out)") +
            (plan.rowInputs
                 ? emitter.rowScaleConstants() +
                       emitter.rowScalesFunction(
                           "template <typename Token> LINAC_DEVICE static void "
                           "rowScales(const Token &token, float qNorm2, float "
                           "kNorm2, float vNorm2, RowScales &out)")
                 : std::string()));
  StringRef stepSignature =
      "template <typename Token, typename State, typename Out> "
      "LINAC_DEVICE static void step(const Token &token, "
      "State &state, float scale, Out *out)";
  // Key vectors split between the two lanes of a column pair (the plan's
  // decode_key_rows).
  Flavor decodeFlavor = kDecodeFlavor;
  if (plan.decodeKeyRows == manifest::DecodeKeyRows::Split)
    decodeFlavor.key = "SplitKeyRows<{}, Split>";
  Placement decodePlacement =
      plan.decodePlacement == manifest::DecodePlacement::FirstUse
          ? Placement::FirstUse
          : Placement::BodyOrder;
  out += (recurrent ? "" : "\n") +
         nested("Scan", emitter.stepFunction(kScanFlavor, stepSignature)) +
         "\n";
  bool chunkBackward =
      plan.backwardFamily.value_or(manifest::Family::Recurrent) !=
      manifest::Family::Recurrent;
  if (backward && chunkBackward)
    out += nested("ChunkBackward",
                  emitter.chunkBackwardFunctions(
                      kWarpFlavor,
                      "template <typename Token, typename Gradients> "
                      "LINAC_DEVICE static void prologueBackward(const Token "
                      "&token, const ChunkOperands<K, V, kKeyGate, "
                      "kValueDecay> &d, const Gradients &grad)",
                      "template <typename Token, typename Gradients> "
                      "LINAC_DEVICE static void epilogueBackward(const Token "
                      "&token, const WarpVec<V> &read, const WarpVec<V> "
                      "&dOut, WarpVec<V> &dRead, const Gradients &grad)")) +
           "\n";
  else if (backward)
    out += nested("ScanBackward",
                  emitter.stepBackwardFunction(
                      kScanFlavor,
                      "template <typename Token, typename State, typename "
                      "Gradients> LINAC_DEVICE static void stepBackward("
                      "const Token &token, State &state, float scale, "
                      "State &dState, const ColumnVec<V> &dOut, "
                      "const Gradients &grad)")) +
           "\n";
  out += nested("Decode",
                "using Split = DecodeSplit<K, V / kDecodeParts, kDecodeWarps, "
                "kDecodeStaging == DecodeStaging::Tensor>;\n" +
                    emitter.stepFunction(decodeFlavor, stepSignature,
                                         decodePlacement)) +
         "};\n\n} // namespace\n\n";
  if (!recurrent)
    out += fmt::format("static_assert(linac::cuda::chunkSharedBytes<Layer>() "
                       "== {}, \"the plan's shared memory\");\n",
                       plan.sharedMemory.value());
  // Each kernel in the part whose file the manifest names for it, so that
  // the parts compile side by side.
  auto inPart = [](manifest::KernelGroup group, StringRef kernels) {
    return fmt::format("#if LINAC_IN_PART({})\n{}#endif\n",
                       manifest::cudaKernelPart(group), kernels.str());
  };
  for (const manifest::Kernel &kernel : manifest::forwardKernels(plan, "")) {
    bool scan = kernel.family == manifest::Family::Recurrent;
    out += inPart(
        scan ? manifest::KernelGroup::Scan : manifest::KernelGroup::Chunk,
        fmt::format("LINAC_{}_KERNEL_{}(Layer)\n", scan ? "SCAN" : "CHUNK",
                    StringRef(manifest::nameOf(kernel.dtype)).upper()));
  }
  if (std::optional<manifest::Phased> phased = manifest::phasedFor(plan)) {
    out += fmt::format(
        "static_assert(linac::cuda::phasedSharedBytes<Layer>() == {} && "
        "linac::cuda::prepareSharedBytes<Layer>() == {} && "
        "linac::cuda::preparedChunkBytes<Layer>() == {}, "
        "\"the plan's phased kernels\");\n",
        plan.phasedSharedMemory.value(), plan.prepareSharedMemory.value(),
        phased->chunkBytes);
    for (const manifest::Kernel &kernel : phased->state)
      out += inPart(
          manifest::KernelGroup::Phased,
          fmt::format("LINAC_PHASED_KERNELS_{}(Layer)\n",
                      StringRef(manifest::nameOf(kernel.dtype)).upper()));
  }
  if (std::optional<manifest::Segments> segments = manifest::segmentsFor(plan))
    out +=
        fmt::format(
            "static_assert(linac::cuda::transitionBlocks<Layer>() == {}, "
            "\"the plan's transition blocks\");\n"
            "static_assert(linac::cuda::composeThreads<Layer>() == {} && "
            "linac::cuda::composeSharedBytes<Layer>() == {}, "
            "\"the plan's compose kernel\");\n",
            segments->transitionBlocks, segments->compose.blockThreads.value(),
            segments->compose.sharedMemory.value()) +
        inPart(manifest::KernelGroup::Compose,
               "LINAC_SEGMENT_COMPOSE_KERNEL(Layer)\n");
  if (backward && chunkBackward)
    out +=
        fmt::format("static_assert(linac::cuda::backwardSharedBytes(Layer::K, "
                    "linac::cuda::backwardGates(Layer::K, Layer::kKeyGate == "
                    "linac::cuda::Gate::Vector)) == "
                    "{}, \"the plan's backward shared memory\");\n",
                    plan.backwardSharedMemory.value()) +
        inPart(manifest::KernelGroup::Backward,
               "LINAC_CHUNK_BACKWARD_KERNELS(Layer)\n");
  else if (backward)
    out += inPart(manifest::KernelGroup::Backward,
                  "LINAC_SCAN_BACKWARD_KERNEL(Layer)\n");
  out += fmt::format(
             "static_assert(linac::cuda::decodeSharedBytes<Layer>() == {}, "
             "\"the plan's decode shared memory\");\n",
             plan.decodeSharedMemory.value()) +
         inPart(manifest::KernelGroup::Decode, "LINAC_DECODE_KERNELS(Layer)\n");
  if (emitter.failed)
    return failure();
  return out;
}

std::string linac::emitContract(StringRef contractHash) {
  return fmt::format("\nLINAC_CONTRACT(\"{}\")\n", contractHash.str());
}
