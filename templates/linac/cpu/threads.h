//===- threads.h - spreading a CPU pass over threads ------------*- C++ -*-===//
//
// The workers of a forward pass or decode step, in the products archive
// (threads.cpp) so that a package's compilation does not parse <thread>.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CPU_THREADS_H
#define LINAC_CPU_THREADS_H

#include <stdint.h>

#include <vector>

namespace linac::cpu {

using HeadsBody = void (*)(void *context, int64_t seq, int64_t firstHead,
                           int64_t endHead);

/// Calls body(context, seq, firstHead, endHead) on `threads` workers (the
/// caller's thread among them) for runs of heads that together cover every
/// sequence and head once, in no fixed order; each call must write only
/// its own heads' outputs and states. A sequence's heads are split into as
/// few runs as keep every worker busy, weighed by the sequences' lengths
/// (`offsets`, sequences + 1 of them; null when all are equally long): a
/// run walks its heads' rows of a token together, which share pages.
void forEachHeadRun(const int64_t *offsets, int64_t sequences, int64_t heads,
                    int32_t threads, HeadsBody body, void *context);

/// forEachHeadRun with a callable body(seq, firstHead, endHead).
template <typename Body>
void forEachHeadRun(const int64_t *offsets, int64_t sequences, int64_t heads,
                    int32_t threads, Body body) {
  forEachHeadRun(
      offsets, sequences, heads, threads,
      [](void *context, int64_t seq, int64_t firstHead, int64_t endHead) {
        (*static_cast<Body *>(context))(seq, firstHead, endHead);
      },
      &body);
}

using TaskBody = void (*)(void *context, int64_t task);

/// Calls body(context, task) for every task in [0, count) on `threads`
/// workers (the caller's thread among them), in no fixed order.
void forEachTask(int64_t count, int32_t threads, TaskBody body, void *context);

/// forEachTask with a callable body(task).
template <typename Body>
void forEachTask(int64_t count, int32_t threads, Body body) {
  forEachTask(
      count, threads,
      [](void *context, int64_t task) {
        (*static_cast<Body *>(context))(task);
      },
      &body);
}

/// A piece of a sequence that a segmented forward runs on its own: whole
/// chunks from the sequence's start, the last piece taking the rest.
struct SequencePiece {
  int64_t seq, begin, end; ///< tokens [begin, end) of sequence seq
  int32_t index;           ///< within its sequence, from 0
  bool last;               ///< its sequence's last piece
};

/// How a forward over `threads` workers cuts its sequences (`offsets`,
/// sequences + 1 of them) into pieces of whole chunks of `chunkSize`:
/// `segmentTokens` > 0 into equal pieces of that many tokens rounded up to
/// whole chunks, -1 never, 0 when fewer (sequence, head) pairs than workers
/// leave workers idle and pieces gain (`erase`: each middle piece then
/// runs twice as long, for its transition). In that last cut each
/// sequence's first piece is `firstShare` times as long as each later one:
/// it runs only in the first pass, beside the middle pieces' states from
/// zeros, which take that share of a piece's whole time (firstPieceShare
/// in layer.h). Empty when no sequence is cut.
std::vector<SequencePiece> cutSequences(const int64_t *offsets,
                                        int64_t sequences, int64_t heads,
                                        int32_t threads, int chunkSize,
                                        bool erase, int64_t segmentTokens,
                                        double firstShare = 1.0);

} // namespace linac::cpu

#endif // LINAC_CPU_THREADS_H
