// The row-scaling analysis: each chunk operand as an input's row times a
// scalar of the token, or the op that forms it some other way.
// RUN: linac-opt %s -split-input-file -linac-test-row-scaling -verify-diagnostics -o /dev/null

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

// expected-remark @+3 {{the query scales the row of q, then linac.l2norm, then arith.mulf}}
// expected-remark @+2 {{the key scales the row of k, then arith.divf, then arith.negf, then linac.l2norm}}
// expected-remark @+1 {{the value scales the row of v}}
linac.layer @scalars_around_norms(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %a : f32, %b : f32) {
  %qn = linac.l2norm %q : !key
  %as = linac.broadcast %a : !key
  %qs = arith.mulf %as, %qn : !key
  %bs = linac.broadcast %b : !key
  %kd = arith.divf %k, %bs : !key
  %kneg = arith.negf %kd : !key
  %kn = linac.l2norm %kneg : !key
  %S1 = linac.write %S, %kn, %v : !state, !key, !value
  %o = linac.read %S1, %qs : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

// expected-remark @+2 {{the key scales the row of k}}
// expected-remark @+1 {{the value scales the row of v}}
linac.layer @channel_ops(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %w : !key) {
  // expected-remark @+1 {{the query is no scaled input row: a product or quotient of two vectors scales each channel by its own factor}}
  %qw = arith.mulf %q, %w : !key
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %qw : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

// expected-remark @+2 {{the key is no scaled input row: a per-head vector parameter is no input row}}
// expected-remark @+1 {{the value scales the row of v}}
linac.layer @elementwise_and_params(%S : !state)
    inputs(%q : !key, %v : !value, %s : f32) params(%u : !key) {
  // expected-remark @+1 {{the query is no scaled input row: the op acts on each channel, not on the row as a whole}}
  %qs = linac.sigmoid %q : !key
  %S1 = linac.write %S, %u, %v : !state, !key, !value
  %o = linac.read %S1, %qs : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

// expected-remark @+2 {{the query scales the row of q}}
// expected-remark @+1 {{the value scales the row of v}}
linac.layer @broadcast_key(%S : !state) inputs(%q : !key, %v : !value, %s : f32) {
  // expected-remark @+1 {{the key is no scaled input row: a broadcast scalar is no input row}}
  %ks = linac.broadcast %s : !key
  %S1 = linac.write %S, %ks, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}
