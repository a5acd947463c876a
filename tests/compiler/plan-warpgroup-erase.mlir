// RUN: linac-opt %s -linac-normalize -linac-plan=target=sm_90a | FileCheck %s
// RUN: linac-opt %s -linac-normalize '-linac-plan=target=sm_90a chunk-kernel=warpgroup' | FileCheck %s --check-prefix=ASKED

// With an erase under no gate or a scalar one the chunkwise entry is the
// warpgroup kernel too, with the phased kernels beside it for the batches
// the runtime cuts into segments (where they are faster); on request
// (chunk-kernel=warpgroup) it takes every batch. Its shared memory at K =
// V = 128 without a gate: two buffers of bf16 Q, K, U, W (E until the
// producer's solve) and P (2 x 73728), both buffers' log-gates (512), the
// producer's A in fp32 (64 rows of 68), the diagonal blocks' inverses (64
// rows of 20) and a scratch tile a producer warp (8 x 512), rounded to
// 1024 (175104), the rows of q, k and v (64 x 768), the rows' mbarrier (8)
// and 1024 to align the base: 225288 bytes. No state copy and no reads'
// tiles: the consumers hold the state as their products' operands and
// stage the reads in U's tiles. At K = 64 under a scalar gate keys and W
// take one tile each, and an epilogue after the read keeps the output
// from a tensor copy.
// CHECK: linac.layer @with_erase
// CHECK-SAME: block_threads = 512 : i64, chunk_kernel = "warpgroup"
// CHECK-SAME: phased = "segmented"
// CHECK-SAME: shared_inputs = array<i64>, shared_memory = 225288 : i64
// CHECK-SAME: tensor_inputs = array<i64: 0, 1, 2>, tensor_output = true
// CHECK: linac.layer @narrow_keys_gated_erase
// CHECK-SAME: chunk_kernel = "warpgroup"
// CHECK-SAME: phased = "segmented"
// CHECK-SAME: shared_inputs = array<i64>, shared_memory = 176136 : i64
// CHECK-SAME: tensor_output = false
// ASKED: linac.layer @with_erase
// ASKED-SAME: chunk_kernel = "warpgroup"
// ASKED-NOT: phased
// ASKED-SAME: shared_memory = 225288 : i64
// ASKED: linac.layer @narrow_keys_gated_erase
// ASKED-SAME: chunk_kernel = "warpgroup"
// ASKED-NOT: phased
// ASKED-SAME: shared_memory = 176136 : i64

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @with_erase(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %b : f32) {
  %S1 = linac.erase %S, %k strength(%b : f32) : !state, !key
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

!narrow_key = tensor<64xf32, #linac.key>
!narrow_state = !linac.state<64x128>

linac.layer @narrow_keys_gated_erase(%S : !narrow_state)
    inputs(%q : !narrow_key, %k : !narrow_key, %v : !value, %g : f32,
           %a : f32, %b : f32, %z : !value) {
  %sp = linac.softplus %g : f32
  %log_a = arith.negf %sp : f32
  %alpha = linac.sigmoid %a : f32
  %beta = linac.sigmoid %b : f32
  %S1 = linac.decay %S key(%log_a : f32) : !narrow_state
  %S2 = linac.erase %S1, %k strength(%alpha : f32) : !narrow_state, !narrow_key
  %S3 = linac.write %S2, %k, %v strength(%beta : f32) : !narrow_state, !narrow_key, !value
  %o = linac.read %S3, %q : !narrow_state, !narrow_key -> !value
  %zg = linac.sigmoid %z : !value
  %out = arith.mulf %o, %zg : !value
  linac.yield %S3, %out : !narrow_state, !value
}
