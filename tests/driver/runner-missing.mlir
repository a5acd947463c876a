// linac forwards run, describe and bench to linac-run beside it; without
// one there, it says which path it tried.
// RUN: rm -rf %t && mkdir -p %t
// RUN: cp linac %t/linac
// RUN: not %t/linac describe %t/none.linac 2>&1 | FileCheck %s
// CHECK: cannot run {{.*}}/linac-run: No such file or directory
