//===- runtime_errors_test.cpp - bad packages and bad arguments -----------===//
//
// Every rejected call names what is wrong and never runs the kernel.
//
//===----------------------------------------------------------------------===//

#include "harness.h"
#include "linac/runtime.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <list>
#include <regex>

namespace fs = std::filesystem;
using namespace linac::harness;

namespace {

class RuntimeErrors : public testing::Test {
protected:
  void SetUp() override {
    work = fs::path(testing::TempDir()) / "linac_runtime_errors";
    package = compiled(fs::path(LINAC_EXAMPLES_DIR) / "gated_deltanet.mlir",
                       {16, 16}, work);
    request.tensors = {{"q", tensor({1, 8, 2, 16})}, {"k", tensor({1, 8, 2, 16})},
                       {"v", tensor({1, 8, 2, 16})}, {"g", tensor({1, 8, 2})},
                       {"b", tensor({1, 8, 2})},     {"A_log", tensor({2})},
                       {"dt_bias", tensor({2})}};
    output.assign(8 * 2 * 16, 0.0f);
    request.output = output.data();
  }

  linac::HostTensor tensor(std::vector<int64_t> shape) {
    storage.emplace_back(4096, 0.5f);
    return {storage.back().data(), std::move(shape)};
  }

  void expectRejected(const std::string &message) {
    try {
      package->forward(request);
      ADD_FAILURE() << "accepted a bad request; expected: " << message;
    } catch (const linac::Error &e) {
      EXPECT_EQ(e.kind, linac::Error::Kind::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
          << e.what();
    }
  }

  /// A copy of the package with its manifest passed through `edit`.
  fs::path editedPackage(const std::string &name,
                         const std::function<std::string(std::string)> &edit) {
    fs::path copy = work / name;
    fs::remove_all(copy);
    fs::copy(work / "gated_deltanet_16x16.linac", copy);
    std::string manifest = package->manifest();
    std::ofstream(copy / "manifest.json") << edit(manifest);
    return copy;
  }

  fs::path work;
  std::shared_ptr<linac::Package> package;
  std::list<std::vector<float>> storage;
  linac::ForwardRequest request;
  std::vector<float> output;
};

TEST_F(RuntimeErrors, AcceptsAWellFormedRequest) {
  EXPECT_NO_THROW(package->forward(request));
}

TEST_F(RuntimeErrors, MissingInput) {
  request.tensors.erase("g");
  expectRejected("missing input 'g', shape [B, T, H]");
}

TEST_F(RuntimeErrors, UnknownTensor) {
  request.tensors["w"] = tensor({1, 8, 2});
  expectRejected("'w' is not an argument of layer @gated_deltanet");
}

TEST_F(RuntimeErrors, WrongFeatureDimension) {
  request.tensors["q"] = tensor({1, 8, 2, 32});
  expectRejected("input 'q' has shape [1, 8, 2, 32], expected [B, T, H, K]: "
                 "feature dimensions differ");
}

TEST_F(RuntimeErrors, WrongRank) {
  request.tensors["b"] = tensor({1, 8, 2, 1});
  expectRejected("input 'b' has shape [1, 8, 2, 1], expected [B, T, H]: wrong rank");
}

TEST_F(RuntimeErrors, MismatchedTime) {
  request.tensors["v"] = tensor({1, 9, 2, 16});
  expectRejected("batch and time differ");
}

TEST_F(RuntimeErrors, HeadsThatDoNotDivide) {
  request.tensors["v"] = tensor({1, 8, 3, 16});
  expectRejected("head counts must divide the largest");
}

TEST_F(RuntimeErrors, ParameterShape) {
  request.tensors["A_log"] = tensor({2, 16});
  expectRejected("param 'A_log' has shape [2, 16], expected [H]");
}

TEST_F(RuntimeErrors, NullData) {
  request.tensors["k"].data = nullptr;
  expectRejected("input 'k' has no data");
}

TEST_F(RuntimeErrors, NoHeads) {
  request.tensors["q"] = tensor({1, 8, 0, 16});
  expectRejected("input 'q' has shape [1, 8, 0, 16], expected [B, T, H, K]: no heads");
}

TEST_F(RuntimeErrors, NegativeTime) {
  for (const char *name : {"q", "k", "v"})
    request.tensors[name] = tensor({1, -8, 2, 16});
  for (const char *name : {"g", "b"})
    request.tensors[name] = tensor({1, -8, 2});
  expectRejected("negative batch or time");
}

TEST_F(RuntimeErrors, NonMonotoneCuSeqlens) {
  request.cuSeqlens = {0, 5, 3, 8};
  expectRejected("cu_seqlens must be non-decreasing, got [0, 5, 3, 8]");
}

TEST_F(RuntimeErrors, CuSeqlensNotCoveringTokens) {
  request.cuSeqlens = {0, 5};
  expectRejected("cu_seqlens must start at 0 and end at T = 8");
}

TEST_F(RuntimeErrors, NoOutputBuffer) {
  request.output = nullptr;
  expectRejected("no output buffer");
}

TEST_F(RuntimeErrors, PackageForAnotherTarget) {
  fs::path path = editedPackage("other_target.linac", [](std::string m) {
    return std::regex_replace(m, std::regex("\"target\": \"cpu\""),
                              "\"target\": \"sm_70\"");
  });
  linac_package *handle = nullptr;
  EXPECT_EQ(linac_package_open(path.c_str(), &handle), LINAC_ERROR_PACKAGE);
  EXPECT_NE(std::string(linac_last_error()).find("package is for target 'sm_70'"),
            std::string::npos)
      << linac_last_error();
}

TEST_F(RuntimeErrors, DeviceForwardOnACpuPackage) {
  linac::DeviceForwardRequest device;
  for (const auto &[name, t] : request.tensors)
    device.tensors[name] = {t.data, t.shape};
  device.output = output.data();
  try {
    package->forwardDevice(device);
    ADD_FAILURE() << "ran a cpu package on the device";
  } catch (const linac::Error &e) {
    EXPECT_EQ(e.kind, linac::Error::Kind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("package for target 'cpu' runs on "
                                         "the host"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(RuntimeErrors, CorruptManifest) {
  fs::path path = editedPackage("corrupt.linac", [](std::string m) {
    return m.substr(0, m.size() / 2);
  });
  linac_package *handle = nullptr;
  EXPECT_EQ(linac_package_open(path.c_str(), &handle), LINAC_ERROR_PACKAGE);
  EXPECT_NE(std::string(linac_last_error()).find("corrupt manifest"),
            std::string::npos)
      << linac_last_error();
}

TEST_F(RuntimeErrors, DecodeEntryOfTheManifest) {
  auto replaced = [](const std::string &from, const std::string &to) {
    return [from, to](std::string m) {
      size_t at = m.find(from);
      EXPECT_NE(at, std::string::npos) << from;
      return m.replace(at, from.size(), to);
    };
  };
  struct Case {
    std::string from, to, message;
  };
  for (const Case &c :
       {Case{"\"entry\": \"linac_cpu_decode\"", "\"entry\": \"decode_elsewhere\"",
             "kernel has no entry 'decode_elsewhere'"},
        Case{"\"state_layout\": \"key_major\"", "\"state_layout\": \"value_major\"",
             "decode state layout \"value_major\" is not key_major"}}) {
    fs::path path = editedPackage("decode.linac", replaced(c.from, c.to));
    linac_package *handle = nullptr;
    EXPECT_EQ(linac_package_open(path.c_str(), &handle), LINAC_ERROR_PACKAGE);
    EXPECT_NE(std::string(linac_last_error()).find(c.message), std::string::npos)
        << linac_last_error();
  }
}

// A number of the manifest that must be an integer and is not, as the
// manifest fuzzer found: converting 1e300 to an integer is undefined.
TEST_F(RuntimeErrors, ManifestIntegersAreIntegers) {
  std::string manifest = package->manifest();
  std::string from = "\"key_dim\": 16";
  size_t at = manifest.find(from);
  ASSERT_NE(at, std::string::npos);
  manifest.replace(at, from.size(), "\"key_dim\": 1e300");
  try {
    linac::Package::checkManifest(manifest);
    ADD_FAILURE() << "accepted a key_dim of 1e300";
  } catch (const linac::Error &e) {
    EXPECT_EQ(e.kind, linac::Error::Kind::Package);
    EXPECT_NE(std::string(e.what()).find("'key_dim' is 1e+300, not an integer"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(RuntimeErrors, NotAPackage) {
  linac_package *handle = nullptr;
  EXPECT_EQ(linac_package_open(work.c_str(), &handle), LINAC_ERROR_PACKAGE);
  EXPECT_NE(std::string(linac_last_error()).find("no manifest.json"),
            std::string::npos);
}

TEST_F(RuntimeErrors, CApiReportsBadShapes) {
  linac_package *handle = nullptr;
  fs::path path = work / "gated_deltanet_16x16.linac";
  ASSERT_EQ(linac_package_open(path.c_str(), &handle), LINAC_OK);
  int64_t shape[] = {1, 8, 2, 15};
  linac_host_tensor q{"q", storage.front().data(), 4, shape};
  linac_forward_args args{};
  args.tensors = &q;
  args.num_tensors = 1;
  args.output = output.data();
  EXPECT_EQ(linac_forward_host(handle, &args), LINAC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(linac_last_error()).find("input 'q' has shape [1, 8, 2, 15]"),
            std::string::npos)
      << linac_last_error();
  linac_package_close(handle);
}

} // namespace
