//===- bench_json.h - what both benches' JSON lines share -------*- C++ -*-===//

#ifndef LINAC_RUNTIME_BENCH_JSON_H
#define LINAC_RUNTIME_BENCH_JSON_H

#include "linac/bench.h"

#include <nlohmann/json.hpp>

namespace linac::bench {

/// The "shape" of a JSON line: B, T, H and the package's K and V.
inline nlohmann::json shapeJson(const Package &package, Shape shape) {
  return {{"B", shape.batch},
          {"T", shape.tokens},
          {"H", shape.heads},
          {"K", package.keyDim()},
          {"V", package.valueDim()}};
}

} // namespace linac::bench

#endif // LINAC_RUNTIME_BENCH_JSON_H
