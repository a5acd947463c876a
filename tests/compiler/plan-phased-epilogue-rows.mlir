// RUN: linac-opt %s -linac-normalize -linac-plan=target=sm_90a | FileCheck %s

// The phased state block stages the rows of the inputs the epilogue loads
// itself (the output's, beside the read) where they fit in shared memory:
// 64 tokens of each 16-bit row on top of the block's own 158224 bytes.
// These layers read before the write, where the lockstep kernel is the
// faster for batches that fill the GPU unless the phased kernels stage an
// epilogue's inputs: then the runtime takes them by shape.
// A bonus's q, k and v (256 bytes a row each) take 49152 more.
// CHECK: linac.layer @bonus
// CHECK-SAME: phased = "by_shape"
// CHECK-SAME: phased_shared_memory = 207376
// Without the bonus, nothing is staged.
// CHECK: linac.layer @no_epilogue_inputs
// CHECK-SAME: phased = "segmented"
// CHECK-SAME: phased_shared_memory = 158224
// A scalar's row is no whole 16-byte run: the epilogue loads it itself.
// CHECK: linac.layer @scalar_output_gate
// CHECK-SAME: phased = "segmented"
// CHECK-SAME: phased_shared_memory = 158224
// Five value rows (80 KiB) would exceed the 227 KiB a block may have.
// CHECK: linac.layer @too_many_rows
// CHECK-SAME: phased = "segmented"
// CHECK-SAME: phased_shared_memory = 158224

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @bonus(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key) {
  %read = linac.read %S, %q : !state, !key -> !value
  %qk = linac.dot %q, %k : !key
  %w = linac.broadcast %qk : !value
  %bonus = arith.mulf %w, %v : !value
  %o = arith.addf %read, %bonus : !value
  %zero = arith.constant dense<0.0> : !key
  %log_a = arith.minimumf %g, %zero : !key
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  linac.yield %S2, %o : !state, !value
}

linac.layer @no_epilogue_inputs(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key) {
  %o = linac.read %S, %q : !state, !key -> !value
  %zero = arith.constant dense<0.0> : !key
  %log_a = arith.minimumf %g, %zero : !key
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  linac.yield %S2, %o : !state, !value
}

linac.layer @scalar_output_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key, %z : f32) {
  %read = linac.read %S, %q : !state, !key -> !value
  %zv = linac.broadcast %z : !value
  %o = arith.mulf %read, %zv : !value
  %zero = arith.constant dense<0.0> : !key
  %log_a = arith.minimumf %g, %zero : !key
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  linac.yield %S2, %o : !state, !value
}

linac.layer @too_many_rows(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key,
           %a : !value, %b : !value, %c : !value, %d : !value,
           %e : !value) {
  %read = linac.read %S, %q : !state, !key -> !value
  %ab = arith.addf %a, %b : !value
  %cd = arith.addf %c, %d : !value
  %abcd = arith.mulf %ab, %cd : !value
  %abcde = arith.addf %abcd, %e : !value
  %o = arith.addf %read, %abcde : !value
  %zero = arith.constant dense<0.0> : !key
  %log_a = arith.minimumf %g, %zero : !key
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  linac.yield %S2, %o : !state, !value
}
