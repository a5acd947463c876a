// -linac-plan reads the normal form -linac-normalize recorded; a recorded
// form that is not the schema's is an error naming the attribute and field.
// RUN: not linac-opt %s -split-input-file -linac-plan 2>&1 | FileCheck %s

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

// CHECK: error: linac.normal_form has no 'write'
linac.layer @missing_field(%S : !state) inputs(%q : !key, %k : !key, %v : !value)
    attributes {linac.normal_form = {chunkable = true, erase = "none", key_decay = "none", normalizer = false, read = "after", value_decay = false}} {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

// CHECK: error: linac.normal_form's 'key_decay' is "sideways"; expected none, fixed, scalar or vector
linac.layer @unknown_name(%S : !state) inputs(%q : !key, %k : !key, %v : !value)
    attributes {linac.normal_form = {chunkable = true, erase = "none", key_decay = "sideways", normalizer = false, read = "after", value_decay = false, write = "plain"}} {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}

// -----

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

// CHECK: error: linac.normal_form's 'chunkable' is 1 : i64; expected true or false
linac.layer @wrong_type(%S : !state) inputs(%q : !key, %k : !key, %v : !value)
    attributes {linac.normal_form = {chunkable = 1, erase = "none", key_decay = "none", normalizer = false, read = "after", value_decay = false, write = "plain"}} {
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}
