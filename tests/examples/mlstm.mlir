// Parses, verifies and round-trips examples/mlstm.mlir, and compiles it for sm_90a.
// RUN: linac-opt %examples/mlstm.mlir > %t.1.mlir
// RUN: linac-opt %t.1.mlir > %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: FileCheck %s --input-file %t.1.mlir
// RUN: linac compile %examples/mlstm.mlir --target sm_90a -o %t.linac 2>/dev/null
// RUN: FileCheck %s --check-prefix=CUDA --input-file %t.linac/manifest.json
// RUN: test -s %t.linac/layer.cubin

// CHECK-LABEL: linac.layer @mlstm(%S: !linac.state<128x128, normalized>) inputs(%q: !key, %k: !key, %v: !value, %i: f32, %f: f32)
// CHECK: %{{[0-9]+}} = linac.decay %S key(%{{[0-9]+}} : f32) : !linac.state<128x128, normalized>
// CHECK: %{{[0-9]+}} = linac.write %{{[0-9]+}}, %k, %v strength(%{{[0-9]+}} : f32) : !linac.state<128x128, normalized>, !key, !value
// CHECK: %{{[0-9]+}} = linac.read %{{[0-9]+}}, %q normalized : !linac.state<128x128, normalized>, !key -> !value
// CHECK: linac.yield %{{[0-9]+}}, %{{[0-9]+}} : !linac.state<128x128, normalized>, !value

// The package for sm_90a has decode kernels and lists its fastest
// forward kernel first.
// CUDA: "entry": "linac_decode_float32"
// CUDA: "max_tokens": 8
// CUDA: "kernels": [
// CUDA-NEXT: {
// CUDA-NEXT: "block_threads":
// CUDA-NEXT: "dtype":
// CUDA-NEXT: "entry": "linac_chunk_bfloat16"
// fp16 activations take the scan: the normaliser's division amplifies the
// chunkwise kernel's bf16 rounding of fp16 inputs.
// CUDA-NOT: "linac_chunk_float16"
// CUDA: "entry": "linac_scan_float16"
// CUDA: "chunkwise_float16": false
