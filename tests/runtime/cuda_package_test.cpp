//===- cuda_package_test.cpp - CUDA packages without a GPU ----------------===//
//
// Opens a hand-written sm_90a package (a manifest and a stand-in cubin,
// sealed as the compiler seals them) and checks everything the runtime
// decides before it needs a driver: integrity, targets, dtypes, shapes and
// pointers, and the error when there is no driver.
//
//===----------------------------------------------------------------------===//

#include "linac/contract.h"
#include "linac/cuda/abi.h"
#include "linac/integrity.h"
#include "linac/package.h"
#include "linac/runtime.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <functional>

namespace fs = std::filesystem;

namespace {

constexpr int64_t kDim = 16;

namespace schema = linac::manifest;

schema::Kernel kernel(const char *entry, linac::DType dtype,
                      schema::Family family, schema::KernelGroup group,
                      int64_t blockThreads, int64_t sharedMemory) {
  return {entry,        schema::cudaKernelFile(schema::cudaKernelPart(group)),
          dtype,        family,
          blockThreads, sharedMemory};
}

/// A layer with key, value and scalar inputs and a per-head parameter, as
/// the compiler would describe it for sm_90a, without its integrity.
nlohmann::json cudaManifest() {
  using linac::DType;
  using schema::Family, schema::Kind, schema::Role;
  schema::Manifest manifest;
  manifest.target = schema::Target::Sm90a;
  manifest.abiVersion = LINAC_CUDA_ABI_VERSION;
  manifest.layer = "toy";
  manifest.keyDim = manifest.valueDim = kDim;
  manifest.plan.target = manifest.target;
  manifest.plan.family = Family::Chunkwise;
  manifest.arguments = {{"q", Role::Input, Kind::Key},
                        {"k", Role::Input, Kind::Key},
                        {"v", Role::Input, Kind::Value},
                        {"g", Role::Input, Kind::Scalar},
                        {"A_log", Role::Param, Kind::Scalar}};
  using Group = schema::KernelGroup;
  manifest.kernels = {kernel("linac_chunk_bfloat16", DType::BFloat16,
                             Family::Chunkwise, Group::Chunk, 256, 190464),
                      kernel("linac_scan_bfloat16", DType::BFloat16,
                             Family::Recurrent, Group::Scan, 128, 0),
                      kernel("linac_scan_float32", DType::Float32,
                             Family::Recurrent, Group::Scan, 160, 0)};
  manifest.backwardKernels = {kernel("linac_scan_backward", DType::Float32,
                                     Family::Recurrent, Group::Backward, 128,
                                     0)};
  manifest.decode.parts = 2;
  manifest.decode.staging = schema::DecodeStaging::Tensor;
  manifest.decode.kernels = {kernel("linac_decode_float32", DType::Float32,
                                    Family::Recurrent, Group::Decode, 128, 0)};
  manifest.step = "{}";
  return nlohmann::json::parse(schema::write(manifest));
}

class CudaPackage : public testing::Test {
protected:
  void SetUp() override {
    request.tensors = {{"q", tensor({1, 8, 2, kDim})},
                       {"k", tensor({1, 8, 2, kDim})},
                       {"v", tensor({1, 8, 2, kDim})},
                       {"g", tensor({1, 8, 2})},
                       {"A_log", tensor({2})}};
    request.output = storage;
    package = linac::Package::open(write(cudaManifest()).string());
  }

  /// A package directory (the test's name and `suffix`) holding `manifest`
  /// and a stand-in cubin for each kernel file it names, each carrying the
  /// manifest's contract, the manifest sealed with their hashes.
  fs::path write(nlohmann::json manifest, const std::string &suffix = "") {
    fs::path path =
        fs::path(testing::TempDir()) /
        (std::string("linac_cuda_") +
         testing::UnitTest::GetInstance()->current_test_info()->name() +
         suffix + ".linac");
    fs::create_directories(path);
    std::string contract = linac::contractHash(manifest.dump());
    std::string cubin = std::string("\x7f"
                                    "ELF stand-in ") +
                        LINAC_CONTRACT_PREFIX + contract;
    nlohmann::json files = nlohmann::json::object();
    std::function<void(const nlohmann::json &)> findFiles =
        [&](const nlohmann::json &node) {
          if (node.is_object() && node.contains("file"))
            files[node["file"].get<std::string>()] = {
                {"bytes", cubin.size()}, {"sha256", linac::sha256Hex(cubin)}};
          if (node.is_structured())
            for (const nlohmann::json &child : node)
              findFiles(child);
        };
    findFiles(manifest);
    manifest["integrity"] = {{"contract", contract}, {"files", files}};
    std::ofstream(path / "manifest.json") << manifest.dump(1);
    for (const auto &file : files.items())
      std::ofstream(path / file.key(), std::ios::binary) << cubin;
    return path;
  }

  /// The message of the package error opening `path` throws.
  static std::string openRejection(const fs::path &path) {
    return rejection([&] { linac::Package::open(path.string()); },
                     linac::Error::Kind::Package);
  }

  /// A tensor whose (aligned, host) data the checks under test never read.
  linac::DeviceTensor tensor(std::vector<int64_t> shape) {
    return {storage, std::move(shape)};
  }

  /// The same tensors as a host request, to compare the two checks.
  linac::ForwardRequest hostRequest() const {
    linac::ForwardRequest host;
    for (const auto &[name, t] : request.tensors)
      host.tensors[name] = {static_cast<const float *>(t.data), t.shape};
    host.cuSeqlens = request.cuSeqlens;
    host.scale = request.scale;
    return host;
  }

  /// The message of the error `call` throws, which must be of `kind`.
  static std::string rejection(const std::function<void()> &call,
                               linac::Error::Kind kind) {
    try {
      call();
    } catch (const linac::Error &e) {
      EXPECT_EQ(e.kind, kind) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "accepted";
    return "";
  }

  std::string deviceRejection() {
    return rejection([&] { package->forwardDevice(request); },
                     linac::Error::Kind::InvalidArgument);
  }

  alignas(16) float storage[64] = {};
  std::unique_ptr<linac::Package> package;
  linac::DeviceForwardRequest request;
};

TEST_F(CudaPackage, OpensAndReportsItsTarget) {
  EXPECT_EQ(package->target(), "sm_90a");
  EXPECT_EQ(package->layer(), "toy");
  linac_package *handle = nullptr;
  std::string path = write(cudaManifest()).string();
  ASSERT_EQ(linac_package_open(path.c_str(), &handle), LINAC_OK)
      << linac_last_error();
  EXPECT_STREQ(linac_package_target(handle), "sm_90a");
  linac_package_close(handle);
}

TEST_F(CudaPackage, OpensSm80) {
  nlohmann::json manifest = cudaManifest();
  manifest["target"] = manifest["plan"]["target"] = "sm_80";
  EXPECT_EQ(linac::Package::open(write(manifest).string())->target(), "sm_80");
}

TEST_F(CudaPackage, HostForwardIsRefused) {
  std::vector<float> output(8 * 2 * kDim);
  linac::ForwardRequest host = hostRequest();
  host.output = output.data();
  std::string message = rejection([&] { package->forward(host); },
                                  linac::Error::Kind::InvalidArgument);
  EXPECT_NE(message.find("package for target 'sm_90a' runs on a CUDA device"),
            std::string::npos)
      << message;

  linac_package *handle = nullptr;
  std::string path = write(cudaManifest()).string();
  ASSERT_EQ(linac_package_open(path.c_str(), &handle), LINAC_OK);
  linac_forward_args args{};
  args.output = output.data();
  EXPECT_EQ(linac_forward_host(handle, &args), LINAC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(linac_last_error()).find("target 'sm_90a'"),
            std::string::npos)
      << linac_last_error();
  linac_package_close(handle);
}

TEST_F(CudaPackage, BadShapesGetTheHostPathsMessages) {
  struct Case {
    std::function<void(linac::DeviceForwardRequest &)> edit;
    std::string message;
  };
  std::vector<Case> cases = {
      {[&](auto &r) { r.tensors.erase("g"); },
       "missing input 'g', shape [B, T, H]"},
      {[&](auto &r) {
         r.tensors["w"] = tensor({1, 8, 2});
       },
       "'w' is not an argument of layer @toy"},
      {[&](auto &r) {
         r.tensors["q"] = tensor({1, 8, 2, 32});
       },
       "input 'q' has shape [1, 8, 2, 32], expected [B, T, H, K]: "
       "feature dimensions differ"},
      {[&](auto &r) {
         r.tensors["g"] = tensor({1, 8, 2, 1});
       },
       "input 'g' has shape [1, 8, 2, 1], expected [B, T, H]: wrong rank"},
      {[&](auto &r) {
         r.tensors["v"] = tensor({1, 9, 2, kDim});
       },
       "batch and time differ"},
      {[&](auto &r) {
         r.tensors["v"] = tensor({1, 8, 3, kDim});
       },
       "head counts must divide the largest"},
      {[&](auto &r) {
         r.tensors["A_log"] = tensor({2, kDim});
       },
       "param 'A_log' has shape [2, 16], expected [H]"},
      {[&](auto &r) {
         r.cuSeqlens = {0, 5, 3, 8};
       },
       "cu_seqlens must be non-decreasing, got [0, 5, 3, 8]"},
      {[&](auto &r) {
         r.cuSeqlens = {0, 5};
       },
       "cu_seqlens must start at 0 and end at T = 8"},
      {[&](auto &r) { r.scale = -1.0f; },
       "scale must be finite and non-negative"},
      {[&](auto &r) { r.tensors["k"].data = nullptr; },
       "input 'k' has no data"},
  };
  linac::DeviceForwardRequest wellFormed = request;
  for (const Case &c : cases) {
    request = wellFormed;
    c.edit(request);
    std::string device = deviceRejection();
    EXPECT_NE(device.find(c.message), std::string::npos) << device;
    linac::ForwardRequest host = hostRequest();
    EXPECT_EQ(rejection([&] { package->check(host); },
                        linac::Error::Kind::InvalidArgument),
              device);
  }
}

TEST_F(CudaPackage, PointersAreChecked) {
  request.output = nullptr;
  EXPECT_EQ(deviceRejection(), "no output buffer");
  request.output = storage;
  request.dtype = linac::DType::BFloat16;
  request.tensors["q"].data = reinterpret_cast<const char *>(storage) + 1;
  EXPECT_EQ(deviceRejection(),
            "input 'q' is not aligned to its 2-byte elements");
  request.tensors["q"].data = storage;
  request.finalState =
      reinterpret_cast<float *>(reinterpret_cast<char *>(storage) + 2);
  EXPECT_EQ(deviceRejection(),
            "final_state is not aligned to its 4-byte elements");
}

TEST_F(CudaPackage, TokenStridesStayUnder2GiB) {
  request.dtype = linac::DType::BFloat16;
  request.tensors["v"] = tensor({1, 8, (int64_t(1) << 26) - 2, kDim});
  EXPECT_NO_THROW(package->check(request));
  request.tensors["v"] = tensor({1, 8, int64_t(1) << 26, kDim});
  EXPECT_EQ(deviceRejection(),
            "input 'v' has 2147483648 bytes a token "
            "across its heads; CUDA kernels take at most 2^31 - 1");
}

TEST_F(CudaPackage, UnknownDTypeIsRefused) {
  request.dtype = static_cast<linac::DType>(7);
  EXPECT_NE(deviceRejection().find("unknown dtype 7; expected float32 (0), "
                                   "bfloat16 (1) or float16 (2)"),
            std::string::npos);

  linac_package *handle = nullptr;
  std::string path = write(cudaManifest()).string();
  ASSERT_EQ(linac_package_open(path.c_str(), &handle), LINAC_OK);
  linac_device_forward_args args{};
  int unknown = 7;
  std::memcpy(&args.dtype, &unknown, sizeof unknown);
  EXPECT_EQ(linac_forward_device(handle, &args), LINAC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(linac_last_error()).find("unknown dtype 7"),
            std::string::npos)
      << linac_last_error();
  linac_package_close(handle);
}

TEST_F(CudaPackage, MissingDTypeListsThePackagesDTypes) {
  request.dtype = linac::DType::Float16;
  EXPECT_EQ(deviceRejection(),
            "package has no float16 kernel; it has bfloat16, float32");
}

TEST_F(CudaPackage, NoDriverIsAnError) {
  if (void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(driver);
    GTEST_SKIP() << "a CUDA driver is installed";
  }
  std::string message = rejection([&] { package->forwardDevice(request); },
                                  linac::Error::Kind::Driver);
  EXPECT_EQ(message.rfind("no CUDA driver: libcuda.so.1", 0), 0u) << message;

  linac_package *handle = nullptr;
  std::string path = write(cudaManifest()).string();
  ASSERT_EQ(linac_package_open(path.c_str(), &handle), LINAC_OK);
  int64_t shapes[][4] = {
      {1, 8, 2, kDim}, {1, 8, 2, kDim}, {1, 8, 2, kDim}, {1, 8, 2}, {2}};
  linac_device_tensor tensors[] = {{"q", storage, 4, shapes[0]},
                                   {"k", storage, 4, shapes[1]},
                                   {"v", storage, 4, shapes[2]},
                                   {"g", storage, 3, shapes[3]},
                                   {"A_log", storage, 1, shapes[4]}};
  int64_t cuSeqlens[] = {0, 3, 8};
  linac_device_forward_args args{};
  args.tensors = tensors;
  args.num_tensors = 5;
  args.dtype = LINAC_FLOAT32;
  args.cu_seqlens = cuSeqlens;
  args.num_cu_seqlens = 3;
  args.output = storage;
  EXPECT_EQ(linac_forward_device(handle, &args), LINAC_ERROR_DRIVER)
      << linac_last_error();
  EXPECT_EQ(std::string(linac_last_error()).rfind("no CUDA driver: ", 0), 0u)
      << linac_last_error();
  linac_package_close(handle);
}

/// A manifest's segments: the compose kernel and `transitionBlocks`.
nlohmann::json segments(int transitionBlocks) {
  return {{"compose",
           {{"entry", "linac_segment_compose"},
            {"file", "layer.cubin"},
            {"dtype", "float32"},
            {"family", "delta_chunkwise"},
            {"block_threads", 128},
            {"shared_memory", 0}}},
          {"transition_blocks", transitionBlocks}};
}

TEST_F(CudaPackage, BadManifestsAreRefused) {
  struct Case {
    std::function<void(nlohmann::json &)> edit;
    std::string message;
  };
  std::vector<Case> cases = {
      {[](auto &m) { m["kernels"][1].erase("block_threads"); },
       "kernels[1] 'linac_scan_bfloat16' has no block_threads or "
       "shared_memory"},
      {[](auto &m) { m["kernels"][2].erase("shared_memory"); },
       "kernels[2] 'linac_scan_float32' has no block_threads or "
       "shared_memory"},
      {[](auto &m) { m.erase("abi_version"); }, "abi_version is missing"},
      {[](auto &m) { m["abi_version"] = LINAC_CUDA_ABI_VERSION + 1; },
       "kernels were built for CUDA ABI version " +
           std::to_string(LINAC_CUDA_ABI_VERSION + 1)},
      {[](auto &m) { m["kernels"][0]["dtype"] = "float64"; },
       "kernels[0].dtype is \"float64\"; expected float32, bfloat16 or "
       "float16"},
      {[](auto &m) { m["kernels"][1]["block_threads"] = 2048; },
       "kernels[1].block_threads is 2048; expected an integer from 1 to 1024"},
      {[](auto &m) { m["kernels"][2]["file"] = "other.cubin"; },
       "kernels[2].file 'other.cubin' is not the package's kernel file "
       "'layer.1.cubin'"},
      {[](auto &m) { m["decode"]["kernels"][0]["file"] = "layer.cubin"; },
       "decode.kernels[0].file 'layer.cubin' is not the package's kernel "
       "file 'layer.1.cubin'"},
      {[](auto &m) { m["kernels"] = nlohmann::json::array(); },
       "kernels is empty"},
      {[](auto &m) { m["decode"]["kernels"] = nlohmann::json::array(); },
       "decode.kernels is empty"},
      {[](auto &m) {
         m["segments"] = segments(1);
         m["segments"]["compose"].erase("block_threads");
       },
       "segments.compose 'linac_segment_compose' has no block_threads or "
       "shared_memory"},
      {[](auto &m) { m["segments"] = segments(17); },
       "segments.transition_blocks is 17; expected an integer from 0 to 16"},
      {[](auto &m) { m["target"] = "sm_70"; },
       "target is \"sm_70\"; expected cpu, sm_90a or sm_80"},
      {[](auto &m) { m.erase("decode"); }, "decode is missing"},
      {[](auto &m) { m["decode"]["state_layout"] = "value_major"; },
       "decode.state_layout is \"value_major\"; expected key_major"},
      {[](auto &m) { m["decode"]["kernels"][0]["file"] = "other.cubin"; },
       "decode.kernels[0].file 'other.cubin' is not the package's kernel "
       "file"},
      {[](auto &m) { m["decode"]["parts"] = 3; },
       "decode.parts 3 does not divide value_dim 16"},
      {[](auto &m) { m["decode"]["parts"] = 0; },
       "decode.parts is 0; expected an integer from 1 to 1048576"},
      {[](auto &m) { m["decode"]["staging"] = "cp.async"; },
       "decode.staging is \"cp.async\"; expected direct, bulk or tensor"},
      {[](auto &m) { m["decode"].erase("staging"); },
       "decode.parts and decode.staging are a GPU package's"},
      {[](auto &m) { m["plan"]["target"] = "cpu"; },
       "plan.target differs from target"},
      {[](auto &m) { m["backward_kernels"] = nlohmann::json::array(); },
       "backward_kernels is empty"},
      {[](auto &m) { m["backward"] = false; },
       "backward_kernels are listed for a package without its backward"},
      {[](auto &m) { m["backward_kernels"][0].erase("block_threads"); },
       "backward_kernels[0] 'linac_scan_backward' has no block_threads or "
       "shared_memory"},
  };
  for (const Case &c : cases) {
    nlohmann::json manifest = cudaManifest();
    c.edit(manifest);
    std::string path = write(manifest).string();
    std::string message = rejection([&] { linac::Package::open(path); },
                                    linac::Error::Kind::Package);
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
  }
}

TEST_F(CudaPackage, NumbersAreRangeChecked) {
  struct Case {
    std::function<void(nlohmann::json &)> edit;
    std::string message;
  };
  std::vector<Case> cases = {
      {[](auto &m) { m["key_dim"] = 0; },
       "key_dim is 0; expected an integer from 1 to 1048576"},
      {[](auto &m) { m["value_dim"] = -16; }, "value_dim is -16"},
      {[](auto &m) { m["key_dim"] = 16.5; }, "key_dim is 16.5"},
      {[](auto &m) { m["key_dim"] = uint64_t(1) << 63; },
       "key_dim is 9223372036854775808"},
      {[](auto &m) { m["key_dim"] = "16"; }, "key_dim is \"16\""},
      {[](auto &m) { m["format"] = 1; },
       "manifest format 1 is not the supported format 5"},
      {[](auto &m) { m["decode"]["max_tokens"] = 0; },
       "decode.max_tokens is 0"},
      {[](auto &m) { m["decode"]["parts"] = int64_t(1) << 40; },
       "decode.parts is 1099511627776"},
      {[](auto &m) { m["kernels"][0]["shared_memory"] = -1; },
       "kernels[0].shared_memory is -1; expected an integer from 0 to "
       "2147483647"},
      {[](auto &m) { m["kernels"][0]["block_threads"] = 0; },
       "kernels[0].block_threads is 0"},
      {[](auto &m) { m["kernels"][0]["block_threads"] = 128.5; },
       "kernels[0].block_threads is 128.5"},
      {[](auto &m) { m["kernels"][0]["file"] = "../layer.cubin"; },
       "kernels[0].file '../layer.cubin' is not a file of the package"},
      {[](auto &m) { m["decode"]["kernels"][0]["file"] = "/etc/passwd"; },
       "decode.kernels[0].file '/etc/passwd' is not a file of the package"},
      {[](auto &m) { m["arguments"][1]["name"] = "q"; },
       "arguments[1].name 'q' appears twice"},
      {[](auto &m) { m["arguments"][0]["role"] = "output"; },
       "arguments[0].role is \"output\""},
      {[](auto &m) { m["arguments"][0]["role"] = "runtime"; },
       "arguments[0].role of 'q' is runtime; expected input or param"},
      {[](auto &m) { m["arguments"][3]["kind"] = "tensor"; },
       "arguments[3].kind is \"tensor\""},
      {[](auto &m) { m["arguments"][3]["kind"] = "state"; },
       "arguments[3].kind of 'g' is state; expected key, value, scalar or "
       "matrix"},
      {[](auto &m) { m["arguments"][0]["name"] = ""; },
       "arguments[0].name is empty"},
      {[](auto &m) {
         m["arguments"] = nlohmann::json::array(
             {{{"name", "A_log"}, {"role", "param"}, {"kind", "scalar"}}});
       },
       "arguments has no input"},
  };
  for (const Case &c : cases) {
    nlohmann::json manifest = cudaManifest();
    c.edit(manifest);
    std::string message = openRejection(write(manifest));
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
  }
}

TEST_F(CudaPackage, TheCubinIsTiedToItsManifest) {
  fs::path path = write(cudaManifest());
  auto readText = [](const fs::path &file) {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::string manifest = readText(path / "manifest.json");
  std::string cubin = readText(path / "layer.cubin");
  auto writeText = [](const fs::path &file, const std::string &text) {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
  };

  writeText(path / "layer.cubin", cubin.substr(0, 10));
  EXPECT_NE(openRejection(path).find(
                "layer.cubin has 10 bytes, but integrity.files.layer.cubin."
                "bytes in manifest.json records " +
                std::to_string(cubin.size()) + " (truncated or replaced)"),
            std::string::npos)
      << openRejection(path);

  std::string changed = cubin;
  changed[5] ^= 1;
  writeText(path / "layer.cubin", changed);
  EXPECT_NE(openRejection(path).find("layer.cubin has SHA-256 " +
                                     linac::sha256Hex(changed)),
            std::string::npos)
      << openRejection(path);

  // A manifest edited after compilation, its integrity member kept.
  writeText(path / "layer.cubin", cubin);
  nlohmann::json edited = nlohmann::json::parse(manifest);
  std::swap(edited["arguments"][0], edited["arguments"][1]);
  writeText(path / "manifest.json", edited.dump(1));
  EXPECT_NE(openRejection(path).find("manifest.json does not match its "
                                     "integrity.contract"),
            std::string::npos)
      << openRejection(path);

  // A cubin from another package, with its hashes copied too.
  nlohmann::json other = cudaManifest();
  other["key_dim"] = 32;
  fs::path otherPath = write(other, "_other");
  edited = nlohmann::json::parse(manifest);
  edited["integrity"]["files"] = nlohmann::json::parse(
      readText(otherPath / "manifest.json"))["integrity"]["files"];
  writeText(path / "manifest.json", edited.dump(1));
  fs::copy_file(otherPath / "layer.cubin", path / "layer.cubin",
                fs::copy_options::overwrite_existing);
  EXPECT_NE(openRejection(path).find("layer.cubin does not carry the "
                                     "manifest's integrity.contract"),
            std::string::npos)
      << openRejection(path);

  edited = nlohmann::json::parse(manifest);
  edited["integrity"]["files"].erase("layer.cubin");
  writeText(path / "manifest.json", edited.dump(1));
  EXPECT_NE(openRejection(path).find("integrity.files has no entry for "
                                     "'layer.cubin'"),
            std::string::npos)
      << openRejection(path);

  edited.erase("integrity");
  writeText(path / "manifest.json", edited.dump(1));
  EXPECT_NE(openRejection(path).find("integrity is missing"),
            std::string::npos)
      << openRejection(path);
}

TEST_F(CudaPackage, MissingCubinIsRefused) {
  for (const char *file : {"layer.cubin", "layer.1.cubin"}) {
    fs::path path = write(cudaManifest());
    fs::remove(path / file);
    std::string message =
        rejection([&] { linac::Package::open(path.string()); },
                  linac::Error::Kind::Package);
    EXPECT_NE(message.find(std::string("cannot read '") + file + "'"),
              std::string::npos)
        << message;
  }
}

} // namespace

namespace {

TEST_F(CudaPackage, DeviceDecodeChecksItsArguments) {
  linac::DeviceDecodeRequest decode;
  decode.tensors = {{"q", tensor({2, 1, 2, kDim})},
                    {"k", tensor({2, 1, 2, kDim})},
                    {"v", tensor({2, 1, 2, kDim})},
                    {"g", tensor({2, 1, 2})},
                    {"A_log", tensor({2})}};
  decode.statePool = storage;
  decode.poolShape = {3, 2, kDim, kDim};
  decode.stateIndices = reinterpret_cast<const int64_t *>(storage);
  decode.numStateIndices = 2;
  decode.output = storage;
  auto invalid = [&](linac::DeviceDecodeRequest r) {
    return rejection([&] { package->decodeDevice(r); },
                     linac::Error::Kind::InvalidArgument);
  };

  linac::DeviceDecodeRequest bf16 = decode;
  bf16.dtype = linac::DType::BFloat16;
  EXPECT_EQ(invalid(bf16), "package has no bfloat16 kernel; it has float32");
  linac::DeviceDecodeRequest count = decode;
  count.numStateIndices = 1;
  EXPECT_EQ(invalid(count), "state_indices has 1 entries for 2 sequences");
  linac::DeviceDecodeRequest noIndices = decode;
  noIndices.stateIndices = nullptr;
  EXPECT_EQ(invalid(noIndices), "state_indices has no data");
  linac::DeviceDecodeRequest pool = decode;
  pool.poolShape = {3, 2, kDim};
  EXPECT_EQ(invalid(pool), "state pool has shape [3, 2, " + std::to_string(kDim) +
                               "], expected [P, 2, " + std::to_string(kDim) +
                               ", " + std::to_string(kDim) + "]");
  linac::DeviceDecodeRequest misaligned = decode;
  misaligned.statePool = storage + 1;
  EXPECT_EQ(invalid(misaligned), "state pool is not aligned to 16 bytes");
  linac::DeviceDecodeRequest noOutput = decode;
  noOutput.output = nullptr;
  EXPECT_EQ(invalid(noOutput), "no output buffer");

  linac::ForwardRequest hostForward = hostRequest();
  linac::DecodeRequest host;
  host.tensors = hostForward.tensors;
  EXPECT_EQ(rejection([&] { package->decode(host); },
                      linac::Error::Kind::InvalidArgument),
            "package for target 'sm_90a' runs on a CUDA device; call the "
            "device entry points");

  linac_device_decode_args noPool{};
  noPool.num_sequences = 2;
  linac_package *handle = nullptr;
  std::string path = write(cudaManifest()).string();
  ASSERT_EQ(linac_package_open(path.c_str(), &handle), LINAC_OK);
  EXPECT_EQ(linac_decode_device(handle, &noPool), LINAC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(linac_last_error()),
            "linac_decode_device needs pool_shape and state_indices");
  linac_package_close(handle);

  if (void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(driver);
    GTEST_SKIP() << "a CUDA driver is installed";
  }
  std::string message = rejection([&] { package->decodeDevice(decode); },
                                  linac::Error::Kind::Driver);
  EXPECT_EQ(message.rfind("no CUDA driver: libcuda.so.1", 0), 0u) << message;
}

} // namespace

// A package compiled with --no-backward: no backward kernel, and its
// backward calls refused before any argument is looked at.
TEST_F(CudaPackage, ForwardOnlyPackageRefusesGradients) {
  nlohmann::json manifest = cudaManifest();
  manifest["backward"] = false;
  manifest["backward_kernels"] = nlohmann::json::array();
  std::shared_ptr<linac::Package> forwardOnly =
      linac::Package::open(write(manifest).string());
  EXPECT_FALSE(forwardOnly->hasBackward());
  linac::DeviceBackwardRequest backward;
  backward.forward = request;
  backward.forward.output = nullptr;
  backward.dOutput = storage;
  const std::string message =
      "@toy's package was compiled without its backward pass (linac compile "
      "--no-backward)";
  EXPECT_NE(rejection([&] { forwardOnly->backwardDevice(backward); },
                      linac::Error::Kind::InvalidArgument)
                .find(message),
            std::string::npos);
  EXPECT_NE(rejection([&] { forwardOnly->backwardWorkspaceBytes(request); },
                      linac::Error::Kind::InvalidArgument)
                .find(message),
            std::string::npos);
}

TEST_F(CudaPackage, DeviceBackwardChecksItsArguments) {
  linac::DeviceBackwardRequest backward;
  backward.forward = request;
  // The forward's output is not the backward's to write.
  backward.forward.output = nullptr;
  backward.dOutput = storage;
  auto invalid = [&](linac::DeviceBackwardRequest r) {
    return rejection([&] { package->backwardDevice(r); },
                     linac::Error::Kind::InvalidArgument);
  };

  linac::DeviceBackwardRequest noDOutput = backward;
  noDOutput.dOutput = nullptr;
  EXPECT_EQ(invalid(noDOutput), "no output gradient (dOutput)");
  linac::DeviceBackwardRequest misaligned = backward;
  misaligned.forward.dtype = linac::DType::BFloat16;
  misaligned.dOutput = reinterpret_cast<const char *>(storage) + 1;
  EXPECT_EQ(invalid(misaligned),
            "dOutput is not aligned to its 2-byte elements");
  linac::DeviceBackwardRequest unknown = backward;
  unknown.gradients["x"] = storage;
  EXPECT_EQ(invalid(unknown), "gradient of 'x', which is not an input or "
                              "parameter of layer 'toy'");
  linac::DeviceBackwardRequest oddGradient = backward;
  oddGradient.gradients["q"] =
      reinterpret_cast<float *>(reinterpret_cast<char *>(storage) + 2);
  EXPECT_EQ(invalid(oddGradient),
            "gradient of 'q' is not aligned to its 4-byte elements");
  linac::DeviceBackwardRequest oddFinal = backward;
  oddFinal.dFinalState =
      reinterpret_cast<const float *>(reinterpret_cast<char *>(storage) + 2);
  EXPECT_EQ(invalid(oddFinal),
            "dFinalState is not aligned to its 4-byte elements");
  linac::DeviceBackwardRequest oddState = backward;
  oddState.dInitialState =
      reinterpret_cast<float *>(reinterpret_cast<char *>(storage) + 2);
  EXPECT_EQ(invalid(oddState),
            "dInitialState is not aligned to its 4-byte elements");
  linac::DeviceBackwardRequest shape = backward;
  shape.forward.tensors["g"] = tensor({1, 8, 3});
  EXPECT_EQ(invalid(shape), rejection([&] { package->check(shape.forward); },
                                      linac::Error::Kind::InvalidArgument));

  linac::BackwardRequest host;
  host.forward = hostRequest();
  host.dOutput = storage;
  EXPECT_EQ(rejection([&] { package->backward(host); },
                      linac::Error::Kind::InvalidArgument),
            "package for target 'sm_90a' runs on a CUDA device; call the "
            "device entry points");

  // One sequence of 8 tokens, H = 2: (1 + 8 / 64 rounded up) checkpoints
  // of each head's state, and 64 states entering a stretch's tokens for
  // each (sequence, head), each state K x V floats.
  EXPECT_EQ(package->backwardWorkspaceBytes(backward.forward),
            size_t((2 * 2 + 1 * 2 * 64) * kDim * kDim * 4));

  linac_package *handle = nullptr;
  std::string path = write(cudaManifest()).string();
  ASSERT_EQ(linac_package_open(path.c_str(), &handle), LINAC_OK);
  linac_device_backward_args args{};
  EXPECT_EQ(linac_backward_device(nullptr, &args),
            LINAC_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(linac_last_error(),
               "linac_backward_device needs a package and arguments");
  args.num_gradients = 1;
  EXPECT_EQ(linac_backward_device(handle, &args), LINAC_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(linac_last_error(), "num_gradients is 1 but gradients is NULL");
  size_t bytes = 0;
  EXPECT_EQ(linac_backward_device_workspace(handle, nullptr, &bytes),
            LINAC_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(linac_last_error(),
               "linac_backward_device_workspace needs a package, arguments "
               "and an out pointer");
  linac_package_close(handle);
}
