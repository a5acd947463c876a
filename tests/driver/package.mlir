// A compiled package: its manifest, generated source and described arguments.
// RUN: rm -rf %t.linac
// RUN: linac compile %s -o %t.linac | FileCheck %s --check-prefix=OUT
// RUN: FileCheck %s --check-prefix=MANIFEST --input-file %t.linac/manifest.json
// RUN: FileCheck %s --check-prefix=SOURCE --input-file %t.linac/layer.cpp
// RUN: linac describe %t.linac | FileCheck %s --check-prefix=DESCRIBE
// RUN: linac-run describe %t.linac | FileCheck %s --check-prefix=DESCRIBE
// RUN: not linac describe %t.missing 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not linac-run describe 2>&1 | FileCheck %s --check-prefix=NOPACKAGE
// RUN: linac bench %t.linac --shape 2,70,3 --reps 1 --threads 1 --threads 2 | FileCheck %s --check-prefix=BENCH
// RUN: linac bench %t.linac --decode --shape 3,2,4 --reps 1 --threads 1 | FileCheck %s --check-prefix=BENCHDECODE
// RUN: not linac bench %t.linac --threads -1 2>&1 | FileCheck %s --check-prefix=BENCHTHREADS

// OUT: .linac
// BENCH: "target":"cpu"
// BENCH-SAME: "threads":1
// BENCH-NEXT: "target":"cpu"
// BENCH-SAME: "threads":2
// BENCHDECODE: "copy_gb_per_s":{{[0-9.e+-]+}},"fraction_of_copy":{{[0-9.e+-]+}}
// BENCHDECODE-SAME: "mode":"decode"
// BENCHDECODE-SAME: "shape":{"B":3,"H":4,
// BENCHDECODE-SAME: "T":2,
// BENCHDECODE-SAME: "target":"cpu"
// BENCHDECODE-SAME: "threads":1
// BENCHTHREADS: error: threads is -1; expected 0 (every core this process may use) or 1 to 1024
// MANIFEST: "abi_version": 6
// MANIFEST: "arguments": [
// MANIFEST: "name": "beta"
// MANIFEST-NEXT: "role": "input"
// MANIFEST: "name": "gamma"
// MANIFEST-NEXT: "role": "param"
// MANIFEST: "format": 5
// MANIFEST: "integrity": {
// MANIFEST-NEXT: "contract": "{{[0-9a-f]+}}",
// MANIFEST-NEXT: "files": {
// MANIFEST-NEXT: "layer.avx2_fma.so": {
// MANIFEST-NEXT: "bytes": {{[1-9][0-9]*}},
// MANIFEST-NEXT: "sha256": "{{[0-9a-f]+}}"
// MANIFEST-NEXT: },
// MANIFEST-NEXT: "layer.so": {
// MANIFEST-NEXT: "bytes": {{[1-9][0-9]*}},
// MANIFEST-NEXT: "sha256": "{{[0-9a-f]+}}"
// MANIFEST: "kernels": [
// MANIFEST: "entry": "linac_cpu_forward",
// MANIFEST: "file": "layer.so",
// MANIFEST-NEXT: "isa": "baseline"
// MANIFEST: "entry": "linac_cpu_forward",
// MANIFEST: "file": "layer.avx2_fma.so",
// MANIFEST-NEXT: "isa": "avx2_fma"
// MANIFEST: "layer": "grouped"
// MANIFEST: "normal_form": {
// MANIFEST: "erase": "vector"
// MANIFEST: "plan": {
// MANIFEST: "family": "delta_chunkwise"
// MANIFEST: "spec_hash":
// MANIFEST: "target": "cpu"
// SOURCE: static constexpr int K = 16, V = 8;
// SOURCE: static constexpr bool kNormalizer = false, kErase = true, kValueDecay = false,
// SOURCE: static void prologue(
// SOURCE: out.e = arg_beta * out.k;
// SOURCE: LINAC_CONTRACT("{{[0-9a-f]+}}")
// DESCRIBE: layer @grouped for cpu, K = 16, V = 8
// DESCRIBE: beta           input    key     [B, T, H, K]
// DESCRIBE: gamma          param    scalar  [H]
// MISSING: error: {{.*}}no manifest.json
// NOPACKAGE: package is required

!key = tensor<16xf32, #linac.key>
!value = tensor<8xf32, #linac.value>
!state = !linac.state<16x8>

linac.layer @grouped(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %beta : !key) params(%gamma : f32) {
  %gamma_zero = arith.constant 0.0 : f32
  %gamma_le0 = arith.minimumf %gamma, %gamma_zero : f32
  %S1 = linac.decay %S key(%gamma_le0 : f32) : !state
  %S2 = linac.erase %S1, %k strength(%beta : !key) : !state, !key
  %S3 = linac.write %S2, %k, %v : !state, !key, !value
  %o = linac.read %S3, %q : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
