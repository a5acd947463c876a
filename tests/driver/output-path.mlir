// `-o` replaces only a package linac wrote, and never the directory it
// runs in; --force replaces anything else.
// RUN: rm -rf %t && mkdir -p %t/notes && echo kept > %t/notes/todo.txt
// RUN: not linac compile %s -o %t/notes 2>&1 | FileCheck %s --check-prefix=REFUSED
// RUN: cat %t/notes/todo.txt | FileCheck %s --check-prefix=KEPT
// RUN: cd %t/notes && not linac compile %s -o . 2>&1 | FileCheck %s --check-prefix=HERE
// RUN: cd %t/notes && not linac compile %s -o .. --force 2>&1 | FileCheck %s --check-prefix=HERE
// RUN: cd %t
// RUN: linac compile %s -o relative.linac && test -f %t/relative.linac/manifest.json
// RUN: cat %t/notes/todo.txt | FileCheck %s --check-prefix=KEPT

// A package is replaced; one holding a file linac did not write is not.
// RUN: linac compile %s -o %t/p.linac && linac compile %s -o %t/p.linac
// RUN: test -f %t/p.linac/manifest.json
// RUN: echo mine > %t/p.linac/mine.txt
// RUN: not linac compile %s -o %t/p.linac 2>&1 | FileCheck %s --check-prefix=REFUSED
// RUN: test -f %t/p.linac/mine.txt
// A GPU package, its kernels in two cubins, is replaced too.
// RUN: linac compile %s --target sm_80 -o %t/gpu.linac
// RUN: linac compile %s --target sm_80 -o %t/gpu.linac
// RUN: test -f %t/gpu.linac/layer.cubin && test -f %t/gpu.linac/layer.1.cubin

// Nor is a file, or a link to a package.
// RUN: echo data > %t/file && not linac compile %s -o %t/file 2>&1 | FileCheck %s --check-prefix=REFUSED
// RUN: cat %t/file | FileCheck %s --check-prefix=DATA
// RUN: linac compile %s -o %t/q.linac && ln -s q.linac %t/link.linac
// RUN: not linac compile %s -o %t/link.linac 2>&1 | FileCheck %s --check-prefix=REFUSED

// --force replaces what is there, in one rename.
// RUN: linac compile %s -o %t/notes --force
// RUN: test -f %t/notes/manifest.json && not test -e %t/notes/todo.txt
// RUN: linac compile %s -o %t/file --force && test -f %t/file/manifest.json

// Nothing is left beside the packages.
// RUN: ls -A %t | FileCheck %s --check-prefix=LEFT --implicit-check-not=tmp --implicit-check-not=old

// REFUSED: error: {{.*}} exists and is not a linac package; pass another -o, or --force to replace it
// KEPT: kept
// HERE: error: {{.*}} is the current directory or holds it; a package needs a path of its own
// DATA: data
// LEFT: file
// LEFT: gpu.linac
// LEFT: link.linac
// LEFT: notes
// LEFT: p.linac
// LEFT: q.linac
// LEFT: relative.linac

!key = tensor<4xf32, #linac.key>
!value = tensor<4xf32, #linac.value>
!state = !linac.state<4x4>
linac.layer @placed(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}
