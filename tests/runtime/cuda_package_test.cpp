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

nlohmann::json argument(const char *name, const char *role, const char *kind,
                        const char *shape) {
  return {{"name", name}, {"role", role}, {"kind", kind}, {"shape", shape}};
}

nlohmann::json kernel(const char *entry, const char *dtype, const char *family,
                      int blockThreads, int sharedMemory) {
  return {{"entry", entry},
          {"file", "layer.cubin"},
          {"dtype", dtype},
          {"family", family},
          {"block_threads", blockThreads},
          {"shared_memory", sharedMemory}};
}

/// A layer with key, value and scalar inputs and a per-head parameter, as
/// the compiler would describe it for sm_90a.
nlohmann::json cudaManifest() {
  return {
      {"format", 2},
      {"target", "sm_90a"},
      {"cuda_abi_version", LINAC_CUDA_ABI_VERSION},
      {"layer", "toy"},
      {"key_dim", kDim},
      {"value_dim", kDim},
      {"normal_form", {{"normalizer", false}}},
      {"arguments",
       {argument("q", "input", "key", "[B, T, H, K]"),
        argument("k", "input", "key", "[B, T, H, K]"),
        argument("v", "input", "value", "[B, T, H, V]"),
        argument("g", "input", "scalar", "[B, T, H]"),
        argument("A_log", "param", "scalar", "[H]"),
        argument("initial_state", "runtime", "state",
                 "[N, H, K, V] (optional)"),
        argument("o", "runtime", "value", "[B, T, H, V]")}},
      {"decode",
       {{"max_tokens", 8},
        {"parts", 2},
        {"staging", "tensor"},
        {"state_layout", "key_major"},
        {"kernels",
         {kernel("linac_decode_float32", "float32", "recurrent", 128, 0)}}}},
      {"kernels",
       {kernel("linac_chunk_bfloat16", "bfloat16", "chunkwise", 256, 190464),
        kernel("linac_scan_bfloat16", "bfloat16", "recurrent", 128, 0),
        kernel("linac_scan_float32", "float32", "recurrent", 160, 0)}}};
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
  /// and a stand-in cubin that carries the manifest's contract, the
  /// manifest sealed with both hashes.
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
    manifest["integrity"] = {
        {"contract", contract},
        {"files",
         {{"layer.cubin",
           {{"bytes", cubin.size()}, {"sha256", linac::sha256Hex(cubin)}}}}}};
    std::ofstream(path / "manifest.json") << manifest.dump(1);
    std::ofstream(path / "layer.cubin", std::ios::binary) << cubin;
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
  manifest["target"] = "sm_80";
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

TEST_F(CudaPackage, BadManifestsAreRefused) {
  struct Case {
    std::function<void(nlohmann::json &)> edit;
    std::string message;
  };
  std::vector<Case> cases = {
      {[](auto &m) { m["kernels"][1].erase("block_threads"); },
       "corrupt manifest"},
      {[](auto &m) { m["kernels"][2].erase("shared_memory"); },
       "corrupt manifest"},
      {[](auto &m) { m.erase("cuda_abi_version"); }, "corrupt manifest"},
      {[](auto &m) { m["cuda_abi_version"] = LINAC_CUDA_ABI_VERSION + 1; },
       "kernels were built for CUDA ABI version " +
           std::to_string(LINAC_CUDA_ABI_VERSION + 1)},
      {[](auto &m) { m["kernels"][0]["dtype"] = "float64"; },
       "kernel 'linac_chunk_bfloat16' has dtype \"float64\""},
      {[](auto &m) { m["kernels"][1]["block_threads"] = 2048; },
       "kernel 'linac_scan_bfloat16' has an impossible launch shape"},
      {[](auto &m) { m["kernels"][2]["file"] = "other.cubin"; },
       "kernel 'linac_scan_float32' is in 'other.cubin'"},
      {[](auto &m) { m["kernels"] = nlohmann::json::array(); },
       "manifest lists no kernels"},
      {[](auto &m) { m["target"] = "sm_70"; }, "package is for target 'sm_70'"},
      {[](auto &m) { m.erase("decode"); }, "corrupt manifest"},
      {[](auto &m) { m["decode"]["state_layout"] = "value_major"; },
       "decode state layout \"value_major\" is not key_major"},
      {[](auto &m) { m["decode"]["kernels"][0]["file"] = "other.cubin"; },
       "kernel 'linac_decode_float32' is in 'other.cubin'"},
      {[](auto &m) { m["decode"]["parts"] = 3; },
       "decode parts 3 do not divide the value columns"},
      {[](auto &m) { m["decode"]["parts"] = 0; },
       "decode parts 0 do not divide the value columns"},
      {[](auto &m) { m["decode"]["staging"] = "cp.async"; },
       "unknown decode staging 'cp.async'"},
      {[](auto &m) { m["decode"].erase("staging"); }, "corrupt manifest"},
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
       "manifest format 1 is not the supported format 2"},
      {[](auto &m) { m["decode"]["max_tokens"] = 0; },
       "decode.max_tokens is 0"},
      {[](auto &m) { m["decode"]["parts"] = int64_t(1) << 40; },
       "decode.parts is 1099511627776"},
      {[](auto &m) { m["kernels"][0]["shared_memory"] = -1; },
       "kernel 'linac_chunk_bfloat16' has an impossible launch shape"},
      {[](auto &m) { m["kernels"][0]["block_threads"] = 0; },
       "kernel 'linac_chunk_bfloat16' has an impossible launch shape"},
      {[](auto &m) { m["kernels"][0]["block_threads"] = 128.5; },
       "kernel 'linac_chunk_bfloat16' has an impossible launch shape"},
      {[](auto &m) { m["kernels"][0]["file"] = "../layer.cubin"; },
       "kernels[0].file '../layer.cubin' is not a file of the package"},
      {[](auto &m) { m["decode"]["kernels"][0]["file"] = "/etc/passwd"; },
       "decode.kernels[0].file '/etc/passwd' is not a file of the package"},
      {[](auto &m) { m["arguments"][1]["name"] = "q"; },
       "arguments[1] 'q' appears twice"},
      {[](auto &m) { m["arguments"][0]["role"] = "output"; },
       "arguments[0] 'q' has role 'output'"},
      {[](auto &m) { m["arguments"][3]["kind"] = "tensor"; },
       "arguments[3] 'g' has kind 'tensor'"},
      {[](auto &m) { m["arguments"][0]["name"] = ""; },
       "arguments[0] has no name"},
      {[](auto &m) {
         m["arguments"] = nlohmann::json::array(
             {argument("A_log", "param", "scalar", "[H]")});
       },
       "the layer has no inputs"},
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
  EXPECT_NE(openRejection(path).find("corrupt manifest"), std::string::npos)
      << openRejection(path);
}

TEST_F(CudaPackage, MissingCubinIsRefused) {
  fs::path path = write(cudaManifest());
  fs::remove(path / "layer.cubin");
  std::string message = rejection([&] { linac::Package::open(path.string()); },
                                  linac::Error::Kind::Package);
  EXPECT_NE(message.find("cannot read 'layer.cubin'"), std::string::npos)
      << message;
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
