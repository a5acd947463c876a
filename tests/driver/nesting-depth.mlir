// Inputs nested deeper than the parser's stack allows are refused before
// parsing, by both tools.
// RUN: %python -c "print('module {' * 10000 + '}' * 10000)" > %t.modules.mlir
// RUN: not linac-opt %t.modules.mlir 2>&1 | FileCheck %s --check-prefix=MODULES
// RUN: not linac compile %t.modules.mlir -o %t.linac 2>&1 | FileCheck %s --check-prefix=MODULES
// RUN: %python -c "print('x = dense<' + '[' * 20000 + ']' * 20000 + '>')" > %t.dense.mlir
// RUN: not linac-opt %t.dense.mlir 2>&1 | FileCheck %s --check-prefix=DENSE
// RUN: not test -e %t.linac

// MODULES: modules.mlir:1:808: error: brackets nest deeper than 100 levels; a spec is one flat layer
// DENSE: dense.mlir:1:110: error: brackets nest deeper than 100 levels

// Brackets in comments, strings and arrows do not count: ((((((((((
// RUN: linac-opt %s | FileCheck %s --check-prefix=PARSED
// PARSED: linac.layer @arrows
!key = tensor<4xf32, #linac.key>
!value = tensor<4xf32, #linac.value>
!state = !linac.state<4x4>
linac.layer @arrows(%S : !state) inputs(%q : !key, %k : !key, %v : !value) attributes {note = "(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("} {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}
