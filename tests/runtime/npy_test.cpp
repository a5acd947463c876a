//===- npy_test.cpp - .npy reading and writing ----------------------------===//

#include "linac/npy.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>

namespace {

std::string tempPath(const std::string &name) {
  return testing::TempDir() + "linac_npy_" + name;
}

TEST(Npy, RoundTripsRandomFloat32) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  std::vector<float> values(2 * 3 * 5);
  for (float &v : values)
    v = normal(rng);
  std::string path = tempPath("f32.npy");
  linac::writeNpy(path, linac::makeFloat32({2, 3, 5}, values));
  linac::NpyArray back = linac::readNpy(path);
  EXPECT_EQ(back.dtype, linac::NpyDType::Float32);
  EXPECT_EQ(back.shape, (std::vector<int64_t>{2, 3, 5}));
  EXPECT_EQ(back.toFloat(), values);
  std::remove(path.c_str());
}

TEST(Npy, ReadsNumpyWrittenInt64) {
  // The bytes NumPy 1.x writes for np.array([0, 3, 7], dtype=np.int64).
  std::string header =
      "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string path = tempPath("i64.npy");
  {
    std::ofstream out(path, std::ios::binary);
    out.write("\x93NUMPY\x01\x00", 8);
    out.put(static_cast<char>(header.size()));
    out.put(0);
    out << header;
    for (int64_t v : {0, 3, 7})
      out.write(reinterpret_cast<const char *>(&v), 8);
  }
  linac::NpyArray array = linac::readNpy(path);
  EXPECT_EQ(array.shapeString(), "(3,)");
  EXPECT_EQ(array.toInt64(), (std::vector<int64_t>{0, 3, 7}));
  std::remove(path.c_str());
}

TEST(Npy, RejectsTruncatedData) {
  std::string path = tempPath("short.npy");
  linac::writeNpy(path, linac::makeFloat32({4}, {1, 2, 3, 4}));
  {
    std::ifstream in(path, std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), {});
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << all.substr(0, all.size() - 4);
  }
  EXPECT_THROW(
      {
        try {
          linac::readNpy(path);
        } catch (const linac::NpyError &e) {
          EXPECT_NE(std::string(e.what()).find("fewer elements"), std::string::npos);
          throw;
        }
      },
      linac::NpyError);
  std::remove(path.c_str());
}

/// A float32 .npy file whose header says `shape` (as NumPy writes it, e.g.
/// "(3,)"), followed by `data`.
std::string writeRaw(const std::string &name, const std::string &shape,
                     const std::string &data) {
  std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string path = tempPath(name);
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(static_cast<char>(header.size() & 0xff));
  out.put(static_cast<char>(header.size() >> 8));
  out << header << data;
  return path;
}

/// The message readNpy throws for `path`.
std::string readError(const std::string &path) {
  try {
    linac::readNpy(path);
  } catch (const linac::NpyError &e) {
    return e.what();
  }
  ADD_FAILURE() << "read " << path;
  return "";
}

TEST(Npy, RejectsShapesPastInt64) {
  // 2^32 * 2^32 elements, and 2^61 elements of 4 bytes: neither count of
  // bytes fits, and neither may reach an allocation.
  for (const char *shape :
       {"(4294967296, 4294967296)", "(2305843009213693952,)",
        "(3037000500, 3037000500, 3037000500)"}) {
    std::string path = writeRaw("huge.npy", shape, "");
    EXPECT_NE(readError(path).find("count an int64 holds"), std::string::npos)
        << readError(path);
  }
  std::string path = writeRaw("huge.npy", "(99999999999999999999,)", "");
  EXPECT_NE(readError(path).find("malformed shape"), std::string::npos);
  std::remove(path.c_str());
}

TEST(Npy, RejectsAShapeLargerThanItsData) {
  // 4 TiB by the header, 8 bytes in the file: an error, not an allocation.
  std::string path = writeRaw("big.npy", "(1099511627776,)", "12345678");
  EXPECT_NE(readError(path).find("fewer elements than its shape "
                                 "(1099511627776,) needs"),
            std::string::npos)
      << readError(path);
  std::remove(path.c_str());
}

TEST(Npy, RejectsNegativeAndMalformedDimensions) {
  std::string path = writeRaw("negative.npy", "(2, -3)", "");
  EXPECT_NE(readError(path).find("negative dimension"), std::string::npos)
      << readError(path);
  path = writeRaw("malformed.npy", "(2, 3x)", std::string(24, '\0'));
  EXPECT_NE(readError(path).find("malformed shape"), std::string::npos)
      << readError(path);
  std::remove(path.c_str());
}

TEST(Npy, RejectsDataBeyondTheShape) {
  std::string path = writeRaw("long.npy", "(2,)", std::string(12, '\0'));
  EXPECT_NE(readError(path).find("more bytes than its shape (2,) needs"),
            std::string::npos)
      << readError(path);
  std::remove(path.c_str());
}

TEST(Npy, ArraysMustHoldTheirShapesBytes) {
  linac::NpyArray array = linac::makeFloat32({2}, {1, 2});
  array.bytes.pop_back();
  EXPECT_THROW(array.toFloat(), linac::NpyError);
  EXPECT_THROW(linac::writeNpy(tempPath("short_array.npy"), array),
               linac::NpyError);
  array.shape = {int64_t(1) << 40, int64_t(1) << 40};
  EXPECT_THROW(array.numElements(), linac::NpyError);
}

TEST(Npy, RejectsNonNpyAndMissingFiles) {
  std::string path = tempPath("text.npy");
  std::ofstream(path) << "hello";
  EXPECT_THROW(linac::readNpy(path), linac::NpyError);
  EXPECT_THROW(linac::readNpy(tempPath("does_not_exist.npy")), linac::NpyError);
  std::remove(path.c_str());
}

TEST(Npy, FloatArrayIsNotAnIndexArray) {
  EXPECT_THROW(linac::makeFloat32({1}, {1.0f}).toInt64(), linac::NpyError);
}

} // namespace
