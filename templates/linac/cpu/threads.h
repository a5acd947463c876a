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

using PairBody = void (*)(void *context, int64_t seq, int64_t head);

/// Calls body(context, seq, head) for every sequence and head on `threads`
/// workers (the caller's thread among them), each pair once, in no fixed
/// order; each pair must write only its own outputs and state.
void forEachPair(int64_t sequences, int64_t heads, int32_t threads,
                 PairBody body, void *context);

/// forEachPair with a callable body(seq, head).
template <typename Body>
void forEachHead(int64_t sequences, int64_t heads, int32_t threads,
                 Body body) {
  forEachPair(
      sequences, heads, threads,
      [](void *context, int64_t seq, int64_t head) {
        (*static_cast<Body *>(context))(seq, head);
      },
      &body);
}

} // namespace linac::cpu

#endif // LINAC_CPU_THREADS_H
