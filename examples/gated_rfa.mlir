// Gated random-feature attention: a scalar gate a = sigmoid(g) decays the
// state and (1 - a) scales the write.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @gated_rfa(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : f32) {
  %neg = arith.negf %g : f32
  %sp = linac.softplus %neg : f32
  %log_a = arith.negf %sp : f32
  %a = math.exp %log_a : f32
  %one = arith.constant 1.0 : f32
  %write_gate = arith.subf %one, %a : f32
  %S1 = linac.decay %S key(%log_a : f32) : !state
  %S2 = linac.write %S1, %k, %v strength(%write_gate : f32) : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
