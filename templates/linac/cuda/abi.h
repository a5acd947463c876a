/*===- abi.h - the calling convention of CUDA layer packages ------*- C -*-===*
 *
 * Every kernel in a CUDA package's cubin is `extern "C" __global__` and takes
 * one linac_cuda_forward_args (forward) or linac_cuda_decode_args (decode)
 * by value, as a __grid_constant__ (its tensor maps are read in place),
 * or one linac_cuda_backward_args (backward).
 * The manifest lists each kernel with its activation dtype, block size and
 * dynamic shared memory; a forward grid is (num_heads, num_seqs), or with
 * segments as linac_cuda_segment_pass says, after the preparing kernel when
 * the phased kernels run; a decode grid as many blocks as fit the device
 * at once, at most one per item (a (head, sequence) state, or one of the
 * manifest's decode "parts" of it). The runtime validates every argument
 * it can see before the launch; the kernel trusts them.
 *
 *===----------------------------------------------------------------------===*/

#ifndef LINAC_CUDA_ABI_H
#define LINAC_CUDA_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LINAC_CUDA_ABI_VERSION 11
/* Inputs and parameters a layer may have, each. */
#define LINAC_CUDA_MAX_ARGUMENTS 16

/* A piece of a sequence that one block of a chunkwise forward runs
 * (sequence parallelism, docs/design.md): whole chunks from the sequence's
 * start, the last piece taking the rest. */
typedef struct linac_cuda_segment {
  int64_t begin, end; /* tokens */
  int64_t seq;
  int32_t index; /* within its sequence, from 0 */
  int32_t last;  /* 1 for its sequence's last segment */
} linac_cuda_segment;

/* The launches of a segmented forward, in order, all on one args:
 *   LOCAL   grid (H, num_segments, 1 + transition blocks): each sequence's
 *           first segment runs whole from the initial state; every other
 *           segment but the last runs from zeros into its slot of
 *           segment_states and, with an erase, its transition's column
 *           blocks of V into segment_transitions from the identity;
 *   COMPOSE linac_segment_compose, grid (H, num_segments, column tiles of
 *           LINAC_CUDA_COMPOSE_COLUMNS): turns each slot into the true state
 *           after its segment, segment by segment;
 *   FINISH  grid (H, num_segments): every segment after the first runs from
 *           its predecessor's slot, writing outputs (and the last the final
 *           state). */
enum linac_cuda_segment_pass {
  LINAC_CUDA_WHOLE = 0,
  LINAC_CUDA_SEGMENT_LOCAL = 1,
  LINAC_CUDA_SEGMENT_COMPOSE = 2,
  LINAC_CUDA_SEGMENT_FINISH = 3
};
/* Value columns one compose block takes. */
#define LINAC_CUDA_COMPOSE_COLUMNS 32
/* Threads of a compose block: sixteen warps, since its walk over the
 * segments waits on shared memory at every step. */
#define LINAC_CUDA_COMPOSE_THREADS 512

/* Columns of a 128-byte swizzled map's box (the output's, and the inputs'
 * of a plan with row_inputs): 128 bytes of 16-bit values, the widest row
 * the 128-byte swizzle takes (a warpgroup product's tile). */
#define LINAC_CUDA_SWIZZLED_BOX_COLUMNS 64

/* The driver's opaque CUtensorMap: 128 bytes, 128-byte aligned. */
typedef struct linac_cuda_tensor_map {
#ifdef __cplusplus
  alignas(128)
#else
  _Alignas(128)
#endif
      uint64_t opaque[16];
} linac_cuda_tensor_map;

typedef struct linac_cuda_forward_args {
  int64_t num_seqs;
  int64_t tokens_per_seq;    /* sequence length when cu_seqlens is NULL */
  const int64_t *cu_seqlens; /* device, num_seqs + 1 offsets, or NULL */
  int64_t num_heads;         /* H: heads of the state and the output */
  /* Device pointers in manifest order: inputs [tokens, heads, ...] in the
   * kernel's activation dtype, parameters [heads, ...] in float32. */
  const void *inputs[LINAC_CUDA_MAX_ARGUMENTS];
  int64_t input_heads[LINAC_CUDA_MAX_ARGUMENTS];
  const float *params[LINAC_CUDA_MAX_ARGUMENTS];
  int64_t param_heads[LINAC_CUDA_MAX_ARGUMENTS];
  const float *initial_state; /* [N, H, K, V] float32, or NULL for zeros */
  float *final_state;         /* [N, H, K, V] float32, or NULL */
  void *output;               /* [tokens, H, V], activation dtype */
  float scale;                /* the read's scale unless the spec fixes it */
  /* Segments (device, num_segments of them) and their workspace; with
   * pass LINAC_CUDA_WHOLE unused. segment_states: [num_segments, H, K,
   * columns]; segment_transitions: with an erase [num_segments, H, K, K],
   * without [num_segments, H, K + columns] total log-gates, the key
   * channels' and then the columns' (geometry.h's transitionFloats). */
  int32_t segment_pass;
  int64_t num_segments;
  const linac_cuda_segment *segments;
  float *segment_states;
  float *segment_transitions;
  /* For the manifest's phased kernels: linac_prepare_<dtype>, launched
   * first on grid (slots, H), writes each chunk's prepared operands here
   * and linac_phased_<dtype> (the chunkwise grids and passes) reads them;
   * [slots, H, phased.chunk_bytes] bytes, 16-byte aligned, slots and a
   * chunk's slot as templates/linac/cuda/geometry.h's preparedSlots and
   * preparedSlot say. */
  void *prepared;
  /* For the plan's tensor_inputs: a CUtensorMap of each listed input as
   * [tokens, input heads, size] moved in boxes of one head's chunk_size
   * tokens, unswizzled, or with the plan's row_inputs and bf16 activations
   * in boxes of 64 columns by those tokens, 128-byte swizzled; with its
   * tensor_output, one of the output as [tokens, H, V] in boxes of 64
   * columns by one head's chunk_size tokens, 128-byte swizzled. The runtime
   * encodes them all when each takes one (16-byte aligned, under 2^31
   * tokens) and says so in maps_encoded; else the kernel copies rows
   * itself. */
  int32_t maps_encoded;
  linac_cuda_tensor_map input_maps[LINAC_CUDA_MAX_ARGUMENTS];
  linac_cuda_tensor_map output_map;
} linac_cuda_forward_args;

/* The backward pass of the forward `forward` describes (its output and
 * final_state unused): the gradients of L = <d_output, output> +
 * <d_final_state, final state>. Every kernel takes every activation dtype.
 * Every gradient is float32, zeroed by the runtime, and the blocks add into it.
 *
 * linac_scan_backward, token by token: grid (num_heads, num_seqs), one
 * block per (head, sequence) as the scan's. Its workspace holds the states
 * it keeps: a checkpoint every kCheckpointTokens tokens, [slots, H, K,
 * columns] with slots as templates/linac/cuda/geometry.h's checkpointSlots
 * and checkpointSlot say, and each block's states entering the tokens of
 * one stretch between checkpoints, [num_seqs, H, kCheckpointTokens, K,
 * columns].
 *
 * The chunkwise backward, seven launches in order (chunk_backward.h; a
 * "warp grid" is ceil(tokens x H / 8) blocks, a warp a (token, head); a
 * "walk grid" (backwardColumnTiles(V), H, num_seqs); a "chunk grid"
 * (backwardSlots, H, backwardColumnTiles(V)); slots and chunks of
 * kBackwardChunk tokens as geometry.h's backwardSlot says):
 *   linac_backward_operands  warp grid: each token's operands into
 *                            `operands`, [tokens, H, backwardRecordFloats];
 *   linac_backward_prepare   chunk grid: each chunk's products that need no
 *                            state into `prepared`, [slots, H,
 *                            backwardPreparedFloats];
 *   linac_backward_states    walk grid: the state entering each chunk into
 *                            `chunk_states`, [slots, H, K, V], and each
 *                            token's read into `reads`, [tokens, H, V];
 *   linac_backward_reads     warp grid: each read's gradient in its place;
 *   linac_backward_state_gradients  walk grid: the gradient of the state
 *                            leaving each chunk into `state_grads` (as
 *                            `chunk_states`), and d_initial_state;
 *   linac_backward_chunks    chunk grid: the operands' gradients into
 *                            `operand_grads` (as `operands`, zeroed by the
 *                            runtime);
 *   linac_backward_arguments warp grid: the inputs' and parameters'. */
typedef struct linac_cuda_backward_args {
  linac_cuda_forward_args forward;
  int32_t dtype;              /* of the inputs and d_output, as linac_dtype */
  const void *d_output;       /* [tokens, H, V] */
  const float *d_final_state; /* [N, H, K, columns], or NULL for zeros */
  float *input_grads[LINAC_CUDA_MAX_ARGUMENTS]; /* as the inputs */
  float *param_grads[LINAC_CUDA_MAX_ARGUMENTS]; /* as the parameters */
  float *d_initial_state; /* [N, H, K, columns], or NULL */
  float *checkpoints;
  float *entering;
  float *operands;
  float *operand_grads;
  float *prepared;
  float *chunk_states;
  float *state_grads;
  float *reads;
} linac_cuda_backward_args;

/* Columns of a decode state's tensor-map box: 128 bytes of floats, the
 * widest row the 128-byte swizzle takes. */
#define LINAC_CUDA_DECODE_BOX_COLUMNS 32
/* Warps of a decode block, one block a multiprocessor. */
#define LINAC_CUDA_DECODE_BLOCK_WARPS 16
/* Where tensor-staged decode stages start in shared memory: the 128-byte
 * swizzle repeats every 1024 bytes, and dynamic shared memory is only
 * promised 16-byte alignment, so the manifest's decode shared memory
 * includes this much for padding. */
#define LINAC_CUDA_DECODE_STAGE_ALIGNMENT 1024

/* A decode step: `tokens` new tokens for each of num_seqs sequences whose
 * states live in a pool [P, H, K, V] (key-major; V + 1 columns with a
 * normaliser). */
typedef struct linac_cuda_decode_args {
  int64_t num_seqs;
  int64_t tokens;
  int64_t num_heads;
  const void *inputs[LINAC_CUDA_MAX_ARGUMENTS]; /* [num_seqs * tokens, heads, ...] */
  int64_t input_heads[LINAC_CUDA_MAX_ARGUMENTS];
  const float *params[LINAC_CUDA_MAX_ARGUMENTS];
  int64_t param_heads[LINAC_CUDA_MAX_ARGUMENTS];
  float *state_pool;            /* device, read and written in place */
  int64_t pool_slots;           /* P */
  const int64_t *state_indices; /* device, [num_seqs]: a slot; one outside
                                   [0, P), such as -1, skips the sequence */
  void *output;                 /* [num_seqs * tokens, H, V], activation dtype */
  float scale;
  /* Device, two counters, zero before a stream's first launch: the tickets
   * taken, and the first ticket of the next launch. */
  unsigned long long *work;
  /* With the manifest's decode staging "tensor", a CUtensorMap of the pool
   * as rows of V floats (P * H * K of them), 128-byte swizzled boxes of
   * LINAC_CUDA_DECODE_BOX_COLUMNS columns by K rows; else unused. */
  linac_cuda_tensor_map state_map;
} linac_cuda_decode_args;

#ifdef __cplusplus
}
#endif

#endif /* LINAC_CUDA_ABI_H */
