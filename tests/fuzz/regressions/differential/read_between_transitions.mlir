// The read takes the state between the decay and the write but is placed
// after the write; the generated step reads the state after the write
// (found by the differential run; the read_order/ reproducers' bug with a
// state other than the incoming one).
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @read_between(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : f32) {
  %S1 = linac.decay %S key(%g : f32) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
