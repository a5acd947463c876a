// A normaliser goes back by chunks, as one more column of the writes: the
// prologue's reverse gives a scalar write strength the gradient of the
// normaliser's weight, the last of d.u, and there is no token-by-token
// step to reverse.
// RUN: linac compile %s --emit=source | FileCheck %s

// CHECK: static void prologueBackward(
// CHECK: grad_arg_v = grad_arg_v + gate * valuesOf<V>(d.u);
// CHECK-NEXT: grad_gate = grad_gate + dot(valuesOf<V>(d.u), arg_v);
// CHECK-NEXT: grad_gate = grad_gate + d.u[V];
// CHECK: static void epilogueBackward(
// CHECK-NOT: stepBackward(
// CHECK: extern "C" int linac_cpu_backward(

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16, normalized>

linac.layer @normalized(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %f : f32, %i : f32) {
  %sp = linac.softplus %f : f32
  %log_f = arith.negf %sp : f32
  %gate = linac.sigmoid %i : f32
  %S1 = linac.decay %S key(%log_f : f32) : !state
  %S2 = linac.write %S1, %k, %v strength(%gate : f32) : !state, !key, !value
  %o = linac.read %S2, %q normalized : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
