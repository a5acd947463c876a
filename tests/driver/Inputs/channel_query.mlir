// The query scales each channel by its own factor: no row scaling.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @channel_query(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %w : !key) {
  %qw = arith.mulf %q, %w : !key
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %qw : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}
