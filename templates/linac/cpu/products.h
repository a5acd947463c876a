//===- products.h - a chunk's matrix products on the CPU --------*- C++ -*-===//
//
// The layer-independent half of the CPU's chunkwise forward: chunk.h
// gathers a chunk's operands from the generated prologue, chunkForward
// (products.cpp, compiled when linac is built) does the products.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CPU_PRODUCTS_H
#define LINAC_CPU_PRODUCTS_H

namespace linac::cpu {

/// One chunk of `rows` tokens (a short chunk padded with zero rows whose
/// log-gates repeat its last), every matrix row-major.
struct Chunk {
  int rows, keys, columns; ///< C, K and the state's columns U
  bool erase, readBefore;
  /// Every key channel's log-gates are the same (no gate, fixed or scalar).
  bool uniformGate;
  float scale; ///< the read's
  /// Floats from a token's row of q, k, e or u to the next token's: the
  /// four are rows of one record a token, as the prologue writes them.
  int rowStride;
  const float *q, *k, *e; ///< [C, K]
  const float *u;         ///< [C, U]
  /// Cumulative log-gates from the chunk's start, [C] for a uniform gate
  /// and [C, K] otherwise, and the ones the query sees (a token back when
  /// reading before the write).
  const double *lam, *lamQ;
  /// With a value-side decay (and no erase): its cumulative log-gates
  /// [C, U] (0 in a normaliser's column) and the query's, else null.
  const double *psi, *psiQ;
};

/// The chunk's reads before the epilogue (`out`, [C, U]; null for none)
/// and the state ([K, U]) carried across it, in place.
void chunkForward(const Chunk &chunk, float *state, float *out);

/// The state after a piece of a cut sequence, in place of `state` ([K, U]),
/// the piece's state from zeros: plus the state entering the piece
/// (`entering`, [K, U]) carried across it, with an erase by its transition
/// (`transition`, [K, K]), else by its total log-gates (`keyLogs`, one a
/// key or under a uniform gate one; `valueLogs`, one a column, or null).
void composePiece(int keys, int columns, const float *transition,
                  const double *keyLogs, bool uniformGate,
                  const double *valueLogs, const float *entering, float *state);

/// Where chunkBackward writes the gradients of a chunk's operands: rows of
/// `rowStride` floats, as Chunk's.
struct ChunkGradients {
  int rowStride;
  float *dq, *dk; ///< [C, K]
  float *de;      ///< [C, K], with an erase
  float *du;      ///< [C, U]
  /// As Chunk::lam ([C] under a uniform gate, else [C, K]): the gradient
  /// with respect to each token's own log-gates (as summed into lam).
  double *dGate;
  /// As Chunk::psi ([C, U]), with a value-side decay: likewise for each
  /// token's value-side log-gates.
  double *dValueGate;
};

/// The backward of chunkForward for a chunk under a key-side gate or none,
/// a value-side decay or none (not with an erase): from the
/// state entering the chunk (`state`, [K, U]), the gradient of the loss with
/// respect to the chunk's reads (`dOut`, [C, U]) and to the state leaving it
/// (`dState`, [K, U]), the gradients of the chunk's operands into `out`; dState
/// becomes the gradient with respect to the state entering the chunk.
void chunkBackward(const Chunk &chunk, const float *state, const float *dOut,
                   float *dState, const ChunkGradients &out);

} // namespace linac::cpu

#endif // LINAC_CPU_PRODUCTS_H
