//===- segments.h - cutting sequences for sequence parallelism --*- C++ -*-===//
//
// A chunkwise GPU forward runs one block per (sequence, head) and walks the
// sequence's chunks in order. When the batch's sequences and heads leave
// the GPU idle, the runtime cuts sequences into segments of whole chunks
// that run side by side (the passes of templates/linac/cuda/abi.h). Which
// cut, if any, comes from a model of each pass's time in chunks: waves of
// its longest block over the multiprocessors, and a chunk's worth for each
// launch and each composed segment. Whether a package's phased kernels run
// instead of its chunkwise entry depends on the plan's rule, their
// workspace and whether the batch is cut.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_SEGMENTS_H
#define LINAC_SEGMENTS_H

#include "linac/cuda/abi.h"
#include "linac/manifest.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace linac {

struct SegmentShape {
  /// Offsets of the sequences' first tokens and, last, the end (as
  /// cu_seqlens).
  std::vector<int64_t> offsets;
  int64_t heads = 0;
  int64_t chunkSize = 0;
  /// Multiprocessors of the device: a block of the chunkwise kernel keeps
  /// one busy, so that blocks beyond this many share them or wait.
  int64_t multiprocessors = 0;
  /// Blocks a segment's transition takes in the LOCAL pass (the manifest's
  /// segments.transition_blocks).
  int64_t transitionBlocks = 0;
};

/// How to run a forward of `shape`: no segments when each sequence runs
/// whole, else every sequence's segments in order, each sequence at least
/// one. `segmentTokens` > 0 cuts segments of that many tokens (rounded up
/// to whole chunks) whatever the model says; 0 lets the model choose; -1
/// keeps every sequence whole.
std::vector<linac_cuda_segment> cutSegments(const SegmentShape &shape,
                                            int64_t segmentTokens = 0);

/// The model's time of a cut into segments of at most `chunks` chunks, in
/// chunks of one block; chunks = 0 for whole sequences.
double modelledChunks(const SegmentShape &shape, int64_t chunks);

/// Whether `blocks` blocks, one a multiprocessor, leave at least three in
/// five of `multiprocessors` idle.
bool leavesMostIdle(int64_t blocks, int64_t multiprocessors);

/// Whether a forward takes a package's phased kernels
/// (templates/linac/cuda/phased.h) instead of its chunkwise entry: always
/// under PhasedUse::Always; otherwise when their workspace of
/// `workspaceBytes` takes at most half the device's free memory
/// (`freeBytes`, asked only then) and, under PhasedUse::Segmented, the
/// batch is cut into segments (`segmented`) or its whole sequences leave
/// most multiprocessors idle (`underfilled`, leavesMostIdle). On an
/// H200 the phased kernels of the delta rule and of key-vector gates are
/// faster than the lockstep entry at every shape measured, from 32 to 1024
/// (sequence, head) pairs, whole or cut (bench/history/forward-chunkwise.md,
/// versions 21 and 23); those without an erase under a scalar gate or none
/// only where the batch is cut; those of the delta rule than the warpgroup
/// entry where the batch is cut or its 48 or fewer (sequence, head) pairs
/// leave most of 132 multiprocessors idle (version 28: Gated DeltaNet with
/// 48 heads at B1 T32768, 3.29 against 3.67 ms), not with 64 pairs (3.82
/// against 3.66; DeltaNet 3.46 against 3.06) nor where its sequences fill
/// them (B8 T4096 H16, 0.770 against 0.557 at version 27).
bool takesPhased(manifest::PhasedUse use, bool segmented, bool underfilled,
                 size_t workspaceBytes,
                 const std::function<size_t()> &freeBytes);

} // namespace linac

#endif // LINAC_SEGMENTS_H
