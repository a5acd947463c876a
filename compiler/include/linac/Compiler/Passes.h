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

} // namespace linac

#endif // LINAC_COMPILER_PASSES_H
