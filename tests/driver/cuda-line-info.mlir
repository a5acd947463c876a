// A GPU package's cubins carry no line table unless --line-info asks for
// one (for profilers); the CPU target refuses the option. `linac bench
// --open` times opening a package, which needs no GPU.
// RUN: rm -rf %t.linac %t.lines.linac %t.cpu.linac
// RUN: linac compile %s --target sm_80 -o %t.linac
// RUN: readelf -S -W %t.linac/layer.cubin | FileCheck %s --check-prefix=PLAIN --implicit-check-not=debug_line
// RUN: readelf -S -W %t.linac/layer.1.cubin | FileCheck %s --check-prefix=PLAIN --implicit-check-not=debug_line
// RUN: linac compile %s --target sm_80 --line-info -o %t.lines.linac
// RUN: readelf -S -W %t.lines.linac/layer.cubin | FileCheck %s --check-prefix=LINES
// RUN: readelf -S -W %t.lines.linac/layer.1.cubin | FileCheck %s --check-prefix=LINES
// RUN: not linac compile %s --line-info -o %t.cpu.linac 2>&1 | FileCheck %s --check-prefix=CPU
// RUN: linac bench --open --reps 3 %t.linac %t.lines.linac | FileCheck %s --check-prefix=OPEN
// RUN: not linac bench --open %t.missing.linac 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not linac bench --open --shape 1,64,1 %t.linac 2>&1 | FileCheck %s --check-prefix=OPENSHAPE

// PLAIN: .text.
// LINES: .nv_debug_line_sass
// CPU: error: --line-info is for the GPU targets (sm_90a, sm_80)
// OPEN: {"kernel_bytes":{{[0-9]+}},"kernel_files":["layer.cubin","layer.1.cubin"],"mode":"open","ms":{{[0-9.e-]+}},"target":"sm_80","variant":"line_info"}
// OPEN-NEXT: "target":"sm_80","variant":"line_info"}
// MISSING: error: {{.*}}missing.linac
// OPENSHAPE: error: --open times opening packages: it takes no --shape, --decode, --threads or --segment-tokens

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
linac.layer @line_info(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}
