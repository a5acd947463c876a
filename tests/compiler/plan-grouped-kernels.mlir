// RUN: linac-opt %s -linac-normalize '-linac-plan=target=sm_90a chunk-kernel=pipelined' | FileCheck %s
// RUN: linac-opt %s -linac-normalize -linac-plan=target=sm_90a | FileCheck %s --check-prefix=DEFAULT
// RUN: linac-opt %s -linac-normalize '-linac-plan=target=sm_90a chunk-kernel=lockstep' | FileCheck %s --check-prefix=LOCKSTEP
// RUN: linac-opt %s -linac-normalize '-linac-plan=target=sm_80' | FileCheck %s --check-prefix=DEFAULT-SM80
// RUN: linac-opt %s -linac-normalize '-linac-plan=target=cpu chunk-kernel=pipelined' | FileCheck %s --check-prefix=CPU
// RUN: not linac-opt %s -linac-normalize '-linac-plan=target=sm_80 chunk-kernel=pipelined' 2>&1 | FileCheck %s --check-prefix=SM80
// RUN: not linac-opt %s -linac-normalize '-linac-plan=target=sm_90a chunk-kernel=fast' 2>&1 | FileCheck %s --check-prefix=BADVALUE
// RUN: linac-opt %s -linac-normalize '-linac-plan=target=sm_90a chunk-kernel=phased' | FileCheck %s --check-prefix=PHASED
// RUN: not linac-opt %s -linac-normalize '-linac-plan=target=sm_80 chunk-kernel=phased' 2>&1 | FileCheck %s --check-prefix=PHASED-SM80

// The pipelined chunkwise kernel on request: its buffers (two chunks'
// prepared operands, T, the reads) as the shared memory, no staged input
// rows, and no phased kernels beside it. Without the request on sm_90a
// the warpgroup kernel (plan-warpgroup-erase.mlir) with the phased kernels
// beside it for the batches the runtime cuts into segments; with
// chunk-kernel=lockstep, on sm_80 and on the CPU the lockstep kernel, with
// no phased kernels.
// CHECK: linac.layer @gated_delta
// CHECK-SAME: chunk_kernel = "pipelined"
// CHECK-SAME: family = "delta_chunkwise"
// CHECK-SAME: late_shared_inputs = array<i64>
// CHECK-SAME: shared_inputs = array<i64>, shared_memory = 218656 : i64
// CHECK-NOT: phased
// DEFAULT: chunk_kernel = "warpgroup"
// DEFAULT-SAME: phased = "segmented"
// LOCKSTEP: chunk_kernel = "lockstep"
// LOCKSTEP-NOT: phased
// DEFAULT-SM80: linac.layer @gated_delta
// DEFAULT-SM80-NOT: phased
// CPU: linac.layer @gated_delta
// CPU-NOT: chunk_kernel
// sm_80 can neither set each warp group's registers nor make bulk copies.
// SM80: error: chunk-kernel=pipelined: the pipelined kernel takes an erase under no gate or a scalar one, without a normaliser, a value-side decay, the read after the write, K and V multiples of 16 with V at most 128, on sm_90a (it sets each warp group's registers or moves chunks by bulk copies)
// BADVALUE: error: chunk-kernel must be auto, lockstep, pipelined, phased or warpgroup, got 'fast'

// The phased kernels always on request, beside the lockstep entry: a state
// block of one warp group, its two chunk buffers, the reads and two
// barriers as its shared memory; the preparing block's one buffer, T and
// the warps' tiles; and the bytes of a prepared chunk, one buffer's image.
// PHASED: linac.layer @gated_delta
// PHASED-SAME: block_threads = 512
// PHASED-SAME: chunk_kernel = "lockstep"
// PHASED-SAME: phased = "always", phased_block_threads = 256 : i64, phased_shared_memory = 192048 : i64, prepare_block_threads = 256 : i64, prepare_shared_memory = 105744 : i64, prepared_chunk_bytes = 79120 : i64
// PHASED-SM80: error: chunk-kernel=phased: the phased kernel takes any key-side gate or none, without a normaliser or a value-side decay, K and V multiples of 16 with V at most 128, on sm_90a

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @gated_delta(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : f32, %b : f32) {
  %zero = arith.constant 0.0 : f32
  %log_a = arith.minimumf %g, %zero : f32
  %S1 = linac.decay %S key(%log_a : f32) : !state
  %S2 = linac.erase %S1, %k strength(%b : f32) : !state, !key
  %S3 = linac.write %S2, %k, %v strength(%b : f32) : !state, !key, !value
  %o = linac.read %S3, %q : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
