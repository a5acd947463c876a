// A value-side decay alone at K = 30, V = 50: the chunkwise kernel pads
// both to tiles of 16 (32 x 64), and its value gates fall fast (by about
// 0.7 a token), so that the pairs inside a sub-chunk, not the factorised
// products across them, carry most of each read.
!key = tensor<30xf32, #linac.key>
!value = tensor<50xf32, #linac.value>
!state = !linac.state<30x50>

linac.layer @odd_dims_value_decay(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %h : !value) {
  %sp_h = linac.softplus %h : !value
  %log_b = arith.negf %sp_h : !value
  %S1 = linac.decay %S value(%log_b : !value) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
