// RWKV-6: the receptance r reads the state before this token's decay and
// write; the token's own contribution enters through the bonus u:
// o = S_{t-1}^T r + ((r (.) u) . k) v, decay exp(-exp(w)).
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @rwkv6(%S : !state)
    inputs(%r : !key, %k : !key, %v : !value, %w : !key)
    params(%u : !key) {
  %o_state = linac.read %S, %r scale 1.0 : !state, !key -> !value
  %ru = arith.mulf %r, %u : !key
  %bonus_weight = linac.dot %ru, %k : !key
  %bw = linac.broadcast %bonus_weight : !value
  %bonus = arith.mulf %bw, %v : !value
  %o = arith.addf %o_state, %bonus : !value
  %ew = math.exp %w : !key
  %log_w = arith.negf %ew : !key
  %S1 = linac.decay %S key(%log_w : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  linac.yield %S2, %o : !state, !value
}
