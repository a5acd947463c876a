//===- device.cpp - running CUDA packages ---------------------------------===//
//
// The forward pass and decode steps of an sm_90a or sm_80 package: device
// pointers checked, arguments packed as templates/linac/cuda/abi.h lays them
// out, kernels launched through the driver loaded at run time.
//
//===----------------------------------------------------------------------===//

#include "linac/package.h"

#include "checks.h"
#include "cuda_driver.h"
#include "linac/cuda/abi.h"
#include "linac/cuda/geometry.h"
#include "linac/segments.h"

#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <numeric>

namespace linac {

using namespace detail;

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

void Package::encodeTensorMaps(const DeviceForwardRequest &request,
                               linac_cuda_forward_args &args) const {
  // Each input as [tokens, heads, size], moved in boxes of one head's chunk
  // of tokens (copyRowsByTensor in templates/linac/cuda/warpgroup.h), or
  // with row_inputs and bf16 activations in 128-byte swizzled boxes of 64
  // columns (the operand tiles; copyOperandRows there), and the output as
  // [tokens, H, V] in such boxes (the reads' tiles); the kernel copies rows
  // itself unless every map is encoded.
  const cuuint32_t chunk = cuuint32_t(info_.plan.chunkSize.value());
  const std::vector<int64_t> &first = request.tensors.at(inputs_[0].name).shape;
  const int64_t tokens = first[0] * first[1];
  // Box coordinates are 32-bit signed; a map's address 16-byte aligned.
  auto takesMap = [&](const void *data) {
    return tokens > 0 && tokens <= std::numeric_limits<int32_t>::max() &&
           reinterpret_cast<uintptr_t>(data) % 16 == 0;
  };
  auto encode = [&](linac_cuda_tensor_map &map, const void *data, int64_t heads,
                    int64_t size, cuuint32_t boxColumns,
                    CUtensorMapSwizzle swizzle, const std::string &what) {
    const cuuint64_t dims[3] = {cuuint64_t(size), cuuint64_t(heads),
                                cuuint64_t(tokens)};
    const cuuint64_t strides[2] = {cuuint64_t(size) * 2,
                                   cuuint64_t(size * heads) * 2};
    const cuuint32_t box[3] = {boxColumns, 1, chunk};
    const cuuint32_t elementStrides[3] = {1, 1, 1};
    cuda::check(cuda::driver().cuTensorMapEncodeTiled(
                    reinterpret_cast<CUtensorMap *>(&map),
                    CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, const_cast<void *>(data),
                    dims, strides, box, elementStrides,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                "cuTensorMapEncodeTiled('" + what + "')");
  };
  const bool output = info_.plan.tensorOutput.value_or(false);
  if (output && !takesMap(request.output))
    return;
  for (int64_t i : *info_.plan.tensorInputs)
    if (!takesMap(request.tensors.at(inputs_[i].name).data))
      return;
  for (int64_t i : *info_.plan.tensorInputs) {
    const DeviceTensor &t = request.tensors.at(inputs_[i].name);
    const int64_t size = std::accumulate(t.shape.begin() + 3, t.shape.end(),
                                         int64_t(1), std::multiplies<>());
    if (info_.plan.rowInputs && request.dtype == DType::BFloat16)
      encode(args.input_maps[i], t.data, t.shape[2], size,
             LINAC_CUDA_SWIZZLED_BOX_COLUMNS, CU_TENSOR_MAP_SWIZZLE_128B,
             inputs_[i].name);
    else
      encode(args.input_maps[i], t.data, t.shape[2], size, cuuint32_t(size),
             CU_TENSOR_MAP_SWIZZLE_NONE, inputs_[i].name);
  }
  if (output)
    encode(args.output_map, request.output, args.num_heads, valueDim_,
           LINAC_CUDA_SWIZZLED_BOX_COLUMNS, CU_TENSOR_MAP_SWIZZLE_128B, "o");
  args.maps_encoded = 1;
}

Package::DeviceForward
Package::planDeviceForward(const DeviceForwardRequest &request,
                           const ForwardShape &shape, CUcontext context) const {
  DeviceForward plan;
  plan.kernel = &kernelFor(request.dtype, kernels_);
  if (!plan.kernel->chunkwise)
    return plan;
  SegmentShape segmentShape;
  segmentShape.offsets = request.cuSeqlens;
  if (segmentShape.offsets.empty())
    for (int64_t s = 0; s <= shape.sequences; ++s)
      segmentShape.offsets.push_back(s * shape.tokens);
  segmentShape.heads = shape.heads;
  segmentShape.chunkSize = info_.plan.chunkSize.value();
  segmentShape.multiprocessors = cuda::multiprocessors(context);
  segmentShape.transitionBlocks = transitionBlocks_;
  if (composeKernel_)
    plan.segments = cutSegments(segmentShape, request.segmentTokens);
  if (phasedKernels_.empty())
    return plan;
  const int64_t slots =
      cuda::preparedSlots(shape.sequences, segmentShape.offsets.back());
  const size_t workspace = size_t(slots * shape.heads * preparedChunkBytes_);
  if (takesPhased(phasedUse_, !plan.segments.empty(),
                  leavesMostIdle(shape.sequences * shape.heads,
                                 segmentShape.multiprocessors),
                  workspace, cuda::freeMemory)) {
    plan.kernel = &kernelFor(request.dtype, phasedKernels_);
    plan.preparedSlots = slots;
  }
  return plan;
}

std::string
Package::deviceForwardEntry(const DeviceForwardRequest &request) const {
  return planDeviceForward(request, check(request), cuda::currentContext())
      .kernel->entry;
}

void Package::forwardDevice(const DeviceForwardRequest &request) const {
  ForwardShape shape = check(request);
  CUcontext context = cuda::currentContext();
  const DeviceForward plan = planDeviceForward(request, shape, context);
  linac_cuda_forward_args args{};
  args.num_seqs = shape.sequences;
  args.tokens_per_seq = shape.tokens;
  deviceArguments(request.tensors, shape.heads, request.output, request.scale,
                  args);
  requireDeviceMemory(request.initialState, "initial_state");
  requireDeviceMemory(request.finalState, "final_state");
  if (plan.kernel->chunkwise && info_.plan.tensorInputs)
    encodeTensorMaps(request, args);
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
  // The phased kernels prepare every chunk of the batch first, into a
  // workspace that lives, in the stream's order, as long as the passes.
  std::optional<cuda::StreamBuffer> prepared;
  if (plan.preparedSlots > 0) {
    cuda::keepPoolMemory(context);
    prepared.emplace(
        size_t(plan.preparedSlots * shape.heads * preparedChunkBytes_), stream);
    args.prepared = reinterpret_cast<void *>(prepared->address());
    launch(kernelFor(request.dtype, preparingKernels_), context, &args,
           plan.preparedSlots, shape.heads, stream);
  }
  if (!plan.segments.empty())
    return forwardSegments(*plan.kernel, context, args, plan.segments, stream);
  launch(*plan.kernel, context, &args, shape.heads, shape.sequences, stream);
}

/// The workspace of a backward call, in floats, each part's in the order
/// linac_cuda_backward_args lists them: token by token the checkpoints and
/// the states entering a stretch's tokens; chunkwise the operands, their
/// gradients, the prepared chunks, the states entering each chunk, the
/// gradients of those leaving each, and the reads.
static std::vector<size_t> backwardWorkspace(const ForwardShape &shape,
                                             bool chunkwise, int64_t keys,
                                             int64_t values, bool keyVector,
                                             size_t stateSize) {
  const int64_t tokens = shape.batch * shape.tokens;
  if (chunkwise) {
    const size_t records = size_t(
        tokens * shape.heads *
        cuda::backwardRecordFloats(int(keys), int(values),
                                   cuda::backwardGates(int(keys), keyVector)));
    const size_t chunks =
        size_t(cuda::backwardSlots(shape.sequences, tokens) * shape.heads);
    return {records,
            records,
            chunks *
                size_t(cuda::backwardPreparedFloats(int(keys), int(values))),
            chunks * stateSize,
            chunks * stateSize,
            size_t(tokens * shape.heads * values)};
  }
  return {size_t(cuda::checkpointSlots(shape.sequences, tokens)) * shape.heads *
              stateSize,
          size_t(shape.sequences * shape.heads) * cuda::kCheckpointTokens *
              stateSize};
}

std::vector<size_t>
Package::backwardWorkspaceParts(const ForwardShape &shape) const {
  return backwardWorkspace(
      shape, backwardKernels_.front().chunkwise, keyDim_, valueDim_,
      info_.normalForm.keyDecay == manifest::KeyDecay::Vector,
      size_t(keyDim_ * stateColumns()));
}

size_t
Package::backwardWorkspaceBytes(const DeviceForwardRequest &request) const {
  requireBackward();
  const std::vector<size_t> parts =
      backwardWorkspaceParts(checkDeviceInputs(request));
  return std::accumulate(parts.begin(), parts.end(), size_t(0)) * sizeof(float);
}

void Package::backwardDevice(const DeviceBackwardRequest &request) const {
  requireBackward();
  const DeviceForwardRequest &forward = request.forward;
  ForwardShape shape = checkDeviceInputs(forward);
  checkBackward(request, forward.tensors, sizeOf(forward.dtype), layer_);
  for (const auto &[name, gradient] : request.gradients)
    requireDeviceMemory(gradient, "gradient of '" + name + "'");
  requireDeviceMemory(request.dOutput, "dOutput");
  requireDeviceMemory(request.dFinalState, "dFinalState");
  requireDeviceMemory(request.dInitialState, "dInitialState");
  requireDeviceMemory(forward.initialState, "initial_state");

  CUcontext context = cuda::currentContext();
  auto stream = static_cast<CUstream>(forward.stream);
  cuda::keepPoolMemory(context);
  linac_cuda_backward_args args{};
  args.forward.num_seqs = shape.sequences;
  args.forward.tokens_per_seq = shape.tokens;
  deviceArguments(forward.tensors, shape.heads, nullptr, forward.scale,
                  args.forward);
  args.forward.initial_state = forward.initialState;
  args.dtype = int32_t(forward.dtype);
  args.d_output = request.dOutput;
  args.d_final_state = request.dFinalState;
  args.d_initial_state = request.dInitialState;
  // Every argument's gradient, zeroed in the stream's order: the caller's
  // buffer or, for one it left out, one that lives as long as the pass.
  std::deque<cuda::StreamBuffer> discarded;
  auto gradientsOf = [&](const std::vector<manifest::Argument> &infos,
                         float **out) {
    for (size_t i = 0; i < infos.size(); ++i) {
      size_t bytes = sizeof(float);
      for (int64_t extent : forward.tensors.at(infos[i].name).shape)
        bytes *= size_t(extent);
      // An empty tensor's gradient is never written.
      if (bytes == 0)
        continue;
      auto given = request.gradients.find(infos[i].name);
      out[i] = given != request.gradients.end()
                   ? given->second
                   : reinterpret_cast<float *>(
                         discarded.emplace_back(bytes, stream).address());
      cuda::check(
          cuda::driver().cuMemsetD8Async(CUdeviceptr(out[i]), 0, bytes, stream),
          "cuMemsetD8Async");
    }
  };
  gradientsOf(inputs_, args.input_grads);
  gradientsOf(params_, args.param_grads);
  if (shape.sequences == 0)
    return;

  std::optional<cuda::StreamBuffer> cuSeqlens;
  if (!forward.cuSeqlens.empty()) {
    cuSeqlens.emplace(forward.cuSeqlens.data(),
                      forward.cuSeqlens.size() * sizeof(int64_t), stream);
    args.forward.cu_seqlens =
        reinterpret_cast<const int64_t *>(cuSeqlens->address());
  }
  const bool chunkwise = backwardKernels_.front().chunkwise;
  const std::vector<size_t> parts = backwardWorkspaceParts(shape);
  cuda::StreamBuffer workspace(
      std::accumulate(parts.begin(), parts.end(), size_t(0)) * sizeof(float),
      stream);
  auto *next = reinterpret_cast<float *>(workspace.address());
  auto take = [&](size_t part) {
    float *at = next;
    next += parts[part];
    return at;
  };
  if (!chunkwise) {
    args.checkpoints = take(0);
    args.entering = take(1);
    launch(backwardKernels_.front(), context, &args, shape.heads,
           shape.sequences, stream);
    return;
  }
  args.operands = take(0);
  args.operand_grads = take(1);
  args.prepared = take(2);
  args.chunk_states = take(3);
  args.state_grads = take(4);
  args.reads = take(5);
  // The blocks of the chunks pass add their columns' shares.
  cuda::check(cuda::driver().cuMemsetD8Async(CUdeviceptr(args.operand_grads), 0,
                                             parts[1] * sizeof(float), stream),
              "cuMemsetD8Async");
  // The grids abi.h gives: a warp a (token, head); a block a (column tile,
  // head, sequence) for the walks; a block a (chunk slot, head, column
  // tile) for the passes over every chunk at once.
  const int64_t tokens = shape.batch * shape.tokens;
  const int64_t warpBlocks =
      (tokens * shape.heads * 32 + cuda::kBackwardThreads - 1) /
      cuda::kBackwardThreads;
  const int64_t tiles = cuda::backwardColumnTiles(int(valueDim_));
  const int64_t slots = cuda::backwardSlots(shape.sequences, tokens);
  for (const CudaKernel &kernel : backwardKernels_) {
    if (kernel.entry == "linac_backward_states" ||
        kernel.entry == "linac_backward_state_gradients")
      launch(kernel, context, &args, tiles, shape.heads, stream,
             shape.sequences);
    else if (kernel.entry == "linac_backward_prepare" ||
             kernel.entry == "linac_backward_chunks")
      launch(kernel, context, &args, slots, shape.heads, stream, tiles);
    else if (warpBlocks > 0)
      launch(kernel, context, &args, warpBlocks, 1, stream);
  }
}

void Package::forwardSegments(const CudaKernel &kernel, CUctx_st *context,
                              linac_cuda_forward_args &args,
                              const std::vector<linac_cuda_segment> &segments,
                              CUstream_st *stream) const {
  const int64_t count = int64_t(segments.size()), heads = args.num_heads;
  // Every segment's slots, the first's and the last's unused, in the
  // stream's order so that they live exactly as long as the passes.
  const size_t stateBytes =
      sizeof(float) * size_t(count * heads * keyDim_ * stateColumns());
  // A transition is K x K with an erase, else the total log-gates of the
  // key channels and the columns (unused without a gate).
  const size_t transitionBytes =
      sizeof(float) *
      size_t(count * heads *
             cuda::transitionFloats(int(keyDim_), int(stateColumns()),
                                    transitionBlocks_ > 0));
  cuda::keepPoolMemory(context);
  cuda::StreamBuffer table(segments.data(),
                           segments.size() * sizeof(linac_cuda_segment), stream);
  cuda::StreamBuffer states(stateBytes, stream);
  cuda::StreamBuffer transitions(transitionBytes, stream);
  args.num_segments = count;
  args.segments = reinterpret_cast<const linac_cuda_segment *>(table.address());
  args.segment_states = reinterpret_cast<float *>(states.address());
  args.segment_transitions = reinterpret_cast<float *>(transitions.address());
  args.segment_pass = LINAC_CUDA_SEGMENT_LOCAL;
  launch(kernel, context, &args, heads, count, stream, 1 + transitionBlocks_);
  args.segment_pass = LINAC_CUDA_SEGMENT_COMPOSE;
  const int64_t tiles = (stateColumns() + LINAC_CUDA_COMPOSE_COLUMNS - 1) /
                        LINAC_CUDA_COMPOSE_COLUMNS;
  launch(*composeKernel_, context, &args, heads, count, stream, tiles);
  args.segment_pass = LINAC_CUDA_SEGMENT_FINISH;
  launch(kernel, context, &args, heads, count, stream);
}

void Package::launch(const CudaKernel &kernel, CUctx_st *context, void *args,
                     int64_t gridX, int64_t gridY, CUstream_st *stream,
                     int64_t gridZ) const {
  CUfunction function =
      modules_->function(context, kernel.entry, kernel.sharedMemory);
  void *params[] = {args};
  cuda::check(cuda::driver().cuLaunchKernel(
                  function, unsigned(gridX), unsigned(gridY), unsigned(gridZ),
                  kernel.blockThreads, 1, 1, kernel.sharedMemory, stream,
                  params, nullptr),
              "cuLaunchKernel('" + kernel.entry + "')");
}

} // namespace linac
