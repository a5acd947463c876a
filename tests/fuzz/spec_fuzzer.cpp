//===- spec_fuzzer.cpp - libFuzzer target: spec text to generated source --===//
//
// Parses the input as a spec (verifying it), then for the CPU and sm_90a
// targets normalises and plans it and generates the source and the step
// program `linac compile` would write, into strings: no host compiler, no
// nvcc. Every step may reject the input with a diagnostic; none may crash.
//
//===----------------------------------------------------------------------===//

#include "linac/Compiler/Codegen.h"
#include "linac/Compiler/Passes.h"
#include "linac/Linac.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>
#include <string>

using namespace mlir;

namespace {

/// Brackets open at once beyond which the parser may run out of stack.
constexpr int kMaxNesting = 200;

/// Inputs that reach bugs already reported and being fixed, so that the
/// fuzzer looks for new ones. Each goes when its fix lands.
bool knownIssue(llvm::StringRef text) {
  // Nesting deep enough to overflow the stack in MLIR's recursive-descent
  // parser (the reproducers' nested_modules_10000 and
  // nested_dense_brackets_20000).
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    bool arrow = c == '>' && i && text[i - 1] == '-';
    depth += c == '(' || c == '[' || c == '{' || c == '<';
    depth -= (c == ')' || c == ']' || c == '}' || c == '>') && !arrow;
    if (depth > kMaxNesting)
      return true;
  }
  return false;
}

/// A constant that is neither a float nor a float splat (an integer, an
/// index, a dense value of several elements) reaches a bad cast in
/// FloatAttr::getValueAsDouble (the reproducers' dense_nonsplat_constant,
/// unused_i32_constant, math_ctlz_i32, arith_addi_index).
bool knownIssue(ModuleOp module) {
  WalkResult walk = module.walk([](arith::ConstantOp constant) {
    auto value = constant.getValue();
    if (auto splat = dyn_cast<SplatElementsAttr>(value);
        splat && isa<FloatType>(splat.getElementType()))
      return WalkResult::advance();
    if (isa<FloatAttr>(value))
      return WalkResult::advance();
    return WalkResult::interrupt();
  });
  return walk.wasInterrupted();
}

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
    FailureOr<std::string> source = target == "cpu"
                                        ? linac::emitCpuSource(layer)
                                        : linac::emitCudaSource(layer);
    if (failed(source))
      continue;
    out << *source << llvm::json::Value(linac::emitStepProgram(layer));
  }
  out << *module;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // The lexer reads up to a terminating NUL, as files read for it have.
  std::string text(reinterpret_cast<const char *>(data), size);
  if (knownIssue(text))
    return -1;
  MLIRContext context(registry(), MLIRContext::Threading::DISABLED);
  context.printOpOnDiagnostic(false);
  // Diagnostics are the expected outcome for most inputs; drop them.
  ScopedDiagnosticHandler quiet(&context,
                                [](Diagnostic &) { return success(); });
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  if (!module || knownIssue(*module))
    return 0;
  for (llvm::StringRef target : {"cpu", "sm_90a"})
    compile(*module, target);
  return 0;
}
