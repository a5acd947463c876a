//===- products.cpp - a chunk's matrix products on the CPU -----------------===//
//
// The part of the CPU's chunkwise forward (chunk.h) that depends on no
// layer: given a chunk's operands and cumulative log-gates, the products P
// and A, the triangular solve for Delta, the reads and the state update,
// on Eigen's fp32 GEMM. Every gate factor keeps a non-positive exponent or
// is split through a reference log-gate into two factors whose exponents
// stay within kMaxFactorExponent (docs/numerics.md).
//
// Compiled once per instruction set when linac is built (the archives
// liblinac_cpu_products_<isa>.a), and linked into each package's kernel
// file of that instruction set, so that a package's compilation does not
// parse Eigen.
//
//===----------------------------------------------------------------------===//

#include "linac/cpu/products.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace linac::cpu {
namespace {

using Matrix =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrix = Eigen::Map<const Matrix>;
/// Cumulative log-gates, summed in double: a difference of two large fp32
/// sums would cancel under strong gates.
using LogGates =
    Eigen::Array<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstLogGates = Eigen::Map<const LogGates>;
using LogGateRow = Eigen::Array<double, 1, Eigen::Dynamic>;

/// A split factor e^a e^b of e^(a + b) keeps |a| and |b| at most this, so
/// neither factor nor any product of two leaves fp32's range (e^88).
constexpr double kMaxFactorExponent = 40.0;
/// Tokens a block of the intra-chunk products takes when one chunk's gates
/// are too strong to split through a single reference.
constexpr int kProductBlock = 16;

/// out[t][s] = sum_d x[t][d] y[s][d] e^(lx[t][d] - ly[s][d]) for the pairs
/// s <= t (s < t when `strict`), 0 elsewhere: the intra-chunk products of a
/// chunk whose cumulative log-gates ly fall from 0 (lx, the query's, lie
/// between ly's row before and its own). Uniform: every channel's log-gates
/// are the same, so one factor a pair serves.
struct GatedProducts {
  const ConstMatrix &x, &y;
  const ConstLogGates &lx, &ly;
  bool uniform, strict;
  Matrix &out;
  Matrix &scaledX, &scaledY;

  bool keeps(int t, int s) const { return strict ? s < t : s <= t; }

  void maskBlock(int begin, int end) {
    for (int t = begin; t < end; ++t)
      for (int s = begin; s < end; ++s)
        if (!keeps(t, s))
          out(t, s) = 0.0f;
  }

  /// Rows [tb, te) against rows [sb, se) through the log-gates `reference`
  /// (a row vector): x e^(lx - reference) times (y e^(reference - ly))^T.
  void throughReference(int tb, int te, int sb, int se,
                        const LogGateRow &reference) {
    const int rows = te - tb, columns = se - sb;
    scaledX.resize(rows, x.cols());
    scaledY.resize(columns, y.cols());
    for (int t = 0; t < rows; ++t)
      scaledX.row(t) = (x.row(tb + t).array() *
                        (lx.row(tb + t) - reference).cast<float>().exp())
                           .matrix();
    for (int s = 0; s < columns; ++s)
      scaledY.row(s) = (y.row(sb + s).array() *
                        (reference - ly.row(sb + s)).cast<float>().exp())
                           .matrix();
    out.block(tb, sb, rows, columns).noalias() =
        scaledX * scaledY.transpose();
  }

  /// The log-gates before row `begin` (0 before the chunk).
  LogGateRow before(int begin) const {
    if (begin == 0)
      return LogGateRow::Zero(ly.cols());
    return ly.row(begin - 1);
  }

  /// The largest fall of any channel's log-gate over rows [begin, end);
  /// NaN gates make it NaN.
  double fall(int begin, int end) const {
    return (before(begin) - ly.row(end - 1)).maxCoeff();
  }

  void block(int begin, int end) {
    if (fall(begin, end) <= 2 * kMaxFactorExponent) {
      // Through the mid-point of the fall: every exponent within half of it.
      throughReference(begin, end, begin, end,
                       (before(begin) + ly.row(end - 1)) * 0.5);
      maskBlock(begin, end);
      return;
    }
    // Too strong a fall for one reference: pair by pair.
    for (int t = begin; t < end; ++t)
      for (int s = begin; s < end; ++s)
        out(t, s) = keeps(t, s)
                        ? (x.row(t).array() * y.row(s).array() *
                           (lx.row(t) - ly.row(s)).cast<float>().exp())
                              .sum()
                        : 0.0f;
  }

  /// Every pair of the chunk's `rows` (a short chunk's rows past its end
  /// are zeros, and so are their products).
  void run(int rows) {
    if (uniform) {
      // One factor a pair, applied to the product.
      out.noalias() = x * y.transpose();
      for (int t = 0; t < rows; ++t)
        for (int s = 0; s < rows; ++s)
          out(t, s) = keeps(t, s)
                          ? out(t, s) * float(std::exp(lx(t, 0) - ly(s, 0)))
                          : 0.0f;
      return;
    }
    if (fall(0, rows) <= 2 * kMaxFactorExponent)
      return block(0, rows);
    // Blocks: a pair of blocks through the log-gate at the end of the
    // earlier one (both factors at most 1), each diagonal block by itself.
    out.setZero();
    for (int tb = 0; tb < rows; tb += kProductBlock) {
      const int te = std::min(rows, tb + kProductBlock);
      for (int sb = 0; sb < tb; sb += kProductBlock)
        throughReference(tb, te, sb, sb + kProductBlock,
                         ly.row(sb + kProductBlock - 1));
      block(tb, te);
    }
  }
};

/// Flushes subnormal results and operands to zero while it lives. Strong
/// gates make factors near fp32's least normal number (e^-87), and x86
/// takes a microcode assist, some hundred cycles, for every subnormal a
/// product meets; values below 1.2e-38 change no fp32 output.
class FlushSubnormals {
public:
#if defined(__SSE__)
  FlushSubnormals() : saved_(_mm_getcsr()) {
    _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero);
  }
  ~FlushSubnormals() { _mm_setcsr(saved_); }

private:
  static constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;
  unsigned saved_;
#endif
};

/// Each thread's scratch matrices, kept from chunk to chunk.
struct Scratch {
  Matrix p, a, gated, delta, scaledX, scaledY;
};

} // namespace

void chunkForward(const Chunk &chunk, float *state, float *out) {
  FlushSubnormals flush;
  const int C = chunk.rows, K = chunk.keys, U = chunk.columns;
  thread_local Scratch scratch;
  Matrix &p = scratch.p, &a = scratch.a, &gated = scratch.gated,
         &delta = scratch.delta;
  p.resize(C, C);
  a.resize(C, C);
  gated.resize(C, K);
  ConstMatrix q(chunk.q, C, K), k(chunk.k, C, K), e(chunk.e, C, K),
      u(chunk.u, C, U);
  ConstLogGates lam(chunk.lam, C, K), lamQ(chunk.lamQ, C, K);
  Eigen::Map<Matrix> S(state, K, U), reads(out, C, U);

  GatedProducts{q,  k, lamQ, lam, chunk.uniformGate, chunk.readBefore,
                p, scratch.scaledX, scratch.scaledY}
      .run(C);
  delta = u;
  if (chunk.erase) {
    GatedProducts{e, k, lam, lam, chunk.uniformGate, true,
                  a, scratch.scaledX, scratch.scaledY}
        .run(C);
    // delta_t + sum_{s<t} A_ts delta_s = u_t - S^T (Gamma_t (.) e_t).
    gated = (e.array() * lam.cast<float>().exp()).matrix();
    delta.noalias() -= gated * S;
    a.triangularView<Eigen::UnitLower>().solveInPlace(delta);
  }

  gated = (q.array() * lamQ.cast<float>().exp()).matrix();
  reads.noalias() = gated * S;
  reads.noalias() += p * delta;

  // S <- Gamma_C (.) S + (K (.) Gamma_C / Gamma)^T Delta.
  const auto lamEnd = lam.row(C - 1);
  for (int t = 0; t < C; ++t)
    gated.row(t) =
        (k.row(t).array() * (lamEnd - lam.row(t)).cast<float>().exp()).matrix();
  S.array().colwise() *= lamEnd.cast<float>().exp().transpose();
  S.noalias() += gated.transpose() * delta;
}

} // namespace linac::cpu
