//===- harness.h - run a CPU package beside the fp64 reference -*- C++ -*-===//
//
// Compiles a spec with `linac compile` (resized to K x V) and runs a
// random problem (problem.h) through the package on the host.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_TESTS_CPU_HARNESS_H
#define LINAC_TESTS_CPU_HARNESS_H

#include "linac/package.h"
#include "problem.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace linac::harness {

/// What a test's package holds: the backward pass too, or the forward and
/// decode alone (`linac compile --no-backward`, which compiles in about 60%
/// of the time), for the tests that take no gradients.
enum class Passes { WithBackward, ForwardOnly };

/// Compiles `spec` at `dims` into `workDir` (once per process) and returns
/// the package's path.
std::filesystem::path compiledPath(const std::filesystem::path &spec, Dims dims,
                                   const std::filesystem::path &workDir,
                                   Passes passes = Passes::WithBackward);

/// compiledPath's package, opened once per process.
std::shared_ptr<Package> compiled(const std::filesystem::path &spec, Dims dims,
                                  const std::filesystem::path &workDir,
                                  Passes passes = Passes::WithBackward);

Outcome run(const Package &package, Dims dims, const Case &c);

/// The examples and the extra specs the CPU tests run, sorted.
std::vector<std::filesystem::path> testSpecs();

} // namespace linac::harness

#endif // LINAC_TESTS_CPU_HARNESS_H
