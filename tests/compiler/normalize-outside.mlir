// Bodies outside the normal form fall back to the recurrent scan with a
// remark naming the op, or are rejected under require-chunkable.
// RUN: linac-opt %s -split-input-file -linac-normalize -verify-diagnostics | FileCheck %s
// RUN: not linac-opt %s -split-input-file -linac-normalize=require-chunkable 2>&1 | FileCheck %s --check-prefix=STRICT

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

// CHECK: linac.layer @read_between
// CHECK-SAME: chunkable = false
// STRICT: error: outside the normal form: the read sits between two transitions
linac.layer @read_between(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %g : f32) {
  %g_zero = arith.constant 0.0 : f32
  %g_le0 = arith.minimumf %g, %g_zero : f32
  %S1 = linac.decay %S key(%g_le0 : f32) : !state
  // expected-remark @+1 {{outside the normal form, so the layer runs as a recurrent scan: the read sits between two transitions}}
  %o = linac.read %S1, %q : !state, !key -> !value
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  linac.yield %S2, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

// CHECK: linac.layer @decay_after_write
// CHECK-SAME: chunkable = false
// STRICT: error: outside the normal form: a decay after an erase or write
linac.layer @decay_after_write(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %g : f32) {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %g_zero = arith.constant 0.0 : f32
  %g_le0 = arith.minimumf %g, %g_zero : f32
  // expected-remark @+1 {{a decay after an erase or write is outside the normal form (decays come first)}}
  %S2 = linac.decay %S1 key(%g_le0 : f32) : !state
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

// CHECK: linac.layer @other_erase_key
// CHECK-SAME: chunkable = false
linac.layer @other_erase_key(%S : !state) inputs(%q : !key, %k : !key, %x : !key, %v : !value, %b : f32) {
  // expected-remark @+1 {{the erase key differs from the write key}}
  %S1 = linac.erase %S, %x strength(%b : f32) : !state, !key
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

// CHECK: linac.layer @write_then_erase
// CHECK-SAME: chunkable = false
linac.layer @write_then_erase(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %b : f32) {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  // expected-remark @+1 {{a second erase, or an erase after the write, is outside the normal form}}
  %S2 = linac.erase %S1, %k strength(%b : f32) : !state, !key
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

// CHECK: linac.layer @two_writes
// CHECK-SAME: chunkable = false
linac.layer @two_writes(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  // expected-remark @+1 {{a second write is outside the normal form}}
  %S2 = linac.write %S1, %q, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

// CHECK: linac.layer @no_write
// CHECK-SAME: chunkable = false
linac.layer @no_write(%S : !state) inputs(%q : !key, %g : f32) {
  %g_zero = arith.constant 0.0 : f32
  %g_le0 = arith.minimumf %g, %g_zero : f32
  // expected-remark @+1 {{the step never writes; the normal form ends in a write}}
  %S1 = linac.decay %S key(%g_le0 : f32) : !state
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

// Two decays merge; a scalar and a vector key gate make a vector decay, and
// a scalar gate from parameters only is a fixed decay.
// CHECK: linac.layer @merged_decays
// CHECK-SAME: key_decay = "vector"
// CHECK-SAME: value_decay = true
// CHECK: linac.layer @fixed_from_params
// CHECK-SAME: key_decay = "fixed"
linac.layer @merged_decays(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %g : f32, %gk : !key, %gv : !value) {
  %g_zero = arith.constant 0.0 : f32
  %g_le0 = arith.minimumf %g, %g_zero : f32
  %S1 = linac.decay %S key(%g_le0 : f32) : !state
  %gk_zero = arith.constant dense<0.0> : !key
  %gk_le0 = arith.minimumf %gk, %gk_zero : !key
  %gv_zero = arith.constant dense<0.0> : !value
  %gv_le0 = arith.minimumf %gv, %gv_zero : !value
  %S2 = linac.decay %S1 key(%gk_le0 : !key) value(%gv_le0 : !value) : !state
  %S3 = linac.write %S2, %k, %v : !state, !key, !value
  %o = linac.read %S3, %q : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
linac.layer @fixed_from_params(%S : !state) inputs(%q : !key, %k : !key, %v : !value) params(%a : f32) {
  %h = linac.head_index : f32
  %g = arith.mulf %a, %h : f32
  %g_zero = arith.constant 0.0 : f32
  %g_le0 = arith.minimumf %g, %g_zero : f32
  %S1 = linac.decay %S key(%g_le0 : f32) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

// -----

// A written value computed from the read needs the state first.
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
// CHECK-LABEL: linac.layer @value_from_read
// CHECK-SAME: chunkable = false
// STRICT: error: outside the normal form: a transition's operand depends on the read
linac.layer @value_from_read(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  %o = linac.read %S, %q : !state, !key -> !value
  // expected-remark @+1 {{a transition's operand depends on the read; the normal form computes them from the token's inputs alone}}
  %u = linac.l2norm %o : !value
  %S1 = linac.write %S, %k, %u : !state, !key, !value
  linac.yield %S1, %o : !state, !value
}
