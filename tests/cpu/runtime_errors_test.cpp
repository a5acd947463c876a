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
    fs::path spec = fs::path(LINAC_EXAMPLES_DIR) / "gated_deltanet.mlir";
    packagePath = compiledPath(spec, {16, 16}, work);
    package = compiled(spec, {16, 16}, work);
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
    fs::copy(packagePath, copy);
    std::string manifest = package->manifest();
    std::ofstream(copy / "manifest.json") << edit(manifest);
    return copy;
  }

  fs::path work, packagePath;
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

TEST_F(RuntimeErrors, ThreadCountOutOfRange) {
  request.threads = -1;
  expectRejected("threads is -1; expected 0 (every core this process may "
                 "use) or 1 to 1024");
  request.threads = 1025;
  expectRejected("threads is 1025; expected 0");
  request.threads = 1024;
  EXPECT_NO_THROW(package->forward(request));
}

// A package compiled with --no-backward runs forward and refuses
// gradients, through C++ and the C API alike; its manifest says so, and a
// manifest that says so while listing backward kernels is refused.
TEST_F(RuntimeErrors, ForwardOnlyPackageRefusesGradients) {
  fs::path spec = fs::path(LINAC_EXAMPLES_DIR) / "gated_deltanet.mlir";
  fs::path path = compiledPath(spec, {16, 16}, work, Passes::ForwardOnly);
  std::shared_ptr<linac::Package> forwardOnly =
      compiled(spec, {16, 16}, work, Passes::ForwardOnly);
  EXPECT_FALSE(forwardOnly->hasBackward());
  EXPECT_TRUE(package->hasBackward());
  EXPECT_NO_THROW(forwardOnly->forward(request));
  const std::string message =
      "@gated_deltanet's package was compiled without its backward pass "
      "(linac compile --no-backward)";
  std::vector<float> dOutput(output.size(), 1.0f);
  linac::BackwardRequest backward;
  backward.forward = request;
  backward.dOutput = dOutput.data();
  try {
    forwardOnly->backward(backward);
    ADD_FAILURE() << "took a backward call without a backward pass";
  } catch (const linac::Error &e) {
    EXPECT_EQ(e.kind, linac::Error::Kind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(package->backward(backward));

  linac_package *handle = nullptr;
  ASSERT_EQ(linac_package_open(path.c_str(), &handle), LINAC_OK)
      << linac_last_error();
  std::vector<linac_host_tensor> tensors;
  for (const auto &[name, t] : request.tensors)
    tensors.push_back(
        {name.c_str(), t.data, int32_t(t.shape.size()), t.shape.data()});
  linac_backward_args args{};
  args.forward.tensors = tensors.data();
  args.forward.num_tensors = tensors.size();
  args.forward.output = output.data();
  args.d_output = dOutput.data();
  EXPECT_EQ(linac_backward_host(handle, &args), LINAC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(linac_last_error()).find(message), std::string::npos)
      << linac_last_error();
  linac_package_close(handle);

  std::string manifest = forwardOnly->manifest();
  EXPECT_NE(manifest.find("\"backward\": false"), std::string::npos);
  std::string listed = std::regex_replace(
      manifest, std::regex("\"backward_kernels\": \\[\\]"),
      "\"backward_kernels\": [{\"entry\": \"linac_cpu_backward\", "
      "\"file\": \"layer.so\", \"dtype\": \"float32\", \"family\": "
      "\"chunkwise\"}]");
  ASSERT_NE(listed, manifest);
  try {
    linac::Package::checkManifest(listed);
    ADD_FAILURE() << "accepted backward kernels in a package without its "
                     "backward";
  } catch (const linac::Error &e) {
    EXPECT_NE(std::string(e.what()).find("backward_kernels are listed for a "
                                         "package without its backward"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(RuntimeErrors, PackageForAnotherTarget) {
  fs::path path = editedPackage("other_target.linac", [](std::string m) {
    return std::regex_replace(m, std::regex("\"target\": \"cpu\""),
                              "\"target\": \"sm_70\"");
  });
  linac_package *handle = nullptr;
  EXPECT_EQ(linac_package_open(path.c_str(), &handle), LINAC_ERROR_PACKAGE);
  EXPECT_NE(std::string(linac_last_error())
                .find("target is \"sm_70\"; expected cpu, sm_90a or sm_80"),
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
  EXPECT_NE(std::string(linac_last_error()).find("not valid JSON"),
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
       {Case{"\"entry\": \"linac_cpu_decode\"",
             "\"entry\": \"decode_elsewhere\"",
             "manifest.json does not match its integrity.contract"},
        Case{"\"state_layout\": \"key_major\"",
             "\"state_layout\": \"value_major\"",
             "decode.state_layout is \"value_major\"; expected "
             "key_major"}}) {
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
    EXPECT_NE(std::string(e.what()).find("key_dim is 1e+300; expected an integer"),
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

TEST_F(RuntimeErrors, ShapesLargerThanMemory) {
  int64_t huge = int64_t(1) << 60;
  for (const char *name : {"q", "k", "v"})
    request.tensors[name] = tensor({1, huge, 2, 16});
  for (const char *name : {"g", "b"})
    request.tensors[name] = tensor({1, huge, 2});
  expectRejected("input 'q' of shape [1, 1152921504606846976, 2, 16] is "
                 "larger than memory can hold");
  for (const char *name : {"q", "k", "v"})
    request.tensors[name] = tensor({huge, huge, 2, 16});
  for (const char *name : {"g", "b"})
    request.tensors[name] = tensor({huge, huge, 2});
  expectRejected("is larger than memory can hold");
}

TEST_F(RuntimeErrors, DecodePoolLargerThanMemory) {
  linac::DecodeRequest decode;
  decode.tensors = request.tensors;
  std::vector<float> pool(2 * 16 * 16);
  decode.statePool = pool.data();
  decode.poolShape = {int64_t(1) << 60, 2, 16, 16};
  decode.stateIndices = {0};
  decode.output = output.data();
  try {
    package->decode(decode);
    ADD_FAILURE() << "accepted a pool of 2^60 slots";
  } catch (const linac::Error &e) {
    EXPECT_NE(
        std::string(e.what()).find("state pool of shape [1152921504606846976, "
                                   "2, 16, 16] is larger than memory can "
                                   "hold"),
        std::string::npos)
        << e.what();
  }
}

TEST_F(RuntimeErrors, CApiChecksEveryPointer) {
  const fs::path &path = packagePath;
  linac_package *handle = nullptr;
  ASSERT_EQ(linac_package_open(path.c_str(), &handle), LINAC_OK);
  auto expectInvalid = [](linac_status status, const std::string &message) {
    EXPECT_EQ(status, LINAC_ERROR_INVALID_ARGUMENT) << linac_last_error();
    EXPECT_NE(std::string(linac_last_error()).find(message), std::string::npos)
        << "expected: " << message << "\n got: " << linac_last_error();
  };

  linac_package *unused = nullptr;
  expectInvalid(linac_package_open(nullptr, &unused),
                "linac_package_open needs a path and an out pointer");
  expectInvalid(linac_package_open(path.c_str(), nullptr),
                "linac_package_open needs a path and an out pointer");
  EXPECT_EQ(linac_package_num_arguments(nullptr), 0u);
  EXPECT_STREQ(linac_package_target(nullptr), "");
  EXPECT_STREQ(linac_package_layer(nullptr), "");
  EXPECT_STREQ(linac_package_argument_kind(nullptr, 0), "");
  EXPECT_STREQ(linac_package_argument_kind(handle, 99), "");
  EXPECT_STREQ(linac_package_argument_kind(handle, 0), "key");
  EXPECT_STREQ(linac_package_layer(handle), "gated_deltanet");
  int64_t dims[4] = {};
  expectInvalid(linac_package_dims(nullptr, dims, dims + 1, dims + 2, dims + 3),
                "linac_package_dims needs a package and four out pointers");
  expectInvalid(linac_package_dims(handle, dims, nullptr, dims + 2, dims + 3),
                "linac_package_dims needs a package and four out pointers");
  ASSERT_EQ(linac_package_dims(handle, dims, dims + 1, dims + 2, dims + 3),
            LINAC_OK);
  EXPECT_EQ(dims[0], 16);
  EXPECT_EQ(dims[1], 16);
  EXPECT_EQ(dims[2], 16);
  EXPECT_EQ(dims[3], 8);
  const char *name = nullptr;
  expectInvalid(linac_package_argument(nullptr, 0, &name, &name, &name),
                "linac_package_argument needs a package");
  expectInvalid(linac_package_argument(handle, 99, &name, &name, &name),
                "no argument 99");
  // The out pointers are optional.
  EXPECT_EQ(linac_package_argument(handle, 0, nullptr, nullptr, nullptr),
            LINAC_OK);

  // The fixture's request, through the C API.
  std::vector<linac_host_tensor> tensors;
  for (const auto &[tensorName, t] : request.tensors)
    tensors.push_back(
        {tensorName.c_str(), t.data, int32_t(t.shape.size()), t.shape.data()});
  linac_forward_args forward{};
  forward.tensors = tensors.data();
  forward.num_tensors = tensors.size();
  forward.output = output.data();
  ASSERT_EQ(linac_forward_host(handle, &forward), LINAC_OK)
      << linac_last_error();
  expectInvalid(linac_forward_host(nullptr, &forward),
                "linac_forward_host needs a package and arguments");
  expectInvalid(linac_forward_host(handle, nullptr),
                "linac_forward_host needs a package and arguments");
  expectInvalid(linac_states_host(nullptr, &forward, nullptr),
                "linac_states_host needs a package and arguments");
  expectInvalid(linac_states_host(handle, nullptr, nullptr),
                "linac_states_host needs a package and arguments");
  linac_forward_args noTensors = forward;
  noTensors.tensors = nullptr;
  expectInvalid(linac_forward_host(handle, &noTensors),
                "no tensors for num_tensors 7");
  linac_forward_args noCuSeqlens = forward;
  noCuSeqlens.num_cu_seqlens = 2;
  expectInvalid(linac_forward_host(handle, &noCuSeqlens),
                "no cu_seqlens for num_cu_seqlens 2");
  int64_t offsets[] = {0, 8};
  linac_forward_args emptyCuSeqlens = forward;
  emptyCuSeqlens.cu_seqlens = offsets;
  expectInvalid(linac_forward_host(handle, &emptyCuSeqlens),
                "cu_seqlens has no entries; pass NULL");
  std::vector<linac_host_tensor> bad = tensors;
  bad[0].name = nullptr;
  forward.tensors = bad.data();
  expectInvalid(linac_forward_host(handle, &forward),
                "tensor 0 has no name or shape");
  bad = tensors;
  bad[1].shape = nullptr;
  forward.tensors = bad.data();
  expectInvalid(linac_forward_host(handle, &forward),
                "tensor 1 has no name or shape");
  bad = tensors;
  bad[2].ndim = 1000;
  forward.tensors = bad.data();
  expectInvalid(linac_forward_host(handle, &forward),
                "has 1000 dimensions; at most 8");
  bad = tensors;
  bad[1].name = bad[0].name;
  forward.tensors = bad.data();
  expectInvalid(linac_forward_host(handle, &forward),
                "tensor '" + std::string(bad[0].name) + "' is given twice");

  std::vector<float> pool(2 * 16 * 16);
  int64_t poolShape[] = {1, 2, 16, 16};
  int64_t indices[] = {0};
  linac_decode_args decode{};
  decode.tensors = tensors.data();
  decode.num_tensors = tensors.size();
  decode.state_pool = pool.data();
  decode.pool_shape = poolShape;
  decode.state_indices = indices;
  decode.num_sequences = 1;
  decode.output = output.data();
  ASSERT_EQ(linac_decode_host(handle, &decode), LINAC_OK) << linac_last_error();
  expectInvalid(linac_decode_host(nullptr, &decode),
                "linac_decode_host needs a package and arguments");
  expectInvalid(linac_decode_host(handle, nullptr),
                "linac_decode_host needs a package and arguments");
  linac_decode_args noPoolShape = decode;
  noPoolShape.pool_shape = nullptr;
  expectInvalid(linac_decode_host(handle, &noPoolShape),
                "linac_decode_host needs pool_shape and state_indices");
  linac_decode_args noIndices = decode;
  noIndices.state_indices = nullptr;
  expectInvalid(linac_decode_host(handle, &noIndices),
                "linac_decode_host needs pool_shape and state_indices");
  linac_decode_args noPool = decode;
  noPool.state_pool = nullptr;
  expectInvalid(linac_decode_host(handle, &noPool), "state pool has no data");
  linac_decode_args noOutput = decode;
  noOutput.output = nullptr;
  expectInvalid(linac_decode_host(handle, &noOutput), "no output buffer");
  linac_decode_args noDecodeTensors = decode;
  noDecodeTensors.tensors = nullptr;
  expectInvalid(linac_decode_host(handle, &noDecodeTensors),
                "no tensors for num_tensors 7");

  // The backward through the C API: every gradient written and finite, and
  // its arguments' errors.
  forward.tensors = tensors.data();
  const std::vector<float> dOutput(output.size(), 1.0f);
  std::map<std::string, std::vector<float>> gradientBuffers;
  std::vector<linac_host_gradient> gradients;
  for (const auto &[tensorName, t] : request.tensors) {
    size_t size = 1;
    for (int64_t extent : t.shape)
      size *= size_t(extent);
    std::vector<float> &buffer = gradientBuffers[tensorName];
    buffer.assign(size, std::nanf(""));
    gradients.push_back({tensorName.c_str(), buffer.data()});
  }
  linac_backward_args backward{};
  backward.forward = forward;
  backward.d_output = dOutput.data();
  backward.gradients = gradients.data();
  backward.num_gradients = gradients.size();
  ASSERT_EQ(linac_backward_host(handle, &backward), LINAC_OK)
      << linac_last_error();
  for (const auto &[tensorName, buffer] : gradientBuffers)
    EXPECT_TRUE(std::all_of(buffer.begin(), buffer.end(),
                            [](float x) { return std::isfinite(x); }))
        << "gradient of " << tensorName;
  expectInvalid(linac_backward_host(nullptr, &backward),
                "linac_backward_host needs a package and arguments");
  expectInvalid(linac_backward_host(handle, nullptr),
                "linac_backward_host needs a package and arguments");
  linac_backward_args noDOutput = backward;
  noDOutput.d_output = nullptr;
  expectInvalid(linac_backward_host(handle, &noDOutput),
                "no output gradient (dOutput)");
  linac_backward_args noGradients = backward;
  noGradients.gradients = nullptr;
  expectInvalid(linac_backward_host(handle, &noGradients),
                "num_gradients is 7 but gradients is NULL");
  std::vector<linac_host_gradient> badGradients = gradients;
  badGradients[0].name = nullptr;
  backward.gradients = badGradients.data();
  expectInvalid(linac_backward_host(handle, &backward),
                "gradient 0 has no name");
  badGradients = gradients;
  badGradients[1].name = badGradients[0].name;
  backward.gradients = badGradients.data();
  expectInvalid(linac_backward_host(handle, &backward),
                "two gradients of '" + std::string(badGradients[0].name) + "'");
  badGradients = gradients;
  badGradients[2].name = "nonexistent";
  backward.gradients = badGradients.data();
  expectInvalid(linac_backward_host(handle, &backward),
                "gradient of 'nonexistent', which is not an input or "
                "parameter of layer 'gated_deltanet'");
  badGradients = gradients;
  badGradients[3].data = nullptr;
  backward.gradients = badGradients.data();
  expectInvalid(linac_backward_host(handle, &backward),
                "gradient of '" + std::string(badGradients[3].name) +
                    "' has no data");

  linac_device_forward_args deviceForward{};
  expectInvalid(linac_forward_device(nullptr, &deviceForward),
                "linac_forward_device needs a package and arguments");
  expectInvalid(linac_forward_device(handle, nullptr),
                "linac_forward_device needs a package and arguments");
  linac_device_decode_args deviceDecode{};
  expectInvalid(linac_decode_device(nullptr, &deviceDecode),
                "linac_decode_device needs a package and arguments");
  expectInvalid(linac_decode_device(handle, nullptr),
                "linac_decode_device needs a package and arguments");

  std::vector<float> states(pool.size());
  for (bool from : {true, false}) {
    auto copy = [&](const linac_package *p, float *poolData, int64_t poolSlots,
                    int64_t heads, const int64_t *idx, size_t count,
                    float *stateData) {
      return from ? linac_states_from_pool(p, poolData, poolSlots, heads, idx,
                                           count, stateData)
                  : linac_states_to_pool(p, stateData, heads, idx, count,
                                         poolData, poolSlots);
    };
    std::string needs =
        std::string(from ? "linac_states_from_pool" : "linac_states_to_pool") +
        " needs a package, buffers and indices";
    EXPECT_EQ(copy(handle, pool.data(), 1, 2, indices, 1, states.data()),
              LINAC_OK)
        << linac_last_error();
    expectInvalid(copy(nullptr, pool.data(), 1, 2, indices, 1, states.data()),
                  needs);
    expectInvalid(copy(handle, nullptr, 1, 2, indices, 1, states.data()),
                  needs);
    expectInvalid(copy(handle, pool.data(), 1, 2, indices, 1, nullptr), needs);
    expectInvalid(copy(handle, pool.data(), 1, 2, nullptr, 1, states.data()),
                  needs);
    expectInvalid(copy(handle, pool.data(), 1, 0, indices, 1, states.data()),
                  "a state pool needs a positive head count, got 0");
    expectInvalid(copy(handle, pool.data(), int64_t(1) << 62, 2, indices, 1,
                       states.data()),
                  "state pool of shape [4611686018427387904, 2, 16, 16] is "
                  "larger than memory can hold");
  }
  linac_package_close(handle);
}

TEST_F(RuntimeErrors, CApiReportsBadShapes) {
  linac_package *handle = nullptr;
  const fs::path &path = packagePath;
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
