// Gated DeltaNet's transitions in the normal form's order with the read of
// the incoming state written last: chunkwise, with the strict intra-chunk
// mask of a read before the write.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @read_order_chunkwise(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : f32, %b : f32) {
  %kn = linac.l2norm %k : !key
  %sp = linac.softplus %g : f32
  %log_a = arith.negf %sp : f32
  %beta = linac.sigmoid %b : f32
  %S1 = linac.decay %S key(%log_a : f32) : !state
  %S2 = linac.erase %S1, %kn strength(%beta : f32) : !state, !key
  %S3 = linac.write %S2, %kn, %v strength(%beta : f32) : !state, !key, !value
  %qn = linac.l2norm %q : !key
  %o = linac.read %S, %qn : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
