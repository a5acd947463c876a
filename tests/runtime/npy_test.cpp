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
