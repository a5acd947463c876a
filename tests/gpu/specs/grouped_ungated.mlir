// The delta rule without a gate at K = 32, V = 128, with its erase and
// write strengths apart: the pipelined and phased chunkwise kernels with a
// decay of 1 and keys of two k-steps. The GPU check covers those paths with
// it; tests/gpu/compile_all.sh compiles it for each kernel.
!key = tensor<32xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<32x128>

linac.layer @grouped_ungated(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %a : f32, %b : f32) {
  %qn = linac.l2norm %q : !key
  %kn = linac.l2norm %k : !key
  %erase = linac.sigmoid %a : f32
  %write = linac.sigmoid %b : f32
  %S1 = linac.erase %S, %kn strength(%erase : f32) : !state, !key
  %S2 = linac.write %S1, %kn, %v strength(%write : f32) : !state, !key, !value
  %o = linac.read %S2, %qn : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
