// No seed system: a two-sided decay with the delta rule's erase.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @two_sided_delta(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key, %h : !value, %b : f32) {
  %qn = linac.l2norm %q : !key
  %kn = linac.l2norm %k : !key
  %neg_g = arith.negf %g : !key
  %sp_g = linac.softplus %neg_g : !key
  %log_a = arith.negf %sp_g : !key
  %neg_h = arith.negf %h : !value
  %sp_h = linac.softplus %neg_h : !value
  %log_b = arith.negf %sp_h : !value
  %beta = linac.sigmoid %b : f32
  %S1 = linac.decay %S key(%log_a : !key) value(%log_b : !value) : !state
  %S2 = linac.erase %S1, %kn strength(%beta : f32) : !state, !key
  %S3 = linac.write %S2, %kn, %v strength(%beta : f32) : !state, !key, !value
  %o = linac.read %S3, %qn : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
