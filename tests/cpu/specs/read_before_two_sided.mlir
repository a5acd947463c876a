// The state read before the token's two-sided decay and write (with a
// bonus for the token's own write): the chunk products' query log-gates one
// token back on both sides.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @read_before_two_sided(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key, %h : !value) {
  %o_state = linac.read %S, %q : !state, !key -> !value
  %qk = linac.dot %q, %k : !key
  %w = linac.broadcast %qk : !value
  %bonus = arith.mulf %w, %v : !value
  %o = arith.addf %o_state, %bonus : !value
  %sp_g = linac.softplus %g : !key
  %log_a = arith.negf %sp_g : !key
  %sp_h = linac.softplus %h : !value
  %log_b = arith.negf %sp_h : !value
  %S1 = linac.decay %S key(%log_a : !key) value(%log_b : !value) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  linac.yield %S2, %o : !state, !value
}
