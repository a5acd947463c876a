// Full matrix gate: every state entry has its own per-token gate
// sigmoid(G). Not chunkable: it runs as a recurrent scan.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @full_matrix_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value,
           %G : tensor<128x128xf32, #linac.matrix>) {
  %neg = arith.negf %G : tensor<128x128xf32, #linac.matrix>
  %sp = linac.softplus %neg : tensor<128x128xf32, #linac.matrix>
  %log_gate = arith.negf %sp : tensor<128x128xf32, #linac.matrix>
  %S1 = linac.matrix_gate %S, %log_gate : !state, tensor<128x128xf32, #linac.matrix>
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
