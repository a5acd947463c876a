//===- npy.h - NumPy .npy array files ---------------------------*- C++ -*-===//
//
// Reads and writes the .npy format (version 1 and 2 headers, C order) for
// the dtypes linac exchanges: float32, float64, int32 and int64.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_NPY_H
#define LINAC_NPY_H

#include <cstdint>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

namespace linac {

enum class NpyDType { Float32, Float64, Int32, Int64 };

/// Bytes per element of `dtype`.
size_t dtypeSize(NpyDType dtype);
/// The NumPy name of `dtype` ("float32", ...).
const char *dtypeName(NpyDType dtype);

/// An n-dimensional array in C order with its raw little-endian bytes.
struct NpyArray {
  NpyDType dtype = NpyDType::Float32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  /// Throws NpyError for a shape whose count overflows int64_t.
  int64_t numElements() const;
  /// The shape as "(2, 3)".
  std::string shapeString() const;
  /// The elements converted to float (float and integer dtypes alike);
  /// this and toInt64 throw unless `bytes` holds exactly the shape's.
  std::vector<float> toFloat() const;
  /// The elements converted to int64; throws for float dtypes.
  std::vector<int64_t> toInt64() const;
};

/// Thrown for unreadable, malformed or unsupported files.
struct NpyError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

NpyArray readNpy(const std::string &path);
/// Reads an array from `in`; `path` names it in errors.
NpyArray readNpy(std::istream &in, const std::string &path);
void writeNpy(const std::string &path, const NpyArray &array);
/// A float32 array of `shape` holding `values`.
NpyArray makeFloat32(std::vector<int64_t> shape, const std::vector<float> &values);

} // namespace linac

#endif // LINAC_NPY_H
