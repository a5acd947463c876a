// mLSTM's body at K = 24, V = 40: the chunkwise kernel pads the state to
// 32 x 48, and the normaliser's column, the tiles' 49th, is the 41st in
// memory.
!key = tensor<24xf32, #linac.key>
!value = tensor<40xf32, #linac.value>
!state = !linac.state<24x40, normalized>

linac.layer @odd_dims_normalized(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %i : f32, %f : f32) {
  %neg_f = arith.negf %f : f32
  %sp = linac.softplus %neg_f : f32
  %g = arith.negf %sp : f32
  %input_gate = math.exp %i : f32
  %S1 = linac.decay %S key(%g : f32) : !state
  %S2 = linac.write %S1, %k, %v strength(%input_gate : f32) : !state, !key, !value
  %o = linac.read %S2, %q normalized : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
