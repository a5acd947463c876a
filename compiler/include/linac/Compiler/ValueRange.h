//===- ValueRange.h - the range of a step's values --------------*- C++ -*-===//
//
// An interval analysis of a layer's step: for every value, bounds that hold
// for each of its elements on every token, whatever the inputs and
// parameters are. The normalize pass uses it to prove log-gates are at most
// zero, so that no decay factor exceeds 1.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_COMPILER_VALUERANGE_H
#define LINAC_COMPILER_VALUERANGE_H

#include "linac/Linac.h"

#include "llvm/ADT/DenseMap.h"

#include <limits>
#include <string>

namespace linac {

/// A closed interval of the extended reals; every element of the value lies
/// in it (or is NaN only where an operand already was).
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();

  static Range all() { return {}; }
  static Range point(double x) { return {x, x}; }
  std::string str() const;
};

/// The range of every value in `layer`'s body, the state's excepted.
llvm::DenseMap<mlir::Value, Range> computeRanges(LayerOp layer);

} // namespace linac

#endif // LINAC_COMPILER_VALUERANGE_H
