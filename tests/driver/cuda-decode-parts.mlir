// Decode items of a quarter of a state's value columns, staged by a tensor
// map (the default where a strip can hold the step): the value inputs are read from
// the item's first column on, the key inputs whole; the manifest tells the
// runtime how many items a state makes and to encode the pool's tensor map.
// RUN: rm -rf %t.linac %t.whole.linac %t.bad.linac
// RUN: linac compile %s --target sm_90a -o %t.linac
// RUN: FileCheck %s --input-file %t.linac/layer.cu
// RUN: FileCheck %s --check-prefix=MANIFEST --input-file %t.linac/manifest.json
// RUN: linac compile %s --target sm_90a --decode-parts 1 -o %t.whole.linac
// RUN: FileCheck %s --check-prefix=WHOLE --input-file %t.whole.linac/manifest.json
// RUN: not linac compile %s --target sm_90a --decode-parts 3 -o %t.bad.linac 2>&1 | FileCheck %s --check-prefix=BADPARTS

// CHECK: kDecodeWarps = 4, kDecodeStages = 12, kDecodeParts = 4;
// CHECK-NEXT: kDecodeStaging = DecodeStaging::Tensor;
// CHECK: struct Decode {
// CHECK: KeyRows<128, Split>::load(token.input(0));
// CHECK: KeyRows<128, Split>::load(token.input(1));
// CHECK: ValueColumns<128, Split>::load(token.input(2) + token.firstColumn);
// CHECK: static_assert(linac::cuda::decodeSharedBytes<Layer>() == 197632,

// MANIFEST: "decode": {
// MANIFEST: "parts": 4,
// MANIFEST-NEXT: "staging": "tensor",

// WHOLE: "parts": 1,
// WHOLE-NEXT: "staging": "bulk",

// BADPARTS: error: decode-parts must be 1, 2 or 4, got 3

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @delta(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %b : f32) {
  %S1 = linac.erase %S, %k strength(%b : f32) : !state, !key
  %S2 = linac.write %S1, %k, %v strength(%b : f32) : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
