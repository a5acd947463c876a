// RUN: linac-opt %s -split-input-file -verify-diagnostics


// expected-error @+1 {{state dimensions must be positive, got 0x128}}
linac.layer @empty_state(%S : !linac.state<0x128>) inputs() {

// -----

// expected-error @+1 {{state needs two dimensions, K x V}}
linac.layer @one_dim(%S : !linac.state<128>) inputs() {

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
// expected-error @+1 {{first argument must be the state (!linac.state<KxV>), got 'tensor<128xf32, #linac.key>'}}
linac.layer @no_state(%S : !key) inputs(%q : !key, %v : !value) {
  %o = arith.constant dense<0.0> : !value
  linac.yield %S, %o : !key, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
// expected-error @+1 {{input name 'scale' is reserved for a runtime argument}}
linac.layer @reserved(%S : !state) inputs(%q : !key, %scale : f32) {
  %o = linac.read %S, %q : !state, !key -> !value
  linac.yield %S, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
// expected-error @+1 {{input name '0' is not an identifier}}
linac.layer @numbered(%S : !state) inputs(%q : !key, %0 : f32) {
  %o = linac.read %S, %q : !state, !key -> !value
  linac.yield %S, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
// expected-error @+1 {{input 'n' has type 'i32'; inputs are f32 scalars, key-side or value-side vectors, or key-by-value matrices}}
linac.layer @int_input(%S : !state) inputs(%q : !key, %n : i32) {
  %o = linac.read %S, %q : !state, !key -> !value
  linac.yield %S, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
// expected-error @+1 {{parameter 'M' has type 'tensor<128x128xf32, #linac.matrix>'; parameters are f32 scalars or key-side or value-side vectors}}
linac.layer @matrix_param(%S : !state) inputs(%q : !key) params(%M : tensor<128x128xf32, #linac.matrix>) {
  %o = linac.read %S, %q : !state, !key -> !value
  linac.yield %S, %o : !state, !value
}

// -----

!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
// expected-error @+1 {{input 'q' has 64 elements but the state has K = 128}}
linac.layer @short_query(%S : !state) inputs(%q : tensor<64xf32, #linac.key>) {
  %o = arith.constant dense<0.0> : !value
  linac.yield %S, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
linac.layer @state_twice(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  // expected-note @+1 {{state defined here}}
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  // expected-error @-3 {{state is used 2 times; thread it through one chain of transitions}}
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %S3 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S3, %q : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
// expected-error @+1 {{never reads the state: add a linac.read}}
linac.layer @no_read(%S : !state) inputs(%k : !key, %v : !value) {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  linac.yield %S1, %v : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
// expected-error @+1 {{reads the state more than once; a step has one read}}
linac.layer @two_reads(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  %o1 = linac.read %S, %q : !state, !key -> !value
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  // expected-note @+1 {{second read here}}
  %o2 = linac.read %S1, %q : !state, !key -> !value
  %o = arith.addf %o1, %o2 : !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
linac.layer @output_not_read(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  // expected-error @+1 {{output does not depend on the read of the state}}
  linac.yield %S1, %v : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
linac.layer @no_gate(%S : !state) inputs(%q : !key) {
  // expected-error @+1 {{needs a key-side gate, a value-side gate or both}}
  %S1 = linac.decay %S : !state
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
linac.layer @gate_wrong_side(%S : !state) inputs(%q : !key, %g : !value) {
  // expected-error @+1 {{operand #1 must be per-token scalar (f32) or key-side vector (tensor<Kxf32, #linac.key>), but got 'tensor<128xf32, #linac.value>'}}
  %S1 = linac.decay %S key(%g : !value) : !state
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
linac.layer @short_gate(%S : !state) inputs(%q : !key, %g : !value) {
  %gv = arith.constant dense<-1.0> : tensor<64xf32, #linac.value>
  // expected-error @+1 {{value-side gate has 64 elements but the state has V = 128}}
  %S1 = linac.decay %S value(%gv : tensor<64xf32, #linac.value>) : !state
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128, normalized>
linac.layer @normalised_value_decay(%S : !state) inputs(%q : !key, %h : !value) {
  // expected-error @+1 {{cannot decay the value side of a state with a normaliser}}
  %S1 = linac.decay %S value(%h : !value) : !state
  %o = linac.read %S1, %q normalized : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128, normalized>
!matrix = tensor<128x128xf32, #linac.matrix>
linac.layer @normalised_matrix_gate(%S : !state) inputs(%q : !key, %G : !matrix) {
  // expected-error @+1 {{cannot gate a state with a normaliser by a matrix}}
  %S1 = linac.matrix_gate %S, %G : !state, !matrix
  %o = linac.read %S1, %q normalized : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
linac.layer @matrix_shape(%S : !state) inputs(%q : !key) {
  %G = arith.constant dense<-1.0> : tensor<128x64xf32, #linac.matrix>
  // expected-error @+1 {{matrix gate is 128x64 but the state is 128x128}}
  %S1 = linac.matrix_gate %S, %G : !state, tensor<128x64xf32, #linac.matrix>
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
linac.layer @value_as_key(%S : !state) inputs(%q : !key, %v : !value, %b : f32) {
  // expected-error @+1 {{operand #1 must be key-side vector (tensor<Kxf32, #linac.key>), but got 'tensor<128xf32, #linac.value>'}}
  %S1 = linac.erase %S, %v strength(%b : f32) : !state, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
linac.layer @erase_strength_side(%S : !state) inputs(%q : !key, %k : !key, %w : !value) {
  // expected-error @+1 {{operand #2 must be per-token scalar (f32) or key-side vector (tensor<Kxf32, #linac.key>), but got 'tensor<128xf32, #linac.value>'}}
  %S1 = linac.erase %S, %k strength(%w : !value) : !state, !key
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
linac.layer @short_key(%S : !state) inputs(%q : tensor<128xf32, #linac.key>, %v : !value) {
  %k = arith.constant dense<1.0> : tensor<32xf32, #linac.key>
  // expected-error @+1 {{key has 32 elements but the state has K = 128}}
  %S1 = linac.write %S, %k, %v : !state, tensor<32xf32, #linac.key>, !value
  %o = linac.read %S1, %q : !state, tensor<128xf32, #linac.key> -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
linac.layer @write_strength_side(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %b : !key) {
  // expected-error @+1 {{operand #3 must be per-token scalar (f32) or value-side vector (tensor<Vxf32, #linac.value>), but got 'tensor<128xf32, #linac.key>'}}
  %S1 = linac.write %S, %k, %v strength(%b : !key) : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128, normalized>
linac.layer @normalised_vector_write(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %w : !value) {
  // expected-error @+1 {{a value-side write strength cannot apply to the normaliser; use a scalar strength}}
  %S1 = linac.write %S, %k, %v strength(%w : !value) : !state, !key, !value
  %o = linac.read %S1, %q normalized : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
linac.layer @normalized_without_normaliser(%S : !state) inputs(%q : !key) {
  // expected-error @+1 {{'normalized' needs a state with a normaliser (!linac.state<KxV, normalized>)}}
  %o = linac.read %S, %q normalized : !state, !key -> !value
  linac.yield %S, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128, normalized>
linac.layer @normaliser_ignored(%S : !state) inputs(%q : !key) {
  // expected-error @+1 {{the state has a normaliser that this read ignores; add 'normalized'}}
  %o = linac.read %S, %q : !state, !key -> !value
  linac.yield %S, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
linac.layer @bad_scale(%S : !state) inputs(%q : !key) {
  // expected-error @+1 {{scale must be positive and finite, got -1.000000e+00}}
  %o = linac.read %S, %q scale -1.0 : !state, !key -> !value
  linac.yield %S, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
linac.layer @read_query_side(%S : !state) inputs(%q : !value) {
  // expected-error @+1 {{operand #1 must be key-side vector (tensor<Kxf32, #linac.key>), but got 'tensor<128xf32, #linac.value>'}}
  %o = linac.read %S, %q : !state, !value -> !value
  linac.yield %S, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x96>
linac.layer @read_output_length(%S : !state) inputs(%q : !key) {
  // expected-error @+1 {{output has 128 elements but the state has V = 96}}
  %o = linac.read %S, %q : !state, !key -> !value
  linac.yield %S, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
linac.layer @bad_eps(%S : !state) inputs(%q : !key) {
  // expected-error @+1 {{eps must be positive and finite, got 0.000000e+00}}
  %qn = linac.l2norm %q {eps = 0.0 : f64} : !key
  %o = linac.read %S, %qn : !state, !key -> !value
  linac.yield %S, %o : !state, !value
}

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
// expected-note @+1 {{prior use here}}
linac.layer @mixed_sides(%S : !state) inputs(%q : !key, %v : !value) {
  // expected-error @+1 {{use of value '%v' expects different type than prior uses}}
  %x = arith.addf %q, %v : !key
  %o = linac.read %S, %q : !state, !key -> !value
  linac.yield %S, %o : !state, !value
}

// -----

linac.layer @outside(%S : !linac.state<4x4>) inputs(%q : tensor<4xf32, #linac.key>) {
  %o = linac.read %S, %q : !linac.state<4x4>, tensor<4xf32, #linac.key> -> tensor<4xf32, #linac.value>
  linac.yield %S, %o : !linac.state<4x4>, tensor<4xf32, #linac.value>
}
// expected-error @+1 {{'linac.head_index' op expects parent op 'linac.layer'}}
%h = linac.head_index : f32

// -----

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>
linac.layer @short_output(%S : !state) inputs(%q : !key) {
  %o = linac.read %S, %q : !state, !key -> !value
  %d = linac.dot %o, %o : !value
  %short = linac.broadcast %d : tensor<64xf32, #linac.value>
  // expected-error @+1 {{output has 64 elements but the state has V = 128}}
  linac.yield %S, %short : !state, tensor<64xf32, #linac.value>
}

// -----

// expected-error @+1 {{has 2 block arguments but names 3}}
"linac.layer"() <{sym_name = "generic", input_names = ["q", "k"], param_names = []}> ({
^bb0(%S: !linac.state<4x4>, %q: tensor<4xf32, #linac.key>):
  %o = linac.read %S, %q : !linac.state<4x4>, tensor<4xf32, #linac.key> -> tensor<4xf32, #linac.value>
  linac.yield %S, %o : !linac.state<4x4>, tensor<4xf32, #linac.value>
}) : () -> ()
