//===- LinacOps.td - linac operations -----------------------*- tablegen -*-===//

#ifndef LINAC_OPS_TD
#define LINAC_OPS_TD

include "linac/LinacDialect.td"
include "linac/LinacTypes.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// The layer
//===----------------------------------------------------------------------===//

def Linac_LayerOp : Linac_Op<"layer", [
    Symbol, IsolatedFromAbove, SingleBlock,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "One time step of a linear-attention layer";
  let description = [{
    The body is one time step. Its block arguments are the incoming state,
    then the token's inputs, then the per-head parameters; it yields the new
    state and the output. Arguments keep the names written in the spec: the
    runtime uses them (q.npy, g.npy...).

    ```mlir
    linac.layer @name(%S : !linac.state<128x128>)
        inputs(%q : !key, %k : !key, %v : !value, %g : f32)
        params(%A_log : f32) {
      ...
      linac.yield %S2, %o : !linac.state<128x128>, !value
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrArrayAttr:$input_names,
                       StrArrayAttr:$param_names);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::BlockArgument getState() { return getBody().getArgument(0); }
    StateType getStateType() {
      return ::llvm::cast<StateType>(getState().getType());
    }
    ::mlir::Block::BlockArgListType getInputs() {
      return getBody().getArguments().slice(1, getInputNames().size());
    }
    ::mlir::Block::BlockArgListType getParams() {
      return getBody().getArguments().drop_front(1 + getInputNames().size());
    }
    /// The spec's name of a block argument other than the state.
    ::llvm::StringRef getArgumentName(::mlir::BlockArgument arg);
    /// True for block arguments that hold per-head parameters.
    bool isParam(::mlir::BlockArgument arg) {
      return arg.getArgNumber() > getInputNames().size();
    }
  }];
}

def Linac_YieldOp : Linac_Op<"yield", [Pure, Terminator, HasParent<"LayerOp">]> {
  let summary = "Ends the step: the new state and the token's output";
  let arguments = (ins Linac_StateType:$state, Linac_ValueVector:$output);
  let assemblyFormat = [{
    $state `,` $output attr-dict `:` qualified(type($state)) `,` type($output)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// State transitions
//===----------------------------------------------------------------------===//

class Linac_TransitionOp<string mnemonic, list<Trait> traits = []>
    : Linac_Op<mnemonic, !listconcat(traits, [Pure, HasParent<"LayerOp">,
        AllTypesMatch<["state", "result"]>])> {
  let results = (outs Linac_StateType:$result);
}

def Linac_DecayOp : Linac_TransitionOp<"decay", [AttrSizedOperandSegments]> {
  let summary = "S <- D_k S D_v, with gates given as log-decays (g <= 0)";
  let description = [{
    The key side takes a scalar log-gate (the same for every row) or a
    key-side vector; the value side takes a value-side vector. A scalar
    that depends on per-head values only (parameters, `linac.head_index`,
    constants) is a fixed per-head decay.

    Log-gates must be provably at most 0 (`-linac-normalize` checks their
    range). `may_grow` admits gates that may be positive, factors above 1
    that grow the state; such a layer runs as a recurrent scan, whose
    per-token factors stay exact.

    ```mlir
    %S1 = linac.decay %S key(%g : f32) : !linac.state<128x128>
    %S1 = linac.decay %S key(%gk : !key) value(%gv : !value) : !linac.state<128x128>
    %S1 = linac.decay %S key(%g : f32) may_grow : !linac.state<128x128>
    ```
  }];
  let arguments = (ins Linac_StateType:$state,
                       Optional<Linac_ScalarOrKeyVector>:$key_gate,
                       Optional<Linac_ValueVector>:$value_gate,
                       UnitAttr:$may_grow);
  let assemblyFormat = [{
    $state (`key` `(` $key_gate^ `:` type($key_gate) `)`)?
           (`value` `(` $value_gate^ `:` type($value_gate) `)`)?
           (`may_grow` $may_grow^)?
    attr-dict `:` qualified(type($state))
  }];
  let hasVerifier = 1;
}

def Linac_MatrixGateOp : Linac_TransitionOp<"matrix_gate"> {
  let summary = "S <- exp(G) (.) S with a per-token K x V log-gate G";
  let description = [{
    Not chunkable: a layer with a matrix gate runs as a recurrent scan.
    The log-gate must be provably at most 0 unless marked `may_grow`, as
    for `linac.decay`.
  }];
  let arguments = (ins Linac_StateType:$state, Linac_Matrix:$gate,
                       UnitAttr:$may_grow);
  let assemblyFormat = [{
    $state `,` $gate (`may_grow` $may_grow^)? attr-dict `:`
    qualified(type($state)) `,` type($gate)
  }];
  let hasVerifier = 1;
}

def Linac_EraseOp : Linac_TransitionOp<"erase"> {
  let summary = "S <- S - k (e^T S), e = strength * k";
  let description = [{
    The delta rule's erase. The strength is a per-token scalar (e = beta k)
    or a key-side vector (e = b (.) k).
  }];
  let arguments = (ins Linac_StateType:$state, Linac_KeyVector:$key,
                       Linac_ScalarOrKeyVector:$strength);
  let assemblyFormat = [{
    $state `,` $key `strength` `(` $strength `:` type($strength) `)`
    attr-dict `:` qualified(type($state)) `,` type($key)
  }];
  let hasVerifier = 1;
}

def Linac_WriteOp : Linac_TransitionOp<"write"> {
  let summary = "S <- S + k u^T, u = v, strength * v";
  let description = [{
    The strength, when given, is a per-token scalar (u = beta v) or a
    value-side vector (u = w (.) v).
  }];
  let arguments = (ins Linac_StateType:$state, Linac_KeyVector:$key,
                       Linac_ValueVector:$value,
                       Optional<Linac_ScalarOrValueVector>:$strength);
  let assemblyFormat = [{
    $state `,` $key `,` $value (`strength` `(` $strength^ `:` type($strength) `)`)?
    attr-dict `:` qualified(type($state)) `,` type($key) `,` type($value)
  }];
  let hasVerifier = 1;
}

def Linac_ReadOp : Linac_Op<"read", [Pure, HasParent<"LayerOp">]> {
  let summary = "o = scale S^T q, optionally divided by max(|scale n^T q|, 1)";
  let description = [{
    Without a `scale` attribute the scale is the runtime's `scale` argument,
    K^-1/2 by default. Reading before the write is written by placing the
    read before the transitions.
  }];
  let arguments = (ins Linac_StateType:$state, Linac_KeyVector:$query,
                       UnitAttr:$normalized, OptionalAttr<F64Attr>:$scale);
  let results = (outs Linac_ValueVector:$output);
  let assemblyFormat = [{
    $state `,` $query (`normalized` $normalized^)? (`scale` $scale^)?
    attr-dict `:` qualified(type($state)) `,` type($query) `->` type($output)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Helpers for gate and input math
//===----------------------------------------------------------------------===//

def Linac_HeadIndexOp : Linac_Op<"head_index", [Pure, HasParent<"LayerOp">]> {
  let summary = "The index h of the head this step runs on, as f32";
  let description = [{
    For per-head constants such as RetNet-style decays gamma_h.
  }];
  let results = (outs F32:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def Linac_L2NormOp : Linac_Op<"l2norm", [Pure, SameOperandsAndResultType]> {
  let summary = "x / sqrt(sum(x^2) + eps)";
  let arguments = (ins Linac_Vector:$input,
                       DefaultValuedAttr<F64Attr, "1.0e-6">:$eps);
  let results = (outs Linac_Vector:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Linac_SigmoidOp : Linac_Op<"sigmoid", [Pure, SameOperandsAndResultType]> {
  let summary = "Elementwise 1 / (1 + exp(-x))";
  let arguments = (ins Linac_Elementwise:$input);
  let results = (outs Linac_Elementwise:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Linac_SoftplusOp : Linac_Op<"softplus", [Pure, SameOperandsAndResultType]> {
  let summary = "Elementwise log(1 + exp(x)), computed without overflow";
  let arguments = (ins Linac_Elementwise:$input);
  let results = (outs Linac_Elementwise:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Linac_DotOp : Linac_Op<"dot", [Pure, SameTypeOperands]> {
  let summary = "sum(a (.) b) of two vectors of one side";
  let arguments = (ins Linac_Vector:$lhs, Linac_Vector:$rhs);
  let results = (outs F32:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs)";
}

def Linac_BroadcastOp : Linac_Op<"broadcast", [Pure]> {
  let summary = "A vector whose every element is the given scalar";
  let arguments = (ins F32:$input);
  let results = (outs Linac_Vector:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

#endif // LINAC_OPS_TD
