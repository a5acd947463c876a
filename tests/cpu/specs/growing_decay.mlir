// A key-vector decay whose factors may exceed 1 (its log lies in [-0.01,
// 0.01]), marked may_grow: a recurrent scan on every target, checked
// against the fp64 reference like any layer.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @growing_decay(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key) {
  %t = math.tanh %g : !key
  %hundredth = arith.constant dense<0.01> : !key
  %log_a = arith.mulf %t, %hundredth : !key
  %S1 = linac.decay %S key(%log_a : !key) may_grow : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
