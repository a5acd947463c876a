// Mamba-2's body at K = 64: the warpgroup kernel with keys of one tile, a
// scalar input beside the staged rows, and parameters. The GPU check
// covers that path with it.
!key = tensor<64xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<64x128>

linac.layer @narrow_keys_scalar_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %dt : f32)
    params(%A_log : f32, %dt_bias : f32) {
  %x = arith.addf %dt, %dt_bias : f32
  %delta = linac.softplus %x : f32
  %A = math.exp %A_log : f32
  %Adt = arith.mulf %A, %delta : f32
  %g = arith.negf %Adt : f32
  %S1 = linac.decay %S key(%g : f32) : !state
  %S2 = linac.write %S1, %k, %v strength(%delta : f32) : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
