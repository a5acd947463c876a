//===- linac-opt.cpp - the linac optimizer driver -------------------------===//
//
// Parses, verifies, transforms and prints linac specs, as mlir-opt does for
// upstream dialects.
//
//===----------------------------------------------------------------------===//

#include "linac/Compiler/Passes.h"
#include "linac/Linac.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  linac::registerLinacPasses();
  mlir::DialectRegistry registry;
  registry.insert<linac::LinacDialect, mlir::arith::ArithDialect,
                  mlir::math::MathDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "linac optimizer driver\n", registry));
}
