// RUN: not linac-opt %s -linac-normalize '-linac-plan=target=sm_90a chunk-kernel=pipelined' 2>&1 | FileCheck %s
// RUN: not linac-opt %s -linac-normalize '-linac-plan=target=sm_90a chunk-kernel=phased' 2>&1 | FileCheck %s --check-prefix=PHASED

// A key-vector gate is neither the pipelined kernel's nor the phased
// ones': asking for either is an error naming what it takes.
// CHECK: error: chunk-kernel=pipelined: the pipelined kernel takes an erase under no gate or a scalar one
// PHASED: error: chunk-kernel=phased: the phased kernel takes an erase under no gate or a scalar one

!key = tensor<64xf32, #linac.key>
!value = tensor<64xf32, #linac.value>
!state = !linac.state<64x64>

linac.layer @vector_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key, %b : f32) {
  %zero = arith.constant dense<0.0> : !key
  %log_a = arith.minimumf %g, %zero : !key
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.erase %S1, %k strength(%b : f32) : !state, !key
  %S3 = linac.write %S2, %k, %v strength(%b : f32) : !state, !key, !value
  %o = linac.read %S3, %q : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
