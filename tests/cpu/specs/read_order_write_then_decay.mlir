// The read of the incoming state written after the transitions, which run
// out of the normal form's order (write, then a key-vector decay): the
// recurrent scan and decode must read S before the step.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @read_order_write_then_decay(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key) {
  %neg = arith.negf %g : !key
  %sp = linac.softplus %neg : !key
  %eighth = arith.constant dense<-0.125> : !key
  %log_a = arith.mulf %sp, %eighth : !key
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %S2 = linac.decay %S1 key(%log_a : !key) : !state
  %o = linac.read %S, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
