// No seed system: Gated DeltaNet-2 with a value-side decay added.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @gdn2_value_decay(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key, %h : !value,
           %b : !key, %w : !value)
    params(%A_log : f32, %dt_bias : !key) {
  %qn = linac.l2norm %q : !key
  %kn = linac.l2norm %k : !key
  %A = math.exp %A_log : f32
  %Ak = linac.broadcast %A : !key
  %x = arith.addf %g, %dt_bias : !key
  %sp = linac.softplus %x : !key
  %Asp = arith.mulf %Ak, %sp : !key
  %log_a = arith.negf %Asp : !key
  %neg_h = arith.negf %h : !value
  %sp_h = linac.softplus %neg_h : !value
  %log_b = arith.negf %sp_h : !value
  %erase = linac.sigmoid %b : !key
  %write = linac.sigmoid %w : !value
  %S1 = linac.decay %S key(%log_a : !key) value(%log_b : !value) : !state
  %S2 = linac.erase %S1, %kn strength(%erase : !key) : !state, !key
  %S3 = linac.write %S2, %kn, %v strength(%write : !value) : !state, !key, !value
  %o = linac.read %S3, %qn : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
