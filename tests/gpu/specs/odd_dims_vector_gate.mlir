// KDA's body at K = 100, V = 40: the chunkwise kernel pads both to tiles
// of 16 (112 x 48) with a key-vector gate, and a segment's 100 x 100
// transition takes three column blocks of 48.
!key = tensor<100xf32, #linac.key>
!value = tensor<40xf32, #linac.value>
!state = !linac.state<100x40>

linac.layer @odd_dims_vector_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key, %b : f32)
    params(%A_log : f32, %dt_bias : !key) {
  %qn = linac.l2norm %q : !key
  %kn = linac.l2norm %k : !key
  %A = math.exp %A_log : f32
  %Ak = linac.broadcast %A : !key
  %x = arith.addf %g, %dt_bias : !key
  %sp = linac.softplus %x : !key
  %Asp = arith.mulf %Ak, %sp : !key
  %log_a = arith.negf %Asp : !key
  %beta = linac.sigmoid %b : f32
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.erase %S1, %kn strength(%beta : f32) : !state, !key
  %S3 = linac.write %S2, %kn, %v strength(%beta : f32) : !state, !key, !value
  %o = linac.read %S3, %qn : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
