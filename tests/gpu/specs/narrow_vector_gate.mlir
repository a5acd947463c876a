// KDA's body at K = 64, V = 48: the phased kernels under a key-vector gate
// with an erase, three of their eight state warps holding value columns,
// keys of two slots a lane in a preparing warp. The GPU check covers that
// path with it; tests/gpu/compile_all.sh compiles it for the phased and
// lockstep kernels too.
!key = tensor<64xf32, #linac.key>
!value = tensor<48xf32, #linac.value>
!state = !linac.state<64x48>

linac.layer @narrow_vector_gate(%S : !state)
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
