// A signal that ends `linac compile` while the host compiler runs leaves
// no staging directory behind.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %python %S/Inputs/interrupt.py %t SIGTERM -- env CXX=%S/Inputs/slow-compiler.sh LINAC_CACHE_DIR=%t.cache linac compile %s -o %t/p.linac
// RUN: %python %S/Inputs/interrupt.py %t SIGINT -- env CXX=%S/Inputs/slow-compiler.sh LINAC_CACHE_DIR=%t.cache linac compile %s -o %t/p.linac
// RUN: ls -A %t | count 0

!key = tensor<4xf32, #linac.key>
!value = tensor<4xf32, #linac.value>
!state = !linac.state<4x4>
linac.layer @interrupted(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}
