//===- products.cpp - a chunk's matrix products on the CPU
//-----------------===//
//
// The part of the CPU's chunkwise forward (chunk.h) that depends on no
// layer: given a chunk's operands and cumulative log-gates, the products P
// and A, the triangular solve for Delta, the reads and the state update,
// on Eigen's fp32 GEMM; and the backward of a chunk without an erase
// (chunkBackward), the first of the backward passes. Every
// gate factor keeps a non-positive exponent or is split through a reference
// log-gate into two factors whose exponents stay within kMaxFactorExponent
// (docs/numerics.md). Exponents are differences of log-gates summed in double,
// rounded to fp32 and exponentiated by Eigen's vectorised exp, a whole array at
// a time.
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
#include <cassert>
#include <cmath>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace linac::cpu {
namespace {

using Matrix =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
/// A chunk's operand: rows Chunk::rowStride floats apart.
using Operand = Eigen::Map<const Matrix, 0, Eigen::OuterStride<>>;
using Factors =
    Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowFactors = Eigen::Array<float, 1, Eigen::Dynamic>;
using ColumnFactors = Eigen::Array<float, Eigen::Dynamic, 1>;
/// Cumulative log-gates, summed in double: a difference of two large fp32
/// sums would cancel under strong gates.
using LogGates =
    Eigen::Array<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstLogGates = Eigen::Map<const LogGates>;
using LogGateRow = Eigen::Array<double, 1, Eigen::Dynamic>;
/// A log-gate's gradient and the sums it is made of, in double: it is a
/// small difference of large sums of pairs under strong gates.
using GateSums = LogGates;
using GateSumRow = LogGateRow;

/// A split factor e^a e^b of e^(a + b) keeps |a| and |b| at most this, so
/// neither factor nor any product of two leaves fp32's range (e^88).
constexpr double kMaxFactorExponent = 40.0;
/// Tokens a block of the intra-chunk products takes when one chunk's gates
/// are too strong to split through a single reference.
constexpr int kProductBlock = 16;

/// e^(sign (rows(t, d) - offset(d))) for every row t: the difference in
/// double, its exponential in fp32 over the whole array.
void expOfDifferences(const ConstLogGates &rows, const LogGateRow &offset,
                      double sign, Factors &out) {
  out.resize(rows.rows(), rows.cols());
  for (int t = 0; t < rows.rows(); ++t)
    for (int d = 0; d < rows.cols(); ++d)
      out(t, d) = float(sign * (rows(t, d) - offset(d)));
  out = out.exp();
}

/// The same for log-gates the same on every channel: one a token.
void expOfDifferences(const double *rows, int count, double offset,
                      double sign, ColumnFactors &out) {
  out.resize(count);
  for (int t = 0; t < count; ++t)
    out(t) = float(sign * (rows[t] - offset));
  out = out.exp();
}

/// The log-gates before row `begin` of `gates` (0 before the chunk).
LogGateRow gatesBefore(const ConstLogGates &gates, int begin) {
  if (begin == 0)
    return LogGateRow::Zero(gates.cols());
  return gates.row(begin - 1);
}

/// The largest fall of any channel's log-gate over rows [begin, end);
/// NaN gates make it NaN.
double largestFall(const ConstLogGates &gates, int begin, int end) {
  return (gatesBefore(gates, begin) - gates.row(end - 1))
      .maxCoeff<Eigen::PropagateNaN>();
}

/// For the blocks of kProductBlock tokens of a chunk's `rows`, in order:
/// pair(tb, te, sb, se) with each earlier block [sb, se), then
/// diagonal(tb, te).
template <typename Pair, typename Diagonal>
void byBlocks(int rows, Pair pair, Diagonal diagonal) {
  for (int tb = 0; tb < rows; tb += kProductBlock) {
    const int te = std::min(rows, tb + kProductBlock);
    for (int sb = 0; sb < tb; sb += kProductBlock)
      pair(tb, te, sb, sb + kProductBlock);
    diagonal(tb, te);
  }
}

/// Zeroes the pairs of `out` above the diagonal (and on it when `strict`).
void mask(Matrix &out, int begin, int end, bool strict) {
  for (int t = begin; t < end; ++t)
    for (int s = strict ? t : t + 1; s < end; ++s)
      out(t, s) = 0.0f;
}

/// out[t][s] = sum_d x[t][d] y[s][d] e^(lx[t][d] - ly[s][d]) for the pairs
/// s <= t (s < t when `strict`), 0 elsewhere, when some channel's
/// log-gates fall by more than 2 kMaxFactorExponent over the chunk: by
/// blocks of kProductBlock tokens, a pair of blocks through the log-gate at
/// the end of the earlier one (both factors at most 1), a diagonal block
/// through its own midpoint, or pair by pair when it alone falls that far.
struct BlockedProducts {
  const Operand &x, &y;
  const ConstLogGates &lx, &ly;
  bool strict;
  Matrix &out;
  Factors &factors;
  Matrix &scaledX, &scaledY;

  /// Rows [tb, te) against rows [sb, se) through the log-gates `reference`:
  /// x e^(lx - reference) times (y e^(reference - ly))^T.
  void throughReference(int tb, int te, int sb, int se,
                        const LogGateRow &reference) {
    const int rows = te - tb, columns = se - sb;
    const ConstLogGates lxBlock(lx.data() + tb * lx.cols(), rows, lx.cols());
    const ConstLogGates lyBlock(ly.data() + sb * ly.cols(), columns, ly.cols());
    expOfDifferences(lxBlock, reference, 1.0, factors);
    scaledX = x.middleRows(tb, rows).array() * factors;
    expOfDifferences(lyBlock, reference, -1.0, factors);
    scaledY = y.middleRows(sb, columns).array() * factors;
    out.block(tb, sb, rows, columns).noalias() =
        scaledX * scaledY.transpose();
  }

  void diagonal(int begin, int end) {
    if (largestFall(ly, begin, end) <= 2 * kMaxFactorExponent) {
      throughReference(begin, end, begin, end,
                       (gatesBefore(ly, begin) + ly.row(end - 1)) * 0.5);
      mask(out, begin, end, strict);
      return;
    }
    for (int t = begin; t < end; ++t)
      for (int s = begin; s < end; ++s)
        out(t, s) = (strict ? s < t : s <= t)
                        ? (x.row(t).array() * y.row(s).array() *
                           (lx.row(t) - ly.row(s)).cast<float>().exp())
                              .sum()
                        : 0.0f;
  }

  void run(int rows) {
    out.setZero();
    byBlocks(
        rows,
        [&](int tb, int te, int sb, int se) {
          throughReference(tb, te, sb, se, ly.row(se - 1));
        },
        [&](int begin, int end) { diagonal(begin, end); });
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

/// Each thread's scratch, kept from chunk to chunk.
struct Scratch {
  Matrix p, a, delta, gatedQ, gatedE, gatedK, scaledX, scaledY;
  Factors factors;
  ColumnFactors query, erase, key;
};

/// A chunk's gated operands: Q (.) Gamma, E (.) Gamma and K (.) Gamma_C /
/// Gamma in gatedQ, gatedE and gatedK, the state's decay over the chunk
/// in `decay`, and P and A. Without `reads` neither Q (.) Gamma nor P,
/// which only the reads take.
struct GatedChunk {
  Matrix &p, &a, &gatedQ, &gatedE, &gatedK;
  bool reads;
  RowFactors decay;
};

/// A gate the same on every channel: one factor a token (and a pair).
void uniformGates(const Chunk &chunk, Scratch &scratch, GatedChunk &out) {
  const int C = chunk.rows, K = chunk.keys;
  const Eigen::OuterStride<> stride(chunk.rowStride);
  const Operand q(chunk.q, C, K, stride), k(chunk.k, C, K, stride),
      e(chunk.e, C, K, stride);
  const double *lam = chunk.lam, *lamQ = chunk.lamQ;
  const double end = lam[C - 1];
  ColumnFactors &fq = scratch.query, &fe = scratch.erase, &fk = scratch.key;
  // NaN gates fail the test and take the pairs' own factors.
  if (-end <= 2 * kMaxFactorExponent) {
    // Through the midpoint of the chunk's fall: every exponent within
    // kMaxFactorExponent, so the factors go into the operands.
    const double mid = end / 2;
    expOfDifferences(lam, C, mid, -1.0, fk);
    out.gatedK = fk.matrix().asDiagonal() * k;
    if (out.reads) {
      expOfDifferences(lamQ, C, mid, 1.0, fq);
      fq *= chunk.scale;
      out.gatedQ = fq.matrix().asDiagonal() * q;
      // The pairs on and below the diagonal alone.
      out.p.triangularView<Eigen::Lower>() =
          out.gatedQ * out.gatedK.transpose();
      mask(out.p, 0, C, chunk.readBefore);
    }
    if (chunk.erase) {
      expOfDifferences(lam, C, mid, 1.0, fe);
      out.gatedE = fe.matrix().asDiagonal() * e;
      out.a.noalias() = out.gatedE * out.gatedK.transpose();
      mask(out.a, 0, C, true);
      if (mid != 0)
        out.gatedE *= float(std::exp(mid));
    }
    // Ungated, the factors are all 1.
    if (mid != 0) {
      if (out.reads)
        out.gatedQ *= float(std::exp(mid));
      out.gatedK *= float(std::exp(end - mid));
    }
  } else {
    // e^(lambda_t - lambda_s) for each kept pair, after the product.
    Factors &pairs = scratch.factors;
    pairs.resize(C, C);
    auto gatedPairs = [&](const Operand &x, const double *lx, bool strict,
                          float factor, Matrix &product) {
      product.noalias() = x * k.transpose();
      for (int t = 0; t < C; ++t)
        for (int s = 0; s < C; ++s)
          pairs(t, s) = (strict ? s < t : s <= t) ? float(lx[t] - lam[s])
                                                  : -INFINITY;
      product.array() *= pairs.exp() * factor;
    };
    if (out.reads)
      gatedPairs(q, lamQ, chunk.readBefore, chunk.scale, out.p);
    if (chunk.erase)
      gatedPairs(e, lam, true, 1.0f, out.a);
    if (out.reads) {
      expOfDifferences(lamQ, C, 0.0, 1.0, fq);
      fq *= chunk.scale;
      out.gatedQ = fq.matrix().asDiagonal() * q;
    }
    expOfDifferences(lam, C, end, -1.0, fk);
    out.gatedK = fk.matrix().asDiagonal() * k;
    if (chunk.erase) {
      expOfDifferences(lam, C, 0.0, 1.0, fe);
      out.gatedE = fe.matrix().asDiagonal() * e;
    }
  }
  out.decay = RowFactors::Constant(K, float(std::exp(end)));
}

/// A gate of its own on every key channel.
void keyGates(const Chunk &chunk, Scratch &scratch, GatedChunk &out) {
  const int C = chunk.rows, K = chunk.keys;
  const Eigen::OuterStride<> stride(chunk.rowStride);
  const Operand q(chunk.q, C, K, stride), k(chunk.k, C, K, stride),
      e(chunk.e, C, K, stride);
  ConstLogGates lam(chunk.lam, C, K), lamQ(chunk.lamQ, C, K);
  const LogGateRow end = lam.row(C - 1);
  Factors &factors = scratch.factors;
  // NaN gates make the fall NaN and take the blocked products.
  if ((-end).maxCoeff<Eigen::PropagateNaN>() <= 2 * kMaxFactorExponent) {
    // Through the midpoint of each channel's fall, as uniformGates.
    // One array of exponentials e^(lambda - m) serves the erase, the key
    // (its reciprocal, within e^+-40) and, reading after the write, the
    // query.
    const LogGateRow mid = end * 0.5;
    expOfDifferences(lam, mid, 1.0, factors);
    out.gatedK = k.array() / factors;
    if (chunk.erase)
      out.gatedE = e.array() * factors;
    if (out.reads) {
      if (chunk.readBefore)
        expOfDifferences(lamQ, mid, 1.0, factors);
      out.gatedQ = q.array() * factors * chunk.scale;
      out.p.triangularView<Eigen::Lower>() =
          out.gatedQ * out.gatedK.transpose();
      mask(out.p, 0, C, chunk.readBefore);
    }
    const RowFactors toMid = mid.cast<float>().exp();
    if (chunk.erase) {
      out.a.noalias() = out.gatedE * out.gatedK.transpose();
      mask(out.a, 0, C, true);
      out.gatedE.array().rowwise() *= toMid;
    }
    if (out.reads)
      out.gatedQ.array().rowwise() *= toMid;
    out.gatedK.array().rowwise() *= (end - mid).cast<float>().exp();
  } else {
    if (out.reads) {
      BlockedProducts{q,
                      k,
                      lamQ,
                      lam,
                      chunk.readBefore,
                      out.p,
                      factors,
                      scratch.scaledX,
                      scratch.scaledY}
          .run(C);
      out.p *= chunk.scale;
    }
    if (chunk.erase) {
      BlockedProducts{e,     k,       lam,             lam, true,
                      out.a, factors, scratch.scaledX, scratch.scaledY}
          .run(C);
      expOfDifferences(lam, LogGateRow::Zero(K), 1.0, factors);
      out.gatedE = e.array() * factors;
    }
    if (out.reads) {
      expOfDifferences(lamQ, LogGateRow::Zero(K), 1.0, factors);
      out.gatedQ = q.array() * factors * chunk.scale;
    }
    expOfDifferences(lam, end, -1.0, factors);
    out.gatedK = k.array() * factors;
  }
  out.decay = end.cast<float>().exp();
}

/// The reads' intra-chunk term under a value-side decay that falls by more
/// than 2 kMaxFactorExponent over the chunk, added to `reads`: sum_{s <= t}
/// P_ts u_s (.) e^(psiQ_t - psi_s), by blocks of kProductBlock tokens as
/// BlockedProducts takes the key side.
struct ValueDecayedReads {
  const Matrix &p;
  const Operand &u;
  const ConstLogGates &psi, &psiQ;
  Eigen::Map<Matrix> &reads;
  Factors &factors;
  Matrix &weighted, &partial;

  /// Rows [tb, te) from the tokens [sb, se) through the log-gates
  /// `reference`: (P u (.) e^(reference - psi)) (.) e^(psiQ - reference).
  void throughReference(int tb, int te, int sb, int se,
                        const LogGateRow &reference) {
    const int rows = te - tb, tokens = se - sb;
    expOfDifferences(ConstLogGates(psi.data() + sb * psi.cols(), tokens,
                                   psi.cols()),
                     reference, -1.0, factors);
    weighted = u.middleRows(sb, tokens).array() * factors;
    partial.noalias() = p.block(tb, sb, rows, tokens) * weighted;
    expOfDifferences(ConstLogGates(psiQ.data() + tb * psiQ.cols(), rows,
                                   psiQ.cols()),
                     reference, 1.0, factors);
    reads.middleRows(tb, rows).array() += partial.array() * factors;
  }

  void diagonal(int begin, int end) {
    if (largestFall(psi, begin, end) <= 2 * kMaxFactorExponent)
      return throughReference(begin, end, begin, end,
                              (gatesBefore(psi, begin) + psi.row(end - 1)) *
                                  0.5);
    for (int t = begin; t < end; ++t)
      for (int s = begin; s <= t; ++s)
        reads.row(t).array() +=
            p(t, s) * u.row(s).array() *
            (psiQ.row(t) - psi.row(s)).cast<float>().exp();
  }

  void run(int rows) {
    byBlocks(
        rows,
        [&](int tb, int te, int sb, int se) {
          throughReference(tb, te, sb, se, psi.row(se - 1));
        },
        [&](int begin, int end) { diagonal(begin, end); });
  }
};

} // namespace

void chunkForward(const Chunk &chunk, float *state, float *out) {
  FlushSubnormals flush;
  const int C = chunk.rows, K = chunk.keys, U = chunk.columns;
  thread_local Scratch scratch;
  scratch.p.resize(C, C);
  scratch.a.resize(C, C);
  GatedChunk gated{
      scratch.p,      scratch.a, scratch.gatedQ, scratch.gatedE, scratch.gatedK,
      out != nullptr, {}};
  if (chunk.uniformGate)
    uniformGates(chunk, scratch, gated);
  else
    keyGates(chunk, scratch, gated);

  const Operand u(chunk.u, C, U, Eigen::OuterStride<>(chunk.rowStride));
  Eigen::Map<Matrix> S(state, K, U), reads(out, out ? C : 0, U);
  if (out)
    reads.noalias() = gated.gatedQ * S;
  // The writes, Delta (U itself without an erase, read in place).
  auto advance = [&](const auto &delta) {
    if (out)
      reads.noalias() += gated.p.triangularView<Eigen::Lower>() * delta;
    // S <- Gamma_C (.) S + (K (.) Gamma_C / Gamma)^T Delta.
    S.array().colwise() *= gated.decay.transpose();
    S.noalias() += gated.gatedK.transpose() * delta;
  };
  if (chunk.erase) {
    // delta_t + sum_{s<t} A_ts delta_s = u_t - S^T (Gamma_t (.) e_t).
    Matrix &delta = scratch.delta;
    delta = u;
    delta.noalias() -= gated.gatedE * S;
    gated.a.triangularView<Eigen::UnitLower>().solveInPlace(delta);
    return advance(delta);
  }
  if (!chunk.psi)
    return advance(u);
  // A value-side decay Psi (no erase, so Delta = U): O = ((Q (.) Gamma)
  // S) (.) Psi + the intra-chunk term, and S <- Gamma_C (.) S (.) Psi_C +
  // (K (.) Gamma_C / Gamma)^T (U (.) Psi_C / Psi).
  ConstLogGates psi(chunk.psi, C, U), psiQ(chunk.psiQ, C, U);
  Factors &factors = scratch.factors;
  const LogGateRow end = psi.row(C - 1);
  if ((-end).maxCoeff<Eigen::PropagateNaN>() <= 2 * kMaxFactorExponent) {
    // Through the midpoint of each column's fall, one array of
    // exponentials F = e^(psi - m) for the writes (U / F), the reads (F,
    // and e^m for the state's part) and the update (e^(psi_C - m) / F).
    const LogGateRow mid = end * 0.5;
    expOfDifferences(psi, mid, 1.0, factors);
    Matrix &weighted = scratch.scaledX, &partial = scratch.scaledY;
    weighted = u.array() / factors;
    if (out) {
      partial.noalias() = gated.p * weighted;
      if (chunk.readBefore)
        expOfDifferences(psiQ, mid, 1.0, factors);
      reads.array().rowwise() *= mid.cast<float>().exp();
      reads.array() = (reads.array() + partial.array()) * factors;
    }
    weighted.array().rowwise() *= (end - mid).cast<float>().exp();
    S.array().colwise() *= gated.decay.transpose();
    S.array().rowwise() *= end.cast<float>().exp();
    S.noalias() += gated.gatedK.transpose() * weighted;
    return;
  }
  if (out) {
    expOfDifferences(psiQ, LogGateRow::Zero(U), 1.0, factors);
    reads.array() *= factors;
    ValueDecayedReads{
        gated.p, u, psi, psiQ, reads, factors, scratch.scaledX, scratch.scaledY}
        .run(C);
  }
  expOfDifferences(psi, end, -1.0, factors);
  scratch.scaledX = u.array() * factors;
  S.array().colwise() *= gated.decay.transpose();
  S.array().rowwise() *= end.cast<float>().exp();
  S.noalias() += gated.gatedK.transpose() * scratch.scaledX;
}

void composePiece(int keys, int columns, const float *transition,
                  const double *keyLogs, bool uniformGate,
                  const double *valueLogs, const float *entering,
                  float *state) {
  Eigen::Map<Matrix> S(state, keys, columns);
  const Eigen::Map<const Matrix> S0(entering, keys, columns);
  if (transition) {
    S.noalias() += Eigen::Map<const Matrix>(transition, keys, keys) * S0;
    return;
  }
  for (int d = 0; d < keys; ++d) {
    const double key = std::exp(keyLogs[uniformGate ? 0 : d]);
    for (int j = 0; j < columns; ++j)
      S(d, j) +=
          float(key * (valueLogs ? std::exp(valueLogs[j]) : 1.0)) * S0(d, j);
  }
}

} // namespace linac::cpu

namespace linac::cpu {

namespace {

/// Each token's gradient with respect to its own log-gates on one side of
/// the state (a column a channel), from what each gate scales: every pair
/// s < t its gate lies between (`leaving`, a row's sum before the
/// diagonal; `joining`, a column's after it; `queryLeaving`, the query
/// pairs among `leaving`), the reads of S0 from its token on (`queryReads`;
/// reading before the write, from the next token on), the erase's reads
/// of S0 from its token on (`eraseReads`), the writes before its token
/// (`writes`) and S0 carried into the leaving state (`kept`). Summed so,
/// no term enters twice with opposite signs (as q (.) dq - k (.) dk would
/// add and take away each diagonal pair).
void gateGradients(const GateSums &leaving, const GateSums &joining,
                   const GateSums &queryLeaving, const GateSums &queryReads,
                   const GateSums &eraseReads, const GateSums &writes,
                   const GateSumRow &kept, bool readBefore, double *out) {
  const Eigen::Index C = leaving.rows(), W = leaving.cols();
  GateSums readsFrom(C, W);
  GateSumRow later = GateSumRow::Zero(W);
  for (Eigen::Index t = C - 1; t >= 0; --t) {
    later += eraseReads.row(t);
    if (!readBefore)
      later += queryReads.row(t);
    readsFrom.row(t) = later;
    if (readBefore)
      later += queryReads.row(t);
  }
  GateSumRow earlier = GateSumRow::Zero(W), straddling = GateSumRow::Zero(W);
  for (Eigen::Index t = 0; t < C; ++t) {
    GateSumRow total = straddling + readsFrom.row(t) + earlier + kept;
    if (readBefore)
      total -= queryLeaving.row(t);
    for (Eigen::Index d = 0; d < W; ++d)
      out[t * W + d] = total(d);
    straddling += joining.row(t) - leaving.row(t);
    earlier += writes.row(t);
  }
}

/// x's rows as gate sums of G channels: each row's sum under a uniform
/// gate (G = 1), else each element.
GateSums gateSumsOf(const Factors &x, int G) {
  if (G == 1)
    return x.cast<double>().rowwise().sum();
  return x.cast<double>();
}

} // namespace

void chunkBackward(const Chunk &chunk, const float *state, const float *dOut,
                   float *dState, const ChunkGradients &out) {
  assert(!(chunk.psi && chunk.erase) && "a value-side decay has no erase");
  FlushSubnormals flush;
  const int C = chunk.rows, K = chunk.keys, U = chunk.columns;
  const int G = chunk.uniformGate ? 1 : K;
  const Eigen::OuterStride<> stride(chunk.rowStride);
  const Operand q(chunk.q, C, K, stride), k(chunk.k, C, K, stride),
      e(chunk.e, C, K, stride), u(chunk.u, C, U, stride);
  const Eigen::Map<const Matrix> S0(state, K, U), dO(dOut, C, U);
  Eigen::Map<Matrix> dS(dState, K, U);
  using Gradient = Eigen::Map<Matrix, 0, Eigen::OuterStride<>>;
  const Eigen::OuterStride<> gradientStride(out.rowStride);
  Gradient dq(out.dq, C, K, gradientStride), dk(out.dk, C, K, gradientStride),
      du(out.du, C, U, gradientStride);

  // With Gamma_t = e^lambda_t (a channel's, or every channel's under a
  // uniform gate): the query's factor Gamma_t, the key's Gamma_C / Gamma_s
  // and the decay Gamma_C, each channel's. Every exponent is a fall, at
  // most 0.
  // Reading before the write, token t's query sees lamQ_t = lambda_(t-1).
  const ConstLogGates lam(chunk.lam, C, G), lamQ(chunk.lamQ, C, G);
  const LogGateRow end = lam.row(C - 1);
  Factors gamma(C, K), query(C, K), key(C, K);
  RowFactors decay(K);
  for (int d = 0; d < K; ++d) {
    const int g = G == 1 ? 0 : d;
    decay(d) = std::exp(float(end(g)));
    for (int t = 0; t < C; ++t) {
      gamma(t, d) = float(lam(t, g));
      query(t, d) = float(lamQ(t, g));
      key(t, d) = float(end(g) - lam(t, g));
    }
  }
  gamma = gamma.exp();
  query = query.exp() * chunk.scale;
  key = key.exp();
  const Matrix keyRows = key * k.array();
  // A value-side decay Psi_t = e^psi_t, a column's: the reads' factor
  // Psi_t (psiQ), the writes' Psi_C / Psi_s and the decay Psi_C; all ones
  // without one.
  const bool valueDecay = chunk.psi != nullptr;
  Factors valueQuery = Factors::Ones(C, U), valueKey = Factors::Ones(C, U);
  RowFactors valueEnd = RowFactors::Ones(U);
  if (valueDecay) {
    const ConstLogGates psi(chunk.psi, C, U), psiQ(chunk.psiQ, C, U);
    for (int j = 0; j < U; ++j) {
      valueEnd(j) = std::exp(float(psi(C - 1, j)));
      for (int t = 0; t < C; ++t) {
        valueQuery(t, j) = std::exp(float(psiQ(t, j)));
        valueKey(t, j) = std::exp(float(psi(C - 1, j) - psi(t, j)));
      }
    }
  }

  // With an erase the writes are the residuals Delta of the forward's
  // solve, (I + A) Delta = U - (Gamma (.) E) S0, A_ts = e_t . k_s F_ts for
  // s < t: recomputed here, as is A.
  // A pair's factors under a key-vector gate, one a channel; under a
  // uniform gate the erase's pairs' factors F_ts on s < t as one array.
  auto pairFactors = [&](int t, int s) -> RowFactors {
    RowFactors pair(K);
    for (int d = 0; d < K; ++d)
      pair(d) = float(lam(t, d) - lam(s, d));
    return pair.exp();
  };
  // A key-vector gate whose channels fall by at most 2 kMaxFactorExponent
  // splits every pair's factors through the midpoint m of each channel's
  // fall, as keyGates does: e^(lambda_t - lambda_s) = e^(lambda_t - m)
  // e^(m - lambda_s), every exponent within kMaxFactorExponent, so the
  // pairs' sums are whole products of K~ = K (.) e^(m - lambda) and the
  // query's or the erase's rows through e^(x - m). NaN gates fail the test.
  const bool keyMidpoint =
      G != 1 && !valueDecay &&
      (-end).maxCoeff<Eigen::PropagateNaN>() <= 2 * kMaxFactorExponent;
  const LogGateRow mid = end * 0.5;
  Factors keyFactors;
  Matrix scaledK;
  if (keyMidpoint) {
    expOfDifferences(lam, mid, -1.0, keyFactors);
    scaledK = k.array() * keyFactors;
  }
  Factors uniformPairs;
  Matrix delta = u, erasePairs, scaledE;
  if (chunk.erase) {
    if (G == 1) {
      uniformPairs.resize(C, C);
      for (int t = 0; t < C; ++t)
        for (int s = 0; s < C; ++s)
          uniformPairs(t, s) = s < t ? float(lam(t, 0) - lam(s, 0)) : -INFINITY;
      uniformPairs = uniformPairs.exp();
      erasePairs = e * k.transpose();
      erasePairs.array() *= uniformPairs;
    } else if (keyMidpoint) {
      scaledE = e.array() / keyFactors;
      erasePairs = scaledE * scaledK.transpose();
      mask(erasePairs, 0, C, true);
    } else {
      erasePairs = Matrix::Zero(C, C);
      for (int t = 0; t < C; ++t)
        for (int s = 0; s < t; ++s)
          erasePairs(t, s) =
              (e.row(t).array() * k.row(s).array() * pairFactors(t, s)).sum();
    }
    delta.noalias() -= (gamma * e.array()).matrix() * S0;
    erasePairs.triangularView<Eigen::UnitLower>().solveInPlace(delta);
  }

  // The pairs s <= t (s < t reading before the write): with A = Q K^T,
  // each pair's factor F_ts = e^(lamQ_t - lambda_s) and the read's scale,
  // and the reads' gradient through the pair G_ts = dO_t . Delta_s (with a
  // value-side decay, each column by e^(psiQ_t - psi_s)). Under a uniform
  // gate and no value-side decay, F is one C x C array on products; under
  // a key-vector gate, through the midpoint when keyMidpoint; otherwise each
  // pair's factors are taken pair by pair. A pair's term of a gate's gradient
  // (below) counts for the tokens between s and t: `leaving` sums a row's
  // before the diagonal, `joining` a column's after it.
  GateSums leavingPairs = GateSums::Zero(C, G),
           joiningPairs = GateSums::Zero(C, G);
  GateSums leavingValues = GateSums::Zero(C, valueDecay ? U : 0),
           joiningValues = GateSums::Zero(C, valueDecay ? U : 0);
  if (G == 1 && !valueDecay) {
    const Matrix reads = dO * delta.transpose();
    Factors pairs(C, C);
    for (int t = 0; t < C; ++t)
      for (int s = 0; s < C; ++s)
        pairs(t, s) = s < t || (s == t && !chunk.readBefore)
                          ? float(lamQ(t, 0) - lam(s, 0))
                          : -INFINITY;
    pairs = pairs.exp() * chunk.scale;
    Matrix a = q * k.transpose();
    a.array() *= pairs;
    Matrix g = reads;
    g.array() *= pairs;
    dq.noalias() = g * k;
    dk.noalias() = g.transpose() * q;
    du.noalias() = a.transpose() * dO;
    GateSums terms = (a.array() * reads.array()).cast<double>();
    terms.matrix().diagonal().setZero();
    leavingPairs.col(0) = terms.rowwise().sum();
    joiningPairs.col(0) = terms.colwise().sum().transpose();
  } else if (keyMidpoint) {
    Factors queryFactors;
    expOfDifferences(lamQ, mid, 1.0, queryFactors);
    queryFactors *= chunk.scale;
    const Matrix scaledQ = q.array() * queryFactors;
    Matrix a = scaledQ * scaledK.transpose();
    mask(a, 0, C, chunk.readBefore);
    Matrix g = dO * delta.transpose();
    mask(g, 0, C, chunk.readBefore);
    Matrix throughK = g * scaledK, throughQ = g.transpose() * scaledQ;
    dq = throughK.array() * queryFactors;
    dk = throughQ.array() * keyFactors;
    du.noalias() = a.transpose() * dO;
    // The gates' sums take the pairs s < t alone.
    if (!chunk.readBefore) {
      const ColumnFactors diagonal = g.diagonal().array();
      throughK.array() -= scaledK.array().colwise() * diagonal;
      throughQ.array() -= scaledQ.array().colwise() * diagonal;
    }
    leavingPairs = (scaledQ.array() * throughK.array()).cast<double>();
    joiningPairs = (scaledK.array() * throughQ.array()).cast<double>();
  } else {
    dq.setZero();
    dk.setZero();
    du.setZero();
    RowFactors pair(K);
    const ConstLogGates psi(chunk.psi, C, valueDecay ? U : 0),
        psiQ(chunk.psiQ, C, valueDecay ? U : 0);
    for (int t = 0; t < C; ++t)
      for (int s = 0; s < t || (s == t && !chunk.readBefore); ++s) {
        if (G == 1) {
          pair.setConstant(std::exp(float(lamQ(t, 0) - lam(s, 0))) *
                           chunk.scale);
        } else {
          for (int d = 0; d < K; ++d)
            pair(d) = float(lamQ(t, d) - lam(s, d));
          pair = pair.exp() * chunk.scale;
        }
        const RowFactors term = q.row(t).array() * k.row(s).array() * pair;
        // dO_t with each column's factor of the pair.
        RowFactors reads = dO.row(t).array();
        if (valueDecay)
          reads *= (psiQ.row(t) - psi.row(s)).cast<float>().exp();
        const float g = (reads * delta.row(s).array()).sum();
        const float a = term.sum();
        dq.row(t).array() += g * pair * k.row(s).array();
        dk.row(s).array() += g * pair * q.row(t).array();
        du.row(s).array() += a * reads;
        if (s < t) {
          const GateSumRow sum = G == 1 ? GateSumRow::Constant(1, double(a) * g)
                                        : GateSumRow((term * g).cast<double>());
          leavingPairs.row(t) += sum;
          joiningPairs.row(s) += sum;
          if (valueDecay) {
            const GateSumRow values =
                (a * reads * delta.row(s).array()).cast<double>();
            leavingValues.row(t) += values;
            joiningValues.row(s) += values;
          }
        }
      }
  }
  // Reading before the write, a query's pairs stop short of its own gate.
  const GateSums queryPairsLeaving = leavingPairs;
  // The state's terms: the reads of S0, the update's keys.
  const Matrix gatedQ = query * q.array();
  const Matrix readsScaled = dO.array() * valueQuery;
  Matrix readsOfState = readsScaled * S0.transpose();
  Factors stateReads = query * readsOfState.array();
  dq.array() += stateReads;
  const Matrix writes = delta.array() * valueKey;
  Matrix update = writes * dS.transpose();
  Factors updates = key * update.array();
  dk.array() += updates;
  const Matrix keyWrites = keyRows * dS;
  du.array() += valueKey * keyWrites.array();

  const Factors queryReads = q.array() * stateReads,
                writeTerms = k.array() * updates;
  Factors eraseReadTerms = Factors::Zero(C, K);
  // Through the solve: du holds dDelta; dR = (I + A)^-T dDelta is du, A's
  // gradient -dR Delta^T on s < t, and the erase's read of S0,
  // R = U - (Gamma (.) E) S0, gives E its gradient and S0 its term.
  Matrix dR;
  if (chunk.erase) {
    Gradient de(out.de, C, K, gradientStride);
    dR = du;
    erasePairs.triangularView<Eigen::UnitLower>().transpose().solveInPlace(dR);
    du = dR;
    Matrix dPairs = -(dR * delta.transpose());
    if (G == 1) {
      const GateSums terms =
          (erasePairs.array() * dPairs.array()).cast<double>();
      leavingPairs.col(0) += terms.rowwise().sum();
      joiningPairs.col(0) += terms.colwise().sum().transpose();
      dPairs.array() *= uniformPairs;
      de.noalias() = dPairs * k;
      dk.noalias() += dPairs.transpose() * e;
    } else if (keyMidpoint) {
      mask(dPairs, 0, C, true);
      const Matrix throughK = dPairs * scaledK,
                   throughE = dPairs.transpose() * scaledE;
      de = throughK.array() / keyFactors;
      dk.array() += throughE.array() * keyFactors;
      leavingPairs += (scaledE.array() * throughK.array()).cast<double>();
      joiningPairs += (scaledK.array() * throughE.array()).cast<double>();
    } else {
      de.setZero();
      for (int t = 0; t < C; ++t)
        for (int s = 0; s < t; ++s) {
          const RowFactors pair = pairFactors(t, s);
          const float g = dPairs(t, s);
          const RowFactors term = e.row(t).array() * k.row(s).array() * pair;
          de.row(t).array() += g * pair * k.row(s).array();
          dk.row(s).array() += g * pair * e.row(t).array();
          const GateSumRow sum = (term * g).cast<double>();
          leavingPairs.row(t) += sum;
          joiningPairs.row(s) += sum;
        }
    }
    const Factors eraseReads = gamma * (-(dR * S0.transpose())).array();
    de.array() += eraseReads;
    eraseReadTerms = e.array() * eraseReads;
  }

  // S0 into the leaving state, each element's term.
  const Factors carried = (decay.matrix().asDiagonal() * S0).array().rowwise() *
                          valueEnd * dS.array();
  const GateSums keyCarried = carried.cast<double>().rowwise().sum();
  gateGradients(leavingPairs, joiningPairs, queryPairsLeaving,
                gateSumsOf(queryReads, G), gateSumsOf(eraseReadTerms, G),
                gateSumsOf(writeTerms, G),
                G == 1 ? GateSumRow::Constant(1, keyCarried.sum())
                       : GateSumRow(keyCarried.transpose()),
                chunk.readBefore, out.dGate);
  if (valueDecay)
    gateGradients(leavingValues, joiningValues, leavingValues,
                  (readsScaled.array() * (gatedQ * S0).array()).cast<double>(),
                  GateSums::Zero(C, U),
                  (writes.array() * keyWrites.array()).cast<double>(),
                  carried.cast<double>().colwise().sum(), chunk.readBefore,
                  out.dValueGate);

  // dS0 = Gamma_C (.) dS (.) Psi_C + (scale Gamma (.) Q)^T (dO (.) Psi) -
  // (Gamma (.) E)^T dR.
  dS = decay.matrix().asDiagonal() * dS;
  dS.array().rowwise() *= valueEnd;
  dS.noalias() += gatedQ.transpose() * readsScaled;
  if (chunk.erase)
    dS.noalias() -= (gamma * e.array()).matrix().transpose() * dR;
}

} // namespace linac::cpu
