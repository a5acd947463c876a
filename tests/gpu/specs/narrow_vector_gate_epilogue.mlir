// An epilogue with inputs of its own, at K = 32, V = 80: the output gate z
// and the value v, whose rows the phased state block stages beside the
// reads, and a scalar c, which it asks L2 for a chunk ahead instead. The GPU
// check covers both paths with it; tests/gpu/compile_all.sh compiles it for
// the phased and lockstep kernels too.
!key = tensor<32xf32, #linac.key>
!value = tensor<80xf32, #linac.value>
!state = !linac.state<32x80>

linac.layer @narrow_vector_gate_epilogue(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key, %z : !value,
           %c : f32) {
  %neg = arith.negf %g : !key
  %sp = linac.softplus %neg : !key
  %sixteenth = arith.constant dense<-0.0625> : !key
  %log_a = arith.mulf %sp, %sixteenth : !key
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %read = linac.read %S2, %q : !state, !key -> !value
  %gate = linac.sigmoid %z : !value
  %gated = arith.mulf %read, %gate : !value
  %cv = linac.broadcast %c : !value
  %skip = arith.mulf %cv, %v : !value
  %o = arith.addf %gated, %skip : !value
  linac.yield %S2, %o : !state, !value
}
