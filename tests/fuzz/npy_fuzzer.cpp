//===- npy_fuzzer.cpp - libFuzzer target: the .npy reader -----------------===//
//
// Reads the input as a .npy file and converts what it holds: a malformed
// file must be an NpyError, never a crash or an unbounded allocation.
//
//===----------------------------------------------------------------------===//

#include "linac/npy.h"

#include <cstddef>
#include <cstdint>
#include <sstream>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  std::istringstream in(bytes);
  try {
    linac::NpyArray array = linac::readNpy(in, "input.npy");
    array.shapeString();
    array.toFloat();
    if (array.dtype == linac::NpyDType::Int32 ||
        array.dtype == linac::NpyDType::Int64)
      array.toInt64();
  } catch (const linac::NpyError &) {
  }
  return 0;
}
