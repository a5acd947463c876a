// Two-sided separable gate: S <- diag(a) S diag(b) with key-side and
// value-side gates logsigmoid(g) / 16 and logsigmoid(h) / 16.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @two_sided(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key, %h : !value) {
  %neg_g = arith.negf %g : !key
  %sp_g = linac.softplus %neg_g : !key
  %ck = arith.constant dense<-0.0625> : !key
  %log_a = arith.mulf %sp_g, %ck : !key
  %neg_h = arith.negf %h : !value
  %sp_h = linac.softplus %neg_h : !value
  %cv = arith.constant dense<-0.0625> : !value
  %log_b = arith.mulf %sp_h, %cv : !value
  %S1 = linac.decay %S key(%log_a : !key) value(%log_b : !value) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
