// The write's strength is the read's output, so the layer is outside the
// normal form and runs as the scan (the chunkwise prologue, which has no
// state, was once generated reading one; found by the differential run).
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @read_feeds_strength(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value) {
  %o = linac.read %S, %q : !state, !key -> !value
  %S1 = linac.write %S, %k, %v strength(%o : !value) : !state, !key, !value
  linac.yield %S1, %o : !state, !value
}
