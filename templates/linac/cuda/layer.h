//===- layer.h - the CUDA skeletons generated layers instantiate -*- C++
//-*-===//
//
// A generated layer is a struct `Layer` with the spec's dimensions, normal
// form and plan as constants, and from the spec's body
//   Chunk::prologue(token, operands) and Chunk::epilogue(token, read, out),
//   run by one warp per token in the chunkwise kernel, and
//   Scan::step(token, state, scale, out), run by the recurrent scan, and
//   Decode::step, the same step on decode.h's split of the state, and
//   ScanBackward::stepBackward(token, state, scale, dState, dOut, grad),
//   the step's reverse, run by the token-by-token backward (backward.h),
//   or ChunkBackward's prologueBackward and epilogueBackward, the
//   reverses of Chunk's, run by the chunkwise backward (chunk_backward.h).
// The LINAC_*_KERNEL(S) macros define the entry points the package's
// manifest lists, one per activation dtype, and LINAC_CONTRACT the hash
// that ties the cubin to the manifest.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CUDA_LAYER_H
#define LINAC_CUDA_LAYER_H

#include "linac/contract.h"
#include "linac/cuda/backward.h"
#include "linac/cuda/chunk_backward.h"
#include "linac/cuda/phased.h"
#include "linac/cuda/scan.h"
#include "linac/cuda/warpgroup.h"

#define LINAC_CUDA_ENTRY_FOR(Layer, family, dtype, T, threads, blocks, Args)   \
  extern "C" __global__ void __launch_bounds__(threads, blocks)                \
      linac_##family##_##dtype(const __grid_constant__ Args args) {            \
    linac::cuda::family##Kernel<Layer, T>(args);                               \
  }
#define LINAC_CUDA_ENTRY(Layer, family, dtype, T, threads)                     \
  LINAC_CUDA_ENTRY_FOR(Layer, family, dtype, T, threads, 1,                   \
                       linac_cuda_forward_args)

/// The forward kernel of one activation dtype: the chunkwise kernel (16-bit
/// activations only, whole sequences or segments) or the exact scan, as the
/// plan chooses.
#define LINAC_CHUNK_KERNEL_BFLOAT16(Layer)                                     \
  LINAC_CUDA_ENTRY(Layer, chunk, bfloat16, __nv_bfloat16,                     \
                   linac::cuda::chunkThreads<Layer>())
#define LINAC_CHUNK_KERNEL_FLOAT16(Layer)                                      \
  LINAC_CUDA_ENTRY(Layer, chunk, float16, __half,                             \
                   linac::cuda::chunkThreads<Layer>())
/// The phased chunkwise forward's two kernels (phased.h) of one
/// activation dtype: the preparing phase, then the state's.
#define LINAC_PHASED_KERNELS_FOR(Layer, dtype, T)                              \
  LINAC_CUDA_ENTRY_FOR(Layer, prepare, dtype, T, linac::cuda::kPhasedThreads, \
                       linac::cuda::prepareBlocksPerMultiprocessor<Layer>(),  \
                       linac_cuda_forward_args)                               \
  LINAC_CUDA_ENTRY_FOR(Layer, phased, dtype, T, linac::cuda::kPhasedThreads,  \
                       1, linac_cuda_forward_args)
#define LINAC_PHASED_KERNELS_BFLOAT16(Layer)                                   \
  LINAC_PHASED_KERNELS_FOR(Layer, bfloat16, __nv_bfloat16)
#define LINAC_PHASED_KERNELS_FLOAT16(Layer)                                    \
  LINAC_PHASED_KERNELS_FOR(Layer, float16, __half)
/// The compose pass of a segmented chunkwise forward (abi.h), fp32 states
/// whatever the activations.
#define LINAC_SEGMENT_COMPOSE_KERNEL(Layer)                                    \
  extern "C" __global__ void __launch_bounds__(                               \
      linac::cuda::composeThreads<Layer>())                                    \
      linac_segment_compose(                                                   \
          const __grid_constant__ linac_cuda_forward_args args) {              \
    linac::cuda::segmentComposeKernel<Layer>(args);                            \
  }
#define LINAC_SCAN_KERNEL_FLOAT32(Layer)                                       \
  LINAC_CUDA_ENTRY(Layer, scan, float32, float,                               \
                   linac::cuda::scanThreads<Layer>())
#define LINAC_SCAN_KERNEL_BFLOAT16(Layer)                                      \
  LINAC_CUDA_ENTRY(Layer, scan, bfloat16, __nv_bfloat16,                      \
                   linac::cuda::scanThreads<Layer>())
#define LINAC_SCAN_KERNEL_FLOAT16(Layer)                                       \
  LINAC_CUDA_ENTRY(Layer, scan, float16, __half,                              \
                   linac::cuda::scanThreads<Layer>())

/// The backward pass token by token (backward.h), for every layer and
/// activation dtype.
#define LINAC_SCAN_BACKWARD_KERNEL(Layer)                                      \
  extern "C" __global__ void __launch_bounds__(                                \
      linac::cuda::scanThreads<Layer>())                                       \
      linac_scan_backward(                                                     \
          const __grid_constant__ linac_cuda_backward_args args) {             \
    linac::cuda::scanBackwardKernel<Layer>(args);                              \
  }

/// The chunkwise backward's seven kernels (chunk_backward.h), for every
/// activation dtype.
#define LINAC_BACKWARD_ENTRY(Layer, name, function, threads)                   \
  extern "C" __global__ void __launch_bounds__(threads) linac_backward_##name( \
      const __grid_constant__ linac_cuda_backward_args args) {                 \
    linac::cuda::function<Layer>(args);                                        \
  }
#define LINAC_CHUNK_BACKWARD_KERNELS(Layer)                                    \
  LINAC_BACKWARD_ENTRY(Layer, operands, backwardOperandsKernel,                \
                       linac::cuda::kBackwardThreads)                          \
  LINAC_BACKWARD_ENTRY(Layer, prepare, backwardPrepareKernel,                  \
                       linac::cuda::kBackwardThreads)                          \
  LINAC_BACKWARD_ENTRY(Layer, states, backwardStatesKernel,                    \
                       linac::cuda::kBackwardWalkThreads)                      \
  LINAC_BACKWARD_ENTRY(Layer, reads, backwardReadsKernel,                      \
                       linac::cuda::kBackwardThreads)                          \
  LINAC_BACKWARD_ENTRY(Layer, state_gradients, backwardStateGradientsKernel,   \
                       linac::cuda::kBackwardWalkThreads)                      \
  LINAC_BACKWARD_ENTRY(Layer, chunks, backwardChunksKernel,                    \
                       linac::cuda::kBackwardThreads)                          \
  LINAC_BACKWARD_ENTRY(Layer, arguments, backwardArgumentsKernel,              \
                       linac::cuda::kBackwardThreads)

/// Decode on a state pool, for every layer and dtype.
#define LINAC_DECODE_KERNELS(Layer)                                            \
  LINAC_CUDA_ENTRY_FOR(Layer, decode, float32, float,                         \
                       linac::cuda::decodeThreads<Layer>(),                    \
                       linac::cuda::decodeBlocksPerMultiprocessor<Layer>(),    \
                       linac_cuda_decode_args)                                 \
  LINAC_CUDA_ENTRY_FOR(Layer, decode, bfloat16, __nv_bfloat16,                \
                       linac::cuda::decodeThreads<Layer>(),                    \
                       linac::cuda::decodeBlocksPerMultiprocessor<Layer>(),    \
                       linac_cuda_decode_args)                                 \
  LINAC_CUDA_ENTRY_FOR(Layer, decode, float16, __half,                        \
                       linac::cuda::decodeThreads<Layer>(),                    \
                       linac::cuda::decodeBlocksPerMultiprocessor<Layer>(),    \
                       linac_cuda_decode_args)

/// The manifest's contract hash, where the runtime finds it in the cubin's
/// bytes without a GPU (linac/contract.h).
// A package's kernels lie in several files, each compiled from the same
// source with LINAC_KERNEL_PART set to its part (the manifest's
// cudaKernelPart); without it the source defines every kernel.
#ifdef LINAC_KERNEL_PART
#define LINAC_IN_PART(part) (LINAC_KERNEL_PART == (part))
#else
#define LINAC_IN_PART(part) 1
#endif

#define LINAC_CONTRACT(hash)                                                   \
  extern "C" __device__ const char linac_contract[] =                          \
      LINAC_CONTRACT_PREFIX hash;

#endif // LINAC_CUDA_LAYER_H
