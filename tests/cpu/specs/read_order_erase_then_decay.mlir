// An erase before a scalar decay (outside the normal form), reading the
// incoming state after every transition.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @read_order_erase_then_decay(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : f32, %b : f32) {
  %qn = linac.l2norm %q : !key
  %kn = linac.l2norm %k : !key
  %sp = linac.softplus %g : f32
  %log_a = arith.negf %sp : f32
  %beta = linac.sigmoid %b : f32
  %S1 = linac.erase %S, %kn strength(%beta : f32) : !state, !key
  %S2 = linac.decay %S1 key(%log_a : f32) : !state
  %S3 = linac.write %S2, %kn, %v strength(%beta : f32) : !state, !key, !value
  %o = linac.read %S, %qn : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
