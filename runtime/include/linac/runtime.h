/*===- runtime.h - the linac runtime's C API ------------------------*- C -*-===*
 *
 * Opens a compiled layer package and runs its forward pass. Every call
 * validates its arguments and returns a status; on failure
 * linac_last_error() says what was wrong. Nothing here needs MLIR.
 *
 *===----------------------------------------------------------------------===*/

#ifndef LINAC_RUNTIME_H
#define LINAC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum linac_status {
  LINAC_OK = 0,
  LINAC_ERROR_INVALID_ARGUMENT = 1, /* a missing, misshapen or unknown tensor */
  LINAC_ERROR_PACKAGE = 2,          /* unreadable, corrupt or foreign package */
  LINAC_ERROR_KERNEL = 3,           /* the kernel reported a failure */
} linac_status;

typedef struct linac_package linac_package;

/* A host tensor, float32 in C order, named as the spec names it. */
typedef struct linac_host_tensor {
  const char *name;
  const float *data;
  int32_t ndim;
  const int64_t *shape;
} linac_host_tensor;

typedef struct linac_forward_args {
  const linac_host_tensor *tensors; /* every input and parameter, by name */
  size_t num_tensors;
  const int64_t *cu_seqlens; /* N + 1 offsets with B == 1, or NULL */
  size_t num_cu_seqlens;
  const float *initial_state; /* [N, H, K, V], or NULL for zeros */
  float *final_state;         /* [N, H, K, V], or NULL */
  float *output;              /* [B, T, H, V] */
  float scale;                /* 0 for the default, K^-1/2 */
} linac_forward_args;

/* Thread-local message of the last failed call on this thread. */
const char *linac_last_error(void);

linac_status linac_package_open(const char *path, linac_package **package);
void linac_package_close(linac_package *package);

size_t linac_package_num_arguments(const linac_package *package);
/* The i-th argument's name, role (input, param, runtime) and shape, such as
 * "[B, T, H, K]". The strings live as long as the package. */
linac_status linac_package_argument(const linac_package *package, size_t i,
                                    const char **name, const char **role,
                                    const char **shape);

linac_status linac_forward_host(linac_package *package,
                                const linac_forward_args *args);

#ifdef __cplusplus
}
#endif

#endif /* LINAC_RUNTIME_H */
