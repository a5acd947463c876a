// GLA's body at K = 32, V = 80: the phased kernels under a key-vector gate
// without an erase, one key slot a lane in a preparing warp, five of the
// eight state warps holding value columns. The GPU check covers that path
// with it; tests/gpu/compile_all.sh compiles it for the phased and
// lockstep kernels too.
!key = tensor<32xf32, #linac.key>
!value = tensor<80xf32, #linac.value>
!state = !linac.state<32x80>

linac.layer @narrow_vector_gate_no_erase(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key) {
  %neg = arith.negf %g : !key
  %sp = linac.softplus %neg : !key
  %sixteenth = arith.constant dense<-0.0625> : !key
  %log_a = arith.mulf %sp, %sixteenth : !key
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
