// The delta rule at K = 64 under a scalar gate, with an erase strength of
// its own (not the write's) and an output gate after the read: compiled
// with chunk-kernel=warpgroup (tests/gpu/compile_all.sh), the warpgroup
// kernel's erase with keys of one tile and the generated epilogue in place
// of the output's tensor copy. The GPU check covers that path with it.
!key = tensor<64xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<64x128>

linac.layer @narrow_keys_erase(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : f32,
           %a : f32, %b : f32, %z : !value) {
  %qn = linac.l2norm %q : !key
  %kn = linac.l2norm %k : !key
  %sp = linac.softplus %g : f32
  %log_a = arith.negf %sp : f32
  %alpha = linac.sigmoid %a : f32
  %beta = linac.sigmoid %b : f32
  %S1 = linac.decay %S key(%log_a : f32) : !state
  %S2 = linac.erase %S1, %kn strength(%alpha : f32) : !state, !key
  %S3 = linac.write %S2, %kn, %v strength(%beta : f32) : !state, !key, !value
  %o = linac.read %S3, %qn : !state, !key -> !value
  %zg = linac.sigmoid %z : !value
  %out = arith.mulf %o, %zg : !value
  linac.yield %S3, %out : !state, !value
}
