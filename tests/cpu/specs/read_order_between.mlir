// The read of the state between the decay and the write, written after the
// write (outside the normal form: a recurrent scan).
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @read_order_between(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key) {
  %sp = linac.softplus %g : !key
  %log_a = arith.negf %sp : !key
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
