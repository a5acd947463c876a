// A key-vector decay log(sigmoid(a)) after the write, which keeps the body
// out of the normal form: the recurrent scan on every target. Under
// saturating gates sigmoid(a) is 0 in fp32 for a below about -88 (the
// reference, in fp64, still has e^a), a decay factor of 0 that must reset
// the state's row, not turn it into NaN.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @zero_decay_after_write(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %a : !key) {
  %alpha = linac.sigmoid %a : !key
  %g = math.log %alpha : !key
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %S2 = linac.decay %S1 key(%g : !key) : !state
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
