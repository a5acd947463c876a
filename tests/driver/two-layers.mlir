// A package holds one layer, on every target; targets are checked first.
// RUN: not linac compile %s -o %t.linac 2>&1 | FileCheck %s
// RUN: not linac compile %s --target sm_90a -o %t.linac 2>&1 | FileCheck %s
// RUN: not linac compile %s --target sm_70 -o %t.linac 2>&1 | FileCheck %s --check-prefix=TARGET
// CHECK: holds 2 layers; a package holds one
// TARGET: unknown target 'sm_70'; expected cpu, sm_90a or sm_80

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @first(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}
linac.layer @second(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}
