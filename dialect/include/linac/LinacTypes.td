//===- LinacTypes.td - linac types --------------------------*- tablegen -*-===//

#ifndef LINAC_TYPES_TD
#define LINAC_TYPES_TD

include "linac/LinacDialect.td"
include "mlir/IR/AttrTypeBase.td"

def Linac_StateType : TypeDef<Linac_Dialect, "State"> {
  let mnemonic = "state";
  let summary = "Per-head recurrent state S of K x V fp32 values";
  let description = [{
    `!linac.state<128x128>` is a state with K = 128 and V = 128.
    `!linac.state<128x128, normalized>` also carries a normaliser n of
    length K under the same transition (a column of ones appended to V
    before the write strength applies).
  }];
  let parameters = (ins "unsigned":$keyDim, "unsigned":$valueDim,
                        "bool":$normalized);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Linac_Scalar : Type<CPred<"$_self.isF32()">, "per-token scalar (f32)">;

def Linac_KeyVector : Type<CPred<"::linac::isKeyVector($_self)">,
    "key-side vector (tensor<Kxf32, #linac.key>)">;
def Linac_ValueVector : Type<CPred<"::linac::isValueVector($_self)">,
    "value-side vector (tensor<Vxf32, #linac.value>)">;
def Linac_Matrix : Type<CPred<"::linac::isMatrixGate($_self)">,
    "key-by-value matrix (tensor<KxVxf32, #linac.matrix>)">;
def Linac_Vector : AnyTypeOf<[Linac_KeyVector, Linac_ValueVector]>;
def Linac_ScalarOrKeyVector : AnyTypeOf<[Linac_Scalar, Linac_KeyVector]>;
def Linac_ScalarOrValueVector : AnyTypeOf<[Linac_Scalar, Linac_ValueVector]>;
def Linac_Elementwise : AnyTypeOf<[Linac_Scalar, Linac_KeyVector,
                                   Linac_ValueVector, Linac_Matrix]>;

#endif // LINAC_TYPES_TD
