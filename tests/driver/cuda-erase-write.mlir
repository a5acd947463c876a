// Decode fuses an erase and the write after it into one pass over the
// state only when both take the same key; with different keys each keeps
// its own pass.
// RUN: rm -rf %t.linac
// RUN: linac compile %s --target sm_90a -o %t.linac
// RUN: FileCheck %s --input-file %t.linac/layer.cu

// CHECK: struct Decode {
// CHECK-NOT: eraseWrite
// CHECK: state.erase(arg_e, {{.*}} * arg_e);
// CHECK-NEXT: state.write(arg_k, arg_v, 1.0f);

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @two_keys(%S : !state)
    inputs(%q : !key, %k : !key, %e : !key, %v : !value, %b : f32) {
  %S1 = linac.erase %S, %e strength(%b : f32) : !state, !key
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
