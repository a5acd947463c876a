//===- LinacDialect.td - linac dialect definition ----------*- tablegen -*-===//

#ifndef LINAC_DIALECT_TD
#define LINAC_DIALECT_TD

include "mlir/IR/OpBase.td"

def Linac_Dialect : Dialect {
  let name = "linac";
  let cppNamespace = "::linac";
  let summary = "Linear-attention layers written as one time step of a state transition";
  let description = [{
    A `linac.layer` describes one time step of a linear-attention layer: it
    takes the per-head state S (K x V) and one token's inputs, applies the
    primitive transitions (decay, matrix gate, erase, write) and reads the
    output. Gate math on the inputs is written with upstream `arith` and
    `math` ops on the dialect's vector types.

    Key-side and value-side vectors are builtin 1-D f32 tensors whose
    encoding names the side (`#linac.key`, `#linac.value`); a key-by-value
    per-token matrix uses `#linac.matrix`. Upstream elementwise ops accept
    them unchanged and, since the side is part of the type, cannot mix them.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect"];
}

class Linac_Op<string mnemonic, list<Trait> traits = []>
    : Op<Linac_Dialect, mnemonic, traits>;

#endif // LINAC_DIALECT_TD
