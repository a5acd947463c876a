//===- segments.cpp - cutting sequences for sequence parallelism ----------===//

#include "linac/segments.h"

#include <algorithm>
#include <cmath>

namespace linac {

namespace {

int64_t chunksOf(int64_t tokens, int64_t chunkSize) {
  return (tokens + chunkSize - 1) / chunkSize;
}

/// Segments of a sequence of `chunks` chunks cut at most `most` long.
int64_t segmentsOf(int64_t chunks, int64_t most) {
  return most == 0 ? 1 : std::max<int64_t>(1, (chunks + most - 1) / most);
}

/// A pass's modelled time: waves of its longest block, as many as the
/// multiprocessors need to take every block's chunks (exact when the
/// blocks are equally long, as a cut's are but for each sequence's last).
double passTime(int64_t longest, double blockChunks, int64_t multiprocessors) {
  if (longest == 0)
    return 0;
  return std::ceil(blockChunks / double(multiprocessors * longest)) *
         double(longest);
}

} // namespace

double modelledChunks(const SegmentShape &shape, int64_t most) {
  const int64_t multiprocessors = std::max<int64_t>(1, shape.multiprocessors);
  double local = 0, finish = 0;
  int64_t longest = 0, composed = 0;
  for (size_t s = 0; s + 1 < shape.offsets.size(); ++s) {
    const int64_t chunks =
        chunksOf(shape.offsets[s + 1] - shape.offsets[s], shape.chunkSize);
    const int64_t pieces = segmentsOf(chunks, most);
    const int64_t length = (chunks + pieces - 1) / pieces;
    longest = std::max(longest, length);
    // The first segment runs whole; the middle ones run for their states
    // and transitions; every one after the first runs again to finish.
    local += double(std::min(length, chunks));
    if (pieces > 2)
      local += double((pieces - 2) * length * (1 + shape.transitionBlocks));
    finish += double(chunks - std::min(length, chunks));
    composed = std::max(composed, pieces - 1);
  }
  local *= double(shape.heads);
  finish *= double(shape.heads);
  if (most == 0)
    return passTime(longest, local, multiprocessors);
  // Three launches, and the compose pass walking the longest chain.
  return passTime(longest, local, multiprocessors) +
         passTime(longest, finish, multiprocessors) + double(2 + composed);
}

bool leavesMostIdle(int64_t blocks, int64_t multiprocessors) {
  return 5 * blocks <= 2 * multiprocessors;
}

bool takesPhased(manifest::PhasedUse use, bool segmented, bool underfilled,
                 size_t workspaceBytes,
                 const std::function<size_t()> &freeBytes) {
  if (use == manifest::PhasedUse::Always)
    return true;
  if (use == manifest::PhasedUse::Segmented && !segmented && !underfilled)
    return false;
  return workspaceBytes <= freeBytes() / 2;
}

std::vector<linac_cuda_segment> cutSegments(const SegmentShape &shape,
                                            int64_t segmentTokens) {
  if (segmentTokens < 0 || shape.offsets.size() < 2 || shape.chunkSize <= 0)
    return {};
  int64_t longest = 0;
  for (size_t s = 0; s + 1 < shape.offsets.size(); ++s)
    longest = std::max(longest, chunksOf(shape.offsets[s + 1] - shape.offsets[s],
                                         shape.chunkSize));
  int64_t most = chunksOf(segmentTokens, shape.chunkSize);
  if (segmentTokens == 0) {
    // Each count of segments of the longest sequence, while a segment
    // keeps a few chunks.
    constexpr int64_t kFewestChunks = 4, kMostSegments = 64;
    double best = modelledChunks(shape, 0);
    for (int64_t pieces = 2; pieces <= kMostSegments; ++pieces) {
      const int64_t length = (longest + pieces - 1) / pieces;
      if (length < kFewestChunks)
        break;
      const double time = modelledChunks(shape, length);
      if (time < best)
        best = time, most = length;
    }
    if (most == 0)
      return {};
  }
  std::vector<linac_cuda_segment> segments;
  for (size_t s = 0; s + 1 < shape.offsets.size(); ++s) {
    const int64_t begin = shape.offsets[s], end = shape.offsets[s + 1];
    const int64_t chunks = chunksOf(end - begin, shape.chunkSize);
    const int64_t pieces = segmentsOf(chunks, most);
    const int64_t length = (chunks + pieces - 1) / pieces * shape.chunkSize;
    for (int64_t piece = 0; piece < pieces; ++piece)
      segments.push_back({begin + std::min(end - begin, piece * length),
                          begin + std::min(end - begin, (piece + 1) * length),
                          int64_t(s), int32_t(piece),
                          int32_t(piece + 1 == pieces)});
  }
  if (segments.size() + 1 == shape.offsets.size())
    return {};
  return segments;
}

} // namespace linac
