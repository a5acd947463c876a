// The CPU backend names an op it cannot lower, and the backward an op it
// has no derivative of.
// RUN: not linac compile %s -o %t.linac 2>&1 | FileCheck %s
// RUN: not test -e %t.linac

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @sine_gate(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %g : f32) {
  // CHECK: error: no backend can lower this op
  // CHECK: error: the backward pass has no derivative of this op
  %s = math.sin %g : f32
  %s_zero = arith.constant 0.0 : f32
  %s_le0 = arith.minimumf %s, %s_zero : f32
  %S1 = linac.decay %S key(%s_le0 : f32) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
