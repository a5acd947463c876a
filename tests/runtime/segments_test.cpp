//===- segments_test.cpp - cutting sequences into segments ----------------===//
//
// The runtime's cut of a chunkwise forward into segments (linac/segments.h):
// every cut covers each sequence exactly, in whole chunks from its start;
// the model keeps sequences whole when they fill the GPU and cuts a long
// one that leaves it idle; the phased kernels run while their workspace
// fits.
//
//===----------------------------------------------------------------------===//

#include "linac/segments.h"

#include <gtest/gtest.h>

#include <random>

namespace {

using linac::cutSegments;
using linac::leavesMostIdle;
using linac::modelledChunks;
using linac::SegmentShape;
using linac::takesPhased;
using linac::manifest::PhasedUse;

SegmentShape uniform(int64_t batch, int64_t tokens, int64_t heads,
                     int64_t transitionBlocks) {
  SegmentShape shape;
  for (int64_t b = 0; b <= batch; ++b)
    shape.offsets.push_back(b * tokens);
  shape.heads = heads;
  shape.chunkSize = 64;
  shape.multiprocessors = 132;
  shape.transitionBlocks = transitionBlocks;
  return shape;
}

/// Each sequence's segments in order, contiguous, covering it, cut at whole
/// chunks from its start, none empty unless the sequence is.
void expectCovers(const SegmentShape &shape,
                  const std::vector<linac_cuda_segment> &segments) {
  size_t next = 0;
  for (size_t seq = 0; seq + 1 < shape.offsets.size(); ++seq) {
    const int64_t begin = shape.offsets[seq], end = shape.offsets[seq + 1];
    int64_t at = begin;
    for (int32_t index = 0;; ++index) {
      ASSERT_LT(next, segments.size()) << "sequence " << seq;
      const linac_cuda_segment &segment = segments[next++];
      EXPECT_EQ(segment.seq, int64_t(seq));
      EXPECT_EQ(segment.index, index);
      EXPECT_EQ(segment.begin, at);
      EXPECT_EQ((segment.begin - begin) % shape.chunkSize, 0);
      EXPECT_TRUE(segment.end > segment.begin || begin == end);
      at = segment.end;
      if (segment.last)
        break;
    }
    EXPECT_EQ(at, end) << "sequence " << seq;
  }
  EXPECT_EQ(next, segments.size());
}

TEST(Segments, FullBatchStaysWhole) {
  EXPECT_TRUE(cutSegments(uniform(8, 4096, 16, 1)).empty());
  EXPECT_TRUE(cutSegments(uniform(8, 4096, 16, 0)).empty());
}

TEST(Segments, LongSequenceOnAnIdleGpuIsCut) {
  for (int64_t transitionBlocks : {0, 1, 2}) {
    SegmentShape shape = uniform(1, 32768, 16, transitionBlocks);
    std::vector<linac_cuda_segment> segments = cutSegments(shape);
    ASSERT_GT(segments.size(), 2u);
    expectCovers(shape, segments);
    const int64_t longest = (segments[0].end - segments[0].begin) / 64;
    EXPECT_LT(modelledChunks(shape, longest), modelledChunks(shape, 0) / 2);
  }
}

// Blocks sharing a multiprocessor share its time: the LOCAL pass's working
// blocks (a first segment and the middle ones) stay within one wave of 132
// rather than spilling a few into a second.
TEST(Segments, CutFitsOneWave) {
  SegmentShape shape = uniform(1, 32768, 16, 0);
  std::vector<linac_cuda_segment> segments = cutSegments(shape);
  ASSERT_FALSE(segments.empty());
  EXPECT_LE(16 * (int64_t(segments.size()) - 1), shape.multiprocessors);
}

TEST(Segments, NeverAndForced) {
  SegmentShape shape = uniform(1, 32768, 16, 1);
  EXPECT_TRUE(cutSegments(shape, -1).empty());
  // Lengths 1, 0, 65, 64 and 200: one chunk a segment, an empty sequence
  // one segment of its own.
  shape.offsets = {0, 1, 1, 66, 130, 330};
  std::vector<linac_cuda_segment> segments = cutSegments(shape, 1);
  EXPECT_EQ(segments.size(), 9u);
  expectCovers(shape, segments);
  // 100 tokens round up to two chunks.
  segments = cutSegments(shape, 100);
  EXPECT_EQ(segments.size(), 1u + 1u + 1u + 1u + 2u);
  expectCovers(shape, segments);
}

TEST(Segments, EveryCutCoversItsSequences) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 500; ++trial) {
    SegmentShape shape;
    shape.chunkSize = 64;
    shape.heads = std::uniform_int_distribution<int64_t>(1, 64)(rng);
    shape.multiprocessors = std::uniform_int_distribution<int64_t>(1, 264)(rng);
    shape.transitionBlocks = std::uniform_int_distribution<int64_t>(0, 2)(rng);
    const int64_t sequences = std::uniform_int_distribution<int64_t>(1, 6)(rng);
    shape.offsets = {0};
    for (int64_t s = 0; s < sequences; ++s)
      shape.offsets.push_back(
          shape.offsets.back() +
          std::uniform_int_distribution<int64_t>(0, 40000)(rng));
    // Half the trials take the model's cut.
    const int64_t tokens =
        rng() % 2 ? 0 : std::uniform_int_distribution<int64_t>(-1, 3000)(rng);
    SCOPED_TRACE("trial " + std::to_string(trial) + ", segment tokens " +
                 std::to_string(tokens));
    std::vector<linac_cuda_segment> segments = cutSegments(shape, tokens);
    if (segments.empty())
      continue;
    expectCovers(shape, segments);
    if (tokens == 0) {
      int64_t longest = 0;
      for (const linac_cuda_segment &segment : segments)
        longest = std::max(longest, (segment.end - segment.begin + 63) / 64);
      EXPECT_LT(modelledChunks(shape, longest), modelledChunks(shape, 0));
    }
  }
}

} // namespace

TEST(Segments, PhasedKernelsByTheirUseAndWorkspace) {
  constexpr size_t kFree = size_t(100) << 30;
  int reads = 0;
  auto freeBytes = [&] {
    ++reads;
    return kFree;
  };
  // By shape, a workspace of half the free memory or less takes the phased
  // kernels, whether the batch is cut or not; more keeps the chunkwise
  // entry.
  for (bool segmented : {false, true}) {
    EXPECT_TRUE(
        takesPhased(PhasedUse::ByShape, segmented, false, 1, freeBytes));
    EXPECT_TRUE(takesPhased(PhasedUse::ByShape, segmented, false, kFree / 2,
                            freeBytes));
    EXPECT_FALSE(takesPhased(PhasedUse::ByShape, segmented, false,
                             kFree / 2 + 1, freeBytes));
  }
  EXPECT_EQ(reads, 6);
  // Segmented: only a batch cut into segments or leaving half the
  // multiprocessors idle, and there as by shape; any other batch does not
  // ask for the free memory.
  EXPECT_FALSE(takesPhased(PhasedUse::Segmented, false, false, 1, freeBytes));
  EXPECT_EQ(reads, 6);
  for (auto [segmented, underfilled] :
       {std::pair{true, false}, std::pair{false, true},
        std::pair{true, true}}) {
    EXPECT_TRUE(takesPhased(PhasedUse::Segmented, segmented, underfilled,
                            kFree / 2, freeBytes));
    EXPECT_FALSE(takesPhased(PhasedUse::Segmented, segmented, underfilled,
                             kFree / 2 + 1, freeBytes));
  }
  EXPECT_EQ(reads, 12);
  // Always: whatever the workspace, without asking.
  EXPECT_TRUE(
      takesPhased(PhasedUse::Always, false, false, 4 * kFree, freeBytes));
  EXPECT_EQ(reads, 12);
}

TEST(Segments, MostlyIdleMultiprocessors) {
  // 132 multiprocessors: 52 blocks leave 80 idle (three in five), 53 and
  // 64 do not.
  EXPECT_TRUE(leavesMostIdle(1, 132));
  EXPECT_TRUE(leavesMostIdle(52, 132));
  EXPECT_FALSE(leavesMostIdle(53, 132));
  EXPECT_FALSE(leavesMostIdle(64, 132));
  EXPECT_FALSE(leavesMostIdle(128, 132));
}
