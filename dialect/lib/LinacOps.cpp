//===- LinacOps.cpp - linac operations ------------------------------------===//

#include "linac/Linac.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;
using namespace linac;

#define GET_OP_CLASSES
#include "linac/LinacOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Shared checks
//===----------------------------------------------------------------------===//

static StateType stateTypeOf(Value state) {
  return cast<StateType>(state.getType());
}

/// Checks that a vector operand has the length of its side of the state.
/// Scalars always fit.
static LogicalResult checkLength(Operation *op, Value value, StateType state,
                                 StringRef what) {
  auto tensor = dyn_cast<RankedTensorType>(value.getType());
  if (!tensor)
    return success();
  if (isMatrixGate(tensor)) {
    if (tensor.getDimSize(0) == state.getKeyDim() &&
        tensor.getDimSize(1) == state.getValueDim())
      return success();
    return op->emitOpError() << what << " is " << tensor.getDimSize(0) << "x"
                             << tensor.getDimSize(1) << " but the state is "
                             << state.getKeyDim() << "x"
                             << state.getValueDim();
  }
  bool keySide = isKeyVector(tensor);
  int64_t expected = keySide ? state.getKeyDim() : state.getValueDim();
  if (tensor.getDimSize(0) == expected)
    return success();
  return op->emitOpError() << what << " has " << tensor.getDimSize(0)
                           << " elements but the state has "
                           << (keySide ? "K = " : "V = ") << expected;
}

//===----------------------------------------------------------------------===//
// LayerOp
//===----------------------------------------------------------------------===//

static constexpr StringLiteral kReservedNames[] = {
    "o", "scale", "initial_state", "final_state", "cu_seqlens"};

StringRef LayerOp::getArgumentName(BlockArgument arg) {
  unsigned index = arg.getArgNumber();
  assert(index > 0 && "the state has no spec name");
  size_t numInputs = getInputNames().size();
  ArrayAttr names = index <= numInputs ? getInputNames() : getParamNames();
  size_t position = index <= numInputs ? index - 1 : index - 1 - numInputs;
  return cast<StringAttr>(names[position]).getValue();
}

void LayerOp::getAsmBlockArgumentNames(Region &region,
                                       OpAsmSetValueNameFn setNameFn) {
  if (region.empty() || region.getNumArguments() !=
                            1 + getInputNames().size() + getParamNames().size())
    return;
  setNameFn(getState(), "S");
  for (BlockArgument arg : region.getArguments().drop_front())
    setNameFn(arg, getArgumentName(arg));
}

/// Parses `(%a : type, ...)`, appending to `args` and their names.
static ParseResult
parseArgumentList(OpAsmParser &parser,
                  SmallVectorImpl<OpAsmParser::Argument> &args,
                  SmallVectorImpl<Attribute> &names) {
  return parser.parseCommaSeparatedList(
      OpAsmParser::Delimiter::Paren, [&]() -> ParseResult {
        OpAsmParser::Argument arg;
        if (parser.parseArgument(arg, /*allowType=*/true))
          return failure();
        names.push_back(parser.getBuilder().getStringAttr(
            arg.ssaName.name.drop_front()));
        args.push_back(arg);
        return success();
      });
}

// linac.layer @name(%S : !linac.state<KxV>) inputs(...) [params(...)]
//     [attributes {...}] { body }
ParseResult LayerOp::parse(OpAsmParser &parser, OperationState &result) {
  StringAttr name;
  if (parser.parseSymbolName(name, getSymNameAttrName(result.name).getValue(),
                             result.attributes))
    return failure();

  SmallVector<OpAsmParser::Argument> args(1);
  if (parser.parseLParen() ||
      parser.parseArgument(args.front(), /*allowType=*/true) ||
      parser.parseRParen())
    return failure();

  SmallVector<Attribute> inputNames, paramNames;
  if (parser.parseKeyword("inputs") ||
      parseArgumentList(parser, args, inputNames))
    return failure();
  if (succeeded(parser.parseOptionalKeyword("params")) &&
      parseArgumentList(parser, args, paramNames))
    return failure();

  Builder &builder = parser.getBuilder();
  result.addAttribute(getInputNamesAttrName(result.name),
                      builder.getArrayAttr(inputNames));
  result.addAttribute(getParamNamesAttrName(result.name),
                      builder.getArrayAttr(paramNames));
  if (parser.parseOptionalAttrDictWithKeyword(result.attributes))
    return failure();
  return parser.parseRegion(*result.addRegion(), args);
}

void LayerOp::print(OpAsmPrinter &p) {
  p << ' ';
  p.printSymbolName(getSymName());
  p << '(';
  p.printRegionArgument(getState());
  p << ") inputs(";
  llvm::interleaveComma(getInputs(), p,
                        [&](BlockArgument arg) { p.printRegionArgument(arg); });
  p << ')';
  if (!getParams().empty()) {
    p << " params(";
    llvm::interleaveComma(getParams(), p, [&](BlockArgument arg) {
      p.printRegionArgument(arg);
    });
    p << ')';
  }
  p.printOptionalAttrDictWithKeyword(
      (*this)->getAttrs(), {getSymNameAttrName(), getInputNamesAttrName(),
                            getParamNamesAttrName()});
  p << ' ';
  p.printRegion(getBody(), /*printEntryBlockArgs=*/false);
}

static bool isIdentifier(StringRef name) {
  return !name.empty() && (llvm::isAlpha(name.front()) || name.front() == '_') &&
         llvm::all_of(name, [](char c) { return llvm::isAlnum(c) || c == '_'; });
}

/// Checks the names and types of the inputs and parameters.
static LogicalResult verifySignature(LayerOp layer) {
  Block &body = layer.getBody().front();
  size_t expected =
      1 + layer.getInputNames().size() + layer.getParamNames().size();
  if (body.getNumArguments() != expected)
    return layer.emitOpError() << "has " << body.getNumArguments()
                               << " block arguments but names " << expected;
  if (!isa<StateType>(layer.getState().getType()))
    return layer.emitOpError()
           << "first argument must be the state (!linac.state<KxV>), got "
           << layer.getState().getType();
  StateType state = layer.getStateType();

  for (BlockArgument arg : body.getArguments().drop_front()) {
    StringRef name = layer.getArgumentName(arg);
    StringRef role = layer.isParam(arg) ? "parameter" : "input";
    if (!isIdentifier(name))
      return layer.emitOpError()
             << role << " name '" << name << "' is not an identifier";
    if (llvm::is_contained(kReservedNames, name))
      return layer.emitOpError()
             << role << " name '" << name
             << "' is reserved for a runtime argument";
    Type type = arg.getType();
    bool allowed = type.isF32() || isKeyVector(type) || isValueVector(type) ||
                   (!layer.isParam(arg) && isMatrixGate(type));
    if (!allowed)
      return layer.emitOpError()
             << role << " '" << name << "' has type " << type << "; "
             << (layer.isParam(arg)
                     ? "parameters are f32 scalars or key-side or value-side "
                       "vectors"
                     : "inputs are f32 scalars, key-side or value-side "
                       "vectors, or key-by-value matrices");
    if (failed(checkLength(layer, arg, state,
                           (Twine(role) + " '" + name + "'").str())))
      return failure();
  }
  return success();
}

/// Every state value must be consumed at most once, by a transition or the
/// yield, so that the step is one chain from the incoming state to the yield.
/// Reads look at a state without consuming it. A state that is never consumed
/// implies another that is consumed twice, since every state descends from
/// the incoming one and the yield takes one.
static LogicalResult verifyStateThreading(LayerOp layer) {
  SmallVector<Value> states{layer.getState()};
  for (Operation &op : layer.getBody().front())
    for (Value result : op.getResults())
      if (isa<StateType>(result.getType()))
        states.push_back(result);
  for (Value state : states) {
    auto uses = llvm::count_if(state.getUsers(), [](Operation *user) {
      return !isa<ReadOp>(user);
    });
    if (uses <= 1)
      continue;
    InFlightDiagnostic diag = layer.emitOpError()
                              << "state is used " << uses
                              << " times; thread it through one chain of "
                                 "transitions";
    if (Operation *def = state.getDefiningOp())
      diag.attachNote(def->getLoc()) << "state defined here";
    return diag;
  }
  return success();
}

/// Values in a step are the state, f32 scalars and f32 tensors of one side
/// (or a key-by-value matrix); integers, indices and unencoded tensors have
/// no lowering.
static bool isStepType(Type type) {
  return isa<StateType>(type) || type.isF32() || isKeyVector(type) ||
         isValueVector(type) || isMatrixGate(type);
}

/// A constant is one finite f32, or a splat of one over a vector of a side.
static LogicalResult verifyConstant(arith::ConstantOp constant) {
  Attribute value = constant.getValue();
  std::optional<APFloat> number;
  if (auto scalar = dyn_cast<FloatAttr>(value))
    number = scalar.getValue();
  else if (auto splat = dyn_cast<SplatElementsAttr>(value))
    number = splat.getSplatValue<APFloat>();
  else
    return constant.emitOpError(
        "in a step must be one value or a splat; a value per element is a "
        "parameter (params(...)), not a constant");
  if (!number->isFinite())
    return constant.emitOpError() << "in a step must be finite, got "
                                  << number->convertToDouble();
  return success();
}

/// Every op of the body is flat elementwise math on step values: no nested
/// regions, no integer or index values, finite constants.
static LogicalResult verifyBodyOps(LayerOp layer) {
  for (Operation &op : layer.getBody().front()) {
    if (op.getNumRegions() != 0)
      return op.emitOpError("cannot appear in a step: a step is straight-line "
                            "code without nested regions");
    SmallVector<Type> types(op.getOperandTypes());
    llvm::append_range(types, op.getResultTypes());
    for (Type type : types)
      if (!isStepType(type))
        return op.emitOpError()
               << "takes or makes a value of type " << type
               << "; a step computes with f32 scalars, key-side or "
                  "value-side f32 vectors and key-by-value matrices";
    if (auto constant = dyn_cast<arith::ConstantOp>(op);
        constant && failed(verifyConstant(constant)))
      return failure();
  }
  return success();
}

LogicalResult LayerOp::verify() { return verifySignature(*this); }

LogicalResult LayerOp::verifyRegions() {
  if (failed(verifyBodyOps(*this)) || failed(verifyStateThreading(*this)))
    return failure();

  SmallVector<ReadOp> reads(getBody().getOps<ReadOp>());
  if (reads.empty())
    return emitOpError("never reads the state: add a linac.read");
  if (reads.size() > 1) {
    InFlightDiagnostic diag =
        emitOpError("reads the state more than once; a step has one read");
    diag.attachNote(reads[1].getLoc()) << "second read here";
    return diag;
  }

  // The output must come from the read, possibly through elementwise math.
  auto yield = cast<YieldOp>(getBody().front().getTerminator());
  SmallVector<Value> worklist{yield.getOutput()};
  llvm::SmallPtrSet<Value, 16> visited;
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    if (!visited.insert(value).second)
      continue;
    if (value == reads.front().getOutput())
      return success();
    if (Operation *def = value.getDefiningOp())
      llvm::append_range(worklist, def->getOperands());
  }
  return yield.emitOpError("output does not depend on the read of the state");
}

//===----------------------------------------------------------------------===//
// Transitions, read and helpers
//===----------------------------------------------------------------------===//

LogicalResult YieldOp::verify() {
  return checkLength(*this, getOutput(), stateTypeOf(getState()), "output");
}

LogicalResult DecayOp::verify() {
  if (!getKeyGate() && !getValueGate())
    return emitOpError("needs a key-side gate, a value-side gate or both");
  StateType state = stateTypeOf(getState());
  if (getValueGate() && state.getNormalized())
    return emitOpError("cannot decay the value side of a state with a "
                       "normaliser: the normaliser column has no value gate");
  if (getKeyGate() &&
      failed(checkLength(*this, getKeyGate(), state, "key-side gate")))
    return failure();
  if (getValueGate() &&
      failed(checkLength(*this, getValueGate(), state, "value-side gate")))
    return failure();
  return success();
}

LogicalResult MatrixGateOp::verify() {
  StateType state = stateTypeOf(getState());
  if (state.getNormalized())
    return emitOpError("cannot gate a state with a normaliser by a matrix: "
                       "the normaliser column has no gate");
  return checkLength(*this, getGate(), state, "matrix gate");
}

LogicalResult EraseOp::verify() {
  StateType state = stateTypeOf(getState());
  if (failed(checkLength(*this, getKey(), state, "key")))
    return failure();
  return checkLength(*this, getStrength(), state, "erase strength");
}

LogicalResult WriteOp::verify() {
  StateType state = stateTypeOf(getState());
  if (failed(checkLength(*this, getKey(), state, "key")) ||
      failed(checkLength(*this, getValue(), state, "value")))
    return failure();
  if (!getStrength())
    return success();
  if (state.getNormalized() && isValueVector(getStrength().getType()))
    return emitOpError("a value-side write strength cannot apply to the "
                       "normaliser; use a scalar strength");
  return checkLength(*this, getStrength(), state, "write strength");
}

LogicalResult ReadOp::verify() {
  StateType state = stateTypeOf(getState());
  if (getNormalized() && !state.getNormalized())
    return emitOpError("'normalized' needs a state with a normaliser "
                       "(!linac.state<KxV, normalized>)");
  if (!getNormalized() && state.getNormalized())
    return emitOpError("the state has a normaliser that this read ignores; "
                       "add 'normalized'");
  if (std::optional<APFloat> scale = getScale()) {
    double value = scale->convertToDouble();
    if (!(value > 0.0 && std::isfinite(value)))
      return emitOpError() << "scale must be positive and finite, got "
                           << value;
  }
  if (failed(checkLength(*this, getQuery(), state, "query")))
    return failure();
  return checkLength(*this, getOutput(), state, "output");
}

LogicalResult L2NormOp::verify() {
  double eps = getEps().convertToDouble();
  if (!(eps > 0.0 && std::isfinite(eps)))
    return emitOpError() << "eps must be positive and finite, got " << eps;
  return success();
}
