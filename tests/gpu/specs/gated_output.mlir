// A scalar gate with an output gate after the read: the warpgroup kernel
// with an epilogue of its own, which stores each token's output itself
// rather than the whole chunk's by a tensor map. The GPU check covers that
// path with it.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @gated_output(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %dt : f32, %z : !value) {
  %delta = linac.softplus %dt : f32
  %g = arith.negf %delta : f32
  %S1 = linac.decay %S key(%g : f32) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  %zg = linac.sigmoid %z : !value
  %out = arith.mulf %o, %zg : !value
  linac.yield %S2, %out : !state, !value
}
