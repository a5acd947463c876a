// The written value is computed from the read, so the layer is outside the
// normal form and runs as the scan (found by the differential run on a
// mutant of RWKV-6: the chunkwise prologue was generated reading a state
// it does not have).
!key = tensor<16xf32, #linac.key>
!value = tensor<32xf32, #linac.value>
!state = !linac.state<16x32>

linac.layer @value_from_read(%S : !state)
    inputs(%r : !key, %k : !key, %v : !value, %w : !key) {
  %o = linac.read %S, %r scale 1.0 : !state, !key -> !value
  %half = arith.constant dense<0.5> : !value
  %echo = arith.mulf %o, %half : !value
  %u = arith.addf %v, %echo : !value
  %ew = math.exp %w : !key
  %log_w = arith.negf %ew : !key
  %S1 = linac.decay %S key(%log_w : !key) : !state
  %S2 = linac.write %S1, %k, %u : !state, !key, !value
  linac.yield %S2, %o : !state, !value
}
