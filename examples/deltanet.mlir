// DeltaNet: the delta rule with strength beta = sigmoid(b) and
// l2-normalised queries and keys.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @deltanet(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %b : f32) {
  %qn = linac.l2norm %q : !key
  %kn = linac.l2norm %k : !key
  %beta = linac.sigmoid %b : f32
  %S1 = linac.erase %S, %kn strength(%beta : f32) : !state, !key
  %S2 = linac.write %S1, %kn, %v strength(%beta : f32) : !state, !key, !value
  %o = linac.read %S2, %qn : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
