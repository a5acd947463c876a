// A package for a GPU target: the generated CUDA source, the cubins (the
// kernels in two parts, the source compiled once a part side by side), and
// a manifest describing each kernel and naming its cubin. A second
// compilation of the same spec takes the cubins from the cache; sm_80
// builds too.
// RUN: rm -rf %t.linac %t.again.linac %t.cache %t.sm80.linac %t.w8.linac
// RUN: env LINAC_CACHE_DIR=%t.cache linac compile %s --target sm_90a -o %t.linac
// RUN: FileCheck %s --check-prefix=MANIFEST --input-file %t.linac/manifest.json
// RUN: FileCheck %s --check-prefix=SOURCE --input-file %t.linac/layer.cu
// RUN: FileCheck %s --check-prefix=STAGING --input-file %t.linac/manifest.json
// RUN: ls %t.cache | count 2
// The cache key holds the compiler: through a logging wrapper the first
// compilation misses, the second hits.
// RUN: rm -f %t.calls
// RUN: printf '#!/bin/sh\necho "$@" >> %t.calls\nexec %nvcc "$@"\n' > %t.nvcc
// RUN: chmod +x %t.nvcc
// RUN: env LINAC_CACHE_DIR=%t.cache NVCC=%t.nvcc linac compile %s --target sm_90a -o %t.again.linac
// RUN: env LINAC_CACHE_DIR=%t.cache NVCC=%t.nvcc linac compile %s --target sm_90a -o %t.again.linac
// RUN: grep -c -- -cubin %t.calls | FileCheck %s --check-prefix=ONECOMPILE
// RUN: env LINAC_CACHE_DIR=%t.cache linac compile %s --target sm_80 -o %t.sm80.linac
// RUN: ls %t.cache | count 6
// RUN: linac describe %t.sm80.linac | FileCheck %s --check-prefix=DESCRIBE
// RUN: env LINAC_CACHE_DIR=%t.cache linac compile %s --target sm_90a --decode-warps 8 -o %t.w8.linac
// RUN: FileCheck %s --check-prefix=WARPS8 --input-file %t.w8.linac/manifest.json
// RUN: not linac bench %t.linac --dtype int8 2>&1 | FileCheck %s --check-prefix=BENCHDTYPE
// RUN: not linac bench %t.linac --shape 8,4096 2>&1 | FileCheck %s --check-prefix=BENCHSHAPE
// RUN: not linac bench %t.missing.linac 2>&1 | FileCheck %s --check-prefix=BENCHMISSING
// RUN: not linac bench %t.linac --reps 0 2>&1 | FileCheck %s --check-prefix=BENCHREPS
// RUN: not linac bench %t.linac --threads 2 2>&1 | FileCheck %s --check-prefix=BENCHTHREADS
// RUN: rm -rf %t.nocompiler.linac
// RUN: not env NVCC=/nonexistent/nvcc linac compile %s --target sm_90a -o %t.nocompiler.linac 2>&1 | FileCheck %s --check-prefix=NONVCC

// MANIFEST: "decode": {
// MANIFEST-NEXT: "kernels": [
// MANIFEST-NEXT: {
// MANIFEST-NEXT: "block_threads": 512,
// MANIFEST-NEXT: "dtype": "float32",
// MANIFEST-NEXT: "entry": "linac_decode_float32",
// MANIFEST: "entry": "linac_decode_bfloat16",
// MANIFEST: "entry": "linac_decode_float16",
// MANIFEST: "max_tokens": 8,
// 16 key rows are too few for tensor-staged strips.
// MANIFEST-NEXT: "parts": 1,
// MANIFEST-NEXT: "staging": "bulk",
// MANIFEST-NEXT: "state_layout": "key_major"
// MANIFEST: "integrity": {
// MANIFEST-NEXT: "contract": "{{[0-9a-f]+}}",
// MANIFEST-NEXT: "files": {
// MANIFEST-NEXT: "layer.1.cubin": {
// MANIFEST-NEXT: "bytes": {{[1-9][0-9]*}},
// MANIFEST-NEXT: "sha256": "{{[0-9a-f]+}}"
// MANIFEST-NEXT: },
// MANIFEST-NEXT: "layer.cubin": {
// MANIFEST-NEXT: "bytes": {{[1-9][0-9]*}},
// MANIFEST-NEXT: "sha256": "{{[0-9a-f]+}}"
// MANIFEST: "kernels": [
// MANIFEST-NEXT: {
// MANIFEST-NEXT: "block_threads": 512,
// MANIFEST-NEXT: "dtype": "bfloat16",
// MANIFEST-NEXT: "entry": "linac_chunk_bfloat16",
// MANIFEST-NEXT: "family": "delta_chunkwise",
// MANIFEST-NEXT: "file": "layer.cubin",
// MANIFEST-NEXT: "shared_memory": {{[1-9][0-9]*}}
// MANIFEST: "entry": "linac_chunk_float16",
// MANIFEST: "block_threads": 32,
// MANIFEST-NEXT: "dtype": "float32",
// MANIFEST-NEXT: "entry": "linac_scan_float32",
// MANIFEST-NEXT: "family": "recurrent",
// MANIFEST-NEXT: "file": "layer.1.cubin",
// MANIFEST-NEXT: "shared_memory": 0
// MANIFEST-NOT: "entry": "linac_scan_bfloat16",
// An erase under a scalar gate also has the phased kernels, which the
// runtime takes by the batch's shape.
// MANIFEST: "phased": {
// MANIFEST-NEXT: "chunk_bytes": {{[1-9][0-9]*}},
// MANIFEST-NEXT: "prepare": [
// MANIFEST: "entry": "linac_prepare_bfloat16",
// MANIFEST: "entry": "linac_prepare_float16",
// MANIFEST: "state": [
// MANIFEST: "entry": "linac_phased_bfloat16",
// MANIFEST: "entry": "linac_phased_float16",
// MANIFEST: "use": "by_shape"
// MANIFEST: "target": "sm_90a"

// SOURCE: #include "linac/cuda/layer.h"
// SOURCE: static constexpr Gate kKeyGate = Gate::Scalar;
// SOURCE-NEXT: static constexpr ChunkKernel kChunkKernel = ChunkKernel::Lockstep;
// SOURCE-NEXT: static constexpr int kDecodeWarps = 16, kDecodeStages = 3, kDecodeParts = 1;
// SOURCE-NEXT: static constexpr DecodeStaging kDecodeStaging = DecodeStaging::Bulk;
// The lockstep kernel stores its output a token at a time.
// SOURCE-NEXT: static constexpr bool kTensorOutput = false;
// Its operands are staged by the prologue, not landed as input rows.
// SOURCE-NEXT: static constexpr bool kRowScaled = false;
// SOURCE-NEXT: static constexpr int kQueryRow = -1, kKeyRow = -1, kValueRow = -1;
// The plan's staged inputs as flags: the vectors (32-byte rows) in shared
// memory, the scalars not.
// SOURCE-NEXT: static constexpr bool sharedInput(int i) {
// SOURCE-NEXT: constexpr bool flags[] = {true, true, true, false, false};
// SOURCE: static constexpr bool lateSharedInput(int i) {
// SOURCE-NEXT: constexpr bool flags[] = {false, false, false, false, false};
// SOURCE: static constexpr bool tensorInput(int i) {
// SOURCE-NEXT: constexpr bool flags[] = {false, false, false, false, false};
// SOURCE: struct Chunk {
// SOURCE: out.gk = neg;
// SOURCE: struct Scan {
// SOURCE: state.erase(
// SOURCE: state.write(
// SOURCE: struct Decode {
// SOURCE-NEXT: using Split = DecodeSplit<K, V / kDecodeParts, kDecodeWarps, kDecodeStaging == DecodeStaging::Tensor>;
// SOURCE: KeyRows<16, Split>::load(token.input(0))
// SOURCE: state.eraseWrite(arg_k, {{.*}} * arg_k, {{.*}} * arg_v, beta);
// SOURCE: static_assert(linac::cuda::chunkSharedBytes<Layer>() ==
// Each kernel in the part whose cubin the manifest names for it.
// SOURCE: #if LINAC_IN_PART(0)
// SOURCE-NEXT: LINAC_CHUNK_KERNEL_BFLOAT16(Layer)
// SOURCE-NEXT: #endif
// SOURCE-NEXT: #if LINAC_IN_PART(0)
// SOURCE-NEXT: LINAC_CHUNK_KERNEL_FLOAT16(Layer)
// SOURCE-NEXT: #endif
// SOURCE-NEXT: #if LINAC_IN_PART(1)
// SOURCE-NEXT: LINAC_SCAN_KERNEL_FLOAT32(Layer)
// SOURCE-NEXT: #endif
// SOURCE-NEXT: static_assert(linac::cuda::phasedSharedBytes<Layer>() ==
// SOURCE-NEXT: #if LINAC_IN_PART(1)
// SOURCE-NEXT: LINAC_PHASED_KERNELS_BFLOAT16(Layer)
// SOURCE-NEXT: #endif
// SOURCE-NEXT: #if LINAC_IN_PART(1)
// SOURCE-NEXT: LINAC_PHASED_KERNELS_FLOAT16(Layer)
// SOURCE-NEXT: #endif
// SOURCE: #if LINAC_IN_PART(0)
// SOURCE-NEXT: LINAC_SEGMENT_COMPOSE_KERNEL(Layer)
// SOURCE: #if LINAC_IN_PART(0)
// SOURCE-NEXT: LINAC_CHUNK_BACKWARD_KERNELS(Layer)
// SOURCE: #if LINAC_IN_PART(1)
// SOURCE-NEXT: LINAC_DECODE_KERNELS(Layer)
// SOURCE: LINAC_CONTRACT("{{[0-9a-f]+}}")

// WARPS8: "decode_warps": 8

// STAGING: "late_shared_inputs": [],
// STAGING-NEXT: "phased": "by_shape",
// STAGING-NEXT: "phased_block_threads": 256,
// STAGING-NEXT: "phased_shared_memory": {{[0-9]+}},
// STAGING-NEXT: "prepare_block_threads": 256,
// STAGING-NEXT: "prepare_shared_memory": {{[0-9]+}},
// STAGING-NEXT: "prepared_chunk_bytes": {{[0-9]+}},
// STAGING-NEXT: "scan_block_threads": {{[0-9]+}},
// STAGING-NEXT: "shared_inputs": [
// STAGING-NEXT: 0,
// STAGING-NEXT: 1,
// STAGING-NEXT: 2
// STAGING-NEXT: ],

// One compilation: nvcc once for each of the two parts.
// ONECOMPILE: {{^2$}}
// DESCRIBE: layer @small_gated_delta for sm_80, K = 16, V = 16

// BENCHDTYPE: error: unknown dtype 'int8'; expected bfloat16, float16 or float32
// BENCHSHAPE: error: --shape takes B,T,H as positive integers, got '8,4096'
// BENCHMISSING: error: {{.*}}no manifest.json
// BENCHREPS: error: --reps must be positive
// BENCHTHREADS: error: --threads is for cpu packages
// NONVCC: error: /nonexistent/nvcc (from NVCC) is not an executable

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @small_gated_delta(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : f32, %b : f32) {
  %log_a = linac.softplus %g : f32
  %neg = arith.negf %log_a : f32
  %beta = linac.sigmoid %b : f32
  %S1 = linac.decay %S key(%neg : f32) : !state
  %S2 = linac.erase %S1, %k strength(%beta : f32) : !state, !key
  %S3 = linac.write %S2, %k, %v strength(%beta : f32) : !state, !key, !value
  %o = linac.read %S3, %q : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
