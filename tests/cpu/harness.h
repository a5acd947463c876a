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

/// Compiles `spec` at `dims` into `workDir` (once per process) and returns
/// the package's path.
std::filesystem::path compiledPath(const std::filesystem::path &spec, Dims dims,
                                   const std::filesystem::path &workDir);

/// compiledPath's package, opened once per process.
std::shared_ptr<Package> compiled(const std::filesystem::path &spec, Dims dims,
                                  const std::filesystem::path &workDir);

Outcome run(const Package &package, Dims dims, const Case &c);

/// The examples and the extra specs the CPU tests run, sorted.
std::vector<std::filesystem::path> testSpecs();

} // namespace linac::harness

#endif // LINAC_TESTS_CPU_HARNESS_H
