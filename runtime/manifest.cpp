//===- manifest.cpp - reading and writing manifest.json -------------------===//

#include "linac/manifest.h"
#include "linac/cuda/geometry.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <type_traits>

namespace linac::manifest {
namespace {

using nlohmann::json;

template <typename T, typename = void> struct HasFields : std::false_type {};
template <typename T>
struct HasFields<T, std::void_t<decltype(T::fields(std::declval<T &>(),
                                                   std::declval<int (&)(...)>()))>>
    : std::true_type {};

[[noreturn]] void fail(const std::string &field, const json &value,
                       const std::string &expected) {
  throw SchemaError(field + " is " + value.dump() + "; expected " + expected);
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

template <typename T> json toJson(const T &value);
template <typename T> json toJson(const std::vector<T> &values);
template <typename T> json toJson(const std::map<std::string, T> &values);

struct Writer {
  json &object;

  template <typename T>
  void operator()(const char *key, const T &value, Bounds = {}) {
    object[key] = toJson(value);
  }
  template <typename T>
  void operator()(const char *key, const std::optional<T> &value, Bounds = {}) {
    if (value)
      object[key] = toJson(*value);
  }
  void operator()(const char *key, const std::string &text,
                  Manifest::JsonText) {
    object[key] = json::parse(text);
  }
};

template <typename T> json toJson(const T &value) {
  if constexpr (std::is_enum_v<T>) {
    return std::string(nameOf(value));
  } else if constexpr (HasFields<T>::value) {
    json object = json::object();
    T::fields(value, Writer{object});
    return object;
  } else {
    return value;
  }
}

template <typename T> json toJson(const std::vector<T> &values) {
  json array = json::array();
  for (const T &value : values)
    array.push_back(toJson(value));
  return array;
}

template <typename T> json toJson(const std::map<std::string, T> &values) {
  json object = json::object();
  for (const auto &[key, value] : values)
    object[key] = toJson(value);
  return object;
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

void fromJson(const json &value, const std::string &field, int64_t &out,
              Bounds bounds) {
  // Non-negative JSON integers parse as unsigned: compare them as such.
  bool inRange =
      value.is_number_integer() &&
      (value.is_number_unsigned()
           ? bounds.min <= 0 || value.get<uint64_t>() >= uint64_t(bounds.min)
           : value.get<int64_t>() >= bounds.min) &&
      (value.is_number_unsigned() ? value.get<uint64_t>() <= uint64_t(bounds.max)
                                  : value.get<int64_t>() <= bounds.max);
  if (!inRange)
    fail(field, value,
         "an integer from " + std::to_string(bounds.min) + " to " +
             std::to_string(bounds.max));
  out = value.get<int64_t>();
}

void fromJson(const json &value, const std::string &field, bool &out, Bounds) {
  if (!value.is_boolean())
    fail(field, value, "true or false");
  out = value.get<bool>();
}

void fromJson(const json &value, const std::string &field, std::string &out,
              Bounds) {
  if (!value.is_string())
    fail(field, value, "a string");
  out = value.get<std::string>();
}

template <typename T>
void fromJson(const json &value, const std::string &field, std::vector<T> &out,
              Bounds bounds);
template <typename T>
void fromJson(const json &value, const std::string &field,
              std::map<std::string, T> &out, Bounds bounds);

template <typename T>
std::enable_if_t<std::is_enum_v<T> || HasFields<T>::value>
fromJson(const json &value, const std::string &field, T &out, Bounds);

struct Reader {
  const json &object;
  std::string prefix;

  const json *find(const char *key) const {
    auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  }
  std::string field(const char *key) const { return prefix + key; }

  template <typename T>
  void operator()(const char *key, T &out, Bounds bounds = {}) const {
    const json *value = find(key);
    if (!value)
      throw SchemaError(field(key) + " is missing");
    fromJson(*value, field(key), out, bounds);
  }
  template <typename T>
  void operator()(const char *key, std::optional<T> &out,
                  Bounds bounds = {}) const {
    out.reset();
    if (const json *value = find(key))
      fromJson(*value, field(key), out.emplace(), bounds);
  }
  void operator()(const char *key, std::string &out, Manifest::JsonText) const {
    const json *value = find(key);
    if (!value)
      throw SchemaError(field(key) + " is missing");
    out = value->dump();
  }
};

template <typename T>
std::enable_if_t<std::is_enum_v<T> || HasFields<T>::value>
fromJson(const json &value, const std::string &field, T &out, Bounds) {
  if constexpr (std::is_enum_v<T>) {
    std::optional<T> parsed =
        value.is_string() ? parse<T>(value.get<std::string>()) : std::nullopt;
    if (!parsed)
      fail(field, value, namesOf<T>());
    out = *parsed;
  } else {
    if (!value.is_object())
      fail(field, value, "an object");
    T::fields(out, Reader{value, field + "."});
  }
}

template <typename T>
void fromJson(const json &value, const std::string &field, std::vector<T> &out,
              Bounds bounds) {
  if (!value.is_array())
    fail(field, value, "an array");
  out.clear();
  for (const json &element : value) {
    std::string elementField = field + "[" + std::to_string(out.size()) + "]";
    fromJson(element, elementField, out.emplace_back(), bounds);
  }
}

template <typename T>
void fromJson(const json &value, const std::string &field,
              std::map<std::string, T> &out, Bounds bounds) {
  if (!value.is_object())
    fail(field, value, "an object");
  out.clear();
  for (const auto &[key, element] : value.items())
    fromJson(element, field + "." + key, out[key], bounds);
}

//===----------------------------------------------------------------------===//
// What the fields must agree on
//===----------------------------------------------------------------------===//

bool isGpu(Target target) { return target != Target::Cpu; }

/// A kernel file's name must name a file inside the package.
void checkFile(const std::string &file, const std::string &field) {
  if (file.empty() || file == "." || file == ".." ||
      file.find('/') != std::string::npos)
    throw SchemaError(field + " '" + file + "' is not a file of the package");
}

/// A CPU package's file of its forward kernels for `isa` (one file per
/// instruction set).
const std::string &kernelFileFor(const Manifest &manifest,
                                 std::optional<CpuIsa> isa) {
  for (const Kernel &kernel : manifest.kernels)
    if (kernel.isa == isa)
      return kernel.file;
  return manifest.kernels.front().file;
}

void checkKernel(const Manifest &manifest, const Kernel &kernel,
                 KernelGroup group, const std::string &field) {
  checkFile(kernel.file, field + ".file");
  if (kernel.isa && isGpu(manifest.target))
    throw SchemaError(field + ".isa is " +
                      std::string(nameOf(*kernel.isa)) +
                      "; only CPU kernels name one");
  const std::string file = isGpu(manifest.target)
                               ? cudaKernelFile(cudaKernelPart(group))
                               : kernelFileFor(manifest, kernel.isa);
  if (kernel.file != file)
    throw SchemaError(field + ".file '" + kernel.file +
                      "' is not the package's kernel file '" + file + "'");
  if (isGpu(manifest.target) && (!kernel.blockThreads || !kernel.sharedMemory))
    throw SchemaError(field + " '" + kernel.entry +
                      "' has no block_threads or shared_memory");
}

void checkKernels(const Manifest &manifest, const std::vector<Kernel> &kernels,
                  KernelGroup group, const std::string &list) {
  for (size_t i = 0; i < kernels.size(); ++i)
    checkKernel(manifest, kernels[i], group,
                list + "[" + std::to_string(i) + "]");
}

void checkArguments(const Manifest &manifest) {
  std::set<std::string> names;
  bool input = false;
  for (size_t i = 0; i < manifest.arguments.size(); ++i) {
    const Argument &arg = manifest.arguments[i];
    std::string field = "arguments[" + std::to_string(i) + "]";
    if (arg.name.empty())
      throw SchemaError(field + ".name is empty");
    if (!names.insert(arg.name).second)
      throw SchemaError(field + ".name '" + arg.name + "' appears twice");
    if (arg.role == Role::Runtime)
      throw SchemaError(field + ".role of '" + arg.name +
                        "' is runtime; expected input or param");
    if (arg.kind == Kind::State || arg.kind == Kind::Index)
      throw SchemaError(field + ".kind of '" + arg.name + "' is " +
                        std::string(nameOf(arg.kind)) +
                        "; expected key, value, scalar or matrix");
    input |= arg.role == Role::Input;
  }
  if (!input)
    throw SchemaError("arguments has no input");
}

void checkAgreement(const Manifest &manifest) {
  if (!manifest.integrity)
    throw SchemaError("integrity is missing");
  if (manifest.plan.target != manifest.target)
    throw SchemaError("plan.target differs from target");
  checkArguments(manifest);
  if (manifest.kernels.empty())
    throw SchemaError("kernels is empty");
  for (size_t i = 0; i < manifest.kernels.size(); ++i) {
    const Kernel &kernel = manifest.kernels[i];
    checkKernel(manifest, kernel,
                kernel.family == Family::Recurrent ? KernelGroup::Scan
                                                   : KernelGroup::Chunk,
                "kernels[" + std::to_string(i) + "]");
  }
  if (!manifest.hasBackward() && !manifest.backwardKernels.empty())
    throw SchemaError("backward_kernels are listed for a package without "
                      "its backward");
  if (manifest.hasBackward() &&
      isGpu(manifest.target) == manifest.backwardKernels.empty())
    throw SchemaError(manifest.backwardKernels.empty()
                          ? "backward_kernels is empty"
                          : "backward_kernels are a GPU package's");
  checkKernels(manifest, manifest.backwardKernels, KernelGroup::Backward,
               "backward_kernels");
  if (manifest.decode.kernels.empty())
    throw SchemaError("decode.kernels is empty");
  checkKernels(manifest, manifest.decode.kernels, KernelGroup::Decode,
               "decode.kernels");
  if (manifest.segments) {
    if (!isGpu(manifest.target))
      throw SchemaError("segments are a GPU package's");
    checkKernel(manifest, manifest.segments->compose, KernelGroup::Compose,
                "segments.compose");
  }
  if (manifest.plan.phased.has_value() != manifest.phased.has_value())
    throw SchemaError(manifest.phased ? "phased is only a plan.phased plan's"
                                      : "phased is missing for plan.phased");
  if (const std::optional<Phased> &phased = manifest.phased) {
    if (phased->state.empty() || phased->prepare.size() != phased->state.size())
      throw SchemaError("phased.state is empty or not one kernel for each of "
                        "phased.prepare's");
    for (size_t i = 0; i < phased->state.size(); ++i)
      if (phased->prepare[i].dtype != phased->state[i].dtype)
        throw SchemaError("phased.prepare[" + std::to_string(i) +
                          "] and phased.state[" + std::to_string(i) +
                          "] differ in dtype");
    checkKernels(manifest, phased->prepare, KernelGroup::Phased,
                 "phased.prepare");
    checkKernels(manifest, phased->state, KernelGroup::Phased, "phased.state");
    if (phased->chunkBytes % 16 != 0)
      throw SchemaError("phased.chunk_bytes " +
                        std::to_string(phased->chunkBytes) +
                        " is not a multiple of 16");
  }
  if (manifest.plan.tensorOutput && !isGpu(manifest.target))
    throw SchemaError("plan.tensor_output is a GPU package's");
  if (const auto &tensorInputs = manifest.plan.tensorInputs) {
    if (!isGpu(manifest.target))
      throw SchemaError("plan.tensor_inputs are a GPU package's");
    const auto inputs = std::count_if(
        manifest.arguments.begin(), manifest.arguments.end(),
        [](const Argument &arg) { return arg.role == Role::Input; });
    for (int64_t index : *tensorInputs)
      if (index < 0 || index >= inputs)
        throw SchemaError("plan.tensor_inputs names input " +
                          std::to_string(index) + " of " +
                          std::to_string(inputs));
  }
  if (const auto &rowInputs = manifest.plan.rowInputs) {
    // The runtime moves each tensor input in swizzled boxes of whole
    // LINAC_CUDA_SWIZZLED_BOX_COLUMNS columns, which only the rows of a
    // key or a value fill.
    const auto &tensorInputs = manifest.plan.tensorInputs;
    if (!tensorInputs || rowInputs->size() != 3)
      throw SchemaError("plan.row_inputs are three of the plan's "
                        "tensor_inputs");
    std::vector<const Argument *> inputs;
    for (const Argument &arg : manifest.arguments)
      if (arg.role == Role::Input)
        inputs.push_back(&arg);
    auto isRowInput = [&](int64_t index) {
      return std::find(rowInputs->begin(), rowInputs->end(), index) !=
             rowInputs->end();
    };
    for (int64_t index : *rowInputs)
      if (std::find(tensorInputs->begin(), tensorInputs->end(), index) ==
          tensorInputs->end())
        throw SchemaError("plan.row_inputs names input " +
                          std::to_string(index) +
                          ", which is not a tensor input");
    for (int64_t index : *tensorInputs) {
      const Argument &arg = *inputs[size_t(index)];
      const int64_t size = arg.kind == Kind::Key     ? manifest.keyDim
                           : arg.kind == Kind::Value ? manifest.valueDim
                                                     : 0;
      if (!isRowInput(index) || size % LINAC_CUDA_SWIZZLED_BOX_COLUMNS != 0 ||
          size == 0)
        throw SchemaError("tensor input '" + arg.name +
                          "' of a package with plan.row_inputs is not a row "
                          "of whole swizzled boxes");
    }
  }
  if (isGpu(manifest.target)) {
    if (!manifest.decode.parts || !manifest.decode.staging)
      throw SchemaError("decode.parts and decode.staging are a GPU "
                        "package's");
    if (manifest.valueDim % *manifest.decode.parts != 0)
      throw SchemaError("decode.parts " +
                        std::to_string(*manifest.decode.parts) +
                        " does not divide value_dim " +
                        std::to_string(manifest.valueDim));
  }
}

} // namespace

bool chunkwiseFor(const Plan &plan, DType dtype) {
  if (plan.family == Family::Recurrent || dtype == DType::Float32)
    return false;
  return dtype == DType::BFloat16 || plan.chunkwiseFloat16.value_or(true);
}

std::vector<int64_t> trailingDims(Kind kind, int64_t keyDim, int64_t valueDim) {
  switch (kind) {
  case Kind::Key:
    return {keyDim};
  case Kind::Value:
    return {valueDim};
  case Kind::Matrix:
    return {keyDim, valueDim};
  default:
    return {};
  }
}

std::string shapeText(Role role, Kind kind) {
  std::string features = kind == Kind::Key      ? ", K"
                         : kind == Kind::Value  ? ", V"
                         : kind == Kind::Matrix ? ", K, V"
                                                : "";
  return role == Role::Param ? "[H" + features + "]"
                             : "[B, T, H" + features + "]";
}

std::vector<RuntimeArgument> runtimeArguments(bool normalizer) {
  std::string state = normalizer ? "[N, H, K, V + 1]" : "[N, H, K, V]";
  return {{"cu_seqlens", Kind::Index, "[N + 1] (optional, B = 1)"},
          {"initial_state", Kind::State, state + " (optional)"},
          {"final_state", Kind::State, state},
          {"o", Kind::Value, "[B, T, H, V]"}};
}

int cudaKernelPart(KernelGroup group) {
  switch (group) {
  case KernelGroup::Chunk:
  case KernelGroup::Compose:
  case KernelGroup::Backward:
    return 0;
  case KernelGroup::Scan:
  case KernelGroup::Phased:
  case KernelGroup::Decode:
    return 1;
  }
  return 0;
}

std::string cudaKernelFile(int part) {
  return part == 0 ? "layer.cubin" : "layer." + std::to_string(part) + ".cubin";
}

/// The file of a GPU package's `group`.
static std::string fileOf(KernelGroup group) {
  return cudaKernelFile(cudaKernelPart(group));
}

std::vector<Kernel> forwardKernels(const Plan &plan, const std::string &file) {
  if (plan.target == Target::Cpu)
    return {{"linac_cpu_forward", file, DType::Float32, plan.family}};
  std::vector<Kernel> kernels;
  for (DType dtype : {DType::BFloat16, DType::Float16})
    if (chunkwiseFor(plan, dtype))
      kernels.push_back({"linac_chunk_" + std::string(nameOf(dtype)),
                         fileOf(KernelGroup::Chunk), dtype, plan.family,
                         plan.blockThreads, plan.sharedMemory});
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16})
    if (!chunkwiseFor(plan, dtype))
      kernels.push_back({"linac_scan_" + std::string(nameOf(dtype)),
                         fileOf(KernelGroup::Scan), dtype, Family::Recurrent,
                         plan.scanBlockThreads, int64_t(0)});
  return kernels;
}

std::vector<Kernel> backwardKernels(const Plan &plan) {
  if (plan.target == Target::Cpu)
    return {};
  const std::string file = fileOf(KernelGroup::Backward);
  // Each kernel takes every activation dtype (an argument), named float32.
  if (plan.backwardFamily.value_or(Family::Recurrent) == Family::Recurrent)
    return {{"linac_scan_backward", file, DType::Float32, Family::Recurrent,
             plan.scanBlockThreads, int64_t(0)}};
  // The kernels whose blocks hold a chunk take shared memory; the walks'
  // blocks have more threads.
  struct Launch {
    const char *name;
    bool chunkBlocks;
    int threads;
  };
  const Launch launches[] = {
      {"operands", false, cuda::kBackwardThreads},
      {"prepare", true, cuda::kBackwardThreads},
      {"states", true, cuda::kBackwardWalkThreads},
      {"reads", false, cuda::kBackwardThreads},
      {"state_gradients", true, cuda::kBackwardWalkThreads},
      {"chunks", true, cuda::kBackwardThreads},
      {"arguments", false, cuda::kBackwardThreads}};
  std::vector<Kernel> kernels;
  for (const Launch &launch : launches)
    kernels.push_back(
        {std::string("linac_backward_") + launch.name, file, DType::Float32,
         *plan.backwardFamily, int64_t(launch.threads),
         launch.chunkBlocks ? plan.backwardSharedMemory.value() : int64_t(0)});
  return kernels;
}

std::optional<Segments> segmentsFor(const Plan &plan) {
  if (plan.target == Target::Cpu || plan.family == Family::Recurrent)
    return std::nullopt;
  return Segments{{"linac_segment_compose", fileOf(KernelGroup::Compose),
                   DType::Float32, plan.family, plan.composeBlockThreads,
                   plan.composeSharedMemory},
                  plan.transitionBlocks.value()};
}

std::optional<Phased> phasedFor(const Plan &plan) {
  if (!plan.phased)
    return std::nullopt;
  const std::string file = fileOf(KernelGroup::Phased);
  Phased phased;
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    if (!chunkwiseFor(plan, dtype))
      continue;
    std::string name(nameOf(dtype));
    phased.prepare.push_back({"linac_prepare_" + name, file, dtype, plan.family,
                              plan.prepareBlockThreads,
                              plan.prepareSharedMemory});
    phased.state.push_back({"linac_phased_" + name, file, dtype, plan.family,
                            plan.phasedBlockThreads, plan.phasedSharedMemory});
  }
  phased.chunkBytes = plan.preparedChunkBytes.value();
  phased.use = *plan.phased;
  return phased;
}

std::vector<Kernel> decodeKernels(const Plan &plan, const std::string &file) {
  if (plan.target == Target::Cpu)
    return {{"linac_cpu_decode", file, DType::Float32, Family::Recurrent}};
  std::vector<Kernel> kernels;
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16})
    kernels.push_back({"linac_decode_" + std::string(nameOf(dtype)),
                       fileOf(KernelGroup::Decode), dtype, Family::Recurrent,
                       plan.decodeBlockThreads, plan.decodeSharedMemory});
  return kernels;
}

std::vector<std::string> kernelFiles(const Manifest &manifest) {
  std::vector<std::string> files;
  auto add = [&](const std::vector<Kernel> &kernels) {
    for (const Kernel &kernel : kernels)
      if (std::find(files.begin(), files.end(), kernel.file) == files.end())
        files.push_back(kernel.file);
  };
  add(manifest.kernels);
  add(manifest.backwardKernels);
  add(manifest.decode.kernels);
  if (manifest.segments)
    add({manifest.segments->compose});
  if (manifest.phased) {
    add(manifest.phased->prepare);
    add(manifest.phased->state);
  }
  return files;
}

void addIsaVariant(Manifest &manifest, CpuIsa isa, const std::string &file) {
  for (std::vector<Kernel> *kernels :
       {&manifest.kernels, &manifest.decode.kernels}) {
    const size_t count = kernels->size();
    for (size_t i = 0; i < count; ++i) {
      if ((*kernels)[i].isa.value_or(CpuIsa::Baseline) != CpuIsa::Baseline)
        continue;
      (*kernels)[i].isa = CpuIsa::Baseline;
      Kernel variant = (*kernels)[i];
      variant.file = file;
      variant.isa = isa;
      kernels->push_back(variant);
    }
  }
}

Manifest read(const std::string &text) {
  json object = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded())
    throw SchemaError("not valid JSON (truncated or damaged)");
  if (!object.is_object())
    throw SchemaError("the manifest is not a JSON object");
  Manifest manifest;
  Reader reader{object, ""};
  // An older or newer format is named before any field it may lack.
  reader("format", manifest.format,
         Bounds{0, std::numeric_limits<int>::max()});
  if (manifest.format != kFormat)
    throw SchemaError("manifest format " + std::to_string(manifest.format) +
                      " is not the supported format " +
                      std::to_string(kFormat) + "; compile the spec again");
  Manifest::fields(manifest, reader);
  checkAgreement(manifest);
  return manifest;
}

std::string write(const Manifest &manifest) {
  return toJson(manifest).dump(2) + "\n";
}

} // namespace linac::manifest
