// A written value computed from the read: outside the normal form, so the
// scan (found by the differential run: the chunkwise prologue had no state
// to read).
!key = tensor<16xf32, #linac.key>
!value = tensor<32xf32, #linac.value>
!state = !linac.state<16x32>

linac.layer @rwkv6(%S : !state)
    inputs(%r : !key, %k : !key, %v : !value, %w : !key)
    params(%u : !key) {
  %o_state = linac.read %S, %r scale 1.0 : !state, !key -> !value
  %m1 = linac.l2norm %o_state : !value
  %ru = arith.mulf %r, %u : !key
  %bonus_weight = linac.dot %ru, %k : !key
  %bw = linac.broadcast %bonus_weight : !value
  %bonus = arith.mulf %bw, %v : !value
  %o = arith.addf %o_state, %bonus : !value
  %ew = math.exp %w : !key
  %log_w = arith.negf %ew : !key
  %S1 = linac.decay %S key(%log_w : !key) : !state
  %S2 = linac.write %S1, %k, %m1 : !state, !key, !value
  linac.yield %S2, %o : !state, !value
}
