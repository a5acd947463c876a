//===- Codegen.h - source and step programs from a planned layer -*- C++ -*-===//

#ifndef LINAC_COMPILER_CODEGEN_H
#define LINAC_COMPILER_CODEGEN_H

#include "linac/Linac.h"

#include "llvm/Support/JSON.h"

#include <string>

namespace linac {

/// C++ source for the CPU target: a `Layer` struct instantiating
/// templates/linac/cpu/layer.h and the exported `linac_cpu_forward`.
/// The layer must carry the normalize and plan passes' attributes. Fails,
/// with a diagnostic on the op, for an op the backend cannot lower.
mlir::FailureOr<std::string> emitCpuSource(LayerOp layer);

/// CUDA C++ for the sm_90a and sm_80 targets: a `Layer` struct instantiating
/// templates/linac/cuda/layer.h, with the chunkwise kernels (unless the plan
/// is recurrent) and the recurrent scan, one entry per activation dtype.
mlir::FailureOr<std::string> emitCudaSource(LayerOp layer);

/// The line that makes either target's source export `contractHash`, the
/// hash of its manifest's contract (templates/linac/contract.h).
std::string emitContract(llvm::StringRef contractHash);

/// The step as a JSON program (values, ops, yield) that the fp64 reference
/// interprets token by token.
llvm::json::Object emitStepProgram(LayerOp layer);

/// Whether a GPU package's forward kernel for activations of `dtype`
/// (float32, bfloat16 or float16) is the chunkwise one; else the scan.
bool chunkwiseFor(LayerOp layer, llvm::StringRef dtype);

/// The kind of a value: state, key, value, scalar or matrix.
llvm::StringRef kindOf(mlir::Type type);

} // namespace linac

#endif // LINAC_COMPILER_CODEGEN_H
