//===- threads.h - spreading a CPU pass over threads ------------*- C++ -*-===//
//
// The workers of a forward pass or decode step, in the products archive
// (threads.cpp) so that a package's compilation does not parse <thread>.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CPU_THREADS_H
#define LINAC_CPU_THREADS_H

#include <stdint.h>

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

} // namespace linac::cpu

#endif // LINAC_CPU_THREADS_H
