//===- checks.h - what the runtime's parts share ----------------*- C++ -*-===//
//
// The errors the runtime throws and the checks of a request's tensors that
// package loading, the host and device executables and the C API share.
// Internal to the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_RUNTIME_CHECKS_H
#define LINAC_RUNTIME_CHECKS_H

#include "linac/package.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace linac::detail {

/// The grid is (heads, sequences); CUDA caps its y dimension.
inline constexpr int64_t kMaxCudaSequences = 65535;

inline Error packageError(const std::string &path, const std::string &what) {
  return Error(Error::Kind::Package, path + ": " + what);
}
inline Error argumentError(const std::string &what) {
  return Error(Error::Kind::InvalidArgument, what);
}

inline std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

inline size_t sizeOf(DType dtype) {
  return dtype == DType::Float32 ? sizeof(float) : sizeof(uint16_t);
}

/// The read's scale: the request's, or K^-1/2 for 0.
inline float scaleOrDefault(float scale, int64_t keyDim) {
  return scale > 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(keyDim));
}

template <typename Tensor>
std::map<std::string, std::vector<int64_t>>
shapesOf(const std::map<std::string, Tensor> &tensors) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto &[name, tensor] : tensors)
    shapes.emplace(name, tensor.shape);
  return shapes;
}

/// "input 'q'", as errors name an argument.
inline std::string describe(const manifest::Argument &arg) {
  return std::string(manifest::nameOf(arg.role)) + " '" + arg.name + "'";
}

/// Throws unless a float tensor of `dims` fits in memory: its size in bytes
/// must be an int64_t, so that no count or offset derived from it overflows.
void checkAddressable(const std::vector<int64_t> &dims,
                      const std::string &what);

/// Throws unless the pointer to `what` is present and `alignment`-aligned.
void checkPointer(const void *data, size_t alignment, const std::string &what);

/// The checks a host and a device backward request share: dOutput present
/// and aligned to `elementSize`, the states' gradients aligned, and each
/// gradient named after one of the forward's `tensors` and aligned.
template <typename Request, typename Tensor>
void checkBackward(const Request &request,
                   const std::map<std::string, Tensor> &tensors,
                   size_t elementSize, const std::string &layer) {
  if (!request.dOutput)
    throw argumentError("no output gradient (dOutput)");
  checkPointer(request.dOutput, elementSize, "dOutput");
  if (request.dFinalState)
    checkPointer(request.dFinalState, sizeof(float), "dFinalState");
  if (request.dInitialState)
    checkPointer(request.dInitialState, sizeof(float), "dInitialState");
  for (const auto &[name, gradient] : request.gradients) {
    if (!tensors.count(name))
      throw argumentError("gradient of '" + name +
                          "', which is not an input or parameter of layer '" +
                          layer + "'");
    checkPointer(gradient, sizeof(float), "gradient of '" + name + "'");
  }
}

} // namespace linac::detail

#endif // LINAC_RUNTIME_CHECKS_H
