// RUN: linac-opt %s -linac-normalize '-linac-plan=target=sm_90a chunk-kernel=phased' | FileCheck %s --check-prefix=PHASED
// RUN: linac-opt %s -linac-normalize -linac-plan=target=sm_90a | FileCheck %s --check-prefix=DEFAULT
// RUN: not linac-opt %s -linac-normalize '-linac-plan=target=sm_90a chunk-kernel=pipelined' 2>&1 | FileCheck %s --check-prefix=PIPELINED

// Without an erase the phased kernels take a key-side gate too: a buffer
// has no W and the preparing block no T, inverses or tiles. Under the
// key-vector gate at K = V = 64 a prepared chunk is 37376 bytes: C
// log-gates (256), the chunk's K log-decays (256), bf16 k, u, q and P
// (64 x 72 each); the preparing block adds two K-vectors for each of the
// eight half sub-chunks (4096), the state block its second buffer, the
// reads (64 x 68 fp32) and two barriers. Under the scalar gate at
// K = V = 128: 256 + 16 bytes, then k, u, q (64 x 136) and P (64 x 72).
// By default the runtime takes them for any batch under the key-vector
// gate, and under the scalar one only for batches it cuts into segments,
// where the warpgroup kernel does not take the layer (V = 64); at
// K = V = 128 the warpgroup kernel takes every batch, with no phased
// kernels beside it.
// PHASED: linac.layer @vector_gate
// PHASED-SAME: family = "chunkwise"
// PHASED-SAME: phased = "always", phased_block_threads = 256 : i64, phased_shared_memory = 92176 : i64, prepare_block_threads = 256 : i64, prepare_shared_memory = 41472 : i64, prepared_chunk_bytes = 37376 : i64
// PHASED: linac.layer @scalar_gate
// PHASED-SAME: phased = "always", phased_block_threads = 256 : i64, phased_shared_memory = 157232 : i64, prepare_block_threads = 256 : i64, prepare_shared_memory = 61712 : i64, prepared_chunk_bytes = 61712 : i64
// DEFAULT: linac.layer @vector_gate
// DEFAULT-SAME: phased = "by_shape"
// DEFAULT: linac.layer @scalar_gate
// DEFAULT-SAME: chunk_kernel = "warpgroup"
// DEFAULT-NOT: phased
// DEFAULT: linac.layer @narrow_scalar_gate
// DEFAULT-SAME: chunk_kernel = "lockstep"
// DEFAULT-SAME: phased = "segmented"
// PIPELINED: error: chunk-kernel=pipelined: the pipelined kernel takes an erase under no gate or a scalar one

!key = tensor<64xf32, #linac.key>
!value = tensor<64xf32, #linac.value>
!state = !linac.state<64x64>

linac.layer @vector_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key) {
  %zero = arith.constant dense<0.0> : !key
  %log_a = arith.minimumf %g, %zero : !key
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

!wide_key = tensor<128xf32, #linac.key>
!wide_value = tensor<128xf32, #linac.value>
!wide_state = !linac.state<128x128>

linac.layer @scalar_gate(%S : !wide_state)
    inputs(%q : !wide_key, %k : !wide_key, %v : !wide_value, %g : f32) {
  %zero = arith.constant 0.0 : f32
  %log_a = arith.minimumf %g, %zero : f32
  %S1 = linac.decay %S key(%log_a : f32) : !wide_state
  %S2 = linac.write %S1, %k, %v : !wide_state, !wide_key, !wide_value
  %o = linac.read %S2, %q : !wide_state, !wide_key -> !wide_value
  linac.yield %S2, %o : !wide_state, !wide_value
}

linac.layer @narrow_scalar_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : f32) {
  %zero = arith.constant 0.0 : f32
  %log_a = arith.minimumf %g, %zero : f32
  %S1 = linac.decay %S key(%log_a : f32) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
