// RUN: linac-opt %s -linac-normalize -linac-plan=target=sm_90a | FileCheck %s
// RUN: not linac-opt %s -linac-normalize '-linac-plan=target=sm_90a chunk-kernel=warpgroup' 2>&1 | FileCheck %s --check-prefix=WARPGROUP

// Reading before the write, the phased kernels' preparing block scales each
// query by the log-gates a token short and leaves P's diagonal out; the
// warpgroup and pipelined kernels read after the write only, so the
// chunkwise entry is the lockstep kernel, and the runtime takes the phased
// kernels for the batches it cuts into segments alone, under any gate,
// with an erase or without (the lockstep kernel is faster where the batch
// fills the GPU).
// CHECK: linac.layer @vector_gate_read_before
// CHECK-SAME: chunk_kernel = "lockstep"
// CHECK-SAME: phased = "segmented"
// CHECK: linac.layer @scalar_gate_read_before
// CHECK-SAME: chunk_kernel = "lockstep"
// CHECK-SAME: phased = "segmented"
// CHECK: linac.layer @scalar_erase_read_before
// CHECK-SAME: chunk_kernel = "lockstep"
// CHECK-SAME: phased = "segmented"
// WARPGROUP: error: chunk-kernel=warpgroup: the warpgroup kernel takes a scalar key-side gate or none, with an erase or without, without a normaliser, a value-side decay, the read after the write

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @vector_gate_read_before(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key) {
  %o = linac.read %S, %q : !state, !key -> !value
  %zero = arith.constant dense<0.0> : !key
  %log_a = arith.minimumf %g, %zero : !key
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  linac.yield %S2, %o : !state, !value
}

linac.layer @scalar_gate_read_before(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : f32) {
  %o = linac.read %S, %q : !state, !key -> !value
  %zero = arith.constant 0.0 : f32
  %log_a = arith.minimumf %g, %zero : f32
  %S1 = linac.decay %S key(%log_a : f32) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  linac.yield %S2, %o : !state, !value
}

linac.layer @scalar_erase_read_before(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : f32, %b : f32) {
  %o = linac.read %S, %q : !state, !key -> !value
  %zero = arith.constant 0.0 : f32
  %log_a = arith.minimumf %g, %zero : f32
  %beta = linac.sigmoid %b : f32
  %S1 = linac.decay %S key(%log_a : f32) : !state
  %S2 = linac.erase %S1, %k strength(%beta : f32) : !state, !key
  %S3 = linac.write %S2, %k, %v strength(%beta : f32) : !state, !key, !value
  linac.yield %S3, %o : !state, !value
}
