//===- SpecSource.cpp - reading a spec's text -----------------------------===//

#include "linac/Compiler/SpecSource.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/AsmParser/AsmParserState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"

using namespace mlir;

LogicalResult linac::checkNestingDepth(const llvm::SourceMgr &sourceMgr,
                                       unsigned buffer, MLIRContext *context) {
  const llvm::MemoryBuffer *file = sourceMgr.getMemoryBuffer(buffer);
  StringRef text = file->getBuffer();
  unsigned depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '/' && text.substr(i, 2) == "//") {
      i = text.find('\n', i);
      if (i == StringRef::npos)
        break;
    } else if (c == '"') {
      // A string ends at the next quote that no backslash escapes.
      while (++i < text.size() && text[i] != '"')
        if (text[i] == '\\')
          ++i;
    } else if (c == '-' && text.substr(i, 2) == "->") {
      ++i;
    } else if (c == '(' || c == '[' || c == '{' || c == '<') {
      if (++depth > kMaxNestingDepth) {
        auto [line, column] = sourceMgr.getLineAndColumn(
            llvm::SMLoc::getFromPointer(text.data() + i), buffer);
        return emitError(FileLineColLoc::get(context,
                                             file->getBufferIdentifier(),
                                             line, column))
               << "brackets nest deeper than " << kMaxNestingDepth
               << " levels; a spec is one flat layer";
      }
    } else if ((c == ')' || c == ']' || c == '}' || c == '>') && depth > 0) {
      --depth;
    }
  }
  return success();
}

OwningOpRef<ModuleOp> linac::parseSpec(llvm::SourceMgr &sourceMgr,
                                       MLIRContext *context) {
  unsigned main = sourceMgr.getMainFileID();
  if (failed(checkNestingDepth(sourceMgr, main, context)))
    return nullptr;
  Block block;
  AsmParserState parsed;
  if (failed(parseAsmSourceFile(sourceMgr, &block, ParserConfig(context),
                                &parsed)))
    return nullptr;
  // The SSA names the spec writes are not part of the IR; keep each as its
  // op's NameLoc, so that generated code can use them.
  for (const AsmParserState::OperationDefinition &def : parsed.getOpDefs()) {
    if (def.resultGroups.size() != 1)
      continue;
    llvm::SMRange range = def.resultGroups.front().definition.loc;
    StringRef name(range.Start.getPointer(),
                   range.End.getPointer() - range.Start.getPointer());
    def.op->setLoc(NameLoc::get(StringAttr::get(context, name.ltrim('%')),
                                def.op->getLoc()));
  }
  Location file = FileLineColLoc::get(
      context, sourceMgr.getMemoryBuffer(main)->getBufferIdentifier(), 0, 0);
  return detail::constructContainerOpForParserIfNecessary<ModuleOp>(
      &block, context, file);
}
