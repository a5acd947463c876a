// The CUDA source flags the inputs the chunkwise epilogue loads (the output's
// own, beside the read), which the phased state block asks L2 for a chunk
// ahead: here q, v and z but not k or the gate, which only the prologue
// takes. A layer whose output is the read flags none.
// RUN: linac compile %s --emit=source --target sm_90a | FileCheck %s
// RUN: linac compile %examples/gla.mlir --emit=source --target sm_90a | FileCheck %s --check-prefix=NONE

// CHECK: static constexpr bool epilogueInput(int i) {
// CHECK-NEXT: constexpr bool flags[] = {true, false, true, false, true};
// CHECK: void epilogue(
// CHECK-NEXT: token.input(0)
// CHECK-NEXT: token.input(2)
// CHECK-NEXT: token.input(4)
// CHECK-NOT: token.input
// CHECK: struct Scan {

// NONE: static constexpr bool epilogueInput(int i) {
// NONE-NEXT: constexpr bool flags[] = {false, false, false, false};

!key = tensor<64xf32, #linac.key>
!value = tensor<64xf32, #linac.value>
!state = !linac.state<64x64>

linac.layer @bonus_and_output_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %a : !key, %z : !value) {
  %o_state = linac.read %S, %q : !state, !key -> !value
  %qq = linac.dot %q, %q : !key
  %w = linac.broadcast %qq : !value
  %bonus = arith.mulf %w, %v : !value
  %o = arith.addf %o_state, %bonus : !value
  %zg = linac.sigmoid %z : !value
  %out = arith.mulf %o, %zg : !value
  %sp = linac.softplus %a : !key
  %g = arith.negf %sp : !key
  %S1 = linac.decay %S key(%g : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  linac.yield %S2, %out : !state, !value
}
