// Row-scaled operands with every kind of scalar the warpgroup kernel takes
// beside the rows: the query l2-normalised and times a scalar input, the
// key the same input's row negated and l2-normalised with its own eps (two
// operands' tiles from one input), the value times a function of another
// scalar input, a write strength and a scalar gate.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @row_scaled_scalars(%S : !state)
    inputs(%q : !key, %v : !value, %a : f32, %b : f32, %c : f32, %dt : f32)
    params(%A_log : f32) {
  %qn = linac.l2norm %q : !key
  %as = linac.broadcast %a : !key
  %qs = arith.mulf %qn, %as : !key
  %kneg = arith.negf %q : !key
  %kn = linac.l2norm %kneg {eps = 0.5 : f64} : !key
  %cs = linac.sigmoid %c : f32
  %cv = linac.broadcast %cs : !value
  %vs = arith.mulf %cv, %v : !value
  %beta = linac.sigmoid %b : f32
  %d = linac.softplus %dt : f32
  %A = math.exp %A_log : f32
  %Adt = arith.mulf %A, %d : f32
  %g = arith.negf %Adt : f32
  %S1 = linac.decay %S key(%g : f32) : !state
  %S2 = linac.write %S1, %kn, %vs strength(%beta : f32) : !state, !key, !value
  %o = linac.read %S2, %qs : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
