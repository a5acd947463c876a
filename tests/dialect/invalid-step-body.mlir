// What a step's body may hold: flat f32 math, finite constants, bounded
// state dimensions. Each case once crashed the compiler or leaked a host
// compiler error.
// RUN: linac-opt %s -split-input-file -verify-diagnostics

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
linac.layer @unused_integer(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  // expected-error @+1 {{'arith.constant' op takes or makes a value of type 'i32'; a step computes with f32 scalars, key-side or value-side f32 vectors and key-by-value matrices}}
  %c = arith.constant 3 : i32
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
linac.layer @index_math(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  // expected-error @+1 {{'arith.constant' op takes or makes a value of type 'index'}}
  %c = arith.constant 3 : index
  %d = arith.addi %c, %c : index
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
linac.layer @integer_op(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %n : f32) {
  %bits = arith.bitcast %n : f32 to i32
  // expected-error @-1 {{'arith.bitcast' op takes or makes a value of type 'i32'}}
  %c = math.ctlz %bits : i32
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
linac.layer @unencoded_tensor(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  // expected-error @+1 {{'arith.constant' op takes or makes a value of type 'tensor<16xf32>'}}
  %c = arith.constant dense<1.0> : tensor<16xf32>
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<4xf32, #linac.key>
!value = tensor<4xf32, #linac.value>
!state = !linac.state<4x4>
linac.layer @per_element_constant(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %g : !key) {
  // expected-error @+1 {{'arith.constant' op in a step must be one value or a splat; a value per element is a parameter (params(...)), not a constant}}
  %c = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : !key
  %x = arith.mulf %g, %c : !key
  %S1 = linac.decay %S key(%x : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
linac.layer @nan_constant(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  // expected-error @+1 {{'arith.constant' op in a step must be finite, got nan}}
  %c = arith.constant dense<0x7FC00000> : !key
  %kc = arith.mulf %k, %c : !key
  %S1 = linac.write %S, %kc, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
linac.layer @infinite_constant(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %b : f32) {
  // expected-error @+1 {{'arith.constant' op in a step must be finite, got -INF}}
  %c = arith.constant 0xFF800000 : f32
  %w = arith.mulf %b, %c : f32
  %S1 = linac.write %S, %k, %v strength(%w : f32) : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
linac.layer @nested_region(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  // expected-error @+1 {{'builtin.module' op cannot appear in a step: a step is straight-line code without nested regions}}
  builtin.module {}
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

// expected-error @+1 {{state dimensions must be at most 512, got 100000x64}}
linac.layer @wide_state(%S : !linac.state<100000x64>) inputs() {

// -----

// Past 32 bits: checked before the dimensions narrow to the type's.
// expected-error @+1 {{state dimensions must be at most 512, got 64x4294967360}}
linac.layer @huge_state(%S : !linac.state<64x4294967360>) inputs() {

// -----

// expected-error @+1 {{state dimensions must be at most 512, got 513x128}}
linac.layer @just_too_wide(%S : !linac.state<513x128>) inputs() {
