// linac run --decode: one step of new tokens on a state pool addressed per
// sequence; -1 skips a sequence, a bad index is an error naming it.
// RUN: rm -rf %t && mkdir -p %t/in
// RUN: linac compile %s -o %t/la.linac
// RUN: %python %S/write_npy.py %t/in q 2 1 1 2
// RUN: %python %S/write_npy.py %t/in k 2 1 1 2
// RUN: %python %S/write_npy.py %t/in v 2 1 1 2
// RUN: %python %S/write_npy.py %t/in state_pool 3 1 2 2
// RUN: %python %S/write_npy.py %t/in state_indices --int64 2,-1
// RUN: linac run %t/la.linac --decode --inputs %t/in --outputs %t/out --scale 1.0
// RUN: %python %S/read_npy.py %t/out/o.npy | FileCheck %s --check-prefix=O
// RUN: %python %S/read_npy.py %t/out/state_pool.npy | FileCheck %s --check-prefix=POOL
// RUN: %python %S/write_npy.py %t/in state_indices --int64 3,-1
// RUN: not linac run %t/la.linac --decode --inputs %t/in --outputs %t/out 2>&1 | FileCheck %s --check-prefix=INDEX
// RUN: rm %t/in/state_pool.npy
// RUN: not linac run %t/la.linac --decode --inputs %t/in --outputs %t/out 2>&1 | FileCheck %s --check-prefix=NOPOOL

// Slot 2 holds ones; with q = k = v = ones, S = 2 * ones and o = S^T q = 4.
// The skipped sequence's rows stay zero and so do slots 0 and 1 of the pool.
// O: shape (2, 1, 1, 2) values 4.0 4.0 0.0 0.0
// POOL: shape (3, 1, 2, 2) values 1.0 1.0 1.0 1.0 1.0 1.0 1.0 1.0 2.0 2.0 2.0 2.0
// INDEX: error: state index 3 of sequence 0 is outside the pool's 3 slots (-1 skips)
// NOPOOL: error: decode needs {{.*}}state_pool.npy

!key = tensor<2xf32, #linac.key>
!value = tensor<2xf32, #linac.value>
!state = !linac.state<2x2>

linac.layer @la(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}
