// linac run --backward runs the forward, then reads grad_o.npy (and
// grad_final_state.npy when there is one) and writes the gradient of each
// input and of the initial state; without grad_o.npy it is an error.
// RUN: rm -rf %t && mkdir -p %t/in
// RUN: linac compile %s -o %t/la.linac
// RUN: %python %S/write_npy.py %t/in q 1 3 1 2
// RUN: %python %S/write_npy.py %t/in k 1 3 1 2
// RUN: %python %S/write_npy.py %t/in v 1 3 1 2
// RUN: not linac run %t/la.linac --inputs %t/in --outputs %t/out --scale 1.0 --backward 2>&1 | FileCheck %s --check-prefix=NODO
// RUN: %python %S/write_npy.py %t/in grad_o 1 3 1 2
// RUN: linac run %t/la.linac --inputs %t/in --outputs %t/out --scale 1.0 --backward
// RUN: %python %S/read_npy.py %t/out/grad_q.npy | FileCheck %s --check-prefix=DQ
// RUN: %python %S/read_npy.py %t/out/grad_k.npy | FileCheck %s --check-prefix=DK
// RUN: %python %S/read_npy.py %t/out/grad_v.npy | FileCheck %s --check-prefix=DK
// RUN: %python %S/read_npy.py %t/out/grad_initial_state.npy | FileCheck %s --check-prefix=DS
// RUN: %python %S/write_npy.py %t/in grad_final_state 1 1 2 2
// RUN: linac run %t/la.linac --inputs %t/in --outputs %t/out --scale 1.0 --backward
// RUN: %python %S/read_npy.py %t/out/grad_k.npy | FileCheck %s --check-prefix=DKF
// RUN: %python %S/read_npy.py %t/out/grad_initial_state.npy | FileCheck %s --check-prefix=DSF
// RUN: %python %S/write_npy.py %t/in grad_o 1 2 1 2
// RUN: not linac run %t/la.linac --inputs %t/in --outputs %t/out --backward 2>&1 | FileCheck %s --check-prefix=SHAPE

// With q = k = v = ones, T = 3, K = V = 2 and L = <grad_o, o> with ones:
// o_t = sum over s <= t of (q_t . k_s) v_s, so dq_t = 2 (t + 1), dk_s =
// dv_s = 2 (3 - s) and dS_0 = sum of q_t grad_o_t^T = 3; a final state's
// gradient of ones adds sum_j v_s[j] = 2 to dk_s and 1 to dS_0.
// NODO: error: --backward needs the output's gradient
// DQ: shape (1, 3, 1, 2) values 2.0 2.0 4.0 4.0 6.0 6.0
// DK: shape (1, 3, 1, 2) values 6.0 6.0 4.0 4.0 2.0 2.0
// DS: shape (1, 1, 2, 2) values 3.0 3.0 3.0 3.0
// DKF: shape (1, 3, 1, 2) values 8.0 8.0 6.0 6.0 4.0 4.0
// DSF: shape (1, 1, 2, 2) values 4.0 4.0 4.0 4.0
// SHAPE: error: grad_o has shape (1, 2, 1, 2), expected [1, 3, 1, 2]

!key = tensor<2xf32, #linac.key>
!value = tensor<2xf32, #linac.value>
!state = !linac.state<2x2>

linac.layer @la(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}
