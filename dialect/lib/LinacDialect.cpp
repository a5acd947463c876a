//===- LinacDialect.cpp - linac dialect, types and attributes -------------===//

#include "linac/Linac.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace linac;

#include "linac/LinacDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "linac/LinacAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "linac/LinacTypes.cpp.inc"

namespace {
/// Prints linac vectors as the aliases !key and !value at the top of the
/// module, which keeps printed specs readable.
struct LinacOpAsmInterface : public OpAsmDialectInterface {
  using OpAsmDialectInterface::OpAsmDialectInterface;

  AliasResult getAlias(Type type, raw_ostream &os) const override {
    if (isKeyVector(type))
      os << "key";
    else if (isValueVector(type))
      os << "value";
    else
      return AliasResult::NoAlias;
    return AliasResult::FinalAlias;
  }
};
} // namespace

void LinacDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "linac/LinacAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "linac/LinacTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "linac/LinacOps.cpp.inc"
      >();
  addInterfaces<LinacOpAsmInterface>();
}

//===----------------------------------------------------------------------===//
// Vector types
//===----------------------------------------------------------------------===//

template <typename EncodingAttr>
static bool isEncodedTensor(Type type, int64_t rank) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getRank() == rank && tensor.hasStaticShape() &&
         tensor.getElementType().isF32() &&
         isa_and_nonnull<EncodingAttr>(tensor.getEncoding());
}

bool linac::isKeyVector(Type type) {
  return isEncodedTensor<KeySideAttr>(type, 1);
}

bool linac::isValueVector(Type type) {
  return isEncodedTensor<ValueSideAttr>(type, 1);
}

bool linac::isMatrixGate(Type type) {
  return isEncodedTensor<MatrixSideAttr>(type, 2);
}

RankedTensorType linac::getKeyVectorType(MLIRContext *ctx, unsigned keyDim) {
  return RankedTensorType::get({keyDim}, Float32Type::get(ctx),
                               KeySideAttr::get(ctx));
}

RankedTensorType linac::getValueVectorType(MLIRContext *ctx,
                                           unsigned valueDim) {
  return RankedTensorType::get({valueDim}, Float32Type::get(ctx),
                               ValueSideAttr::get(ctx));
}

//===----------------------------------------------------------------------===//
// StateType
//===----------------------------------------------------------------------===//

LogicalResult
StateType::verify(function_ref<InFlightDiagnostic()> emitError,
                  unsigned keyDim, unsigned valueDim, bool normalized) {
  if (keyDim == 0 || valueDim == 0)
    return emitError() << "state dimensions must be positive, got " << keyDim
                       << "x" << valueDim;
  if (keyDim > kMaxStateDim || valueDim > kMaxStateDim)
    return emitError() << "state dimensions must be at most " << kMaxStateDim
                       << ", got " << keyDim << "x" << valueDim;
  return success();
}

// !linac.state<KxV> or !linac.state<KxV, normalized>
Type StateType::parse(AsmParser &parser) {
  SmallVector<int64_t, 2> dims;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() ||
      parser.parseDimensionList(dims, /*allowDynamic=*/false,
                                /*withTrailingX=*/false))
    return {};
  if (dims.size() != 2) {
    parser.emitError(loc, "state needs two dimensions, K x V");
    return {};
  }
  // Checked before narrowing to the type's unsigned parameters.
  if (llvm::any_of(dims, [](int64_t d) { return d > kMaxStateDim; })) {
    parser.emitError(loc) << "state dimensions must be at most "
                          << kMaxStateDim << ", got " << dims[0] << "x"
                          << dims[1];
    return {};
  }
  bool normalized = succeeded(parser.parseOptionalComma());
  if (normalized && parser.parseKeyword("normalized"))
    return {};
  if (parser.parseGreater())
    return {};
  return getChecked([&] { return parser.emitError(loc); },
                    parser.getContext(), dims[0], dims[1], normalized);
}

void StateType::print(AsmPrinter &printer) const {
  printer << "<" << getKeyDim() << "x" << getValueDim();
  if (getNormalized())
    printer << ", normalized";
  printer << ">";
}
