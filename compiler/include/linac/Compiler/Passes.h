//===- Passes.h - linac compiler passes -------------------------*- C++ -*-===//

#ifndef LINAC_COMPILER_PASSES_H
#define LINAC_COMPILER_PASSES_H

#include "linac/Linac.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace linac {

#define GEN_PASS_DECL
#include "linac/Compiler/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "linac/Compiler/Passes.h.inc"

/// Names of the attributes the passes attach to a layer.
inline constexpr llvm::StringLiteral kNormalFormAttr = "linac.normal_form";
inline constexpr llvm::StringLiteral kPlanAttr = "linac.plan";

} // namespace linac

#endif // LINAC_COMPILER_PASSES_H
