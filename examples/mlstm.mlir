// mLSTM: a scalar forget gate log(sigmoid(f)), an exponential input gate
// exp(i) on the write, and a normaliser n under the same transition:
// o = scale S^T q / max(|scale n^T q|, 1).
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @mlstm(%S : !linac.state<128x128, normalized>)
    inputs(%q : !key, %k : !key, %v : !value, %i : f32, %f : f32) {
  %neg_f = arith.negf %f : f32
  %sp = linac.softplus %neg_f : f32
  %g = arith.negf %sp : f32
  %input_gate = math.exp %i : f32
  %S1 = linac.decay %S key(%g : f32) : !linac.state<128x128, normalized>
  %S2 = linac.write %S1, %k, %v strength(%input_gate : f32)
      : !linac.state<128x128, normalized>, !key, !value
  %o = linac.read %S2, %q normalized
      : !linac.state<128x128, normalized>, !key -> !value
  linac.yield %S2, %o : !linac.state<128x128, normalized>, !value
}
