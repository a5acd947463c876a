//===- Linac.h - the linac dialect, its types and ops -----------*- C++ -*-===//

#ifndef LINAC_LINAC_H
#define LINAC_LINAC_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "linac/LinacDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "linac/LinacAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "linac/LinacTypes.h.inc"

namespace linac {
/// The largest K and V a state may have. Every kernel keeps a state's key
/// rows or value columns on chip; past this, the generated code takes the
/// host compiler or nvcc unbounded time.
constexpr unsigned kMaxStateDim = 512;
/// A 1-D f32 tensor encoded #linac.key.
bool isKeyVector(mlir::Type type);
/// A 1-D f32 tensor encoded #linac.value.
bool isValueVector(mlir::Type type);
/// A 2-D f32 tensor encoded #linac.matrix.
bool isMatrixGate(mlir::Type type);
/// The key-side vector type of length `keyDim`.
mlir::RankedTensorType getKeyVectorType(mlir::MLIRContext *ctx, unsigned keyDim);
/// The value-side vector type of length `valueDim`.
mlir::RankedTensorType getValueVectorType(mlir::MLIRContext *ctx,
                                          unsigned valueDim);
} // namespace linac

#define GET_OP_CLASSES
#include "linac/LinacOps.h.inc"

#endif // LINAC_LINAC_H
