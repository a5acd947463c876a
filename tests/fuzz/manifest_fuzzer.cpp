//===- manifest_fuzzer.cpp - libFuzzer target: the manifest reader --------===//
//
// Checks the input as a package's manifest.json, as Package::open does
// before it loads the kernel file: a bad manifest must be a package error,
// never a crash.
//
//===----------------------------------------------------------------------===//

#include "linac/package.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    linac::Package::checkManifest(
        std::string(reinterpret_cast<const char *>(data), size));
  } catch (const linac::Error &) {
  }
  return 0;
}
