//===- Codegen.h - source and step programs from a planned layer -*- C++ -*-===//

#ifndef LINAC_COMPILER_CODEGEN_H
#define LINAC_COMPILER_CODEGEN_H

#include "linac/Linac.h"
#include "linac/manifest.h"

#include <string>

namespace linac {

/// C++ source for the CPU target: a `Layer` struct instantiating
/// templates/linac/cpu/layer.h and the exported `linac_cpu_forward`.
/// The layer must be normalised, and `plan` its plan for the cpu target.
/// Fails, with a diagnostic on the op, for an op the backend cannot lower.
/// Without `backward` the source leaves out the backward pass (and its
/// `linac_cpu_backward`).
mlir::FailureOr<std::string>
emitCpuSource(LayerOp layer, const manifest::Plan &plan, bool backward = true);

/// CUDA C++ for the sm_90a and sm_80 targets: a `Layer` struct instantiating
/// templates/linac/cuda/layer.h, with the chunkwise kernels (unless the plan
/// is recurrent) and the recurrent scan, one entry per activation dtype
/// (manifest::forwardKernels), the decode kernels and, with `backward`, the
/// backward kernel.
mlir::FailureOr<std::string>
emitCudaSource(LayerOp layer, const manifest::Plan &plan, bool backward = true);

/// The line that makes either target's source export `contractHash`, the
/// hash of its manifest's contract (templates/linac/contract.h).
std::string emitContract(llvm::StringRef contractHash);

/// The step as a JSON program (values, ops, yield) that the fp64 reference
/// interprets token by token, as compact JSON text.
std::string emitStepProgram(LayerOp layer);

/// The kind of a value: state, key, value, scalar or matrix.
manifest::Kind kindOf(mlir::Type type);

} // namespace linac

#endif // LINAC_COMPILER_CODEGEN_H
