//===- npy.cpp - NumPy .npy array files ------------------------------------===//

#include "linac/npy.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

namespace linac {

static constexpr char kMagic[] = "\x93NUMPY";
static constexpr size_t kMagicSize = 6;

size_t dtypeSize(NpyDType dtype) {
  switch (dtype) {
  case NpyDType::Float32:
  case NpyDType::Int32:
    return 4;
  case NpyDType::Float64:
  case NpyDType::Int64:
    return 8;
  }
  return 0;
}

const char *dtypeName(NpyDType dtype) {
  switch (dtype) {
  case NpyDType::Float32:
    return "float32";
  case NpyDType::Float64:
    return "float64";
  case NpyDType::Int32:
    return "int32";
  case NpyDType::Int64:
    return "int64";
  }
  return "?";
}

static const char *descrOf(NpyDType dtype) {
  switch (dtype) {
  case NpyDType::Float32:
    return "<f4";
  case NpyDType::Float64:
    return "<f8";
  case NpyDType::Int32:
    return "<i4";
  case NpyDType::Int64:
    return "<i8";
  }
  return "?";
}

int64_t NpyArray::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      throw NpyError("shape " + shapeString() +
                     " has no element count an int64 holds");
  return n;
}

/// The bytes `array`'s shape and dtype need.
static size_t dataSize(const NpyArray &array) {
  int64_t bytes;
  if (__builtin_mul_overflow(array.numElements(),
                             int64_t(dtypeSize(array.dtype)), &bytes))
    throw NpyError("shape " + array.shapeString() +
                   " has no byte count an int64 holds");
  return size_t(bytes);
}

/// Throws unless `array` holds the bytes its shape says.
static void checkBytes(const NpyArray &array) {
  if (array.bytes.size() != dataSize(array))
    throw NpyError("an array of shape " + array.shapeString() + " holds " +
                   std::to_string(array.bytes.size()) + " bytes, not " +
                   std::to_string(dataSize(array)));
}

std::string NpyArray::shapeString() const {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

template <typename T> static T load(const uint8_t *p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

std::vector<float> NpyArray::toFloat() const {
  checkBytes(*this);
  std::vector<float> out(numElements());
  const uint8_t *p = bytes.data();
  size_t step = dtypeSize(dtype);
  for (size_t i = 0; i < out.size(); ++i, p += step) {
    switch (dtype) {
    case NpyDType::Float32:
      out[i] = load<float>(p);
      break;
    case NpyDType::Float64:
      out[i] = static_cast<float>(load<double>(p));
      break;
    case NpyDType::Int32:
      out[i] = static_cast<float>(load<int32_t>(p));
      break;
    case NpyDType::Int64:
      out[i] = static_cast<float>(load<int64_t>(p));
      break;
    }
  }
  return out;
}

std::vector<int64_t> NpyArray::toInt64() const {
  if (dtype != NpyDType::Int32 && dtype != NpyDType::Int64)
    throw NpyError(std::string("expected an integer array, got ") +
                   dtypeName(dtype));
  checkBytes(*this);
  std::vector<int64_t> out(numElements());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = dtype == NpyDType::Int32 ? load<int32_t>(bytes.data() + 4 * i)
                                   : load<int64_t>(bytes.data() + 8 * i);
  return out;
}

static NpyDType parseDescr(const std::string &descr, const std::string &path) {
  if (descr == "<f4" || descr == "f4")
    return NpyDType::Float32;
  if (descr == "<f8" || descr == "f8")
    return NpyDType::Float64;
  if (descr == "<i4" || descr == "i4")
    return NpyDType::Int32;
  if (descr == "<i8" || descr == "i8")
    return NpyDType::Int64;
  throw NpyError(path + ": unsupported dtype '" + descr +
                 "' (expected float32, float64, int32 or int64, little-endian)");
}

NpyArray readNpy(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw NpyError(path + ": cannot open");
  return readNpy(in, path);
}

NpyArray readNpy(std::istream &in, const std::string &path) {
  char magic[kMagicSize + 2];
  if (!in.read(magic, sizeof(magic)) ||
      std::memcmp(magic, kMagic, kMagicSize) != 0)
    throw NpyError(path + ": not a .npy file");
  uint32_t headerLen = 0;
  int major = static_cast<unsigned char>(magic[kMagicSize]);
  if (major == 1) {
    uint8_t len[2];
    in.read(reinterpret_cast<char *>(len), 2);
    headerLen = len[0] | (len[1] << 8);
  } else if (major == 2 || major == 3) {
    uint8_t len[4];
    in.read(reinterpret_cast<char *>(len), 4);
    headerLen = len[0] | (len[1] << 8) | (len[2] << 16) | (uint32_t(len[3]) << 24);
  } else {
    throw NpyError(path + ": unsupported .npy version " + std::to_string(major));
  }
  if (!in || headerLen > (1u << 20))
    throw NpyError(path + ": truncated or oversized header");
  std::string header(headerLen, '\0');
  if (!in.read(header.data(), headerLen))
    throw NpyError(path + ": truncated header");

  static const std::regex descrRe(R"('descr'\s*:\s*'([^']*)')");
  static const std::regex orderRe(R"('fortran_order'\s*:\s*(True|False))");
  static const std::regex shapeRe(R"('shape'\s*:\s*\(([^)]*)\))");
  std::smatch m;
  NpyArray array;
  if (!std::regex_search(header, m, descrRe))
    throw NpyError(path + ": header has no 'descr'");
  array.dtype = parseDescr(m[1], path);
  if (!std::regex_search(header, m, orderRe))
    throw NpyError(path + ": header has no 'fortran_order'");
  if (m[1] == "True")
    throw NpyError(path + ": Fortran-order arrays are not supported; save in C order");
  if (!std::regex_search(header, m, shapeRe))
    throw NpyError(path + ": header has no 'shape'");
  std::stringstream dims(m[1]);
  std::string dim;
  while (std::getline(dims, dim, ',')) {
    if (dim.find_first_not_of(" \t") == std::string::npos)
      continue;
    long long value;
    try {
      size_t used = 0;
      value = std::stoll(dim, &used);
      if (dim.find_first_not_of(" \t", used) != std::string::npos)
        throw std::invalid_argument(dim);
    } catch (const std::logic_error &) {
      throw NpyError(path + ": malformed shape '" + std::string(m[1]) + "'");
    }
    if (value < 0)
      throw NpyError(path + ": negative dimension in shape '" +
                     std::string(m[1]) + "'");
    array.shape.push_back(value);
  }
  size_t size;
  try {
    size = dataSize(array);
  } catch (const NpyError &e) {
    throw NpyError(path + ": " + e.what());
  }
  // Read what the file holds, up to one byte more than the header says, in
  // chunks: a header may claim more than memory holds, and allocating that
  // much before reading would fail.
  constexpr size_t kChunk = size_t(1) << 24;
  size_t held = 0;
  while (held <= size) {
    size_t want = std::min(kChunk, size + 1 - held);
    array.bytes.resize(held + want);
    in.read(reinterpret_cast<char *>(array.bytes.data() + held), want);
    held += size_t(in.gcount());
    if (size_t(in.gcount()) < want)
      break;
  }
  array.bytes.resize(held);
  if (held < size)
    throw NpyError(path + ": file holds fewer elements than its shape " +
                   array.shapeString() + " needs");
  if (held > size)
    throw NpyError(path + ": file holds more bytes than its shape " +
                   array.shapeString() + " needs");
  return array;
}

void writeNpy(const std::string &path, const NpyArray &array) {
  checkBytes(array);
  std::string header = std::string("{'descr': '") + descrOf(array.dtype) +
                       "', 'fortran_order': False, 'shape': " +
                       array.shapeString() + ", }";
  // Pad so that the data starts on a 64-byte boundary, ending in '\n'.
  size_t total = kMagicSize + 2 + 2 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  if (header.size() > UINT16_MAX)
    throw NpyError(path + ": shape " + array.shapeString() +
                   " is too long for a version 1 header");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    throw NpyError(path + ": cannot write");
  uint16_t len = static_cast<uint16_t>(header.size());
  out.write(kMagic, kMagicSize);
  out.put(1);
  out.put(0);
  out.put(static_cast<char>(len & 0xff));
  out.put(static_cast<char>(len >> 8));
  out << header;
  out.write(reinterpret_cast<const char *>(array.bytes.data()), array.bytes.size());
  if (!out)
    throw NpyError(path + ": write failed");
}

NpyArray makeFloat32(std::vector<int64_t> shape, const std::vector<float> &values) {
  NpyArray array;
  array.dtype = NpyDType::Float32;
  array.shape = std::move(shape);
  if (static_cast<int64_t>(values.size()) != array.numElements())
    throw NpyError("makeFloat32: " + std::to_string(values.size()) +
                   " values for shape " + array.shapeString());
  array.bytes.resize(values.size() * sizeof(float));
  std::memcpy(array.bytes.data(), values.data(), array.bytes.size());
  return array;
}

} // namespace linac
