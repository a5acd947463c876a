//===- Passes.td - linac compiler passes -------------------*- tablegen -*-===//

#ifndef LINAC_COMPILER_PASSES_TD
#define LINAC_COMPILER_PASSES_TD

include "mlir/Pass/PassBase.td"

def LinacNormalize : Pass<"linac-normalize", "::mlir::ModuleOp"> {
  let summary = "Derive each layer's normal form";
  let description = [{
    Records on every `linac.layer` a `linac.normal_form` dictionary: the
    key-side decay (none, fixed, scalar, vector), the value-side decay, the
    erase and write strengths (none, scalar, vector), where the read sits
    (after or before the transitions), whether a normaliser is carried, and
    whether the body is chunkable. A body outside the form gets a remark
    naming the op that breaks it and will run as a recurrent scan; with
    `require-chunkable` that is an error instead.
  }];
  let options = [
    Option<"requireChunkable", "require-chunkable", "bool", "false",
           "Reject bodies outside the normal form instead of falling back "
           "to the recurrent scan">,
  ];
}

def LinacTestRowScaling : Pass<"linac-test-row-scaling", "::mlir::ModuleOp"> {
  let summary = "Remark how each chunk operand is formed from an input row";
  let description = [{
    A test of the row-scaling analysis: for every chunkable layer, a remark
    on the query, the key and the written value saying which input's row
    each scales and through which ops, or, at the op that prevents it, why
    the operand is formed some other way.
  }];
}

def LinacPlan : Pass<"linac-plan", "::mlir::ModuleOp"> {
  let summary = "Choose the algorithm, chunking, numerics and launch shape";
  let description = [{
    Records on every normalised `linac.layer` a `linac.plan` dictionary: the
    algorithm family (`chunkwise`, `delta_chunkwise`, `recurrent`), the chunk
    size, the numerics of the gates (`none`, `scalar_tile` when a scalar
    log-gate difference is formed on the whole C x C tile, `pairwise` when
    each key channel's difference is exponentiated per pair, `subchunk`
    with its size on GPUs), and the target's tiles and launch shape.
  }];
  let options = [
    Option<"target", "target", "std::string", "\"cpu\"",
           "Target to plan for: cpu, sm_90a or sm_80">,
    Option<"decodeWarps", "decode-warps", "int64_t", "16",
           "Warps of a GPU decode block that take one state: 16 (the "
           "default) or 8; a strip takes decode-warps / decode-parts">,
    Option<"decodeParts", "decode-parts", "int64_t", "4",
           "Strips of value columns a GPU decode item holds of a state: 1, "
           "2 or 4 (the default); states with a normaliser, a full-matrix "
           "gate or a sum over the value axis, or strips a tensor map "
           "cannot move, keep 1">,
    Option<"chunkKernel", "chunk-kernel", "std::string", "\"auto\"",
           "A GPU's chunkwise kernels: auto (the default: lockstep, and the "
           "phased kernels for the shapes they win at where the layer has "
           "them), lockstep, pipelined (an erase under no gate or a scalar "
           "one), phased (always; an erase under any key-side gate or "
           "none), or warpgroup (wgmma; a scalar gate or none, keys of 64 or "
           "128 and values of 128, an erase or not; with an erase the phased "
           "kernels stay beside it for segments); the last three on "
           "sm_90a">,
  ];
  let dependentDialects = ["::linac::LinacDialect"];
}

#endif // LINAC_COMPILER_PASSES_TD
