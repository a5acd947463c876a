//===- harness.h - run a CPU package beside the fp64 reference -*- C++ -*-===//
//
// Compiles a spec with `linac compile` (resized to K x V), fills its
// arguments with fresh random data, runs the package through the runtime
// and the same problem through the reference.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_TESTS_CPU_HARNESS_H
#define LINAC_TESTS_CPU_HARNESS_H

#include "linac/package.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace linac::harness {

struct Dims {
  int k, v;
};

/// Compiles `spec` at `dims` into `workDir` (once per process) and opens it.
std::shared_ptr<Package> compiled(const std::filesystem::path &spec, Dims dims,
                                  const std::filesystem::path &workDir);

/// Raw gate inputs: N(0, 1); uniform in [-20, 20] for the inputs decays
/// derive from; all zero.
enum class GateRange { Moderate, Strong, Zero };

struct Case {
  int64_t batch = 2, tokens = 65, heads = 2;
  int64_t keyHeads = 2;           ///< heads of q and k (grouped when < heads)
  std::vector<int64_t> cuSeqlens; ///< with batch 1
  bool initialState = false;
  bool zeroKeys = false;
  GateRange gates = GateRange::Moderate;
};

struct Outcome {
  double outputError = 0, stateError = 0; ///< relative to the reference
  bool finite = true;                     ///< every element written and finite
  double milliseconds = 0;                ///< the package's forward pass
};

Outcome run(const Package &package, Dims dims, const Case &c);

} // namespace linac::harness

#endif // LINAC_TESTS_CPU_HARNESS_H
