// Mamba2 (SSD): q = C, k = B, v = x. dt = softplus(dt_raw + dt_bias),
// decay exp(-exp(A_log) dt), and the write is scaled by dt.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @mamba2(%S : !state)
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
