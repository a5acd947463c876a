// RUN: not linac-opt %s -linac-normalize '-linac-plan=target=sm_90a chunk-kernel=pipelined' 2>&1 | FileCheck %s
// RUN: linac-opt %s -linac-normalize '-linac-plan=target=sm_90a chunk-kernel=phased' | FileCheck %s --check-prefix=PHASED
// RUN: linac-opt %s -linac-normalize -linac-plan=target=sm_90a | FileCheck %s --check-prefix=DEFAULT

// A key-vector gate is not the pipelined kernel's: asking for it is an
// error naming what it takes.
// CHECK: error: chunk-kernel=pipelined: the pipelined kernel takes an erase under no gate or a scalar one
// The phased kernels take it, by default beside the lockstep entry. At
// K = V = 64 a prepared chunk is 46592 bytes: C log-gates (256), the
// decay vector of K floats (256), bf16 k, w, q (64 x 72 each), u
// (64 x 72) and P (64 x 72). The preparing block adds T (64 x 68 fp32),
// the inverses (64 x 20), eight 16 x 8 tiles and two K-vectors for each of
// the eight half sub-chunks: 77312 bytes.
// PHASED: phased = "always", phased_block_threads = 256 : i64, phased_shared_memory = 110608 : i64, prepare_block_threads = 256 : i64, prepare_shared_memory = 77312 : i64, prepared_chunk_bytes = 46592 : i64
// DEFAULT: phased = "by_shape"

!key = tensor<64xf32, #linac.key>
!value = tensor<64xf32, #linac.value>
!state = !linac.state<64x64>

linac.layer @vector_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key, %b : f32) {
  %zero = arith.constant dense<0.0> : !key
  %log_a = arith.minimumf %g, %zero : !key
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.erase %S1, %k strength(%b : f32) : !state, !key
  %S3 = linac.write %S2, %k, %v strength(%b : f32) : !state, !key, !value
  %o = linac.read %S3, %q : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
