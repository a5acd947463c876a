// A value-side decay beside a scalar key-side gate: the chunk backward's
// pairs take one key factor a pair and a value factor a column.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @value_decay_scalar_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %a : f32, %h : !value) {
  %neg_a = arith.negf %a : f32
  %sp_a = linac.softplus %neg_a : f32
  %log_a = arith.negf %sp_a : f32
  %neg_h = arith.negf %h : !value
  %sp_h = linac.softplus %neg_h : !value
  %log_b = arith.negf %sp_h : !value
  %S1 = linac.decay %S key(%log_a : f32) value(%log_b : !value) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
