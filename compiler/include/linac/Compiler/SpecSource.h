//===- SpecSource.h - reading a spec's text ---------------------*- C++ -*-===//
//
// Checks on a spec's text that must come before MLIR's parser sees it.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_COMPILER_SPECSOURCE_H
#define LINAC_COMPILER_SPECSOURCE_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/Support/SourceMgr.h"

namespace linac {

/// How deep brackets ((), [], {}, <>) may nest in a spec. MLIR's parser
/// recurses once per level, so an input nested thousands deep would
/// overflow its stack; a spec needs fewer than ten.
constexpr unsigned kMaxNestingDepth = 100;

/// Fails, with an error at the first bracket past kMaxNestingDepth, when
/// `buffer` of `sourceMgr` nests deeper.
mlir::LogicalResult checkNestingDepth(const llvm::SourceMgr &sourceMgr,
                                      unsigned buffer,
                                      mlir::MLIRContext *context);

/// Checks and parses the spec that is `sourceMgr`'s main file; diagnostics
/// go to `context`'s handler.
mlir::OwningOpRef<mlir::ModuleOp> parseSpec(llvm::SourceMgr &sourceMgr,
                                            mlir::MLIRContext *context);

} // namespace linac

#endif // LINAC_COMPILER_SPECSOURCE_H
