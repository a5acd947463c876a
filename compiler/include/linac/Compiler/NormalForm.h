//===- NormalForm.h - a layer's normal form ---------------------*- C++ -*-===//
//
// docs/design.md, the normal form: every chunkable step reduces to
//   S_t = (I - k_t e_t^T) D_k,t S_{t-1} D_v,t + k_t u_t^T,  o_t = read(S_t, q_t)
// This analysis finds the SSA values that play each role in a layer's body,
// or says which op keeps the body out of that form.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_COMPILER_NORMALFORM_H
#define LINAC_COMPILER_NORMALFORM_H

#include "linac/Linac.h"
#include "linac/manifest.h"

#include "llvm/ADT/SmallVector.h"

#include <array>
#include <optional>
#include <string>

namespace linac {

using manifest::KeyDecay;
using manifest::Strength;

struct NormalForm {
  /// Log-gates whose sum is the key-side / value-side log-decay.
  llvm::SmallVector<mlir::Value> keyGates, valueGates;
  KeyDecay keyDecay = KeyDecay::None;
  bool valueDecay = false;

  mlir::Value key, value, query;
  /// Erase strength (e = strength (.) k) and write strength (u = strength v).
  mlir::Value eraseStrength, writeStrength;
  Strength erase = Strength::None;
  Strength write = Strength::None;

  ReadOp read;
  /// The read sees the state before the token's transitions.
  bool readBefore = false;
  bool normalizer = false;
  /// A decay or matrix gate is marked may_grow: its factors may exceed 1.
  bool mayGrow = false;

  /// The summary the normalize pass records and the manifest carries.
  manifest::NormalForm summary() const;

  /// False when the body is outside the form; `blocker` is the op that
  /// breaks it and `reason` says how.
  bool chunkable = true;
  mlir::Operation *blocker = nullptr;
  std::string reason;
};

/// Derives the normal form of a verified layer.
NormalForm deriveNormalForm(LayerOp layer);

/// True if `value` is the same for every token: it depends only on
/// parameters, the head index and constants.
bool isPerHead(LayerOp layer, mlir::Value value);

/// The inputs the output takes other than through the form's read, in
/// order: those a chunkwise epilogue loads itself. None where the form
/// found no read.
std::vector<int64_t> epilogueInputs(LayerOp layer, const NormalForm &form);

/// How a chunk operand vector is formed from the token's inputs: as an
/// input's row times a scalar of the token, so that a kernel can use the row
/// as loaded and apply the scalar to the products the operand enters.
/// `path` holds the ops from the row outward (l2norm, negf, and mulf or divf
/// by a broadcast scalar, `scalars` holding each one's scalar, null for the
/// others); the scalar follows from them and the row's squared norm.
/// Without `input`, `blocker` is the op that forms the operand some other
/// way and `reason` says how.
struct RowScaling {
  mlir::BlockArgument input;
  llvm::SmallVector<mlir::Operation *> path;
  llvm::SmallVector<mlir::Value> scalars;
  mlir::Operation *blocker = nullptr;
  std::string reason;
  explicit operator bool() const { return bool(input); }
};

/// The row scaling of `operand`, a vector of a layer's body.
RowScaling rowScalingOf(LayerOp layer, mlir::Value operand);

/// A layer whose query, key and written value are each an input's row times
/// a scalar of the token, its strengths and key log-gates scalars computed
/// from scalar inputs and parameters alone (no normaliser, no value-side
/// decay): the three inputs' indices in that order, and whether the
/// query's scalar, and the product of the key's and the written value's,
/// are 1 for every token.
struct RowScaledOperands {
  std::array<int64_t, 3> inputs;
  bool unitQuery, unitWrite;
};
/// The row-scaled operands of a layer; none for any other.
std::optional<RowScaledOperands> rowScaledOperands(LayerOp layer,
                                                   const NormalForm &form);

/// Elements one value of an input or parameter holds: a tensor's, or 1 for
/// a scalar.
int64_t elementsOf(mlir::Type type);

} // namespace linac

#endif // LINAC_COMPILER_NORMALFORM_H
