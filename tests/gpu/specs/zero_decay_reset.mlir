// A fixed per-head decay gamma_h = 1 - 2^(-5h): head 0's factor is exactly
// 0 (log-gate -inf, a hard reset every token), the others' as RetNet's. On
// the GPU: the chunkwise kernel's scalar gate in bf16 and fp16, the scan in
// fp32, and decode. tests/gpu/prepare.sh compiles it beside the examples;
// tests/cpu/specs has the same spec for the CPU tests.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @zero_decay_reset(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value) {
  %h = linac.head_index : f32
  %one = arith.constant 1.0 : f32
  %minus_five = arith.constant -5.0 : f32
  %e = arith.mulf %minus_five, %h : f32
  %p = math.exp2 %e : f32
  %gamma = arith.subf %one, %p : f32
  %g = math.log %gamma : f32
  %S1 = linac.decay %S key(%g : f32) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
