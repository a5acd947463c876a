//===- gates.h - the log-gate floor of the chunkwise kernels ----*- C++ -*-===//
//
// The CPU and CUDA chunkwise kernels sum each token's log-gates over a chunk
// and exponentiate differences of those sums. A decay factor of 0 (log-gate
// -inf: sigmoid or exp under- or overflowing in fp32, or a spec's hard
// reset) would make a sum -inf and a difference of two (-inf) - (-inf) =
// NaN, so each token's log-gate is raised to a finite floor where the
// kernel takes it from the prologue, before it enters a sum. The scan and
// decode need none: there e^-inf = 0 resets the state exactly.
// docs/numerics.md gives the error.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_GATES_H
#define LINAC_GATES_H

#ifdef __CUDACC__
#define LINAC_GATE_FUNCTION __host__ __device__ constexpr
#else
#define LINAC_GATE_FUNCTION constexpr
#endif

namespace linac {

/// A factor spanning a token below the floor is at most e^-60 (8.8e-27)
/// instead of smaller, a change no fp32 output can show, and a chunk's sums
/// stay within 64 * 60 = 3840, where an fp32 addition rounds by at most
/// 1.2e-4.
constexpr float kLogGateFloor = -60.0f;

/// g raised to kLogGateFloor. The comparison is false for NaN, so a NaN gate
/// stays NaN.
LINAC_GATE_FUNCTION float floorLogGate(float g) {
  return g < kLogGateFloor ? kLogGateFloor : g;
}

} // namespace linac

#undef LINAC_GATE_FUNCTION

#endif // LINAC_GATES_H
