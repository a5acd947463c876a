// Gated DeltaNet-2: a key-vector decay as in KDA, a key-vector erase
// strength b = sigmoid(b_raw) and a value-vector write strength
// w = sigmoid(w_raw).
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @gdn2(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key, %b : !key, %w : !value)
    params(%A_log : f32, %dt_bias : !key) {
  %qn = linac.l2norm %q : !key
  %kn = linac.l2norm %k : !key
  %A = math.exp %A_log : f32
  %Ak = linac.broadcast %A : !key
  %x = arith.addf %g, %dt_bias : !key
  %sp = linac.softplus %x : !key
  %Asp = arith.mulf %Ak, %sp : !key
  %log_a = arith.negf %Asp : !key
  %erase = linac.sigmoid %b : !key
  %write = linac.sigmoid %w : !value
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.erase %S1, %kn strength(%erase : !key) : !state, !key
  %S3 = linac.write %S2, %kn, %v strength(%write : !value) : !state, !key, !value
  %o = linac.read %S3, %qn : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
