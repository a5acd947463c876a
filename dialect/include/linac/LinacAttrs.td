//===- LinacAttrs.td - side encodings of linac vectors -----*- tablegen -*-===//

#ifndef LINAC_ATTRS_TD
#define LINAC_ATTRS_TD

include "linac/LinacDialect.td"
include "mlir/IR/AttrTypeBase.td"

class Linac_Attr<string name, string attrMnemonic>
    : AttrDef<Linac_Dialect, name> {
  let mnemonic = attrMnemonic;
}

def Linac_KeySideAttr : Linac_Attr<"KeySide", "key"> {
  let summary = "Encoding of a key-side vector (length K)";
}

def Linac_ValueSideAttr : Linac_Attr<"ValueSide", "value"> {
  let summary = "Encoding of a value-side vector (length V)";
}

def Linac_MatrixSideAttr : Linac_Attr<"MatrixSide", "matrix"> {
  let summary = "Encoding of a per-token K x V matrix (a full matrix gate)";
}

#endif // LINAC_ATTRS_TD
