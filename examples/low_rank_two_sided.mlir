// Low-rank two-sided gate: the gate matrix G = alpha beta^T with
// alpha = sigmoid(a) and beta = sigmoid(b) is rank one, so its log splits
// into a key-side and a value-side decay.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @low_rank_two_sided(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %a : !key, %b : !value) {
  %alpha = linac.sigmoid %a : !key
  %log_alpha = math.log %alpha : !key
  %beta = linac.sigmoid %b : !value
  %log_beta = math.log %beta : !value
  %S1 = linac.decay %S key(%log_alpha : !key) value(%log_beta : !value) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
