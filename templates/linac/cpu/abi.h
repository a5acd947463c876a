/*===- abi.h - the calling convention of CPU layer packages -------*- C -*-===*
 *
 * A CPU package's shared object exports `linac_cpu_forward` with this
 * signature. The runtime validates every argument before the call; the
 * kernel trusts them.
 *
 *===----------------------------------------------------------------------===*/

#ifndef LINAC_CPU_ABI_H
#define LINAC_CPU_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LINAC_CPU_ABI_VERSION 1

typedef struct linac_cpu_forward_args {
  int64_t num_seqs;
  const int64_t *cu_seqlens; /* num_seqs + 1 offsets into the token axis */
  int64_t num_heads;         /* H: heads of the state and the output */
  const float *const *inputs; /* in manifest order, [tokens, heads, ...] */
  const int64_t *input_heads;
  const float *const *params; /* in manifest order, [heads, ...] */
  const int64_t *param_heads;
  const float *initial_state; /* [N, H, K, V], or NULL for zeros */
  float *final_state;         /* [N, H, K, V], or NULL */
  float *output;              /* [tokens, H, V] */
  float scale;                /* the read's scale unless the spec fixes it */
} linac_cpu_forward_args;

typedef int (*linac_cpu_forward_fn)(const linac_cpu_forward_args *args);
typedef int (*linac_cpu_abi_version_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* LINAC_CPU_ABI_H */
