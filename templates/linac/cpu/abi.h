/*===- abi.h - the calling convention of CPU layer packages -------*- C -*-===*
 *
 * A CPU package's shared object exports `linac_cpu_forward` (prefill),
 * `linac_cpu_decode` and `linac_cpu_backward` with these signatures. The
 * runtime validates every argument before the call; the kernel trusts
 * them.
 *
 *===----------------------------------------------------------------------===*/

#ifndef LINAC_CPU_ABI_H
#define LINAC_CPU_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LINAC_CPU_ABI_VERSION 6

typedef struct linac_cpu_forward_args {
  int64_t num_seqs;
  const int64_t *cu_seqlens; /* num_seqs + 1 offsets into the token axis */
  int64_t num_heads;         /* H: heads of the state and the output */
  const float *const *inputs; /* in manifest order, [tokens, heads, ...] */
  const int64_t *input_heads;
  const float *const *params; /* in manifest order, [heads, ...] */
  const int64_t *param_heads;
  /* States are [N, H, K, V], or [N, H, K, V + 1] with the normaliser as
   * the last column when the layer has one. */
  const float *initial_state; /* or NULL for zeros */
  float *final_state;         /* or NULL */
  float *output;              /* [tokens, H, V], or NULL for no reads:
                                 the final states alone (and transitions) */
  float scale;                /* the read's scale unless the spec fixes it */
  int32_t threads;            /* workers, at least 1 */
  /* Sequences cut into pieces that run side by side: 0 where workers
   * would otherwise idle, -1 never, n > 0 into pieces of n tokens rounded
   * up to whole chunks. */
  int64_t segment_tokens;
  /* Without an output, or NULL: each sequence's transition, the linear
   * map that carries any other entering state over it (S_out = A(S_in) +
   * final state): [N, H, K, K] with an erase (A S_in), [N, H, K, V] or
   * [N, H, K, V + 1] factors without (A (.) S_in). A NULL output is for
   * chunkwise layers without an erase under a value-side decay alone; the
   * runtime checks. */
  float *transitions;
} linac_cpu_forward_args;

/* A few new tokens for each of B sequences whose states live in a pool
 * [P, H, K, V] (key-major: S[k][v] at k * V + v; [P, H, K, V + 1] with a
 * normaliser), addressed per sequence. */
typedef struct linac_cpu_decode_args {
  int64_t num_seqs;           /* B */
  int64_t tokens;             /* new tokens per sequence */
  int64_t num_heads;          /* H */
  const float *const *inputs; /* in manifest order, [B * tokens, heads, ...] */
  const int64_t *input_heads;
  const float *const *params; /* in manifest order, [heads, ...] */
  const int64_t *param_heads;
  float *state_pool;          /* read and written in place */
  const int64_t *state_indices; /* [B]: each sequence's pool slot, -1 skips */
  float *output;              /* [B * tokens, H, V]; skipped rows untouched */
  float scale;
  int32_t threads; /* workers, at least 1 */
} linac_cpu_decode_args;

/* The gradients of L = <d_output, output> + <d_final_state, final state>
 * with respect to every input, parameter and the initial state, for the
 * forward pass `forward` describes (its output and final_state unused).
 * Gradient buffers are laid out as their tensors and added to: the caller
 * zeroes them. An input shared by a group of heads sums its heads'
 * gradients, a parameter its tokens'. */
typedef struct linac_cpu_backward_args {
  linac_cpu_forward_args forward;
  const float *d_output;      /* [tokens, H, V] */
  const float *d_final_state; /* as the states, or NULL for zeros */
  float *const *input_grads;  /* in manifest order, as the inputs */
  float *const *param_grads;  /* in manifest order, as the parameters */
  float *d_initial_state;     /* as the states, or NULL */
} linac_cpu_backward_args;

typedef int (*linac_cpu_forward_fn)(const linac_cpu_forward_args *args);
typedef int (*linac_cpu_decode_fn)(const linac_cpu_decode_args *args);
typedef int (*linac_cpu_backward_fn)(const linac_cpu_backward_args *args);
typedef int (*linac_cpu_abi_version_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* LINAC_CPU_ABI_H */
