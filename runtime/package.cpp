//===- package.cpp - loading and running packages -------------------------===//

#include "linac/package.h"
#include "linac/integrity.h"
#include "linac/runtime.h"

#include "cuda_driver.h"
#include "linac/contract.h"
#include "linac/cpu/abi.h"
#include "linac/cuda/abi.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <type_traits>

namespace linac {

/// The grid is (heads, sequences); CUDA caps its y dimension.
static constexpr int64_t kMaxCudaSequences = 65535;

static Error packageError(const std::string &path, const std::string &what) {
  return Error(Error::Kind::Package, path + ": " + what);
}
static Error argumentError(const std::string &what) {
  return Error(Error::Kind::InvalidArgument, what);
}

static std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}


const char *dtypeName(DType dtype) {
  std::string_view name = manifest::nameOf(dtype);
  return name.empty() ? nullptr : name.data();
}

static size_t sizeOf(DType dtype) {
  return dtype == DType::Float32 ? sizeof(float) : sizeof(uint16_t);
}

static std::string readFile(const std::string &path, const std::string &file) {
  std::ifstream in(path + "/" + file, std::ios::binary | std::ios::ate);
  std::streamoff size = in ? std::streamoff(in.tellg()) : -1;
  std::string bytes(size > 0 ? size_t(size) : 0, '\0');
  if (size < 0 || !in.seekg(0) || !in.read(bytes.data(), bytes.size()))
    throw packageError(path, "cannot read '" + file + "'");
  return bytes;
}

/// The checks that tie a package's binary to its manifest
/// (docs/runtime.md): the manifest's fields hash to its integrity.contract,
/// the file has the size and SHA-256 that integrity.files records, and it
/// carries the contract. Returns the file's bytes, verified, so that what
/// is loaded is what was checked.
static std::string verifiedBinary(const std::string &path,
                                  const std::string &manifestText,
                                  const manifest::Integrity &integrity,
                                  const std::string &file) {
  std::string fieldsHash = contractHash(manifestText);
  if (fieldsHash != integrity.contract)
    throw packageError(path, "manifest.json does not match its "
                             "integrity.contract " +
                                 integrity.contract + " (its fields hash to " +
                                 fieldsHash +
                                 "): it was edited after compilation");
  auto record = integrity.files.find(file);
  if (record == integrity.files.end())
    throw packageError(path, "manifest.json: integrity.files has no entry "
                             "for '" +
                                 file + "'");
  std::string bytes = readFile(path, file);
  if (int64_t(bytes.size()) != record->second.bytes)
    throw packageError(path, file + " has " + std::to_string(bytes.size()) +
                                 " bytes, but integrity.files." + file +
                                 ".bytes in manifest.json records " +
                                 std::to_string(record->second.bytes) +
                                 " (truncated or replaced)");
  if (sha256Hex(bytes) != record->second.sha256)
    throw packageError(path, file + " has SHA-256 " + sha256Hex(bytes) +
                                 ", but integrity.files." + file +
                                 ".sha256 in manifest.json records " +
                                 record->second.sha256 +
                                 " (changed or replaced)");
  if (bytes.find(LINAC_CONTRACT_PREFIX + integrity.contract) ==
      std::string::npos)
    throw packageError(path, file +
                                 " does not carry the manifest's "
                                 "integrity.contract " +
                                 integrity.contract +
                                 ": it was built for another package");
  return bytes;
}

std::unique_ptr<Package> Package::open(const std::string &path) {
  std::ifstream in(path + "/manifest.json");
  if (!in)
    throw packageError(path, "no manifest.json (is this a .linac package?)");
  std::stringstream text;
  text << in.rdbuf();
  std::unique_ptr<Package> package(new Package());
  package->manifest_ = text.str();
  readManifest(path, package.get());
  package->loadKernels(path);
  return package;
}

void Package::checkManifest(const std::string &text) {
  Package package;
  package.manifest_ = text;
  readManifest("manifest.json", &package);
}

void Package::readManifest(const std::string &path, Package *package) {
  try {
    package->info_ = manifest::read(package->manifest_);
  } catch (const manifest::SchemaError &e) {
    throw packageError(path, std::string("manifest.json: ") + e.what());
  }
  const manifest::Manifest &info = package->info_;
  bool device = info.target != manifest::Target::Cpu;
  int abiVersion = device ? LINAC_CUDA_ABI_VERSION : LINAC_CPU_ABI_VERSION;
  if (info.abiVersion != abiVersion)
    throw packageError(path, std::string("kernels were built for ") +
                                 (device ? "CUDA" : "CPU") + " ABI version " +
                                 std::to_string(info.abiVersion) +
                                 "; this runtime supports version " +
                                 std::to_string(abiVersion));
  package->target_ = std::string(manifest::nameOf(info.target));
  package->layer_ = info.layer;
  package->keyDim_ = info.keyDim;
  package->valueDim_ = info.valueDim;
  package->normalizer_ = info.normalForm.normalizer;
  for (const manifest::Argument &arg : info.arguments) {
    (arg.role == manifest::Role::Input ? package->inputs_ : package->params_)
        .push_back(arg);
    package->arguments_.push_back({arg.name,
                                   std::string(manifest::nameOf(arg.role)),
                                   std::string(manifest::nameOf(arg.kind)),
                                   manifest::shapeText(arg.role, arg.kind)});
  }
  for (const manifest::RuntimeArgument &arg :
       manifest::runtimeArguments(info.normalForm.normalizer))
    package->arguments_.push_back(
        {arg.name, "runtime", std::string(manifest::nameOf(arg.kind)),
         arg.shape});
  package->maxDecodeTokens_ = info.decode.maxTokens;
  package->kernelFile_ = info.kernels.front().file;
  if (!device) {
    package->forwardEntry_ = info.kernels.front().entry;
    package->decodeEntry_ = info.decode.kernels.front().entry;
    return;
  }
  if (package->inputs_.size() > LINAC_CUDA_MAX_ARGUMENTS ||
      package->params_.size() > LINAC_CUDA_MAX_ARGUMENTS)
    throw packageError(path, "layer has more than " +
                                 std::to_string(LINAC_CUDA_MAX_ARGUMENTS) +
                                 " inputs or parameters");
  auto kernelsOf = [](const std::vector<manifest::Kernel> &list) {
    std::vector<CudaKernel> kernels;
    for (const manifest::Kernel &kernel : list)
      kernels.push_back({kernel.entry, kernel.dtype,
                         unsigned(kernel.blockThreads.value()),
                         unsigned(kernel.sharedMemory.value())});
    return kernels;
  };
  package->kernels_ = kernelsOf(info.kernels);
  package->decodeKernels_ = kernelsOf(info.decode.kernels);
  package->decodeParts_ = info.decode.parts.value();
  package->decodeTensorMap_ =
      info.decode.staging == manifest::DecodeStaging::Tensor;
}

void Package::loadKernels(const std::string &path) {
  const manifest::Integrity &integrity = *info_.integrity;
  if (runsOnDevice()) {
    modules_ = std::make_unique<cuda::ModuleCache>(
        verifiedBinary(path, manifest_, integrity, kernelFile_));
    return;
  }
  // dlopen maps the file, and a file shorter than its headers say faults
  // there: check the bytes first.
  verifiedBinary(path, manifest_, integrity, kernelFile_);
  std::string library = path + "/" + kernelFile_;
  library_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library_)
    throw packageError(path, std::string("cannot load kernel: ") + dlerror());
  auto version = reinterpret_cast<linac_cpu_abi_version_fn>(
      dlsym(library_, "linac_cpu_abi_version"));
  if (!version || version() != LINAC_CPU_ABI_VERSION)
    throw packageError(path, "kernel was built for another CPU ABI version");
  // dlopen returns the library already loaded from the same path, which
  // may be an earlier build of the package than the file just checked.
  auto loaded = static_cast<const char *>(dlsym(library_, LINAC_CONTRACT_SYMBOL));
  if (!loaded || loaded != LINAC_CONTRACT_PREFIX + integrity.contract)
    throw packageError(path, kernelFile_ +
                                 " as loaded does not carry the manifest's "
                                 "integrity.contract (is an earlier build of "
                                 "this package still open in this process?)");
  forward_ = dlsym(library_, forwardEntry_.c_str());
  if (!forward_)
    throw packageError(path, "kernel has no entry '" + forwardEntry_ + "'");
  decode_ = dlsym(library_, decodeEntry_.c_str());
  if (!decode_)
    throw packageError(path, "kernel has no entry '" + decodeEntry_ + "'");
}

Package::Package() = default;

Package::~Package() {
  if (library_)
    dlclose(library_);
}

void Package::requireTarget(bool device) const {
  if (device && !runsOnDevice())
    throw argumentError("package for target '" + target_ +
                        "' runs on the host; call the host entry points");
  if (!device && runsOnDevice())
    throw argumentError("package for target '" + target_ +
                        "' runs on a CUDA device; call the device entry "
                        "points");
}

const Package::CudaKernel &
Package::kernelFor(DType dtype, const std::vector<CudaKernel> &kernels) const {
  if (!dtypeName(dtype))
    throw argumentError("unknown dtype " + std::to_string(int(dtype)) +
                        "; expected float32 (0), bfloat16 (1) or float16 (2)");
  std::vector<DType> available;
  for (const CudaKernel &kernel : kernels) {
    if (kernel.dtype == dtype)
      return kernel;
    if (std::find(available.begin(), available.end(), kernel.dtype) ==
        available.end())
      available.push_back(kernel.dtype);
  }
  std::string names;
  for (DType other : available)
    names += (names.empty() ? "" : ", ") + std::string(dtypeName(other));
  throw argumentError("package has no " + std::string(dtypeName(dtype)) +
                      " kernel; it has " + names);
}

/// The read's scale: the request's, or K^-1/2 for 0.
static float scaleOrDefault(float scale, int64_t keyDim) {
  return scale > 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(keyDim));
}

template <typename Tensor>
static std::map<std::string, std::vector<int64_t>>
shapesOf(const std::map<std::string, Tensor> &tensors) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto &[name, tensor] : tensors)
    shapes.emplace(name, tensor.shape);
  return shapes;
}

static std::string describe(const manifest::Argument &arg) {
  return std::string(manifest::nameOf(arg.role)) + " '" + arg.name + "'";
}

/// Throws unless a float tensor of `dims` fits in memory: its size in bytes
/// must be an int64_t, so that no count or offset derived from it overflows.
static void checkAddressable(const std::vector<int64_t> &dims,
                             const std::string &what) {
  int64_t bytes = sizeof(float);
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(bytes, d, &bytes))
      throw argumentError(what + " of shape " + shapeString(dims) +
                          " is larger than memory can hold");
}

/// Throws unless the pointer to `what` is present and `alignment`-aligned.
static void checkPointer(const void *data, size_t alignment,
                         const std::string &what) {
  if (!data)
    throw argumentError(what + " has no data");
  if (reinterpret_cast<uintptr_t>(data) % alignment != 0)
    throw argumentError(what + " is not aligned to its " +
                        std::to_string(alignment) + "-byte elements");
}

ForwardShape
Package::checkShapes(const std::map<std::string, std::vector<int64_t>> &shapes,
                     const std::vector<int64_t> &cuSeqlens, float scale) const {
  ForwardShape shape;
  for (const auto &[name, tensorShape] : shapes) {
    bool known = false;
    for (const ArgumentInfo &arg : arguments_)
      known |= arg.name == name && arg.role != "runtime";
    if (!known)
      throw argumentError("'" + name + "' is not an argument of layer @" +
                          layer_);
  }
  auto shapeOf =
      [&](const manifest::Argument &arg) -> const std::vector<int64_t> & {
    auto it = shapes.find(arg.name);
    if (it == shapes.end())
      throw argumentError("missing " + describe(arg) + ", shape " +
                          manifest::shapeText(arg.role, arg.kind));
    return it->second;
  };
  auto fail = [&](const manifest::Argument &arg,
                  const std::vector<int64_t> &t, const std::string &why) {
    return argumentError(describe(arg) + " has shape " + shapeString(t) +
                         ", expected " +
                         manifest::shapeText(arg.role, arg.kind) + ": " + why);
  };

  bool first = true;
  std::vector<int64_t> heads;
  for (const manifest::Argument &arg : inputs_) {
    const std::vector<int64_t> &t = shapeOf(arg);
    std::vector<int64_t> trailing =
        manifest::trailingDims(arg.kind, keyDim_, valueDim_);
    if (t.size() != 3 + trailing.size())
      throw fail(arg, t, "wrong rank");
    if (!std::equal(trailing.begin(), trailing.end(), t.begin() + 3))
      throw fail(arg, t, "feature dimensions differ from the layer's");
    if (first) {
      shape.batch = t[0];
      shape.tokens = t[1];
      first = false;
    } else if (t[0] != shape.batch || t[1] != shape.tokens) {
      throw fail(arg, t, "batch and time differ from the first input's [" +
                             std::to_string(shape.batch) + ", " +
                             std::to_string(shape.tokens) + ", ...]");
    }
    if (t[2] <= 0)
      throw fail(arg, t, "no heads");
    heads.push_back(t[2]);
    shape.heads = std::max(shape.heads, t[2]);
  }
  for (const manifest::Argument &arg : params_) {
    const std::vector<int64_t> &t = shapeOf(arg);
    std::vector<int64_t> trailing =
        manifest::trailingDims(arg.kind, keyDim_, valueDim_);
    if (t.size() != 1 + trailing.size() ||
        !std::equal(trailing.begin(), trailing.end(), t.begin() + 1) ||
        t[0] <= 0)
      throw fail(arg, t, "parameters are [H] or [H, D]");
    heads.push_back(t[0]);
  }
  for (int64_t h : heads)
    if (shape.heads % h != 0)
      throw argumentError("head counts must divide the largest, " +
                          std::to_string(shape.heads) + "; got " +
                          std::to_string(h));
  if (shape.batch < 0 || shape.tokens < 0)
    throw argumentError("negative batch or time");
  for (const std::vector<manifest::Argument> *args : {&inputs_, &params_})
    for (const manifest::Argument &arg : *args)
      checkAddressable(shapeOf(arg), describe(arg));
  checkAddressable({shape.batch, shape.tokens, shape.heads, valueDim_},
                   "the output");

  if (cuSeqlens.empty()) {
    shape.sequences = shape.batch;
  } else {
    if (shape.batch != 1)
      throw argumentError("cu_seqlens needs batch 1 (a packed token axis), "
                          "got batch " + std::to_string(shape.batch));
    if (cuSeqlens.size() < 2 || cuSeqlens.front() != 0 ||
        cuSeqlens.back() != shape.tokens)
      throw argumentError("cu_seqlens must start at 0 and end at T = " +
                          std::to_string(shape.tokens) + ", got " +
                          shapeString(cuSeqlens));
    for (size_t i = 1; i < cuSeqlens.size(); ++i)
      if (cuSeqlens[i] < cuSeqlens[i - 1])
        throw argumentError("cu_seqlens must be non-decreasing, got " +
                            shapeString(cuSeqlens));
    shape.sequences = int64_t(cuSeqlens.size()) - 1;
  }
  checkAddressable({shape.sequences, shape.heads, keyDim_, stateColumns()},
                   "the states");
  if (!(std::isfinite(scale) && scale >= 0.0f))
    throw argumentError("scale must be finite and non-negative (0 for the "
                        "default)");
  return shape;
}

ForwardShape Package::check(const ForwardRequest &request) const {
  ForwardShape shape =
      checkShapes(shapesOf(request.tensors), request.cuSeqlens, request.scale);
  for (const std::vector<manifest::Argument> *args : {&inputs_, &params_})
    for (const manifest::Argument &arg : *args)
      checkPointer(request.tensors.at(arg.name).data, sizeof(float),
                   describe(arg));
  return shape;
}

ForwardShape Package::check(const DeviceForwardRequest &request) const {
  requireTarget(/*device=*/true);
  // Refuses a dtype outside the enum or one the package has no kernel for.
  kernelFor(request.dtype, kernels_);
  ForwardShape shape =
      checkShapes(shapesOf(request.tensors), request.cuSeqlens, request.scale);
  checkDevicePointers(request.tensors, request.dtype);
  size_t elementSize = sizeOf(request.dtype);
  if (!request.output)
    throw argumentError("no output buffer");
  checkPointer(request.output, elementSize, "output");
  if (request.initialState)
    checkPointer(request.initialState, sizeof(float), "initial_state");
  if (request.finalState)
    checkPointer(request.finalState, sizeof(float), "final_state");
  if (shape.heads > std::numeric_limits<int32_t>::max())
    throw argumentError("CUDA kernels run at most 2^31 - 1 heads, got " +
                        std::to_string(shape.heads));
  if (shape.sequences > kMaxCudaSequences)
    throw argumentError(
        "CUDA kernels run at most " + std::to_string(kMaxCudaSequences) +
        " sequences per call, got " + std::to_string(shape.sequences));
  return shape;
}

/// A validated request's host tensors in manifest order, as the CPU ABI
/// takes them.
struct HostArguments {
  std::vector<const float *> inputs, params;
  std::vector<int64_t> inputHeads, paramHeads;

  HostArguments(const std::map<std::string, HostTensor> &tensors,
                const std::vector<manifest::Argument> &inputInfos,
                const std::vector<manifest::Argument> &paramInfos) {
    for (const manifest::Argument &arg : inputInfos) {
      const HostTensor &t = tensors.at(arg.name);
      inputs.push_back(t.data);
      inputHeads.push_back(t.shape[2]);
    }
    for (const manifest::Argument &arg : paramInfos) {
      const HostTensor &t = tensors.at(arg.name);
      params.push_back(t.data);
      paramHeads.push_back(t.shape[0]);
    }
  }
};

void Package::forward(const ForwardRequest &request) const {
  requireTarget(/*device=*/false);
  ForwardShape shape = check(request);
  if (!request.output)
    throw argumentError("no output buffer");
  std::vector<int64_t> cu = request.cuSeqlens;
  if (cu.empty())
    for (int64_t b = 0; b <= shape.batch; ++b)
      cu.push_back(b * shape.tokens);

  HostArguments host(request.tensors, inputs_, params_);
  linac_cpu_forward_args args{};
  args.num_seqs = shape.sequences;
  args.cu_seqlens = cu.data();
  args.num_heads = shape.heads;
  args.inputs = host.inputs.data();
  args.input_heads = host.inputHeads.data();
  args.params = host.params.data();
  args.param_heads = host.paramHeads.data();
  args.initial_state = request.initialState;
  args.final_state = request.finalState;
  args.output = request.output;
  args.scale = scaleOrDefault(request.scale, keyDim_);
  int status = reinterpret_cast<linac_cpu_forward_fn>(forward_)(&args);
  if (status != 0)
    throw Error(Error::Kind::Kernel,
                "kernel failed with status " + std::to_string(status));
}

size_t Package::checkPool(int64_t poolSlots,
                          const std::vector<int64_t> &indices) const {
  // Sorted, not marked in a map of the pool: the slot count is the
  // caller's word, and may be far more than memory holds.
  std::vector<int64_t> taken;
  for (size_t b = 0; b < indices.size(); ++b) {
    int64_t slot = indices[b];
    if (slot < -1 || slot >= poolSlots)
      throw argumentError("state index " + std::to_string(slot) +
                          " of sequence " + std::to_string(b) +
                          " is outside the pool's " +
                          std::to_string(poolSlots) + " slots (-1 skips)");
    if (slot >= 0)
      taken.push_back(slot);
  }
  std::sort(taken.begin(), taken.end());
  auto twice = std::adjacent_find(taken.begin(), taken.end());
  if (twice != taken.end())
    throw argumentError("pool slot " + std::to_string(*twice) +
                        " is given to two sequences");
  return size_t(keyDim_) * stateColumns();
}

ForwardShape
Package::checkDecode(const std::map<std::string, std::vector<int64_t>> &shapes,
                     const std::vector<int64_t> &pool, size_t numIndices,
                     float scale) const {
  ForwardShape shape = checkShapes(shapes, {}, scale);
  if (shape.tokens < 1 || shape.tokens > maxDecodeTokens_)
    throw argumentError("decode takes 1 to " + std::to_string(maxDecodeTokens_) +
                        " new tokens per sequence, got " +
                        std::to_string(shape.tokens));
  std::vector<int64_t> expectedPool{-1, shape.heads, keyDim_, stateColumns()};
  if (pool.size() != 4 || pool[0] < 0 ||
      !std::equal(pool.begin() + 1, pool.end(), expectedPool.begin() + 1))
    throw argumentError("state pool has shape " + shapeString(pool) +
                        ", expected [P, " + std::to_string(shape.heads) + ", " +
                        std::to_string(keyDim_) + ", " +
                        std::to_string(stateColumns()) + "]");
  checkAddressable(pool, "state pool");
  if (int64_t(numIndices) != shape.batch)
    throw argumentError("state_indices has " + std::to_string(numIndices) +
                        " entries for " + std::to_string(shape.batch) +
                        " sequences");
  return shape;
}

void Package::decode(const DecodeRequest &request) const {
  requireTarget(/*device=*/false);
  ForwardShape shape = checkDecode(shapesOf(request.tensors), request.poolShape,
                                   request.stateIndices.size(), request.scale);
  checkPool(request.poolShape[0], request.stateIndices);
  for (const std::vector<manifest::Argument> *args : {&inputs_, &params_})
    for (const manifest::Argument &arg : *args)
      checkPointer(request.tensors.at(arg.name).data, sizeof(float),
                   describe(arg));
  checkPointer(request.statePool, sizeof(float), "state pool");
  if (!request.output)
    throw argumentError("no output buffer");

  HostArguments host(request.tensors, inputs_, params_);
  linac_cpu_decode_args args{};
  args.num_seqs = shape.batch;
  args.tokens = shape.tokens;
  args.num_heads = shape.heads;
  args.inputs = host.inputs.data();
  args.input_heads = host.inputHeads.data();
  args.params = host.params.data();
  args.param_heads = host.paramHeads.data();
  args.state_pool = request.statePool;
  args.state_indices = request.stateIndices.data();
  args.output = request.output;
  args.scale = scaleOrDefault(request.scale, keyDim_);
  int status = reinterpret_cast<linac_cpu_decode_fn>(decode_)(&args);
  if (status != 0)
    throw Error(Error::Kind::Kernel,
                "kernel failed with status " + std::to_string(status));
}

size_t Package::checkPoolCopy(int64_t poolSlots, int64_t heads,
                              const std::vector<int64_t> &indices) const {
  if (heads <= 0)
    throw argumentError("a state pool needs a positive head count, got " +
                        std::to_string(heads));
  checkAddressable({poolSlots, heads, keyDim_, stateColumns()}, "state pool");
  checkAddressable({int64_t(indices.size()), heads, keyDim_, stateColumns()},
                   "the states");
  return checkPool(poolSlots, indices) * heads;
}

void Package::statesFromPool(const float *pool, int64_t poolSlots,
                             int64_t heads, const std::vector<int64_t> &indices,
                             float *states) const {
  size_t size = checkPoolCopy(poolSlots, heads, indices);
  for (size_t n = 0; n < indices.size(); ++n)
    if (indices[n] >= 0)
      std::copy_n(pool + indices[n] * size, size, states + n * size);
}

void Package::statesToPool(const float *states, int64_t heads,
                           const std::vector<int64_t> &indices, float *pool,
                           int64_t poolSlots) const {
  size_t size = checkPoolCopy(poolSlots, heads, indices);
  for (size_t n = 0; n < indices.size(); ++n)
    if (indices[n] >= 0)
      std::copy_n(states + n * size, size, pool + indices[n] * size);
}

/// Refuses a pointer the driver does not know as device or managed memory.
static void requireDeviceMemory(const void *data, const std::string &what) {
  if (data && !cuda::isDeviceMemory(data))
    throw argumentError(what + " is a host pointer; pass device memory");
}

template <typename Args>
void Package::deviceArguments(const std::map<std::string, DeviceTensor> &tensors,
                              int64_t heads, void *output, float scale,
                              Args &args) const {
  args.num_heads = heads;
  requireDeviceMemory(output, "output");
  args.output = output;
  args.scale = scaleOrDefault(scale, keyDim_);
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const DeviceTensor &t = tensors.at(inputs_[i].name);
    requireDeviceMemory(t.data, describe(inputs_[i]));
    args.inputs[i] = t.data;
    args.input_heads[i] = t.shape[2];
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const DeviceTensor &t = tensors.at(params_[i].name);
    requireDeviceMemory(t.data, describe(params_[i]));
    args.params[i] = static_cast<const float *>(t.data);
    args.param_heads[i] = t.shape[0];
  }
}

void Package::checkDevicePointers(
    const std::map<std::string, DeviceTensor> &tensors, DType dtype) const {
  for (const manifest::Argument &arg : inputs_)
    checkPointer(tensors.at(arg.name).data, sizeOf(dtype), describe(arg));
  for (const manifest::Argument &arg : params_)
    checkPointer(tensors.at(arg.name).data, sizeof(float), describe(arg));
}

void Package::decodeDevice(const DeviceDecodeRequest &request) const {
  requireTarget(/*device=*/true);
  const CudaKernel &kernel = kernelFor(request.dtype, decodeKernels_);
  ForwardShape shape = checkDecode(shapesOf(request.tensors), request.poolShape,
                                   request.numStateIndices, request.scale);
  checkDevicePointers(request.tensors, request.dtype);
  size_t elementSize = sizeOf(request.dtype);
  checkPointer(request.statePool, sizeof(float), "state pool");
  // The kernels move state rows in 16-byte runs.
  if (reinterpret_cast<uintptr_t>(request.statePool) % 16 != 0)
    throw argumentError("state pool is not aligned to 16 bytes");
  if (!request.output)
    throw argumentError("no output buffer");
  checkPointer(request.output, elementSize, "output");
  if (shape.batch)
    checkPointer(request.stateIndices, sizeof(int64_t), "state_indices");

  CUcontext context = cuda::currentContext();
  linac_cuda_decode_args args{};
  args.num_seqs = shape.batch;
  args.tokens = shape.tokens;
  deviceArguments(request.tensors, shape.heads, request.output, request.scale,
                  args);
  requireDeviceMemory(request.stateIndices, "state_indices");
  requireDeviceMemory(request.statePool, "state pool");
  args.state_pool = request.statePool;
  args.pool_slots = request.poolShape[0];
  args.state_indices = request.stateIndices;
  if (shape.batch == 0)
    return;

  auto stream = static_cast<CUstream>(request.stream);
  if (decodeTensorMap_ && args.pool_slots > 0)
    encodeStateMap(args.state_pool, args.pool_slots * shape.heads, args);
  args.work = reinterpret_cast<unsigned long long *>(
      modules_->workCounters(context, stream));
  // As many blocks as the device runs at once, sharing out the items (a
  // sequence's head's state, or a strip of it), or one per item when there
  // are fewer.
  int64_t items = shape.batch * shape.heads * decodeParts_;
  int64_t resident = modules_->residentBlocks(context, kernel.entry,
                                              kernel.blockThreads,
                                              kernel.sharedMemory);
  launch(kernel, context, &args, std::min(items, resident), 1, stream);
}

void Package::encodeStateMap(float *pool, int64_t states,
                             linac_cuda_decode_args &args) const {
  // The pool as rows of V floats, one per key row of each state, moved in
  // boxes of LINAC_CUDA_DECODE_BOX_COLUMNS columns by every key row,
  // 128-byte swizzled (DecodeState's tensor staging in
  // templates/linac/cuda/decode.h).
  int64_t rows = states * keyDim_;
  // Box coordinates are 32-bit signed.
  if (rows > std::numeric_limits<int32_t>::max())
    throw argumentError("state pool has " + std::to_string(rows) +
                        " key rows; decode takes at most 2^31 - 1");
  cuuint64_t dims[2] = {cuuint64_t(valueDim_), cuuint64_t(rows)};
  cuuint64_t rowBytes[1] = {cuuint64_t(valueDim_) * sizeof(float)};
  cuuint32_t box[2] = {LINAC_CUDA_DECODE_BOX_COLUMNS, cuuint32_t(keyDim_)};
  cuuint32_t elementStrides[2] = {1, 1};
  static_assert(sizeof(CUtensorMap) == sizeof(linac_cuda_tensor_map) &&
                    alignof(CUtensorMap) == alignof(linac_cuda_tensor_map),
                "the ABI's tensor map is the driver's");
  cuda::check(cuda::driver().cuTensorMapEncodeTiled(
                  reinterpret_cast<CUtensorMap *>(&args.state_map),
                  CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, pool, dims, rowBytes, box,
                  elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              "cuTensorMapEncodeTiled");
}

void Package::forwardDevice(const DeviceForwardRequest &request) const {
  ForwardShape shape = check(request);
  const CudaKernel &kernel = kernelFor(request.dtype, kernels_);
  CUcontext context = cuda::currentContext();
  linac_cuda_forward_args args{};
  args.num_seqs = shape.sequences;
  args.tokens_per_seq = shape.tokens;
  deviceArguments(request.tensors, shape.heads, request.output, request.scale,
                  args);
  requireDeviceMemory(request.initialState, "initial_state");
  requireDeviceMemory(request.finalState, "final_state");
  args.initial_state = request.initialState;
  args.final_state = request.finalState;
  // An empty batch is done; the driver refuses a grid without blocks.
  if (shape.sequences == 0)
    return;

  auto stream = static_cast<CUstream>(request.stream);
  std::optional<cuda::StreamBuffer> cuSeqlens;
  if (!request.cuSeqlens.empty()) {
    cuSeqlens.emplace(request.cuSeqlens.data(),
                      request.cuSeqlens.size() * sizeof(int64_t), stream);
    args.cu_seqlens = reinterpret_cast<const int64_t *>(cuSeqlens->address());
  }
  launch(kernel, context, &args, shape.heads, shape.sequences, stream);
}

void Package::launch(const CudaKernel &kernel, CUctx_st *context, void *args,
                     int64_t gridX, int64_t gridY, CUstream_st *stream) const {
  CUfunction function =
      modules_->function(context, kernel.entry, kernel.sharedMemory);
  void *params[] = {args};
  cuda::check(cuda::driver().cuLaunchKernel(
                  function, unsigned(gridX), unsigned(gridY), 1,
                  kernel.blockThreads, 1, 1, kernel.sharedMemory, stream,
                  params, nullptr),
              "cuLaunchKernel('" + kernel.entry + "')");
}

} // namespace linac

//===----------------------------------------------------------------------===//
// C API
//===----------------------------------------------------------------------===//

struct linac_package {
  std::unique_ptr<linac::Package> package;
};

static thread_local std::string lastError;
/// Dimensions of a C API tensor: the layer's have at most five.
static constexpr int32_t kMaxTensorRank = 8;

static linac::Error invalidArgument(const std::string &what) {
  return linac::Error(linac::Error::Kind::InvalidArgument, what);
}

/// The C API's named tensors as the C++ API's map.
template <typename Tensor, typename CTensor>
static std::map<std::string, Tensor> tensorsOf(const CTensor *tensors,
                                               size_t count) {
  if (count && !tensors)
    throw invalidArgument("no tensors for num_tensors " +
                          std::to_string(count));
  std::map<std::string, Tensor> result;
  for (size_t i = 0; i < count; ++i) {
    const CTensor &t = tensors[i];
    if (!t.name || t.ndim < 0 || (t.ndim > 0 && !t.shape))
      throw invalidArgument("tensor " + std::to_string(i) +
                            " has no name or shape");
    if (t.ndim > kMaxTensorRank)
      throw invalidArgument("tensor '" + std::string(t.name) + "' has " +
                            std::to_string(t.ndim) + " dimensions; at most " +
                            std::to_string(kMaxTensorRank));
    auto [at, added] = result.emplace(
        t.name,
        Tensor{t.data, std::vector<int64_t>(t.shape, t.shape + t.ndim)});
    if (!added)
      throw invalidArgument("tensor '" + at->first + "' is given twice");
  }
  return result;
}

static std::vector<int64_t> cuSeqlensOf(const int64_t *cuSeqlens,
                                        size_t count) {
  if (!cuSeqlens && count)
    throw invalidArgument("no cu_seqlens for num_cu_seqlens " +
                          std::to_string(count));
  if (cuSeqlens && !count)
    throw invalidArgument("cu_seqlens has no entries; pass NULL for B "
                          "sequences of T tokens");
  if (!cuSeqlens)
    return {};
  return std::vector<int64_t>(cuSeqlens, cuSeqlens + count);
}

/// A linac_dtype as the C++ API's DType. C may store any int in a
/// linac_dtype, while C++ may assume an enum holds only its enumerators'
/// values: read the int, and let the C++ API reject values it does not
/// name.
static linac::DType dtypeOf(const linac_dtype &dtype) {
  static_assert(sizeof(linac_dtype) == sizeof(int) &&
                LINAC_FLOAT32 == int(linac::DType::Float32) &&
                LINAC_BFLOAT16 == int(linac::DType::BFloat16) &&
                LINAC_FLOAT16 == int(linac::DType::Float16));
  int value;
  std::memcpy(&value, &dtype, sizeof value);
  return static_cast<linac::DType>(value);
}

template <typename F> static linac_status guarded(F body) {
  try {
    body();
    return LINAC_OK;
  } catch (const linac::Error &e) {
    lastError = e.what();
    switch (e.kind) {
    case linac::Error::Kind::InvalidArgument:
      return LINAC_ERROR_INVALID_ARGUMENT;
    case linac::Error::Kind::Package:
      return LINAC_ERROR_PACKAGE;
    case linac::Error::Kind::Kernel:
      return LINAC_ERROR_KERNEL;
    case linac::Error::Kind::Driver:
      return LINAC_ERROR_DRIVER;
    }
  } catch (const std::exception &e) {
    lastError = e.what();
  } catch (...) {
    // Nothing may unwind into C.
    lastError = "unknown error";
  }
  return LINAC_ERROR_PACKAGE;
}

/// The fields the host and device decode arguments share.
template <typename Request, typename Tensor, typename CArgs>
static Request decodeRequestOf(const char *caller, const linac_package *package,
                               const CArgs *args) {
  if (!package || !args)
    throw invalidArgument(std::string(caller) +
                          " needs a package and arguments");
  if (!args->pool_shape || (args->num_sequences && !args->state_indices))
    throw invalidArgument(std::string(caller) +
                          " needs pool_shape and state_indices");
  Request request;
  request.tensors = tensorsOf<Tensor>(args->tensors, args->num_tensors);
  request.statePool = args->state_pool;
  request.poolShape.assign(args->pool_shape, args->pool_shape + 4);
  if constexpr (std::is_same_v<Request, linac::DecodeRequest>) {
    request.stateIndices.assign(args->state_indices,
                                args->state_indices + args->num_sequences);
  } else {
    request.stateIndices = args->state_indices;
    request.numStateIndices = args->num_sequences;
  }
  request.output = args->output;
  request.scale = args->scale;
  return request;
}

extern "C" {

const char *linac_last_error(void) { return lastError.c_str(); }

linac_status linac_package_open(const char *path, linac_package **package) {
  return guarded([&] {
    if (!path || !package)
      throw invalidArgument(
          "linac_package_open needs a path and an out pointer");
    *package = new linac_package{linac::Package::open(path)};
  });
}

void linac_package_close(linac_package *package) { delete package; }

size_t linac_package_num_arguments(const linac_package *package) {
  return package ? package->package->arguments().size() : 0;
}

linac_status linac_package_argument(const linac_package *package, size_t i,
                                    const char **name, const char **role,
                                    const char **shape) {
  return guarded([&] {
    if (!package)
      throw invalidArgument("linac_package_argument needs a package");
    if (i >= package->package->arguments().size())
      throw invalidArgument("no argument " + std::to_string(i));
    const linac::ArgumentInfo &arg = package->package->arguments()[i];
    if (name)
      *name = arg.name.c_str();
    if (role)
      *role = arg.role.c_str();
    if (shape)
      *shape = arg.shape.c_str();
  });
}

const char *linac_package_target(const linac_package *package) {
  return package ? package->package->target().c_str() : "";
}

linac_status linac_forward_host(linac_package *package,
                                const linac_forward_args *args) {
  return guarded([&] {
    if (!package || !args)
      throw invalidArgument("linac_forward_host needs a package and arguments");
    linac::ForwardRequest request;
    request.tensors =
        tensorsOf<linac::HostTensor>(args->tensors, args->num_tensors);
    request.cuSeqlens = cuSeqlensOf(args->cu_seqlens, args->num_cu_seqlens);
    request.initialState = args->initial_state;
    request.finalState = args->final_state;
    request.output = args->output;
    request.scale = args->scale;
    package->package->forward(request);
  });
}

linac_status linac_decode_host(linac_package *package,
                               const linac_decode_args *args) {
  return guarded([&] {
    // The request first: it checks the package pointer.
    auto request = decodeRequestOf<linac::DecodeRequest, linac::HostTensor>(
        "linac_decode_host", package, args);
    package->package->decode(request);
  });
}

linac_status linac_decode_device(linac_package *package,
                                 const linac_device_decode_args *args) {
  return guarded([&] {
    auto request =
        decodeRequestOf<linac::DeviceDecodeRequest, linac::DeviceTensor>(
            "linac_decode_device", package, args);
    request.dtype = dtypeOf(args->dtype);
    request.stream = args->stream;
    package->package->decodeDevice(request);
  });
}

linac_status linac_states_from_pool(const linac_package *package,
                                    const float *pool, int64_t pool_slots,
                                    int64_t heads, const int64_t *indices,
                                    size_t count, float *states) {
  return guarded([&] {
    if (!package || !pool || !states || (count && !indices))
      throw invalidArgument("linac_states_from_pool needs a package, buffers "
                            "and indices");
    package->package->statesFromPool(
        pool, pool_slots, heads, std::vector<int64_t>(indices, indices + count),
        states);
  });
}

linac_status linac_states_to_pool(const linac_package *package,
                                  const float *states, int64_t heads,
                                  const int64_t *indices, size_t count,
                                  float *pool, int64_t pool_slots) {
  return guarded([&] {
    if (!package || !pool || !states || (count && !indices))
      throw invalidArgument("linac_states_to_pool needs a package, buffers "
                            "and indices");
    package->package->statesToPool(
        states, heads, std::vector<int64_t>(indices, indices + count), pool,
        pool_slots);
  });
}

linac_status linac_forward_device(linac_package *package,
                                  const linac_device_forward_args *args) {
  return guarded([&] {
    if (!package || !args)
      throw invalidArgument(
          "linac_forward_device needs a package and arguments");
    linac::DeviceForwardRequest request;
    request.tensors =
        tensorsOf<linac::DeviceTensor>(args->tensors, args->num_tensors);
    request.dtype = dtypeOf(args->dtype);
    request.cuSeqlens = cuSeqlensOf(args->cu_seqlens, args->num_cu_seqlens);
    request.initialState = args->initial_state;
    request.finalState = args->final_state;
    request.output = args->output;
    request.scale = args->scale;
    request.stream = args->stream;
    package->package->forwardDevice(request);
  });
}

} // extern "C"
