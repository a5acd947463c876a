// Gated linear attention: a key-vector gate logsigmoid(g) / 16.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @gla(%S : !state)
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
