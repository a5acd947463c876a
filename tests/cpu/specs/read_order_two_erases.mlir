// A key-vector decay, two erases and a write (outside the normal form),
// with the read of the incoming state last in the body and its query
// normalised after the transitions.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @read_order_two_erases(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key, %b : f32) {
  %kn = linac.l2norm %k : !key
  %sp = linac.softplus %g : !key
  %log_a = arith.negf %sp : !key
  %beta = linac.sigmoid %b : f32
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.erase %S1, %kn strength(%beta : f32) : !state, !key
  %S3 = linac.erase %S2, %kn strength(%beta : f32) : !state, !key
  %S4 = linac.write %S3, %kn, %v strength(%beta : f32) : !state, !key, !value
  %qn = linac.l2norm %q : !key
  %o = linac.read %S, %qn : !state, !key -> !value
  linac.yield %S4, %o : !state, !value
}
