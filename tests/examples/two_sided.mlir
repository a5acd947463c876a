// Parses, verifies and round-trips examples/two_sided.mlir, and compiles it for sm_90a.
// RUN: linac-opt %examples/two_sided.mlir > %t.1.mlir
// RUN: linac-opt %t.1.mlir > %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: FileCheck %s --input-file %t.1.mlir
// RUN: linac compile %examples/two_sided.mlir --target sm_90a -o %t.linac 2>/dev/null
// RUN: FileCheck %s --check-prefix=CUDA --input-file %t.linac/manifest.json
// RUN: test -s %t.linac/layer.cubin

// CHECK-LABEL: linac.layer @two_sided(%S: !linac.state<128x128>) inputs(%q: !key, %k: !key, %v: !value, %g: !key, %h: !value)
// CHECK: %{{[0-9]+}} = linac.decay %S key(%{{[0-9]+}} : !key) value(%{{[0-9]+}} : !value) : !linac.state<128x128>
// CHECK: %{{[0-9]+}} = linac.write %{{[0-9]+}}, %k, %v : !linac.state<128x128>, !key, !value
// CHECK: %{{[0-9]+}} = linac.read %{{[0-9]+}}, %q : !linac.state<128x128>, !key -> !value
// CHECK: linac.yield %{{[0-9]+}}, %{{[0-9]+}} : !linac.state<128x128>, !value

// The package for sm_90a has decode kernels and lists its fastest
// forward kernel first.
// CUDA: "entry": "linac_decode_float32"
// CUDA: "max_tokens": 8
// CUDA: "kernels": [
// CUDA-NEXT: {
// CUDA-NEXT: "block_threads":
// CUDA-NEXT: "dtype":
// CUDA-NEXT: "entry": "linac_chunk_bfloat16"
