// A decode step whose vector arguments would not fit in registers beside
// the state, all loaded before its first state op, computes each value
// just before its first use. At K = V = 128 with 8 warps a state, a thread
// holds 64 state floats and 8 of each vector; the limit is 104 floats.
// RUN: linac-opt %examples/gdn2.mlir -linac-normalize '-linac-plan=target=sm_90a decode-warps=8 decode-parts=1' | FileCheck %s --check-prefix=GDN2
// RUN: linac-opt %examples/kda.mlir -linac-normalize '-linac-plan=target=sm_90a decode-warps=8 decode-parts=1' | FileCheck %s --check-prefix=KDA
// RUN: linac-opt %examples/gated_deltanet.mlir -linac-normalize '-linac-plan=target=sm_90a decode-warps=8 decode-parts=1' | FileCheck %s --check-prefix=GDN
// RUN: linac-opt %examples/full_matrix_gate.mlir -linac-normalize '-linac-plan=target=sm_90a decode-warps=8 decode-parts=1' | FileCheck %s --check-prefix=MATRIX

// Seven vectors (q, k, v, g, b, w, dt_bias): 64 + 56 = 120 floats.
// GDN2: decode_placement = "first_use"
// Five (q, k, v, g, dt_bias): 104, at the limit.
// KDA: decode_placement = "body_order"
// Three: 88.
// GDN: decode_placement = "body_order"
// A full-matrix gate's tile is 64 floats a thread: 64 + 64 + 24 = 152.
// MATRIX: decode_placement = "first_use"

// With the default 16 warps a state in strips of a quarter of its columns,
// a thread holds 32 state floats, 8 of a key vector and 4 of a value
// vector: GDN-2's 32 + 6 x 8 + 4 = 84.
// RUN: linac-opt %examples/gdn2.mlir -linac-normalize -linac-plan=target=sm_90a | FileCheck %s --check-prefix=GDN2-STRIPS
// GDN2-STRIPS: decode_parts = 4 : i64, decode_placement = "body_order"
