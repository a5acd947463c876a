//===- cpu_gemm.cpp - the CPU bench's reference GEMM, one instruction set --===//
//
// Compiled once for each instruction set of LINAC_CPU_ISAS with its flags,
// LINAC_GEMM_ISA naming the function: the fp32 product the CPU bench
// measures the host's rate with, by the same library (Eigen) and at the
// same width as the packages' products.
//
//===----------------------------------------------------------------------===//

#include <Eigen/Core>

#define LINAC_GEMM_NAME2(isa) linac_cpu_gemm_##isa
#define LINAC_GEMM_NAME(isa) LINAC_GEMM_NAME2(isa)

/// c = a b for n x n row-major matrices, on the calling thread.
extern "C" void LINAC_GEMM_NAME(LINAC_GEMM_ISA)(int n, const float *a,
                                                const float *b, float *c) {
  using Matrix =
      Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const Matrix> x(a, n, n), y(b, n, n);
  Eigen::Map<Matrix> out(c, n, n);
  out.noalias() = x * y;
}
