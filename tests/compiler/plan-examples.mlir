// The CPU plan of every example.
// RUN: linac-opt %examples/deltanet.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=DELTANET
// RUN: linac-opt %examples/full_matrix_gate.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=FULLMATRIXGATE
// RUN: linac-opt %examples/gated_deltanet.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=GATEDDELTANET
// RUN: linac-opt %examples/gated_rfa.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=GATEDRFA
// RUN: linac-opt %examples/gateloop.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=GATELOOP
// RUN: linac-opt %examples/gdn2.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=GDN2
// RUN: linac-opt %examples/gla.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=GLA
// RUN: linac-opt %examples/hgrn2.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=HGRN2
// RUN: linac-opt %examples/kda.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=KDA
// RUN: linac-opt %examples/linear_attention.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=LINEARATTENTION
// RUN: linac-opt %examples/low_rank_two_sided.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=LOWRANKTWOSIDED
// RUN: linac-opt %examples/mamba2.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=MAMBA2
// RUN: linac-opt %examples/mlstm.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=MLSTM
// RUN: linac-opt %examples/retnet.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=RETNET
// RUN: linac-opt %examples/rwkv6.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=RWKV6
// RUN: linac-opt %examples/two_sided.mlir -linac-normalize -linac-plan 2>&1 | FileCheck %s --check-prefix=TWOSIDED

// DELTANET: linac.layer @deltanet
// DELTANET-SAME: linac.plan = {chunk_size = 64 : i64, decode_state_layout = "key_major", family = "delta_chunkwise", gate_numerics = "none", target = "cpu"}

// FULLMATRIXGATE: linac.layer @full_matrix_gate
// FULLMATRIXGATE-SAME: linac.plan = {decode_state_layout = "key_major", family = "recurrent", target = "cpu"}

// GATEDDELTANET: linac.layer @gated_deltanet
// GATEDDELTANET-SAME: linac.plan = {chunk_size = 64 : i64, decode_state_layout = "key_major", family = "delta_chunkwise", gate_numerics = "scalar_tile", target = "cpu"}

// GATEDRFA: linac.layer @gated_rfa
// GATEDRFA-SAME: linac.plan = {chunk_size = 64 : i64, decode_state_layout = "key_major", family = "chunkwise", gate_numerics = "scalar_tile", target = "cpu"}

// GATELOOP: linac.layer @gateloop
// GATELOOP-SAME: linac.plan = {chunk_size = 64 : i64, decode_state_layout = "key_major", family = "chunkwise", gate_numerics = "reference", target = "cpu"}

// GDN2: linac.layer @gdn2
// GDN2-SAME: linac.plan = {chunk_size = 64 : i64, decode_state_layout = "key_major", family = "delta_chunkwise", gate_numerics = "reference", target = "cpu"}

// GLA: linac.layer @gla
// GLA-SAME: linac.plan = {chunk_size = 64 : i64, decode_state_layout = "key_major", family = "chunkwise", gate_numerics = "reference", target = "cpu"}

// HGRN2: linac.layer @hgrn2
// HGRN2-SAME: linac.plan = {chunk_size = 64 : i64, decode_state_layout = "key_major", family = "chunkwise", gate_numerics = "reference", target = "cpu"}

// KDA: linac.layer @kda
// KDA-SAME: linac.plan = {chunk_size = 64 : i64, decode_state_layout = "key_major", family = "delta_chunkwise", gate_numerics = "reference", target = "cpu"}

// LINEARATTENTION: linac.layer @linear_attention
// LINEARATTENTION-SAME: linac.plan = {chunk_size = 64 : i64, decode_state_layout = "key_major", family = "chunkwise", gate_numerics = "none", target = "cpu"}

// LOWRANKTWOSIDED: linac.layer @low_rank_two_sided
// LOWRANKTWOSIDED-SAME: linac.plan = {chunk_size = 64 : i64, decode_state_layout = "key_major", family = "chunkwise", gate_numerics = "pairwise", target = "cpu"}

// MAMBA2: linac.layer @mamba2
// MAMBA2-SAME: linac.plan = {chunk_size = 64 : i64, decode_state_layout = "key_major", family = "chunkwise", gate_numerics = "scalar_tile", target = "cpu"}

// MLSTM: linac.layer @mlstm
// MLSTM-SAME: linac.plan = {chunk_size = 64 : i64, decode_state_layout = "key_major", family = "chunkwise", gate_numerics = "scalar_tile", target = "cpu"}

// RETNET: linac.layer @retnet
// RETNET-SAME: linac.plan = {chunk_size = 64 : i64, decode_state_layout = "key_major", family = "chunkwise", gate_numerics = "scalar_tile", target = "cpu"}

// RWKV6: linac.layer @rwkv6
// RWKV6-SAME: linac.plan = {chunk_size = 64 : i64, decode_state_layout = "key_major", family = "chunkwise", gate_numerics = "reference", target = "cpu"}

// TWOSIDED: linac.layer @two_sided
// TWOSIDED-SAME: linac.plan = {chunk_size = 64 : i64, decode_state_layout = "key_major", family = "chunkwise", gate_numerics = "pairwise", target = "cpu"}
