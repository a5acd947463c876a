// With decode_placement = "first_use" the decode step loads and computes
// each value just before the state op that first takes it: the gate before
// the decay, the key, strengths and value before the update, the query
// before the read. The recurrent scan keeps body order. GDN-2 takes it
// with 8 warps a whole state (tests/compiler/plan-decode-placement.mlir).
// RUN: rm -rf %t.linac
// RUN: linac compile %examples/gdn2.mlir --target sm_90a --decode-warps 8 --decode-parts 1 -o %t.linac
// RUN: FileCheck %s --input-file %t.linac/layer.cu

// CHECK: struct Scan {
// CHECK: load(token.input(0));
// CHECK: state.decay(
// CHECK: struct Decode {
// CHECK-NOT: load(token.input(0))
// CHECK: load(token.input(3));
// CHECK-NOT: load(token.input(0))
// CHECK: state.decay(
// CHECK-NEXT: const auto arg_k = SplitKeyRows<128, Split>::load(token.input(1));
// CHECK-NOT: load(token.input(0))
// CHECK: state.eraseWrite(
// CHECK-NEXT: const auto arg_q = SplitKeyRows<128, Split>::load(token.input(0));
// CHECK-NEXT: const auto qn = l2norm(arg_q, 1e-06f);  // %qn = linac.l2norm %q
// CHECK-NEXT: state.read(qn, scale);
