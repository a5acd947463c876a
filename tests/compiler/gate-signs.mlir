// -linac-normalize proves every log-gate at most 0 by its range, or stops
// with an error naming the gate.
// RUN: linac-opt %s -split-input-file -linac-normalize -verify-diagnostics

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
// expected-note @+1 {{the gate is input 'g' itself}}
linac.layer @raw_input(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %g : !key) {
  // expected-error @+1 {{the key-side log-gate may be positive (it lies in [-inf, +inf]), a decay factor above 1 that grows the state; bound it at most 0 (arith.minimumf with 0.0, -softplus(x), which is log(sigmoid(-x)), or -exp(x), for instance) or mark the op `may_grow` to run the layer as a recurrent scan}}
  %S1 = linac.decay %S key(%g : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
// expected-note @+1 {{the gate is parameter 'gamma' itself}}
linac.layer @raw_param(%S : !state) inputs(%q : !key, %k : !key, %v : !value) params(%gamma : f32) {
  // expected-error @+1 {{the key-side log-gate may be positive}}
  %S1 = linac.decay %S key(%gamma : f32) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
linac.layer @value_side(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %h : !value) {
  %sp = linac.softplus %h : !value
  // A softplus is positive: the sign is wrong, not missing.
  %half = arith.constant dense<0.5> : !value
  // expected-note @+1 {{the gate is computed here}}
  %log_b = arith.mulf %sp, %half : !value
  // expected-error @+1 {{the value-side log-gate may be positive (it lies in [0, +inf])}}
  %S1 = linac.decay %S value(%log_b : !value) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
!matrix = tensor<16x16xf32, #linac.matrix>
linac.layer @matrix(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %G : !matrix) {
  // A log of an unbounded value may be anything.
  // expected-note @+1 {{the gate is computed here}}
  %log_G = math.log %G : !matrix
  // expected-error @+1 {{the matrix log-gate may be positive (it lies in [-inf, +inf])}}
  %S1 = linac.matrix_gate %S, %log_G : !state, !matrix
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
