// A value-side decay goes back by chunks: the prologue's reverse takes
// the value-side log-gates' gradient d.gv, and there is no token-by-token
// step to reverse. With an erase beside it (two_sided_delta) the step goes
// back token by token.
// RUN: linac compile %s --emit=source | FileCheck %s
// RUN: linac compile %S/../cpu/specs/two_sided_delta.mlir --emit=source \
// RUN:   | FileCheck %s --check-prefix=ERASE

// CHECK: static void prologueBackward(
// CHECK: grad_log_b = grad_log_b + d.gv;
// CHECK: static void epilogueBackward(
// CHECK-NOT: stepBackward(
// CHECK: extern "C" int linac_cpu_backward(

// ERASE-NOT: prologueBackward(
// ERASE: static void stepBackward(
// ERASE: extern "C" int linac_cpu_backward(

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @two_sided(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key, %h : !value) {
  %ea = math.exp %g : !key
  %log_a = arith.negf %ea : !key
  %eb = math.exp %h : !value
  %log_b = arith.negf %eb : !value
  %S1 = linac.decay %S key(%log_a : !key) value(%log_b : !value) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
