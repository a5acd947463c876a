// Parses, verifies and round-trips examples/full_matrix_gate.mlir.
// RUN: linac-opt %examples/full_matrix_gate.mlir > %t.1.mlir
// RUN: linac-opt %t.1.mlir > %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: FileCheck %s --input-file %t.1.mlir

// CHECK-LABEL: linac.layer @full_matrix_gate(%S: !linac.state<128x128>) inputs(%q: !key, %k: !key, %v: !value, %G: tensor<128x128xf32, #linac.matrix>)
// CHECK: %{{[0-9]+}} = linac.matrix_gate %S, %{{[0-9]+}} : !linac.state<128x128>, tensor<128x128xf32, #linac.matrix>
// CHECK: %{{[0-9]+}} = linac.write %{{[0-9]+}}, %k, %v : !linac.state<128x128>, !key, !value
// CHECK: %{{[0-9]+}} = linac.read %{{[0-9]+}}, %q : !linac.state<128x128>, !key -> !value
// CHECK: linac.yield %{{[0-9]+}}, %{{[0-9]+}} : !linac.state<128x128>, !value
