//===- spec_fuzzer.cpp - libFuzzer target: spec text to generated source --===//
//
// Parses the input as a spec (verifying it), then for the CPU and sm_90a
// targets normalises and plans it and generates the source and the step
// program `linac compile` would write, into strings: no host compiler, no
// nvcc. Every step may reject the input with a diagnostic; none may crash.
//
//===----------------------------------------------------------------------===//

#include "linac/Compiler/Codegen.h"
#include "linac/Compiler/LayerAttributes.h"
#include "linac/Compiler/Passes.h"
#include "linac/Compiler/SpecSource.h"
#include "linac/Linac.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>
#include <string>

using namespace mlir;

namespace {

DialectRegistry &registry() {
  static DialectRegistry *registry = [] {
    auto *r = new DialectRegistry();
    r->insert<linac::LinacDialect, arith::ArithDialect, math::MathDialect>();
    return r;
  }();
  return *registry;
}

/// What `linac compile --target TARGET` computes before it writes files.
void compile(ModuleOp parsed, llvm::StringRef target) {
  OwningOpRef<ModuleOp> module(cast<ModuleOp>(parsed->clone()));
  PassManager pm(module->getContext());
  pm.addPass(linac::createLinacNormalize());
  pm.addPass(linac::createLinacPlan({target.str(), 16, 4}));
  if (failed(pm.run(*module)))
    return;
  std::string text;
  llvm::raw_string_ostream out(text);
  for (linac::LayerOp layer : module->getOps<linac::LayerOp>()) {
    FailureOr<linac::manifest::Plan> plan = linac::getPlan(layer);
    if (failed(plan))
      continue;
    FailureOr<std::string> source = target == "cpu"
                                        ? linac::emitCpuSource(layer, *plan)
                                        : linac::emitCudaSource(layer, *plan);
    if (failed(source))
      continue;
    out << *source << linac::emitStepProgram(layer);
  }
  out << *module;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // The lexer reads up to a terminating NUL, as files read for it have.
  std::string text(reinterpret_cast<const char *>(data), size);
  MLIRContext context(registry(), MLIRContext::Threading::DISABLED);
  context.printOpOnDiagnostic(false);
  // Diagnostics are the expected outcome for most inputs; drop them.
  ScopedDiagnosticHandler quiet(&context,
                                [](Diagnostic &) { return success(); });
  // Through the tools' own front end, which bounds the nesting first.
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBuffer(text, "spec"),
                               llvm::SMLoc());
  OwningOpRef<ModuleOp> module = linac::parseSpec(sourceMgr, &context);
  if (!module)
    return 0;
  for (llvm::StringRef target : {"cpu", "sm_90a"})
    compile(*module, target);
  return 0;
}
