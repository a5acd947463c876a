// Every elementwise and helper op of the dialect that no example takes, on
// operands inside its domain: in the gates and strengths (the prologue)
// and after the read (the epilogue), so that the backward's derivative of
// each is checked against the reference's. An erase of key-vector strength
// and a write of value-vector strength, under a scalar and a key-vector
// gate summed.
!key = tensor<128xf32, #linac.key>
!value = tensor<128xf32, #linac.value>
!state = !linac.state<128x128>

linac.layer @every_elementwise_op(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %a : !key, %b : !key,
           %c : f32, %z : !value)
    params(%p : f32, %w : !value) {
  // A key-vector log-gate, -log2(1 + softplus(a)) / 8, and a scalar one,
  // -sqrt(e^c) e^p.
  %sa = linac.softplus %a : !key
  %one = arith.constant dense<1.0> : !key
  %onep = arith.addf %sa, %one : !key
  %l2 = math.log2 %onep : !key
  %eighth = arith.constant dense<-0.125> : !key
  %gk = arith.mulf %l2, %eighth : !key
  %ec = math.exp %c : f32
  %root = math.sqrt %ec : f32
  %pexp = math.exp %p : f32
  %spg = arith.mulf %root, %pexp : f32
  %gs = arith.negf %spg : f32
  // Queries: tanh, exp2, division, abs and a power; keys normalised.
  %tq = math.tanh %q : !key
  %eq = math.exp2 %tq : !key
  %dq = arith.divf %q, %eq : !key
  %abq = math.absf %a : !key
  %pw = math.powf %onep, %tq : !key
  %sum = arith.addf %dq, %abq : !key
  %query = arith.subf %sum, %pw : !key
  %kn = linac.l2norm %k : !key
  // Strengths: a key vector in (0, 1) through the reciprocal square root and
  // a maximum; a value vector through log and log1p.
  %sb = linac.sigmoid %b : !key
  %two = arith.constant dense<2.0> : !key
  %sb2 = arith.addf %sb, %two : !key
  %rs = math.rsqrt %sb2 : !key
  %zero = arith.constant dense<0.0> : !key
  %floor = arith.maximumf %sb, %zero : !key
  %erase = arith.mulf %floor, %rs : !key
  %sw = linac.softplus %w : !value
  %vone = arith.constant dense<1.0> : !value
  %swp = arith.addf %sw, %vone : !value
  %lw = math.log %swp : !value
  %l1w = math.log1p %lw : !value
  %mw = arith.minimumf %l1w, %vone : !value
  %S1 = linac.decay %S key(%gk : !key) : !state
  %S2 = linac.decay %S1 key(%gs : f32) : !state
  %S3 = linac.erase %S2, %kn strength(%erase : !key) : !state, !key
  %S4 = linac.write %S3, %kn, %v strength(%mw : !value) : !state, !key, !value
  %r = linac.read %S4, %query : !state, !key -> !value
  // The epilogue: a gate of the output by sigmoid(z), less a dot's
  // broadcast.
  %gz = linac.sigmoid %z : !value
  %gated = arith.mulf %r, %gz : !value
  %zz = linac.dot %z, %gz : !value
  %bz = linac.broadcast %zz : !value
  %small = arith.constant dense<0.01> : !value
  %shift = arith.mulf %bz, %small : !value
  %o = arith.subf %gated, %shift : !value
  linac.yield %S4, %o : !state, !value
}
