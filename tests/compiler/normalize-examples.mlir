// The normal form of every example (docs/design.md, the normal form).
// RUN: linac-opt %examples/deltanet.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=DELTANET
// RUN: linac-opt %examples/full_matrix_gate.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=FULLMATRIXGATE
// RUN: linac-opt %examples/gated_deltanet.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=GATEDDELTANET
// RUN: linac-opt %examples/gated_rfa.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=GATEDRFA
// RUN: linac-opt %examples/gateloop.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=GATELOOP
// RUN: linac-opt %examples/gdn2.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=GDN2
// RUN: linac-opt %examples/gla.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=GLA
// RUN: linac-opt %examples/hgrn2.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=HGRN2
// RUN: linac-opt %examples/kda.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=KDA
// RUN: linac-opt %examples/linear_attention.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=LINEARATTENTION
// RUN: linac-opt %examples/low_rank_two_sided.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=LOWRANKTWOSIDED
// RUN: linac-opt %examples/mamba2.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=MAMBA2
// RUN: linac-opt %examples/mlstm.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=MLSTM
// RUN: linac-opt %examples/retnet.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=RETNET
// RUN: linac-opt %examples/rwkv6.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=RWKV6
// RUN: linac-opt %examples/two_sided.mlir -linac-normalize 2>&1 | FileCheck %s --check-prefix=TWOSIDED

// DELTANET: linac.layer @deltanet
// DELTANET-SAME: linac.normal_form = {chunkable = true, erase = "scalar", key_decay = "none", normalizer = false, read = "after", value_decay = false, write = "scalar"}

// FULLMATRIXGATE: linac.layer @full_matrix_gate
// FULLMATRIXGATE-SAME: linac.normal_form = {chunkable = false, erase = "none", key_decay = "none", normalizer = false, read = "after", value_decay = false, write = "none"}

// GATEDDELTANET: linac.layer @gated_deltanet
// GATEDDELTANET-SAME: linac.normal_form = {chunkable = true, erase = "scalar", key_decay = "scalar", normalizer = false, read = "after", value_decay = false, write = "scalar"}

// GATEDRFA: linac.layer @gated_rfa
// GATEDRFA-SAME: linac.normal_form = {chunkable = true, erase = "none", key_decay = "scalar", normalizer = false, read = "after", value_decay = false, write = "scalar"}

// GATELOOP: linac.layer @gateloop
// GATELOOP-SAME: linac.normal_form = {chunkable = true, erase = "none", key_decay = "vector", normalizer = false, read = "after", value_decay = false, write = "plain"}

// GDN2: linac.layer @gdn2
// GDN2-SAME: linac.normal_form = {chunkable = true, erase = "vector", key_decay = "vector", normalizer = false, read = "after", value_decay = false, write = "vector"}

// GLA: linac.layer @gla
// GLA-SAME: linac.normal_form = {chunkable = true, erase = "none", key_decay = "vector", normalizer = false, read = "after", value_decay = false, write = "plain"}

// HGRN2: linac.layer @hgrn2
// HGRN2-SAME: linac.normal_form = {chunkable = true, erase = "none", key_decay = "vector", normalizer = false, read = "after", value_decay = false, write = "plain"}

// KDA: linac.layer @kda
// KDA-SAME: linac.normal_form = {chunkable = true, erase = "scalar", key_decay = "vector", normalizer = false, read = "after", value_decay = false, write = "scalar"}

// LINEARATTENTION: linac.layer @linear_attention
// LINEARATTENTION-SAME: linac.normal_form = {chunkable = true, erase = "none", key_decay = "none", normalizer = false, read = "after", value_decay = false, write = "plain"}

// LOWRANKTWOSIDED: linac.layer @low_rank_two_sided
// LOWRANKTWOSIDED-SAME: linac.normal_form = {chunkable = true, erase = "none", key_decay = "vector", normalizer = false, read = "after", value_decay = true, write = "plain"}

// MAMBA2: linac.layer @mamba2
// MAMBA2-SAME: linac.normal_form = {chunkable = true, erase = "none", key_decay = "scalar", normalizer = false, read = "after", value_decay = false, write = "scalar"}

// MLSTM: linac.layer @mlstm
// MLSTM-SAME: linac.normal_form = {chunkable = true, erase = "none", key_decay = "scalar", normalizer = true, read = "after", value_decay = false, write = "scalar"}

// RETNET: linac.layer @retnet
// RETNET-SAME: linac.normal_form = {chunkable = true, erase = "none", key_decay = "fixed", normalizer = false, read = "after", value_decay = false, write = "plain"}

// RWKV6: linac.layer @rwkv6
// RWKV6-SAME: linac.normal_form = {chunkable = true, erase = "none", key_decay = "vector", normalizer = false, read = "before", value_decay = false, write = "plain"}

// TWOSIDED: linac.layer @two_sided
// TWOSIDED-SAME: linac.normal_form = {chunkable = true, erase = "none", key_decay = "vector", normalizer = false, read = "after", value_decay = true, write = "plain"}
