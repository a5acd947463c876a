// Gated DeltaNet at K = V = 16: one tile of keys and of values, a state
// the chunkwise kernels take unpadded. The GPU check covers it;
// tests/gpu/prepare.sh compiles it beside the examples.
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @small_dims(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : f32, %b : f32)
    params(%A_log : f32, %dt_bias : f32) {
  %qn = linac.l2norm %q : !key
  %kn = linac.l2norm %k : !key
  %A = math.exp %A_log : f32
  %x = arith.addf %g, %dt_bias : f32
  %sp = linac.softplus %x : f32
  %Asp = arith.mulf %A, %sp : f32
  %log_a = arith.negf %Asp : f32
  %beta = linac.sigmoid %b : f32
  %S1 = linac.decay %S key(%log_a : f32) : !state
  %S2 = linac.erase %S1, %kn strength(%beta : f32) : !state, !key
  %S3 = linac.write %S2, %kn, %v strength(%beta : f32) : !state, !key, !value
  %o = linac.read %S3, %qn : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
