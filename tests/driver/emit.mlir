// linac compile --emit prints a stage of the pipeline instead of building a
// package, and the generated source names values as the spec does.
// RUN: linac compile %s --emit=mlir | FileCheck %s --check-prefix=MLIR
// RUN: linac compile %s --emit=normal | FileCheck %s --check-prefix=NORMAL
// RUN: linac compile %s --emit=plan --target sm_90a | FileCheck %s --check-prefix=PLAN
// RUN: linac compile %s --emit=source | FileCheck %s --check-prefix=SOURCE
// A GPU's source needs no nvcc.
// RUN: env NVCC=/nonexistent/nvcc linac compile %s --emit=source --target sm_90a | FileCheck %s --check-prefix=CUDA
// RUN: linac compile %examples/gdn2.mlir --emit=source | FileCheck %s --check-prefix=GDN2
// RUN: env NVCC=/nonexistent/nvcc linac compile %examples/rwkv6.mlir --emit=source --target sm_90a | FileCheck %s --check-prefix=SCANBWD
// RUN: not linac compile %s --emit=binary 2>&1 | FileCheck %s --check-prefix=BADEMIT

// MLIR: linac.layer @names
// MLIR-NOT: linac.normal_form
// NORMAL: linac.normal_form = {
// NORMAL-NOT: linac.plan
// PLAN: linac.plan = {{{.*}}target = "sm_90a"{{.*}}}
// BADEMIT: Cannot find option named 'binary'

// Spec names that C++ or the generated code reserve, or that are not
// identifiers, get a suffix or a prefix; the others stay as written.
// SOURCE: const auto state_1 = l2norm(arg_k, 1e-06f);  // %state = linac.l2norm %k
// SOURCE-NEXT: const auto read_1 = sigmoid(arg_b);  // %read = linac.sigmoid %b
// SOURCE-NEXT: const auto v7 = -read_1;  // %7 = arith.negf %read
// SOURCE-NEXT: const auto float_1 = arg_g + v7;  // %float = arith.addf %g, %7
// SOURCE-NEXT: const auto v_arg_q = l2norm(arg_q, 1e-06f);  // %arg_q = linac.l2norm %q
// SOURCE-NEXT: const auto zero = 0.0f;  // %zero = arith.constant
// SOURCE-NEXT: const auto my_gate = minimum(float_1, zero);  // %my.gate = arith.minimumf %float, %zero
// The reverse of the prologue: an adjoint grad_NAME for each value, seeded
// from the operands' gradients d, each op's derivative after a comment
// naming the op, each argument's into its gradient row. A constant has no
// adjoint.
// SOURCE: static void prologueBackward(
// SOURCE: float grad_my_gate = 0.0f;
// SOURCE-NEXT: grad_v_arg_q = grad_v_arg_q + d.q;
// SOURCE-NEXT: grad_state_1 = grad_state_1 + d.k;
// SOURCE-NEXT: grad_my_gate = grad_my_gate + sum(d.gk);
// SOURCE-NEXT: grad_state_1 = grad_state_1 + read_1 * d.e;
// SOURCE-NEXT: grad_read_1 = grad_read_1 + dot(d.e, state_1);
// SOURCE-NEXT: grad_arg_v = grad_arg_v + valuesOf<V>(d.u);
// SOURCE-NEXT: // back through %my.gate = arith.minimumf %float, %zero
// SOURCE-NEXT: grad_float_1 = grad_float_1 + whereAtLeast(zero, float_1, grad_my_gate);
// SOURCE-NOT: grad_zero
// SOURCE: addGradient(grad.input(0), grad_arg_q);
// SOURCE: static void epilogueBackward(
// SOURCE: dRead = dRead + dOut;
// SOURCE: state.decay(Vec<16>::splat(my_gate));  // %S1 = linac.decay %S, %my.gate
// SOURCE-NEXT: state.erase(state_1, Vec<16>::splat(read_1) * state_1);  // %S2 = linac.erase %S1, %state, %read
// SOURCE-NEXT: state.write(state_1, arg_v, 1.0f);  // %S3 = linac.write %S2, %state, %v
// SOURCE-NEXT: const auto o = state.read(v_arg_q, scale);  // %o = linac.read %S3, %arg_q
// SOURCE: extern "C" int linac_cpu_backward(

// CUDA: #include "linac/cuda/layer.h"
// CUDA: const auto state_1 = l2norm(arg_k, 1e-06f);  // %state = linac.l2norm %k
// The backward is chunkwise: the prologue's and the epilogue's reverses on
// the chunkwise kernels' types, a warp a token.
// CUDA: struct ChunkBackward {
// CUDA: static void prologueBackward(
// CUDA: WarpVec<16> grad_arg_q{};
// CUDA: grad_state_1 = grad_state_1 + read_1 * d.e;
// CUDA: addGradient(grad.input(2), grad_arg_v);
// CUDA: static void epilogueBackward(
// CUDA: dRead = dRead + dOut;
// CUDA-NOT: struct ScanBackward
// Decode fuses an erase and the write with its key into one op.
// CUDA: struct Decode {
// CUDA: state.eraseWrite(state_1, {{.*}}, arg_v, 1.0f);  // %S2 = linac.erase %S1, %state, %read; %S3 = linac.write %S2, %state, %v
// CUDA: static_assert(linac::cuda::backwardSharedBytes(Layer::K, {{.*}}) == {{[0-9]+}}
// CUDA-NEXT: #if LINAC_IN_PART(0)
// CUDA-NEXT: LINAC_CHUNK_BACKWARD_KERNELS(Layer)
// CUDA-NOT: LINAC_SCAN_BACKWARD_KERNEL

// Reading before the write (RWKV-6), the backward's step runs token by
// token on the scan's types: key vectors whole on every thread, value
// vectors a column a thread.
// SCANBWD: struct ScanBackward {
// SCANBWD: const auto step_before_{{[0-9]+}} = state.copy();
// SCANBWD: FullVec<128> grad_arg_r{};
// SCANBWD-DAG: writeBackward(dState,
// SCANBWD-DAG: readBackward(dState,
// SCANBWD-DAG: decayBackward(dState,
// SCANBWD-NOT: ChunkBackward
// SCANBWD: LINAC_SCAN_BACKWARD_KERNEL(Layer)

// GDN2: const auto kn = l2norm(arg_k, 1e-06f);  // %kn = linac.l2norm %k
// GDN2: const auto erase = sigmoid(arg_b);  // %erase = linac.sigmoid %b
// GDN2-NEXT: const auto write = sigmoid(arg_w);  // %write = linac.sigmoid %w
// GDN2: state.decay(log_a);  // %S1 = linac.decay %S, %log_a
// GDN2-NEXT: state.erase(kn, erase * kn);  // %S2 = linac.erase %S1, %kn, %erase
// GDN2-NEXT: state.write(kn, write * arg_v, 1.0f);  // %S3 = linac.write %S2, %kn, %v, %write

!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @names(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : f32, %b : f32) {
  %state = linac.l2norm %k : !key
  %read = linac.sigmoid %b : f32
  %7 = arith.negf %read : f32
  %float = arith.addf %g, %7 : f32
  %arg_q = linac.l2norm %q : !key
  %zero = arith.constant 0.0 : f32
  %my.gate = arith.minimumf %float, %zero : f32
  %S1 = linac.decay %S key(%my.gate : f32) : !state
  %S2 = linac.erase %S1, %state strength(%read : f32) : !state, !key
  %S3 = linac.write %S2, %state, %v : !state, !key, !value
  %o = linac.read %S3, %arg_q : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
