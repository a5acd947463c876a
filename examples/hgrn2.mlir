// HGRN-2: a forget gate f = lower_bound + (1 - lower_bound) sigmoid(g) per
// key channel; the key is its complement, 1 - f.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @hgrn2(%S : !state)
    inputs(%q : !key, %v : !value, %g : !key)
    params(%lower_bound : !key) {
  %one = arith.constant dense<1.0> : !key
  %s = linac.sigmoid %g : !key
  %span = arith.subf %one, %lower_bound : !key
  %scaled = arith.mulf %span, %s : !key
  %f = arith.addf %lower_bound, %scaled : !key
  %log_f = math.log %f : !key
  %k = arith.subf %one, %f : !key
  %S1 = linac.decay %S key(%log_f : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
