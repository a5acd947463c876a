//===- package.cpp - opening a package ------------------------------------===//
//
// Reads and checks a package's manifest and the integrity of its kernel
// file, then loads the kernels (docs/runtime.md).
//
//===----------------------------------------------------------------------===//

#include "linac/package.h"
#include "linac/integrity.h"

#include "checks.h"
#include "cuda_driver.h"
#include "linac/contract.h"
#include "linac/cpu/abi.h"
#include "linac/cuda/abi.h"

#include <algorithm>
#include <dlfcn.h>
#include <fstream>
#include <sstream>

namespace linac {

using detail::argumentError;
using detail::packageError;

const char *dtypeName(DType dtype) {
  std::string_view name = manifest::nameOf(dtype);
  return name.empty() ? nullptr : name.data();
}

bool hostRuns(manifest::CpuIsa isa) {
  if (const char *cap = std::getenv("LINAC_CPU_ISA")) {
    std::optional<manifest::CpuIsa> most = manifest::parse<manifest::CpuIsa>(cap);
    if (!most)
      throw argumentError(std::string("LINAC_CPU_ISA is '") + cap +
                          "'; expected " + manifest::namesOf<manifest::CpuIsa>());
    if (isa > *most)
      return false;
  }
  switch (isa) {
  case manifest::CpuIsa::Baseline:
    return true;
  case manifest::CpuIsa::Avx2Fma:
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
  }
  return false;
}

/// Of a CPU package's entries, the one for the richest instruction set
/// this host runs.
static const manifest::Kernel &
cpuKernelFor(const std::vector<manifest::Kernel> &kernels) {
  const manifest::Kernel *best = &kernels.front();
  for (const manifest::Kernel &kernel : kernels)
    if (kernel.isa && hostRuns(*kernel.isa) &&
        *kernel.isa > best->isa.value_or(manifest::CpuIsa::Baseline))
      best = &kernel;
  return *best;
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
  package->kernelFiles_ = manifest::kernelFiles(info);
  package->kernelFile_ = package->kernelFiles_.front();
  if (!device) {
    // The schema keeps each instruction set's entries in one file.
    const manifest::Kernel &forward = cpuKernelFor(info.kernels);
    const manifest::Kernel &decode = cpuKernelFor(info.decode.kernels);
    package->kernelFile_ = forward.file;
    package->kernelFiles_ = {forward.file};
    package->forwardEntry_ = forward.entry;
    package->decodeEntry_ = decode.entry;
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
                         unsigned(kernel.sharedMemory.value()),
                         kernel.family != manifest::Family::Recurrent});
    return kernels;
  };
  package->kernels_ = kernelsOf(info.kernels);
  if (info.segments) {
    package->composeKernel_ = kernelsOf({info.segments->compose}).front();
    package->transitionBlocks_ = info.segments->transitionBlocks;
  }
  if (info.phased) {
    package->preparingKernels_ = kernelsOf(info.phased->prepare);
    package->phasedKernels_ = kernelsOf(info.phased->state);
    package->preparedChunkBytes_ = info.phased->chunkBytes;
    package->phasedUse_ = info.phased->use;
  }
  package->decodeKernels_ = kernelsOf(info.decode.kernels);
  if (info.hasBackward())
    package->backwardKernels_ = kernelsOf(info.backwardKernels);
  package->decodeParts_ = info.decode.parts.value();
  package->decodeTensorMap_ =
      info.decode.staging == manifest::DecodeStaging::Tensor;
}

void Package::loadKernels(const std::string &path) {
  const manifest::Integrity &integrity = *info_.integrity;
  if (runsOnDevice()) {
    std::vector<std::string> images;
    for (const std::string &file : kernelFiles_)
      images.push_back(verifiedBinary(path, manifest_, integrity, file));
    modules_ = std::make_unique<cuda::ModuleCache>(std::move(images));
    return;
  }
  // dlopen maps the file, and a file shorter than its headers say faults
  // there: check the bytes first. The files of other instruction sets are
  // checked too: a package is whole or refused, whichever file this host
  // takes.
  verifiedBinary(path, manifest_, integrity, kernelFile_);
  for (const manifest::Kernel &kernel : info_.kernels)
    if (kernel.file != kernelFile_)
      verifiedBinary(path, manifest_, integrity, kernel.file);
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
  if (!info_.hasBackward())
    return;
  backward_ = dlsym(library_, "linac_cpu_backward");
  if (!backward_)
    throw packageError(path, "kernel has no entry 'linac_cpu_backward'");
}

Package::Package() = default;

Package::~Package() {
  if (library_)
    dlclose(library_);
}

void Package::requireBackward() const {
  if (!info_.hasBackward())
    throw argumentError("@" + layer_ +
                        "'s package was compiled without its backward pass "
                        "(linac compile --no-backward); compile it without "
                        "that option for gradients");
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

} // namespace linac
