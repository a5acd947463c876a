//===- linac-opt.cpp - the linac optimizer driver -------------------------===//
//
// Parses, verifies, transforms and prints linac specs, as mlir-opt does for
// upstream dialects. The input's nesting is checked first, as `linac
// compile` checks it (SpecSource.h).
//
//===----------------------------------------------------------------------===//

#include "linac/Compiler/Passes.h"
#include "linac/Compiler/SpecSource.h"
#include "linac/Linac.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

static LogicalResult nestingWithinBounds(const llvm::MemoryBuffer &input) {
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBuffer(input.getMemBufferRef()), llvm::SMLoc());
  MLIRContext context;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  return linac::checkNestingDepth(sourceMgr, sourceMgr.getMainFileID(),
                                  &context);
}

int main(int argc, char **argv) {
  linac::registerLinacPasses();
  DialectRegistry registry;
  registry.insert<linac::LinacDialect, arith::ArithDialect,
                  math::MathDialect>();
  auto [inputFilename, outputFilename] = registerAndParseCLIOptions(
      argc, argv, "linac optimizer driver\n", registry);
  MlirOptMainConfig config = MlirOptMainConfig::createFromCLOptions();

  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input =
      openInputFile(inputFilename, &error);
  if (!input) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (failed(nestingWithinBounds(*input)))
    return 1;
  std::unique_ptr<llvm::ToolOutputFile> output =
      openOutputFile(outputFilename, &error);
  if (!output) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (failed(MlirOptMain(output->os(), std::move(input), registry, config)))
    return 1;
  output->keep();
  return 0;
}
