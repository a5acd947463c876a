// A full matrix gate after the write, reading the incoming state at the
// end of the body.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @read_order_matrix_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value,
           %G : tensor<128x128xf32, #linac.matrix>) {
  %neg = arith.negf %G : tensor<128x128xf32, #linac.matrix>
  %sp = linac.softplus %neg : tensor<128x128xf32, #linac.matrix>
  %log_gate = arith.negf %sp : tensor<128x128xf32, #linac.matrix>
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %S2 = linac.matrix_gate %S1, %log_gate : !state, tensor<128x128xf32, #linac.matrix>
  %o = linac.read %S, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
