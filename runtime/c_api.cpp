//===- c_api.cpp - the C API over the C++ one -----------------------------===//
//
// Every entry checks its pointers and sizes and turns the C++ API's
// exceptions into a status and linac_last_error() (runtime.h).
//
//===----------------------------------------------------------------------===//

#include "linac/package.h"
#include "linac/runtime.h"

#include "checks.h"

#include <cstring>

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
    request.threads = args->threads;
  } else {
    request.stateIndices = args->state_indices;
    request.numStateIndices = args->num_sequences;
  }
  request.output = args->output;
  request.scale = args->scale;
  return request;
}

/// Gradient buffers by name from a C array of linac_host_gradient or
/// linac_device_gradient.
template <typename CGradient>
static std::map<std::string, float *> gradientsOf(const CGradient *gradients,
                                                  size_t count) {
  if (count > 0 && !gradients)
    throw invalidArgument("num_gradients is " + std::to_string(count) +
                          " but gradients is NULL");
  std::map<std::string, float *> byName;
  for (size_t i = 0; i < count; ++i) {
    if (!gradients[i].name)
      throw invalidArgument("gradient " + std::to_string(i) + " has no name");
    if (!byName.emplace(gradients[i].name, gradients[i].data).second)
      throw invalidArgument("two gradients of '" +
                            std::string(gradients[i].name) + "'");
  }
  return byName;
}

/// A backward request (BackwardRequest or DeviceBackwardRequest) from its
/// C arguments, its forward request made by `forwardOf`.
template <typename Request, typename CArgs, typename ForwardOf>
static Request backwardRequestOf(const CArgs &args, ForwardOf forwardOf) {
  Request request;
  request.forward = forwardOf(args.forward);
  request.dOutput = args.d_output;
  request.dFinalState = args.d_final_state;
  request.dInitialState = args.d_initial_state;
  request.gradients = gradientsOf(args.gradients, args.num_gradients);
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

const char *linac_package_argument_kind(const linac_package *package,
                                        size_t i) {
  if (!package || i >= package->package->arguments().size())
    return "";
  return package->package->arguments()[i].kind.c_str();
}

const char *linac_package_target(const linac_package *package) {
  return package ? package->package->target().c_str() : "";
}

const char *linac_package_layer(const linac_package *package) {
  return package ? package->package->layer().c_str() : "";
}

linac_status linac_package_dims(const linac_package *package,
                                int64_t *key_dim, int64_t *value_dim,
                                int64_t *state_columns,
                                int64_t *max_decode_tokens) {
  return guarded([&] {
    if (!package || !key_dim || !value_dim || !state_columns ||
        !max_decode_tokens)
      throw invalidArgument(
          "linac_package_dims needs a package and four out pointers");
    *key_dim = package->package->keyDim();
    *value_dim = package->package->valueDim();
    *state_columns = package->package->stateColumns();
    *max_decode_tokens = package->package->maxDecodeTokens();
  });
}

/// A host forward request from its C arguments.
static linac::ForwardRequest forwardRequestOf(const linac_forward_args &args) {
  linac::ForwardRequest request;
  request.tensors =
      tensorsOf<linac::HostTensor>(args.tensors, args.num_tensors);
  request.cuSeqlens = cuSeqlensOf(args.cu_seqlens, args.num_cu_seqlens);
  request.initialState = args.initial_state;
  request.finalState = args.final_state;
  request.output = args.output;
  request.scale = args.scale;
  request.threads = args.threads;
  return request;
}

linac_status linac_forward_host(linac_package *package,
                                const linac_forward_args *args) {
  return guarded([&] {
    if (!package || !args)
      throw invalidArgument("linac_forward_host needs a package and arguments");
    package->package->forward(forwardRequestOf(*args));
  });
}

linac_status linac_states_host(linac_package *package,
                               const linac_forward_args *args,
                               float *transitions) {
  return guarded([&] {
    if (!package || !args)
      throw invalidArgument("linac_states_host needs a package and arguments");
    package->package->states(forwardRequestOf(*args), transitions);
  });
}

linac_status linac_backward_host(linac_package *package,
                                 const linac_backward_args *args) {
  return guarded([&] {
    if (!package || !args)
      throw invalidArgument(
          "linac_backward_host needs a package and arguments");
    package->package->backward(
        backwardRequestOf<linac::BackwardRequest>(*args, forwardRequestOf));
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

/// A device forward request from its C arguments.
static linac::DeviceForwardRequest
deviceForwardRequestOf(const linac_device_forward_args &args) {
  linac::DeviceForwardRequest request;
  request.tensors =
      tensorsOf<linac::DeviceTensor>(args.tensors, args.num_tensors);
  request.dtype = dtypeOf(args.dtype);
  request.cuSeqlens = cuSeqlensOf(args.cu_seqlens, args.num_cu_seqlens);
  request.initialState = args.initial_state;
  request.finalState = args.final_state;
  request.output = args.output;
  request.scale = args.scale;
  request.stream = args.stream;
  return request;
}

linac_status linac_forward_device(linac_package *package,
                                  const linac_device_forward_args *args) {
  return guarded([&] {
    if (!package || !args)
      throw invalidArgument(
          "linac_forward_device needs a package and arguments");
    package->package->forwardDevice(deviceForwardRequestOf(*args));
  });
}

linac_status linac_backward_device(linac_package *package,
                                   const linac_device_backward_args *args) {
  return guarded([&] {
    if (!package || !args)
      throw invalidArgument(
          "linac_backward_device needs a package and arguments");
    package->package->backwardDevice(
        backwardRequestOf<linac::DeviceBackwardRequest>(
            *args, deviceForwardRequestOf));
  });
}

linac_status
linac_backward_device_workspace(const linac_package *package,
                                const linac_device_forward_args *forward,
                                size_t *bytes) {
  return guarded([&] {
    if (!package || !forward || !bytes)
      throw invalidArgument("linac_backward_device_workspace needs a package, "
                            "arguments and an out pointer");
    *bytes = package->package->backwardWorkspaceBytes(
        deviceForwardRequestOf(*forward));
  });
}

} // extern "C"
