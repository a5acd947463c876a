// --no-backward leaves the backward pass out: no reversed prologue,
// epilogue or step and no backward entry in the CPU source, no backward
// kernel in the CUDA one, and the manifest says so with no backward
// kernels. The forward and decode are as they are with it.
// RUN: linac compile %s --emit=source --no-backward | FileCheck %s --check-prefix=CPU
// RUN: linac compile %s --emit=source --target sm_90a --no-backward \
// RUN:   | FileCheck %s --check-prefix=CUDA
// RUN: linac compile %s --emit=source --target sm_90a \
// RUN:   | FileCheck %s --check-prefix=CUDA-FULL
// RUN: linac compile %s --no-backward -o %t.linac
// RUN: FileCheck %s --check-prefix=MANIFEST --input-file %t.linac/manifest.json
// RUN: linac compile %s -o %t.full.linac
// RUN: FileCheck %s --check-prefix=MANIFEST-FULL --input-file %t.full.linac/manifest.json

// CPU: #include "linac/cpu/layer.h"
// CPU-NOT: Backward(
// CPU: extern "C" int linac_cpu_forward(
// CPU: extern "C" int linac_cpu_decode(
// CPU-NOT: linac_cpu_backward

// CUDA-NOT: Backward
// CUDA: LINAC_CHUNK_KERNEL_BFLOAT16(Layer)
// CUDA-NOT: BACKWARD_KERNEL
// CUDA: LINAC_DECODE_KERNELS(Layer)
// CUDA-NOT: BACKWARD_KERNEL

// CUDA-FULL: struct ChunkBackward {
// CUDA-FULL: LINAC_CHUNK_BACKWARD_KERNELS(Layer)

// MANIFEST: "backward": false,
// MANIFEST-NEXT: "backward_kernels": [],
// MANIFEST-FULL-NOT: "backward":
// MANIFEST-FULL: "backward_kernels": []

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @no_backward(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key) {
  %zero = arith.constant dense<0.0> : !key
  %log_a = arith.minimumf %g, %zero : !key
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
