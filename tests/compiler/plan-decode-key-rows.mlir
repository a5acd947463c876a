// Decode splits a column pair's key rows between its two lanes where the
// step takes two or more transcendentals of every key row (GDN-2: the
// gate's softplus and the erase strength's sigmoid); with fewer the trade
// of halves costs more than it saves, and each lane computes its rows
// whole.
// RUN: linac-opt %examples/gdn2.mlir -linac-normalize -linac-plan=target=sm_90a | FileCheck %s --check-prefix=SPLIT
// RUN: linac-opt %examples/kda.mlir -linac-normalize -linac-plan=target=sm_90a | FileCheck %s --check-prefix=WHOLE
// RUN: linac-opt %examples/gated_deltanet.mlir -linac-normalize -linac-plan=target=sm_90a | FileCheck %s --check-prefix=WHOLE
// RUN: linac-opt %examples/gdn2.mlir -linac-normalize -linac-plan=target=cpu | FileCheck %s --check-prefix=CPU

// SPLIT: decode_key_rows = "split"
// WHOLE: decode_key_rows = "whole"
// CPU-NOT: decode_key_rows
