// A layer whose q, k and v are each an input's row times a scalar of the
// token gets rowScales beside its prologue: each operand's scalar from its
// row's squared norm, along the ops from the row outward. Gated DeltaNet's
// l2norms, strengths and gate; a layer whose query mixes channels has none.
// RUN: linac compile %s --emit=source --target sm_90a | FileCheck %s
// RUN: linac compile %examples/gated_deltanet.mlir --emit=source --target sm_90a | FileCheck %s --check-prefix=GDN
// RUN: linac compile %S/Inputs/channel_query.mlir --emit=source --target sm_90a | FileCheck %s --check-prefix=NONE

// CHECK: static void rowScales(const Token &token, float qNorm2, float kNorm2, float vNorm2, RowScales &out) {
// CHECK-NEXT: out.q = 1.0f;
// CHECK-NEXT: out.q = out.q / sqrtf(out.q * out.q * qNorm2 + 1e-06f);
// CHECK-NEXT: const float arg_a = loadScalar(token.input(3));
// CHECK-NEXT: out.q *= arg_a;
// CHECK-NEXT: out.k = 1.0f;
// CHECK-NEXT: const float arg_b = loadScalar(token.input(4));
// CHECK-NEXT: out.k /= arg_b;
// CHECK-NEXT: out.k = -out.k;
// CHECK-NEXT: out.k = out.k / sqrtf(out.k * out.k * kNorm2 + 0.5f);
// CHECK-NEXT: out.u = 1.0f;
// CHECK-NEXT: out.e = 0.0f;
// CHECK-NEXT: out.gk = 0.0f;
// CHECK-NEXT: }

// GDN: static void rowScales(
// GDN: out.q = out.q / sqrtf(out.q * out.q * qNorm2 + 1e-06f);
// GDN: out.k = out.k / sqrtf(out.k * out.k * kNorm2 + 1e-06f);
// GDN: const auto beta = sigmoid(arg_b);
// GDN-NEXT: out.e = beta * out.k;
// GDN-NEXT: out.u *= beta;
// GDN: out.gk = log_a;

// NONE: struct Chunk {
// NONE-NOT: rowScales
// NONE: struct Scan {

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @scalars_around_norms(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %a : f32, %b : f32) {
  %qn = linac.l2norm %q : !key
  %as = linac.broadcast %a : !key
  %qs = arith.mulf %as, %qn : !key
  %bs = linac.broadcast %b : !key
  %kd = arith.divf %k, %bs : !key
  %kneg = arith.negf %kd : !key
  %kn = linac.l2norm %kneg {eps = 0.5 : f64} : !key
  %S1 = linac.write %S, %kn, %v : !state, !key, !value
  %o = linac.read %S1, %qs : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}
