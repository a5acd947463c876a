/*===- runtime.h - the linac runtime's C API ------------------------*- C -*-===*
 *
 * Opens a compiled layer package and runs its forward pass: on the host for
 * a cpu package, on a CUDA device for an sm_90a or sm_80 one. Every call
 * validates its arguments, NULL pointers included, and returns a status; on
 * failure linac_last_error() says what was wrong. Nothing here needs MLIR,
 * and the CUDA driver is found at run time, only when a device call needs
 * it.
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
  LINAC_ERROR_DRIVER = 4, /* no CUDA driver, or a driver call failed */
} linac_status;

/* The element type of a device call's inputs and output. */
typedef enum linac_dtype {
  LINAC_FLOAT32 = 0,
  LINAC_BFLOAT16 = 1,
  LINAC_FLOAT16 = 2,
} linac_dtype;

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
  int32_t threads;            /* 0 for every core this process may use, or
                                 1 to 1024 */
} linac_forward_args;

/* A device tensor in C order, named as the spec names it: an input in the
 * call's dtype, or a float32 parameter. */
typedef struct linac_device_tensor {
  const char *name;
  const void *data;
  int32_t ndim;
  const int64_t *shape;
} linac_device_tensor;

/* As linac_forward_args, with every buffer in device memory except
 * cu_seqlens, which stays on the host. */
typedef struct linac_device_forward_args {
  const linac_device_tensor *tensors; /* every input and parameter, by name */
  size_t num_tensors;
  linac_dtype dtype;          /* of the inputs and the output */
  const int64_t *cu_seqlens;  /* on the host: N + 1 offsets, B == 1, or NULL */
  size_t num_cu_seqlens;
  const float *initial_state; /* [N, H, K, V] float32, or NULL for zeros */
  float *final_state;         /* [N, H, K, V] float32, or NULL */
  void *output;               /* [B, T, H, V] in dtype */
  float scale;                /* 0 for the default, K^-1/2 */
  void *stream;               /* a CUstream, or NULL for the default stream */
} linac_device_forward_args;

/* Thread-local message of the last failed call on this thread. */
const char *linac_last_error(void);

/* Opens a package after checking its manifest and that its files belong
 * together (docs/runtime.md): LINAC_ERROR_PACKAGE if not. */
linac_status linac_package_open(const char *path, linac_package **package);
void linac_package_close(linac_package *package);

/* 0 for a NULL package. */
size_t linac_package_num_arguments(const linac_package *package);
/* The i-th argument's name, role (input, param, runtime) and shape, such as
 * "[B, T, H, K]". The strings live as long as the package. */
linac_status linac_package_argument(const linac_package *package, size_t i,
                                    const char **name, const char **role,
                                    const char **shape);

/* The i-th argument's kind: key, value, scalar, matrix (inputs and
 * parameters), index or state (the runtime's); "" for a NULL package or an
 * index past the last. The string lives as long as the package. */
const char *linac_package_argument_kind(const linac_package *package,
                                        size_t i);
/* "cpu", "sm_90a" or "sm_80" ("" for a NULL package); the string lives as
 * long as the package. */
const char *linac_package_target(const linac_package *package);
/* The layer's name, as the spec's linac.layer names it ("" for a NULL
 * package); the string lives as long as the package. */
const char *linac_package_layer(const linac_package *package);
/* The layer's key and value dimensions K and V, the columns of a head's
 * state in memory (V, or V + 1 with a normaliser) and the new tokens a
 * decode step may take per sequence. */
linac_status linac_package_dims(const linac_package *package,
                                int64_t *key_dim, int64_t *value_dim,
                                int64_t *state_columns,
                                int64_t *max_decode_tokens);

/* Runs a cpu package on host buffers. */
linac_status linac_forward_host(linac_package *package,
                                const linac_forward_args *args);

/* Runs each sequence of a cpu package's batch from its initial state to
 * args->final_state without reading (args->output unused), for splitting
 * sequences over processes. With `transitions` it also writes each
 * sequence's transition, the linear map A that carries any other entering
 * state over it, S_out = A(S_in) + final state: [N, H, K, K] when the layer
 * erases (A S_in), [N, H, K, C] factors when it does not (A (.) S_in, C the
 * state's columns). Chunkwise layers without an erase under a value-side
 * decay. */
linac_status linac_states_host(linac_package *package,
                               const linac_forward_args *args,
                               float *transitions);

/* A gradient buffer, float32 in C order, shaped as the input or parameter
 * it is the gradient of, and named as it. */
typedef struct linac_host_gradient {
  const char *name;
  float *data;
} linac_host_gradient;

/* The gradients of L = <d_output, output> + <d_final_state, final state> of
 * the forward pass `forward` describes (its output and final_state unused)
 * with respect to its inputs, parameters and initial state. */
typedef struct linac_backward_args {
  linac_forward_args forward;
  const float *d_output;                /* [B, T, H, V] */
  const float *d_final_state;           /* [N, H, K, V], or NULL for zeros */
  const linac_host_gradient *gradients; /* an argument left out gets none */
  size_t num_gradients;
  float *d_initial_state; /* [N, H, K, V], or NULL */
} linac_backward_args;

/* Runs the backward pass of a cpu package on host buffers, overwriting the
 * gradients. */
linac_status linac_backward_host(linac_package *package,
                                 const linac_backward_args *args);

/* A decode step on host buffers: args->tensors are inputs [B, n, H, ...]
 * (n new tokens per sequence, 1 to the package's maximum, 8) and
 * parameters; each sequence's state is read from and written back to the
 * pool slot state_indices[b] (-1 skips the sequence). */
typedef struct linac_decode_args {
  const linac_host_tensor *tensors;
  size_t num_tensors;
  float *state_pool;          /* [P, H, K, V], or [P, H, K, V + 1] with a
                                 normaliser (its last column) */
  const int64_t *pool_shape;  /* 4 entries */
  const int64_t *state_indices; /* B entries, each slot at most once */
  size_t num_sequences;       /* B */
  float *output;              /* [B, n, H, V] */
  float scale;                /* 0 for the default, K^-1/2 */
  int32_t threads;            /* as linac_forward_args' */
} linac_decode_args;

linac_status linac_decode_host(linac_package *package,
                               const linac_decode_args *args);

/* A decode step of a CUDA package: the tensors of linac_decode_args in
 * device memory, state_indices included, enqueued on `stream` like
 * linac_forward_device. A slot outside [0, P) (-1 among them) skips the
 * sequence; the caller keeps each slot to one sequence. The kernels share
 * their work out through counters the package keeps per context and
 * stream, so steps on different streams may run at once; the first step
 * on a stream allocates its counters (16 bytes, freed with the package), so
 * run one before capturing the stream into a CUDA graph, and replay a graph
 * on one stream at a time. */
typedef struct linac_device_decode_args {
  const linac_device_tensor *tensors;
  size_t num_tensors;
  linac_dtype dtype;
  float *state_pool;          /* 16-byte aligned */
  const int64_t *pool_shape; /* 4 entries */
  const int64_t *state_indices; /* device memory */
  size_t num_sequences;
  void *output;
  float scale;
  void *stream;
} linac_device_decode_args;

linac_status linac_decode_device(linac_package *package,
                                 const linac_device_decode_args *args);

/* Between a pool [P, H, K, C] and the forward pass's states [N, H, K, C]
 * (C = V, or V + 1 with a normaliser): state n is pool slot indices[n];
 * entries of -1 are skipped. */
linac_status linac_states_from_pool(const linac_package *package,
                                    const float *pool, int64_t pool_slots,
                                    int64_t heads, const int64_t *indices,
                                    size_t count, float *states);
linac_status linac_states_to_pool(const linac_package *package,
                                  const float *states, int64_t heads,
                                  const int64_t *indices, size_t count,
                                  float *pool, int64_t pool_slots);

/* Enqueues a CUDA package's forward pass on args->stream in the calling
 * thread's current context (device 0's primary context if it has none),
 * with the package's first kernel for args->dtype. Returns without
 * synchronizing; the kernel's own faults surface on the stream. */
linac_status linac_forward_device(linac_package *package,
                                  const linac_device_forward_args *args);

/* The backward of a CUDA package's forward pass: linac_backward_args' buffers
 * in device memory (cu_seqlens on the host), d_output in forward.dtype,
 * every gradient float32. Enqueued on forward.stream like
 * linac_forward_device; the states the pass keeps live in a workspace
 * allocated and freed in the stream's order
 * (linac_backward_device_workspace says how large). */
typedef struct linac_device_gradient {
  const char *name;
  float *data;
} linac_device_gradient;

typedef struct linac_device_backward_args {
  linac_device_forward_args forward;      /* output and final_state unused */
  const void *d_output;                   /* [B, T, H, V] */
  const float *d_final_state;             /* [N, H, K, V], or NULL for zeros */
  const linac_device_gradient *gradients; /* an argument left out gets none */
  size_t num_gradients;
  float *d_initial_state; /* [N, H, K, V], or NULL */
} linac_device_backward_args;

linac_status linac_backward_device(linac_package *package,
                                   const linac_device_backward_args *args);

/* The device memory a linac_backward_device call on `forward`'s tensors
 * takes besides its arguments, in bytes. */
linac_status
linac_backward_device_workspace(const linac_package *package,
                                const linac_device_forward_args *forward,
                                size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* LINAC_RUNTIME_H */
