// HGRN-2: a forget gate f = lower_bound + (1 - lower_bound) sigmoid(g) per
// key channel; the key is its complement, 1 - f. Written as
// 1 - f = (1 - lower_bound) sigmoid(-g), with the bound clamped to [0, 1],
// so that f <= 1 is provable and log f is formed without cancellation.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @hgrn2(%S : !state)
    inputs(%q : !key, %v : !value, %g : !key)
    params(%lower_bound : !key) {
  %zero = arith.constant dense<0.0> : !key
  %one = arith.constant dense<1.0> : !key
  %above_zero = arith.maximumf %lower_bound, %zero : !key
  %bound = arith.minimumf %above_zero, %one : !key
  %span = arith.subf %one, %bound : !key
  %neg_g = arith.negf %g : !key
  %closed = linac.sigmoid %neg_g : !key
  %k = arith.mulf %span, %closed : !key
  %neg_k = arith.negf %k : !key
  %log_f = math.log1p %neg_k : !key
  %S1 = linac.decay %S key(%log_f : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
