// Parses, verifies and round-trips examples/rwkv6.mlir.
// RUN: linac-opt %examples/rwkv6.mlir > %t.1.mlir
// RUN: linac-opt %t.1.mlir > %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: FileCheck %s --input-file %t.1.mlir

// CHECK-LABEL: linac.layer @rwkv6(%S: !linac.state<128x128>) inputs(%r: !key, %k: !key, %v: !value, %w: !key) params(%u: !key)
// CHECK: %{{[0-9]+}} = linac.read %S, %r scale 1.000000e+00 : !linac.state<128x128>, !key -> !value
// CHECK: %{{[0-9]+}} = linac.decay %S key(%{{[0-9]+}} : !key) : !linac.state<128x128>
// CHECK: %{{[0-9]+}} = linac.write %{{[0-9]+}}, %k, %v : !linac.state<128x128>, !key, !value
// CHECK: linac.yield %{{[0-9]+}}, %{{[0-9]+}} : !linac.state<128x128>, !value
