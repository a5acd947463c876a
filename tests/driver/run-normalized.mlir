// A layer with a normaliser keeps it as its states' last column, so a run
// resumes from [N, H, K, V + 1] and writes the same shape back.
// RUN: rm -rf %t && mkdir -p %t/in
// RUN: linac compile %s -o %t/norm.linac
// RUN: linac describe %t/norm.linac | FileCheck %s --check-prefix=DESCRIBE
// RUN: %python %S/write_npy.py %t/in q 1 1 1 2
// RUN: %python %S/write_npy.py %t/in k 1 1 1 2
// RUN: %python %S/write_npy.py %t/in v 1 1 1 2
// RUN: %python %S/write_npy.py %t/in initial_state 1 1 2 3
// RUN: linac run %t/norm.linac --inputs %t/in --outputs %t/out --scale 1.0
// RUN: %python %S/read_npy.py %t/out/o.npy | FileCheck %s --check-prefix=O
// RUN: %python %S/read_npy.py %t/out/final_state.npy | FileCheck %s --check-prefix=STATE
// RUN: %python %S/write_npy.py %t/in initial_state 1 1 2 2
// RUN: not linac run %t/norm.linac --inputs %t/in --outputs %t/out 2>&1 | FileCheck %s --check-prefix=SHAPE

// DESCRIBE: initial_state runtime state [N, H, K, V + 1] (optional)
// From S = ones and n = ones: S = 2, n = 2, o = (S^T q) / max(|n^T q|, 1) = 4 / 4.
// O: shape (1, 1, 1, 2) values 1.0 1.0
// STATE: shape (1, 1, 2, 3) values 2.0 2.0 2.0 2.0 2.0 2.0
// SHAPE: error: initial_state has shape (1, 1, 2, 2), expected [1, 1, 2, 3]

!key = tensor<2xf32, #linac.key>
!value = tensor<2xf32, #linac.value>
!state = !linac.state<2x2, normalized>

linac.layer @norm(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q normalized : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}
