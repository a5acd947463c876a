//===- package.cpp - loading and running CPU packages ---------------------===//

#include "linac/package.h"
#include "linac/runtime.h"

#include "linac/cpu/abi.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <dlfcn.h>
#include <fstream>
#include <numeric>
#include <sstream>

namespace linac {

static constexpr int kManifestFormat = 1;

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

std::unique_ptr<Package> Package::open(const std::string &path) {
  std::ifstream in(path + "/manifest.json");
  if (!in)
    throw packageError(path, "no manifest.json (is this a .linac package?)");
  std::stringstream text;
  text << in.rdbuf();
  std::unique_ptr<Package> package(new Package());
  package->manifest_ = text.str();
  try {
    nlohmann::json manifest = nlohmann::json::parse(package->manifest_);
    if (manifest.at("format").get<int>() != kManifestFormat)
      throw packageError(path, "manifest format " +
                                   manifest.at("format").dump() +
                                   " is not the supported format " +
                                   std::to_string(kManifestFormat));
    package->target_ = manifest.at("target").get<std::string>();
    if (package->target_ != "cpu")
      throw packageError(path, "package is for target '" + package->target_ +
                                   "'; this runtime runs cpu packages on the host");
    package->layer_ = manifest.at("layer").get<std::string>();
    package->keyDim_ = manifest.at("key_dim").get<int64_t>();
    package->valueDim_ = manifest.at("value_dim").get<int64_t>();
    if (package->keyDim_ <= 0 || package->valueDim_ <= 0)
      throw packageError(path, "manifest has non-positive dimensions");
    for (const nlohmann::json &arg : manifest.at("arguments")) {
      ArgumentInfo info{arg.at("name").get<std::string>(),
                        arg.at("role").get<std::string>(),
                        arg.at("kind").get<std::string>(),
                        arg.at("shape").get<std::string>()};
      if (info.role == "input")
        package->inputs_.push_back(info);
      else if (info.role == "param")
        package->params_.push_back(info);
      package->arguments_.push_back(std::move(info));
    }
    std::string library =
        path + "/" + manifest.at("kernels").at(0).at("file").get<std::string>();
    std::string entry =
        manifest.at("kernels").at(0).at("entry").get<std::string>();
    package->library_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!package->library_)
      throw packageError(path, std::string("cannot load kernel: ") + dlerror());
    auto version = reinterpret_cast<linac_cpu_abi_version_fn>(
        dlsym(package->library_, "linac_cpu_abi_version"));
    if (!version || version() != LINAC_CPU_ABI_VERSION)
      throw packageError(path, "kernel was built for another CPU ABI version");
    package->forward_ = dlsym(package->library_, entry.c_str());
    if (!package->forward_)
      throw packageError(path, "kernel has no entry '" + entry + "'");
  } catch (const nlohmann::json::exception &e) {
    throw packageError(path, std::string("corrupt manifest: ") + e.what());
  }
  return package;
}

Package::~Package() {
  if (library_)
    dlclose(library_);
}

/// Elements per token (inputs) or per head (parameters) of a kind.
static std::vector<int64_t> trailingDims(const std::string &kind, int64_t k,
                                         int64_t v) {
  if (kind == "key")
    return {k};
  if (kind == "value")
    return {v};
  if (kind == "matrix")
    return {k, v};
  return {};
}

ForwardShape Package::check(const ForwardRequest &request) const {
  ForwardShape shape;
  for (const auto &[name, tensor] : request.tensors) {
    bool known = false;
    for (const ArgumentInfo &arg : arguments_)
      known |= arg.name == name && arg.role != "runtime";
    if (!known)
      throw argumentError("'" + name + "' is not an argument of layer @" +
                          layer_);
  }
  auto tensorOf = [&](const ArgumentInfo &arg) -> const HostTensor & {
    auto it = request.tensors.find(arg.name);
    if (it == request.tensors.end())
      throw argumentError("missing " + arg.role + " '" + arg.name +
                          "', shape " + arg.shape);
    if (!it->second.data)
      throw argumentError(arg.role + " '" + arg.name + "' has no data");
    return it->second;
  };
  auto fail = [&](const ArgumentInfo &arg, const HostTensor &t,
                  const std::string &why) {
    return argumentError(arg.role + " '" + arg.name + "' has shape " +
                         shapeString(t.shape) + ", expected " + arg.shape +
                         ": " + why);
  };

  bool first = true;
  std::vector<int64_t> heads;
  for (const ArgumentInfo &arg : inputs_) {
    const HostTensor &t = tensorOf(arg);
    std::vector<int64_t> trailing = trailingDims(arg.kind, keyDim_, valueDim_);
    if (t.shape.size() != 3 + trailing.size())
      throw fail(arg, t, "wrong rank");
    if (!std::equal(trailing.begin(), trailing.end(), t.shape.begin() + 3))
      throw fail(arg, t, "feature dimensions differ from the layer's");
    if (first) {
      shape.batch = t.shape[0];
      shape.tokens = t.shape[1];
      first = false;
    } else if (t.shape[0] != shape.batch || t.shape[1] != shape.tokens) {
      throw fail(arg, t, "batch and time differ from the first input's [" +
                             std::to_string(shape.batch) + ", " +
                             std::to_string(shape.tokens) + ", ...]");
    }
    if (t.shape[2] <= 0)
      throw fail(arg, t, "no heads");
    heads.push_back(t.shape[2]);
    shape.heads = std::max(shape.heads, t.shape[2]);
  }
  for (const ArgumentInfo &arg : params_) {
    const HostTensor &t = tensorOf(arg);
    std::vector<int64_t> trailing = trailingDims(arg.kind, keyDim_, valueDim_);
    if (t.shape.size() != 1 + trailing.size() ||
        !std::equal(trailing.begin(), trailing.end(), t.shape.begin() + 1) ||
        t.shape[0] <= 0)
      throw fail(arg, t, "parameters are [H] or [H, D]");
    heads.push_back(t.shape[0]);
  }
  for (int64_t h : heads)
    if (shape.heads % h != 0)
      throw argumentError("head counts must divide the largest, " +
                          std::to_string(shape.heads) + "; got " +
                          std::to_string(h));
  if (shape.batch < 0 || shape.tokens < 0)
    throw argumentError("negative batch or time");

  if (request.cuSeqlens.empty()) {
    shape.sequences = shape.batch;
  } else {
    const std::vector<int64_t> &cu = request.cuSeqlens;
    if (shape.batch != 1)
      throw argumentError("cu_seqlens needs batch 1 (a packed token axis), "
                          "got batch " + std::to_string(shape.batch));
    if (cu.size() < 2 || cu.front() != 0 || cu.back() != shape.tokens)
      throw argumentError("cu_seqlens must start at 0 and end at T = " +
                          std::to_string(shape.tokens) + ", got " +
                          shapeString(cu));
    for (size_t i = 1; i < cu.size(); ++i)
      if (cu[i] < cu[i - 1])
        throw argumentError("cu_seqlens must be non-decreasing, got " +
                            shapeString(cu));
    shape.sequences = int64_t(cu.size()) - 1;
  }
  if (!(std::isfinite(request.scale) && request.scale >= 0.0f))
    throw argumentError("scale must be finite and non-negative (0 for the "
                        "default)");
  return shape;
}

void Package::forward(const ForwardRequest &request) const {
  ForwardShape shape = check(request);
  if (!request.output)
    throw argumentError("no output buffer");
  std::vector<int64_t> cu = request.cuSeqlens;
  if (cu.empty())
    for (int64_t b = 0; b <= shape.batch; ++b)
      cu.push_back(b * shape.tokens);

  std::vector<const float *> inputs, params;
  std::vector<int64_t> inputHeads, paramHeads;
  for (const ArgumentInfo &arg : inputs_) {
    const HostTensor &t = request.tensors.at(arg.name);
    inputs.push_back(t.data);
    inputHeads.push_back(t.shape[2]);
  }
  for (const ArgumentInfo &arg : params_) {
    const HostTensor &t = request.tensors.at(arg.name);
    params.push_back(t.data);
    paramHeads.push_back(t.shape[0]);
  }
  linac_cpu_forward_args args{};
  args.num_seqs = shape.sequences;
  args.cu_seqlens = cu.data();
  args.num_heads = shape.heads;
  args.inputs = inputs.data();
  args.input_heads = inputHeads.data();
  args.params = params.data();
  args.param_heads = paramHeads.data();
  args.initial_state = request.initialState;
  args.final_state = request.finalState;
  args.output = request.output;
  args.scale = request.scale > 0.0f
                   ? request.scale
                   : 1.0f / std::sqrt(static_cast<float>(keyDim_));
  int status = reinterpret_cast<linac_cpu_forward_fn>(forward_)(&args);
  if (status != 0)
    throw Error(Error::Kind::Kernel,
                "kernel failed with status " + std::to_string(status));
}

} // namespace linac

//===----------------------------------------------------------------------===//
// C API
//===----------------------------------------------------------------------===//

struct linac_package {
  std::unique_ptr<linac::Package> package;
};

static thread_local std::string lastError;

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
    }
  } catch (const std::exception &e) {
    lastError = e.what();
  }
  return LINAC_ERROR_PACKAGE;
}

extern "C" {

const char *linac_last_error(void) { return lastError.c_str(); }

linac_status linac_package_open(const char *path, linac_package **package) {
  return guarded([&] {
    if (!path || !package)
      throw linac::Error(linac::Error::Kind::InvalidArgument,
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
    if (!package || i >= package->package->arguments().size())
      throw linac::Error(linac::Error::Kind::InvalidArgument,
                         "no argument " + std::to_string(i));
    const linac::ArgumentInfo &arg = package->package->arguments()[i];
    if (name)
      *name = arg.name.c_str();
    if (role)
      *role = arg.role.c_str();
    if (shape)
      *shape = arg.shape.c_str();
  });
}

linac_status linac_forward_host(linac_package *package,
                                const linac_forward_args *args) {
  return guarded([&] {
    if (!package || !args)
      throw linac::Error(linac::Error::Kind::InvalidArgument,
                         "linac_forward_host needs a package and arguments");
    linac::ForwardRequest request;
    for (size_t i = 0; i < args->num_tensors; ++i) {
      const linac_host_tensor &t = args->tensors[i];
      if (!t.name || t.ndim < 0 || (t.ndim > 0 && !t.shape))
        throw linac::Error(linac::Error::Kind::InvalidArgument,
                           "tensor " + std::to_string(i) +
                               " has no name or shape");
      request.tensors[t.name] = {t.data,
                                 std::vector<int64_t>(t.shape, t.shape + t.ndim)};
    }
    if (args->cu_seqlens)
      request.cuSeqlens.assign(args->cu_seqlens,
                               args->cu_seqlens + args->num_cu_seqlens);
    request.initialState = args->initial_state;
    request.finalState = args->final_state;
    request.output = args->output;
    request.scale = args->scale;
    package->package->forward(request);
  });
}

} // extern "C"
