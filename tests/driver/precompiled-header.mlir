// With GCC, `linac compile` precompiles the header a CPU source includes
// first, once per compiler, flags and templates, into the cache, and
// compiles every package's file against it; a compiler that is not GCC,
// or a header that fails to precompile, leaves the files compiled from the
// header itself.
// RUN: rm -rf %t %t.cache && mkdir -p %t
// RUN: env CXX=%S/Inputs/logging-compiler.sh COMPILER_LOG=%t/first.log LINAC_CACHE_DIR=%t.cache linac compile %s --no-backward -o %t/first.linac
// RUN: FileCheck %s --check-prefix=FIRST < %t/first.log
// RUN: ls %t.cache/pch-*/linac/cpu/layer.h.gch
// RUN: ls %t.cache | not grep tmp
// FIRST-DAG: -x c++-header {{.*}}/linac/cpu/layer.h -o {{.*}}/pch-{{[0-9a-f]+}}.tmp{{[0-9]+}}/linac/cpu/layer.h.gch
// FIRST-DAG: -I{{[^ ]*}}/pch-{{[0-9a-f]+}} {{.*}}layer.cpp {{.*}}-o {{.*}}/layer.so

// Another spec reuses the header; the backward's source includes another.
// RUN: sed 's/4xf32/6xf32/; s/4x4/6x6/' %s > %t/wider.mlir
// RUN: env CXX=%S/Inputs/logging-compiler.sh COMPILER_LOG=%t/again.log LINAC_CACHE_DIR=%t.cache linac compile %t/wider.mlir --no-backward -o %t/wider.linac
// RUN: FileCheck %s --check-prefix=AGAIN --implicit-check-not=c++-header < %t/again.log
// AGAIN: -I{{[^ ]*}}/pch-{{[0-9a-f]+}} {{.*}}layer.cpp
// RUN: env CXX=%S/Inputs/logging-compiler.sh COMPILER_LOG=%t/backward.log LINAC_CACHE_DIR=%t.cache linac compile %s -o %t/backward.linac
// RUN: FileCheck %s --check-prefix=BACKWARD < %t/backward.log
// BACKWARD: -x c++-header {{.*}}/linac/cpu/backward.h

// RUN: rm -rf %t.cache
// RUN: env CXX=%S/Inputs/logging-compiler.sh COMPILER_MODE=not-gcc COMPILER_LOG=%t/other.log LINAC_CACHE_DIR=%t.cache linac compile %s -o %t/other.linac
// RUN: FileCheck %s --check-prefix=PLAIN --implicit-check-not=pch- < %t/other.log
// RUN: env CXX=%S/Inputs/logging-compiler.sh COMPILER_MODE=no-headers COMPILER_LOG=%t/failed.log LINAC_CACHE_DIR=%t.cache linac compile %s -o %t/failed.linac
// RUN: FileCheck %s --check-prefix=FAILED < %t/failed.log
// RUN: ls %t.cache | not grep pch-
// FAILED: -x c++-header
// PLAIN-NOT: -I{{[^ ]*}}/pch-
// PLAIN: {{.*}}layer.cpp {{.*}}-o {{.*}}/layer.so
// FAILED-NOT: -I{{[^ ]*}}/pch-

// Packages compiled each way compute the same.
// RUN: mkdir -p %t/in
// RUN: %python %S/write_npy.py %t/in q 1 3 1 4
// RUN: %python %S/write_npy.py %t/in k 1 3 1 4
// RUN: %python %S/write_npy.py %t/in v 1 3 1 4
// RUN: linac run %t/first.linac --inputs %t/in --outputs %t/first --scale 1.0
// RUN: linac run %t/other.linac --inputs %t/in --outputs %t/other --scale 1.0
// RUN: cmp %t/first/o.npy %t/other/o.npy

!key = tensor<4xf32, #linac.key>
!value = tensor<4xf32, #linac.value>
!state = !linac.state<4x4>
linac.layer @precompiled(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}
