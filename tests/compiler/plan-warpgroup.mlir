// RUN: linac-opt %s -linac-normalize -linac-plan=target=sm_90a | FileCheck %s
// RUN: linac-opt %s -linac-normalize '-linac-plan=target=sm_90a chunk-kernel=lockstep' | FileCheck %s --check-prefix=LOCKSTEP
// RUN: linac-opt %s -linac-normalize -linac-plan=target=sm_80 | FileCheck %s --check-prefix=SM80
// RUN: not linac-opt %s -linac-normalize '-linac-plan=target=sm_90a chunk-kernel=warpgroup' 2>&1 | FileCheck %s --check-prefix=REFUSED

// Under a scalar key-side gate or none, the chunkwise entry is the
// warpgroup kernel on sm_90a (with an erase, plan-warpgroup-erase.mlir): eight producer warps and a
// consumer warpgroup for each 64 value columns (512 threads). Its shared
// memory at K = V = 128 under the scalar gate: two buffers of bf16 Q, K
// and U (2 x 49152), U scaled (16384), both buffers' log-gates and each
// consumer's cumulative sums (1024), the state copies (2 x 16384), the
// reads (16384), the rows of q, k and v (64 x 768), the parameter (16),
// the rows' mbarrier (8) and 1024 to align the base: 215064 bytes. At
// K = 64 without a gate: keys of one tile and no scaled U, 133128 bytes.
// The rows of q, k and v move by tensor maps, the scalar dt does not; the
// output, which is the read, by one too, unless an epilogue follows the
// read (@gated_output). Since q, k and v are each an input's row times a
// scalar of the token, the rows land in the operand tiles as loaded
// (row_inputs: query, key, value); not where another tensor input is no
// operand's row (@gated_output's z), where a scalar comes from an input
// row (@gate_from_row) or with an erase (@with_erase).
// CHECK: linac.layer @scalar_gate
// CHECK-SAME: block_threads = 512 : i64, chunk_kernel = "warpgroup"
// CHECK-SAME: late_shared_inputs = array<i64>
// CHECK-NOT: phased
// CHECK-SAME: row_inputs = array<i64: 0, 1, 2>
// CHECK-SAME: shared_inputs = array<i64>, shared_memory = 215064 : i64
// CHECK-SAME: tensor_inputs = array<i64: 0, 1, 2>, tensor_output = true
// CHECK: linac.layer @narrow_ungated
// CHECK-SAME: block_threads = 512 : i64, chunk_kernel = "warpgroup"
// CHECK-SAME: row_inputs = array<i64: 0, 1, 2>
// CHECK-SAME: shared_memory = 133128 : i64
// CHECK: linac.layer @gated_output
// CHECK-SAME: chunk_kernel = "warpgroup"
// CHECK-NOT: row_inputs
// CHECK-SAME: tensor_inputs = array<i64: 0, 1, 2, 4>, tensor_output = false
// CHECK: linac.layer @gate_from_row
// CHECK-SAME: chunk_kernel = "warpgroup"
// CHECK-NOT: row_inputs
// CHECK-SAME: tensor_inputs = array<i64: 0, 1, 2>
// CHECK: linac.layer @tied_rows
// CHECK-SAME: row_inputs = array<i64: 0, 0, 1>
// CHECK-SAME: tensor_inputs = array<i64: 0, 1>
// CHECK: linac.layer @with_erase
// CHECK-SAME: block_threads = 512 : i64, chunk_kernel = "warpgroup"
// CHECK-NOT: row_inputs
// CHECK: linac.layer @narrow_values
// CHECK-SAME: block_threads = 512 : i64, chunk_kernel = "lockstep"
// LOCKSTEP: linac.layer @scalar_gate
// LOCKSTEP-SAME: block_threads = 512 : i64, chunk_kernel = "lockstep"
// SM80: linac.layer @scalar_gate
// SM80-SAME: block_threads = 512 : i64, chunk_kernel = "lockstep"
// REFUSED: error: chunk-kernel=warpgroup: the warpgroup kernel takes a scalar key-side gate or none, with an erase or without, without a normaliser, a value-side decay, the read after the write, K of 64 or 128 and V of 128, its input rows within shared memory, on sm_90a (its products are wgmma)
// REFUSED-NEXT: linac.layer @narrow_values

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @scalar_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %dt : f32)
    params(%A_log : f32) {
  %d = linac.softplus %dt : f32
  %A = math.exp %A_log : f32
  %Adt = arith.mulf %A, %d : f32
  %g = arith.negf %Adt : f32
  %S1 = linac.decay %S key(%g : f32) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

!narrow_key = tensor<64xf32, #linac.key>
!narrow_state = !linac.state<64x128>

linac.layer @narrow_ungated(%S : !narrow_state)
    inputs(%q : !narrow_key, %k : !narrow_key, %v : !value) {
  %S1 = linac.write %S, %k, %v : !narrow_state, !narrow_key, !value
  %o = linac.read %S1, %q : !narrow_state, !narrow_key -> !value
  linac.yield %S1, %o : !narrow_state, !value
}

linac.layer @gated_output(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %dt : f32, %z : !value) {
  %d = linac.softplus %dt : f32
  %g = arith.negf %d : f32
  %S1 = linac.decay %S key(%g : f32) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  %zg = linac.sigmoid %z : !value
  %out = arith.mulf %o, %zg : !value
  linac.yield %S2, %out : !state, !value
}

linac.layer @gate_from_row(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value) params(%w : !key) {
  %x = linac.dot %k, %w : !key
  %d = linac.softplus %x : f32
  %g = arith.negf %d : f32
  %S1 = linac.decay %S key(%g : f32) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

linac.layer @tied_rows(%S : !state) inputs(%x : !key, %v : !value) {
  %k = linac.l2norm %x : !key
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %x : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

linac.layer @with_erase(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %b : f32) {
  %S1 = linac.erase %S, %k strength(%b : f32) : !state, !key
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

!half_value = tensor<64xf32, #linac.value>
!half_state = !linac.state<128x64>

linac.layer @narrow_values(%S : !half_state)
    inputs(%q : !key, %k : !key, %v : !half_value) {
  %S1 = linac.write %S, %k, %v : !half_state, !key, !half_value
  %o = linac.read %S1, %q : !half_state, !key -> !half_value
  linac.yield %S1, %o : !half_state, !half_value
}
