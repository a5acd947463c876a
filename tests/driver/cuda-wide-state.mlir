// A state too large to stage in shared memory (256 x 256 fp32) still gets
// a decode kernel: it loads each state straight from the pool.
// RUN: rm -rf %t.linac
// RUN: linac compile %s --target sm_90a -o %t.linac
// RUN: FileCheck %s --input-file %t.linac/manifest.json

// CHECK: "decode": {
// CHECK: "entry": "linac_decode_float32",
// CHECK-NEXT: "family": "recurrent",
// CHECK-NEXT: "file": "layer.1.cubin",
// CHECK-NEXT: "shared_memory": 0
// CHECK: "decode_stages": 0,

linac.layer @wide_state(%S : !linac.state<256x256>)
    inputs(%q : tensor<256xf32, #linac.key>, %k : tensor<256xf32, #linac.key>,
           %v : tensor<256xf32, #linac.value>) {
  %S1 = linac.write %S, %k, %v : !linac.state<256x256>, tensor<256xf32, #linac.key>, tensor<256xf32, #linac.value>
  %o = linac.read %S1, %q : !linac.state<256x256>, tensor<256xf32, #linac.key> -> tensor<256xf32, #linac.value>
  linac.yield %S1, %o : !linac.state<256x256>, tensor<256xf32, #linac.value>
}
