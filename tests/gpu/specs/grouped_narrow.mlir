// Gated DeltaNet at K = 64, V = 48: the pipelined and phased chunkwise
// kernels with three of their eight state warps holding value columns and
// keys of four k-steps. The GPU check covers those paths with it;
// tests/gpu/compile_all.sh compiles it for each kernel.
!key = tensor<64xf32, #linac.key>
!value = tensor<48xf32, #linac.value>
!state = !linac.state<64x48>

linac.layer @grouped_narrow(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : f32, %b : f32) {
  %qn = linac.l2norm %q : !key
  %kn = linac.l2norm %k : !key
  %zero = arith.constant 0.0 : f32
  %log_a = arith.minimumf %g, %zero : f32
  %beta = linac.sigmoid %b : f32
  %S1 = linac.decay %S key(%log_a : f32) : !state
  %S2 = linac.erase %S1, %kn strength(%beta : f32) : !state, !key
  %S3 = linac.write %S2, %kn, %v strength(%beta : f32) : !state, !key, !value
  %o = linac.read %S3, %qn : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
