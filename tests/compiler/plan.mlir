// RUN: linac-opt %s -linac-normalize -linac-plan=target=sm_90a | FileCheck %s --check-prefix=SM90
// RUN: linac-opt %s -linac-normalize -linac-plan=target=sm_80 | FileCheck %s --check-prefix=SM80
// RUN: not linac-opt %s -linac-normalize -linac-plan=target=sm_70 2>&1 | FileCheck %s --check-prefix=BADTARGET
// RUN: linac-opt %s -linac-normalize '-linac-plan=target=sm_90a decode-warps=8' | FileCheck %s --check-prefix=WARPS8
// RUN: not linac-opt %s -linac-normalize '-linac-plan=target=sm_90a decode-warps=4' 2>&1 | FileCheck %s --check-prefix=BADWARPS
// RUN: not linac-opt %s -linac-plan 2>&1 | FileCheck %s --check-prefix=NONORMAL

// BADTARGET: error: unknown target 'sm_70'; expected cpu, sm_90a or sm_80
// BADWARPS: error: decode-warps must be 8 or 16, got 4

// Decode on 8 warps a state: two groups a block, three whole states staged
// each (32 value columns make strips of 2 columns a warp, too narrow).
// WARPS8: linac.layer @vector_gate
// WARPS8-SAME: decode_block_threads = 512 : i64, decode_key_rows = "whole", decode_parts = 1 : i64, decode_placement = "body_order", decode_shared_memory = 52224 : i64, decode_stages = 6 : i64, decode_staging = "bulk", decode_state_layout = "key_major", decode_warps = 8 : i64
// NONORMAL: error: has no linac.normal_form; run -linac-normalize first

!key = tensor<64xf32, #linac.key>
!value = tensor<32xf32, #linac.value>
!state = !linac.state<64x32>

// On GPUs a key-vector gate is handled in sub-chunks of 16. The vector
// inputs are staged in shared memory a chunk ahead; the scalar %b, not 16
// bytes a token, stays in registers. With its erase, the phased kernels
// come beside the lockstep one: a prepared chunk carries the decay as a
// vector of K = 64 floats (42496 bytes with V = 32).
// SM90: linac.layer @vector_gate
// SM90-SAME: linac.plan = {backward_family = "delta_chunkwise", backward_shared_memory = 84096 : i64, block_threads = 512 : i64, chunk_kernel = "lockstep", chunk_size = 64 : i64, chunkwise_float16 = true, compose_block_threads = 512 : i64, compose_shared_memory = 24832 : i64, decode_block_threads = 512 : i64, decode_key_rows = "whole", decode_parts = 1 : i64, decode_placement = "body_order", decode_shared_memory = 26112 : i64, decode_stages = 3 : i64, decode_staging = "bulk", decode_state_layout = "key_major", decode_warps = 16 : i64, family = "delta_chunkwise", gate_numerics = "subchunk", late_shared_inputs = array<i64>, phased = "by_shape", phased_block_threads = 256 : i64, phased_shared_memory = 94224 : i64, prepare_block_threads = 256 : i64, prepare_shared_memory = 73216 : i64, prepared_chunk_bytes = 42496 : i64, scan_block_threads = 32 : i64, shared_inputs = array<i64: 0, 1, 2, 3>, shared_memory = 134144 : i64, subchunk_size = 16 : i64, target = "sm_90a", transition_blocks = 2 : i64}
// SM80: linac.layer @vector_gate
// SM80-SAME: target = "sm_80"
linac.layer @vector_gate(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %g : !key, %b : f32) {
  %g_zero = arith.constant dense<0.0> : !key
  %g_le0 = arith.minimumf %g, %g_zero : !key
  %S1 = linac.decay %S key(%g_le0 : !key) : !state
  %S2 = linac.erase %S1, %k strength(%b : f32) : !state, !key
  %S3 = linac.write %S2, %k, %v strength(%b : f32) : !state, !key, !value
  %o = linac.read %S3, %q : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}

// SM90: linac.layer @matrix
// SM90-SAME: linac.plan = {backward_family = "recurrent", block_threads = 32 : i64, decode_block_threads = 512 : i64, decode_key_rows = "whole", decode_parts = 1 : i64, decode_placement = "body_order", decode_shared_memory = 26112 : i64, decode_stages = 3 : i64, decode_staging = "bulk", decode_state_layout = "key_major", decode_warps = 16 : i64, family = "recurrent", scan_block_threads = 32 : i64, target = "sm_90a"}
linac.layer @matrix(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %G : tensor<64x32xf32, #linac.matrix>) {
  %G_zero = arith.constant dense<0.0> : tensor<64x32xf32, #linac.matrix>
  %G_le0 = arith.minimumf %G, %G_zero : tensor<64x32xf32, #linac.matrix>
  %S1 = linac.matrix_gate %S, %G_le0 : !state, tensor<64x32xf32, #linac.matrix>
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

// A value-side decay runs chunkwise: its cumulative log-gates take C x
// (V + 4) floats of shared memory beside the key side's; the pairs inside
// a sub-chunk of 16 take their column factors one by one.
// SM90: linac.layer @value_decay
// SM90-SAME: linac.plan = {backward_family = "recurrent", block_threads = 512 : i64, chunk_kernel = "lockstep", chunk_size = 64 : i64, chunkwise_float16 = true, compose_block_threads = 512 : i64, compose_shared_memory = 0 : i64, decode_block_threads = 512 : i64, decode_key_rows = "whole", decode_parts = 1 : i64, decode_placement = "body_order", decode_shared_memory = 26112 : i64, decode_stages = 3 : i64, decode_staging = "bulk", decode_state_layout = "key_major", decode_warps = 16 : i64, family = "chunkwise", gate_numerics = "subchunk", late_shared_inputs = array<i64>, scan_block_threads = 32 : i64, shared_inputs = array<i64: 0, 1, 2, 3>, shared_memory = 89344 : i64, subchunk_size = 16 : i64, target = "sm_90a", transition_blocks = 0 : i64}
// SM80: linac.layer @value_decay
// SM80-SAME: family = "chunkwise"
linac.layer @value_decay(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %h : !value) {
  %h_zero = arith.constant dense<0.0> : !value
  %h_le0 = arith.minimumf %h, %h_zero : !value
  %S1 = linac.decay %S value(%h_le0 : !value) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}

// With an erase, whose triangular system would differ for every column, a
// value-side decay runs the recurrent scan on GPUs (the CPU stays
// chunkwise).
// SM90: linac.layer @value_decay_erase
// SM90-SAME: family = "recurrent", recurrent_reason = "value-side decay with an erase"
linac.layer @value_decay_erase(%S : !state) inputs(%q : !key, %k : !key, %v : !value, %h : !value, %b : f32) {
  %h_zero = arith.constant dense<0.0> : !value
  %h_le0 = arith.minimumf %h, %h_zero : !value
  %S1 = linac.decay %S value(%h_le0 : !value) : !state
  %S2 = linac.erase %S1, %k strength(%b : f32) : !state, !key
  %S3 = linac.write %S2, %k, %v : !state, !key, !value
  %o = linac.read %S3, %q : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}

// K and V that are not multiples of 16 run chunkwise, padded to 32 x 48 in
// the kernel's tiles (its shared memory); past 128 they run the scan.
// SM90: linac.layer @odd_dims
// SM90-SAME: linac.plan = {backward_family = "chunkwise", backward_shared_memory = 41728 : i64, block_threads = 512 : i64, chunk_kernel = "lockstep", chunk_size = 64 : i64, chunkwise_float16 = true, compose_block_threads = 512 : i64, compose_shared_memory = 0 : i64, decode_block_threads = 512 : i64, decode_key_rows = "whole", decode_parts = 1 : i64, decode_placement = "body_order", decode_shared_memory = 16896 : i64, decode_stages = 3 : i64, decode_staging = "bulk", decode_state_layout = "key_major", decode_warps = 16 : i64, family = "chunkwise", gate_numerics = "none", late_shared_inputs = array<i64>, scan_block_threads = 64 : i64, shared_inputs = array<i64: 0, 1, 2>, shared_memory = 63232 : i64, target = "sm_90a", transition_blocks = 0 : i64}
linac.layer @odd_dims(%S : !linac.state<24x40>) inputs(%q : tensor<24xf32, #linac.key>, %k : tensor<24xf32, #linac.key>, %v : tensor<40xf32, #linac.value>) {
  %S1 = linac.write %S, %k, %v : !linac.state<24x40>, tensor<24xf32, #linac.key>, tensor<40xf32, #linac.value>
  %o = linac.read %S1, %q : !linac.state<24x40>, tensor<24xf32, #linac.key> -> tensor<40xf32, #linac.value>
  linac.yield %S1, %o : !linac.state<24x40>, tensor<40xf32, #linac.value>
}

// SM90: linac.layer @too_wide
// SM90-SAME: family = "recurrent", recurrent_reason = "dimensions above 128"
linac.layer @too_wide(%S : !linac.state<136x16>) inputs(%q : tensor<136xf32, #linac.key>, %k : tensor<136xf32, #linac.key>, %v : tensor<16xf32, #linac.value>) {
  %S1 = linac.write %S, %k, %v : !linac.state<136x16>, tensor<136xf32, #linac.key>, tensor<16xf32, #linac.value>
  %o = linac.read %S1, %q : !linac.state<136x16>, tensor<136xf32, #linac.key> -> tensor<16xf32, #linac.value>
  linac.yield %S1, %o : !linac.state<136x16>, tensor<16xf32, #linac.value>
}

// The chunkwise kernel's working set must fit the target's shared memory:
// K = V = 128 with an erase and a key-vector gate fits sm_90a's 227 KiB but
// not sm_80's 163 KiB, where it runs as the scan.
// Its 212992 bytes leave room to stage only the first input in its own
// memory; the other vectors take that of the state copy, Delta, P and A.
// SM90: linac.layer @large_delta
// SM90-SAME: family = "delta_chunkwise"
// SM90-SAME: late_shared_inputs = array<i64: 1, 2, 3>, phased = "by_shape"
// The phased kernels' preparing block keeps two K-vectors of log-gates for
// each half sub-chunk rather than every token's, so that two fit a
// multiprocessor (2 x 114432 bytes, and 1 KiB each reserved, within 228 KiB).
// SM90-SAME: prepare_shared_memory = 114432 : i64, prepared_chunk_bytes = 79616 : i64, scan_block_threads = 128 : i64, shared_inputs = array<i64: 0>, shared_memory = 229376 : i64
// sm_80 has no bulk copy engine, so its decode steps load states directly.
// SM80: linac.layer @large_delta
// SM80-SAME: linac.plan = {backward_family = "recurrent", block_threads = 128 : i64, decode_block_threads = 512 : i64, decode_key_rows = "whole", decode_parts = 1 : i64, decode_placement = "body_order", decode_shared_memory = 0 : i64, decode_stages = 0 : i64, decode_staging = "direct", decode_state_layout = "key_major", decode_warps = 16 : i64, family = "recurrent", recurrent_reason = "the chunk's 212992 bytes exceed sm_80's 166912 of shared memory", scan_block_threads = 128 : i64, target = "sm_80"}
linac.layer @large_delta(%S : !linac.state<128x128>)
    inputs(%q : tensor<128xf32, #linac.key>, %k : tensor<128xf32, #linac.key>,
           %v : tensor<128xf32, #linac.value>, %g : tensor<128xf32, #linac.key>,
           %b : f32) {
  %g_zero = arith.constant dense<0.0> : tensor<128xf32, #linac.key>
  %g_le0 = arith.minimumf %g, %g_zero : tensor<128xf32, #linac.key>
  %S1 = linac.decay %S key(%g_le0 : tensor<128xf32, #linac.key>) : !linac.state<128x128>
  %S2 = linac.erase %S1, %k strength(%b : f32) : !linac.state<128x128>, tensor<128xf32, #linac.key>
  %S3 = linac.write %S2, %k, %v strength(%b : f32) : !linac.state<128x128>, tensor<128xf32, #linac.key>, tensor<128xf32, #linac.value>
  %o = linac.read %S3, %q : !linac.state<128x128>, tensor<128xf32, #linac.key> -> tensor<128xf32, #linac.value>
  linac.yield %S3, %o : !linac.state<128x128>, tensor<128xf32, #linac.value>
}

// A state too large to stage in shared memory for decode: each decode step
// loads it straight from the pool.
// SM90: linac.layer @wide_state
// SM90-SAME: decode_shared_memory = 0 : i64
// SM90-SAME: decode_stages = 0 : i64
linac.layer @wide_state(%S : !linac.state<256x256>)
    inputs(%q : tensor<256xf32, #linac.key>, %k : tensor<256xf32, #linac.key>,
           %v : tensor<256xf32, #linac.value>) {
  %S1 = linac.write %S, %k, %v : !linac.state<256x256>, tensor<256xf32, #linac.key>, tensor<256xf32, #linac.value>
  %o = linac.read %S1, %q : !linac.state<256x256>, tensor<256xf32, #linac.key> -> tensor<256xf32, #linac.value>
  linac.yield %S1, %o : !linac.state<256x256>, tensor<256xf32, #linac.value>
}

// A normaliser's column makes state rows of 129 floats, but a row lane's
// block of 8 rows is whole 16-byte runs, which the bulk copy engine moves.
// SM90: linac.layer @normalized
// SM90-SAME: decode_shared_memory = 199680 : i64
// SM90-SAME: decode_stages = 3 : i64
linac.layer @normalized(%S : !linac.state<128x128, normalized>)
    inputs(%q : tensor<128xf32, #linac.key>, %k : tensor<128xf32, #linac.key>,
           %v : tensor<128xf32, #linac.value>) {
  %S1 = linac.write %S, %k, %v
      : !linac.state<128x128, normalized>, tensor<128xf32, #linac.key>, tensor<128xf32, #linac.value>
  %o = linac.read %S1, %q normalized
      : !linac.state<128x128, normalized>, tensor<128xf32, #linac.key> -> tensor<128xf32, #linac.value>
  linac.yield %S1, %o : !linac.state<128x128, normalized>, tensor<128xf32, #linac.value>
}

// With 16 key rows, a row lane holds one row of 65 floats: not whole
// 16-byte runs, so decode loads such states directly.
// SM90: linac.layer @normalized_short
// SM90-SAME: decode_shared_memory = 0 : i64
// SM90-SAME: decode_stages = 0 : i64
linac.layer @normalized_short(%S : !linac.state<16x64, normalized>)
    inputs(%q : tensor<16xf32, #linac.key>, %k : tensor<16xf32, #linac.key>,
           %v : tensor<64xf32, #linac.value>) {
  %S1 = linac.write %S, %k, %v
      : !linac.state<16x64, normalized>, tensor<16xf32, #linac.key>, tensor<64xf32, #linac.value>
  %o = linac.read %S1, %q normalized
      : !linac.state<16x64, normalized>, tensor<16xf32, #linac.key> -> tensor<64xf32, #linac.value>
  linac.yield %S1, %o : !linac.state<16x64, normalized>, tensor<64xf32, #linac.value>
}
