// Decode items: by default 16 warps take a state in four strips of a
// quarter of its value columns, 4 warps a strip, each strip moved by a
// tensor map's boxes of 32 columns by every key row; a group has three
// stages (two for the items on their way, one to write back through), 1 KiB
// more to align the swizzle. A state a strip cannot hold, or whose strips a
// tensor map cannot move, keeps whole-state items staged by bulk copies of
// row blocks on sm_90a and loaded directly on sm_80.
// RUN: linac-opt %s -linac-normalize '-linac-plan=target=sm_90a' | FileCheck %s
// RUN: linac-opt %s -linac-normalize '-linac-plan=target=sm_90a decode-parts=2' | FileCheck %s --check-prefix=HALVES
// RUN: linac-opt %s -linac-normalize '-linac-plan=target=sm_90a decode-warps=8 decode-parts=2' | FileCheck %s --check-prefix=WARPS8
// RUN: linac-opt %s -linac-normalize '-linac-plan=target=sm_80' | FileCheck %s --check-prefix=SM80
// RUN: not linac-opt %s -linac-normalize '-linac-plan=target=sm_90a decode-parts=3' 2>&1 | FileCheck %s --check-prefix=BADPARTS

// BADPARTS: error: decode-parts must be 1, 2 or 4, got 3

!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

// Quarters of 32 columns, 4 warps each: four groups of three 16 KiB stages.
// CHECK-LABEL: linac.layer @strips
// CHECK-SAME: decode_parts = 4 : i64, decode_placement = "body_order", decode_shared_memory = 197632 : i64, decode_stages = 12 : i64, decode_staging = "tensor", decode_state_layout = "key_major", decode_warps = 4 : i64
// Halves of 64 columns, 8 warps each: two groups of three 32 KiB stages.
// HALVES-LABEL: linac.layer @strips
// HALVES-SAME: decode_parts = 2 : i64, decode_placement = "body_order", decode_shared_memory = 197632 : i64, decode_stages = 6 : i64, decode_staging = "tensor", decode_state_layout = "key_major", decode_warps = 8 : i64
// 8 warps a state leave 4 a half: four groups, room for one stage each.
// WARPS8-LABEL: linac.layer @strips
// WARPS8-SAME: decode_parts = 2 : i64, decode_placement = "body_order", decode_shared_memory = 132096 : i64, decode_stages = 4 : i64, decode_staging = "tensor", decode_state_layout = "key_major", decode_warps = 4 : i64
// SM80-LABEL: linac.layer @strips
// SM80-SAME: decode_parts = 1 : i64, decode_placement = "body_order", decode_shared_memory = 0 : i64, decode_stages = 0 : i64, decode_staging = "direct", decode_state_layout = "key_major", decode_warps = 16 : i64
linac.layer @strips(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %b : f32) {
  %S1 = linac.erase %S, %k strength(%b : f32) : !state, !key
  %S2 = linac.write %S1, %k, %v strength(%b : f32) : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

// The value's l2norm sums over every value column: one group of 16 warps
// takes whole states through three bulk-copy stages.
// CHECK-LABEL: linac.layer @value_norm
// CHECK-SAME: decode_parts = 1 : i64, decode_placement = "body_order", decode_shared_memory = 198144 : i64, decode_stages = 3 : i64, decode_staging = "bulk", decode_state_layout = "key_major", decode_warps = 16 : i64
linac.layer @value_norm(%S : !state) inputs(%q : !key, %k : !key, %v : !value) {
  %vn = linac.l2norm %v : !value
  %S1 = linac.write %S, %k, %vn : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// A normaliser's column belongs to no strip.
// CHECK-LABEL: linac.layer @normalized
// CHECK-SAME: decode_parts = 1 : i64
// CHECK-SAME: decode_staging = "bulk"
linac.layer @normalized(%S : !linac.state<128x128, normalized>) inputs(%q : !key, %k : !key, %v : !value) {
  %S1 = linac.write %S, %k, %v : !linac.state<128x128, normalized>, !key, !value
  %o = linac.read %S1, %q normalized : !linac.state<128x128, normalized>, !key -> !value
  linac.yield %S1, %o : !linac.state<128x128, normalized>, !value
}

// Half of 64 columns over 8 warps is 4 a warp, less than a lane pair's 8,
// so a quarter-warp's rows could not differ by row % 8.
// CHECK-LABEL: linac.layer @narrow
// CHECK-SAME: decode_parts = 1 : i64
// CHECK-SAME: decode_staging = "bulk"
linac.layer @narrow(%S : !linac.state<128x64>) inputs(%q : !key, %k : !key, %v : tensor<64xf32, #linac.value>) {
  %S1 = linac.write %S, %k, %v : !linac.state<128x64>, !key, tensor<64xf32, #linac.value>
  %o = linac.read %S1, %q : !linac.state<128x64>, !key -> tensor<64xf32, #linac.value>
  linac.yield %S1, %o : !linac.state<128x64>, tensor<64xf32, #linac.value>
}

// 48 key rows are not whole pairs of rows for each of 16 row lanes.
// CHECK-LABEL: linac.layer @short_keys
// CHECK-SAME: decode_parts = 1 : i64
// CHECK-SAME: decode_staging = "bulk"
linac.layer @short_keys(%S : !linac.state<48x128>) inputs(%q : tensor<48xf32, #linac.key>, %k : tensor<48xf32, #linac.key>, %v : !value) {
  %S1 = linac.write %S, %k, %v : !linac.state<48x128>, tensor<48xf32, #linac.key>, !value
  %o = linac.read %S1, %q : !linac.state<48x128>, tensor<48xf32, #linac.key> -> !value
  linac.yield %S1, %o : !linac.state<48x128>, !value
}
