//===- LayerAttributes.h - what the passes record on a layer ----*- C++ -*-===//
//
// -linac-normalize records a layer's normal form and -linac-plan its plan as
// dictionary attributes, so that linac-opt prints them and later passes and
// tools read them back. These are the only functions that touch those
// attributes by key: everything else works on the typed structs of the
// manifest's schema (linac/manifest.h), whose field lists they walk.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_COMPILER_LAYERATTRIBUTES_H
#define LINAC_COMPILER_LAYERATTRIBUTES_H

#include "linac/Linac.h"
#include "linac/manifest.h"

namespace linac {

/// Names of the attributes the passes attach to a layer.
inline constexpr llvm::StringLiteral kNormalFormAttr = "linac.normal_form";
inline constexpr llvm::StringLiteral kPlanAttr = "linac.plan";

void setNormalForm(LayerOp layer, const manifest::NormalForm &form);
void setPlan(LayerOp layer, const manifest::Plan &plan);

/// The recorded normal form or plan; fails, with an error on the layer that
/// names the attribute and the field, where it is missing or malformed.
mlir::FailureOr<manifest::NormalForm> getNormalForm(LayerOp layer);
mlir::FailureOr<manifest::Plan> getPlan(LayerOp layer);

} // namespace linac

#endif // LINAC_COMPILER_LAYERATTRIBUTES_H
