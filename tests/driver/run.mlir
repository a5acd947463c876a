// linac run reads one .npy per argument and writes o.npy and final_state.npy;
// a missing input is an error naming it.
// RUN: rm -rf %t && mkdir -p %t/in
// RUN: linac compile %s -o %t/la.linac
// RUN: %python %S/write_npy.py %t/in q 1 3 1 2
// RUN: %python %S/write_npy.py %t/in k 1 3 1 2
// RUN: %python %S/write_npy.py %t/in v 1 3 1 2
// RUN: linac run %t/la.linac --inputs %t/in --outputs %t/out --scale 1.0
// RUN: %python %S/read_npy.py %t/out/o.npy | FileCheck %s --check-prefix=O
// RUN: %python %S/read_npy.py %t/out/final_state.npy | FileCheck %s --check-prefix=STATE
// RUN: %python %S/write_npy.py %t/in initial_state 1 1 3 3
// RUN: not linac run %t/la.linac --inputs %t/in --outputs %t/out 2>&1 | FileCheck %s --check-prefix=STATESHAPE
// RUN: rm %t/in/k.npy
// RUN: not linac run %t/la.linac --inputs %t/in --outputs %t/out 2>&1 | FileCheck %s --check-prefix=MISSING

// With q = k = v = ones: S_t = t * ones, o_t = S_t^T q = 2t per element.
// O: shape (1, 3, 1, 2) values 2.0 2.0 4.0 4.0 6.0 6.0
// STATE: shape (1, 1, 2, 2) values 3.0 3.0 3.0 3.0
// STATESHAPE: error: initial_state has shape (1, 1, 3, 3), expected [1, 1, 2, 2]
// MISSING: error: missing input 'k'

!key = tensor<2xf32, #linac.key>
!value = tensor<2xf32, #linac.value>
!state = !linac.state<2x2>

linac.layer @la(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}
