//===- checks.cpp - the checks of a request's tensors ---------------------===//
//
// Every forward and decode call is checked before any kernel runs: names,
// ranks and dimensions, head counts, cu_seqlens, sizes that memory can hold,
// the scale, and a decode's pool and slots.
//
//===----------------------------------------------------------------------===//

#include "checks.h"

#include <algorithm>
#include <cmath>

namespace linac {

using namespace detail;

void detail::checkAddressable(const std::vector<int64_t> &dims,
                              const std::string &what) {
  int64_t bytes = sizeof(float);
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(bytes, d, &bytes))
      throw argumentError(what + " of shape " + shapeString(dims) +
                          " is larger than memory can hold");
}

void detail::checkPointer(const void *data, size_t alignment,
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
  ForwardShape shape = checkDeviceInputs(request);
  if (!request.output)
    throw argumentError("no output buffer");
  checkPointer(request.output, sizeOf(request.dtype), "output");
  if (request.finalState)
    checkPointer(request.finalState, sizeof(float), "final_state");
  return shape;
}

ForwardShape
Package::checkDeviceInputs(const DeviceForwardRequest &request) const {
  requireTarget(/*device=*/true);
  // Refuses a dtype outside the enum or one the package has no kernel for.
  kernelFor(request.dtype, kernels_);
  ForwardShape shape =
      checkShapes(shapesOf(request.tensors), request.cuSeqlens, request.scale);
  checkDevicePointers(request.tensors, request.dtype);
  size_t elementSize = sizeOf(request.dtype);
  if (request.initialState)
    checkPointer(request.initialState, sizeof(float), "initial_state");
  if (shape.heads > std::numeric_limits<int32_t>::max())
    throw argumentError("CUDA kernels run at most 2^31 - 1 heads, got " +
                        std::to_string(shape.heads));
  if (shape.sequences > kMaxCudaSequences)
    throw argumentError(
        "CUDA kernels run at most " + std::to_string(kMaxCudaSequences) +
        " sequences per call, got " + std::to_string(shape.sequences));
  // The kernels step from one token's inputs to the next by a 32-bit
  // stride in bytes.
  for (const manifest::Argument &arg : inputs_) {
    const std::vector<int64_t> &dims = request.tensors.at(arg.name).shape;
    int64_t bytes = int64_t(elementSize);
    for (size_t d = 2; d < dims.size(); ++d)
      bytes *= dims[d];
    if (bytes > std::numeric_limits<int32_t>::max())
      throw argumentError(describe(arg) + " has " + std::to_string(bytes) +
                          " bytes a token across its heads; CUDA kernels "
                          "take at most 2^31 - 1");
  }
  return shape;
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

} // namespace linac
