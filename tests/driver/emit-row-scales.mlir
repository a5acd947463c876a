// A layer whose q, k and v are each an input's row times a scalar of the
// token, on the warpgroup kernel without an erase, gets rowScales beside its
// prologue: each operand's scalar from its row's squared norm, along the ops
// from the row outward, the write strength and the key log-gate; and the
// flags that say which scalars take a norm and which are 1. Mamba-2's
// scalars are its write strength and gate alone. With an erase (Gated
// DeltaNet) or a query that mixes channels there is none.
// RUN: linac compile %s --emit=source --target sm_90a | FileCheck %s
// RUN: linac compile %examples/mamba2.mlir --emit=source --target sm_90a | FileCheck %s --check-prefix=MAMBA
// RUN: linac compile %examples/gated_deltanet.mlir --emit=source --target sm_90a | FileCheck %s --check-prefix=NONE
// RUN: linac compile %S/Inputs/channel_query.mlir --emit=source --target sm_90a | FileCheck %s --check-prefix=NONE

// CHECK: static constexpr bool kRowScaled = true;
// CHECK-NEXT: static constexpr int kQueryRow = 0, kKeyRow = 1, kValueRow = 2;
// CHECK: static constexpr bool kQueryNorm = true, kKeyNorm = true, kValueNorm = false;
// CHECK-NEXT: static constexpr bool kUnitQuery = false, kUnitWrite = false;
// CHECK-NEXT: static void rowScales(const Token &token, float qNorm2, float kNorm2, float vNorm2, RowScales &out) {
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
// CHECK-NEXT: out.gk = 0.0f;
// CHECK-NEXT: }

// MAMBA: static constexpr bool kRowScaled = true;
// MAMBA: static constexpr bool kQueryNorm = false, kKeyNorm = false, kValueNorm = false;
// MAMBA-NEXT: static constexpr bool kUnitQuery = true, kUnitWrite = false;
// MAMBA: const auto delta = softplus(x);
// MAMBA: out.u *= delta;
// MAMBA: out.gk = g;

// NONE: static constexpr bool kRowScaled = false;
// NONE-NEXT: static constexpr int kQueryRow = -1, kKeyRow = -1, kValueRow = -1;
// NONE: struct Chunk {
// NONE-NOT: rowScales
// NONE: struct Scan {

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

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
