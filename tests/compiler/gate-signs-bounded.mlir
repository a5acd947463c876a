// Gates the range analysis proves at most 0 change nothing; `may_grow`
// admits growing gates, which run as a recurrent scan on every target.
// RUN: linac-opt %s -split-input-file -linac-normalize -verify-diagnostics
// RUN: linac-opt %s -split-input-file -linac-normalize -linac-plan 2>/dev/null | FileCheck %s --check-prefix=CPU
// RUN: linac-opt %s -split-input-file -linac-normalize -linac-plan=target=sm_90a 2>/dev/null | FileCheck %s --check-prefix=SM90

// Gates the analysis proves at most 0: -softplus, -exp(a) softplus, a clamp,
// log sigmoid, RetNet's log(1 - 2^(-5-h)), and a factor of exactly 0.
// CPU-LABEL: linac.layer @bounded
// CPU-SAME: family = "chunkwise"
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
linac.layer @bounded(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %a : !key, %b : f32, %c : f32, %d : !key)
    params(%A_log : f32) {
  %sp = linac.softplus %a : !key
  %g1 = arith.negf %sp : !key
  %A = math.exp %A_log : f32
  %spb = linac.softplus %b : f32
  %Asp = arith.mulf %A, %spb : f32
  %g2 = arith.negf %Asp : f32
  %zero = arith.constant 0.0 : f32
  %g3 = arith.minimumf %c, %zero : f32
  %s = linac.sigmoid %d : !key
  %g4 = math.log %s : !key
  %h = linac.head_index : f32
  %minus_five = arith.constant -5.0 : f32
  %e = arith.subf %minus_five, %h : f32
  %p = math.exp2 %e : f32
  %one = arith.constant 1.0 : f32
  %gamma = arith.subf %one, %p : f32
  %g5 = math.log %gamma : f32
  %nothing = arith.mulf %zero, %p : f32
  %g6 = math.log %nothing : f32
  %S1 = linac.decay %S key(%g1 : !key) : !state
  %S2 = linac.decay %S1 key(%g2 : f32) : !state
  %S3 = linac.decay %S2 key(%g3 : f32) : !state
  %S4 = linac.decay %S3 key(%g4 : !key) : !state
  %S5 = linac.decay %S4 key(%g5 : f32) : !state
  %S6 = linac.decay %S5 key(%g6 : f32) : !state
  %S7 = linac.write %S6, %k, %v : !state, !key, !value
  %o = linac.read %S7, %q : !state, !key -> !value
  linac.yield %S7, %o : !state, !value
}

// -----

// A gate marked may_grow runs as a recurrent scan on every target.
// CPU-LABEL: linac.layer @growing
// CPU-SAME: family = "recurrent"
// CPU-SAME: recurrent_reason = "a decay marked may_grow"
// SM90-LABEL: linac.layer @growing
// SM90-SAME: family = "recurrent"
// SM90-SAME: recurrent_reason = "a decay marked may_grow"
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
linac.layer @growing(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %g : f32) {
  %S1 = linac.decay %S key(%g : f32) may_grow : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

// -----

// CPU-LABEL: linac.layer @growing_matrix
// CPU-SAME: family = "recurrent"
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
!matrix = tensor<16x16xf32, #linac.matrix>
linac.layer @growing_matrix(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %G : !matrix) {
  // expected-remark @+1 {{a full matrix gate has no chunkwise form}}
  %S1 = linac.matrix_gate %S, %G may_grow : !state, !matrix
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
