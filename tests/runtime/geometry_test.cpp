//===- geometry_test.cpp - the slot numberings kernels and runtime share --===//
//
// The workspaces of the phased forward, the token-by-token backward and the
// chunkwise backward number a batch's chunks (or checkpoints) by slots that
// the runtime counts and the kernels compute (linac/cuda/geometry.h). On
// random varlen batches, empty and one-token sequences among them, every
// sequence's slots are distinct from every other's and below the count.
//
//===----------------------------------------------------------------------===//

#include "linac/cuda/geometry.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <vector>

namespace {

namespace cuda = linac::cuda;

using SlotOf = std::function<int64_t(int64_t seq, int64_t begin, int64_t c)>;
using SlotCount = std::function<int64_t(int64_t seqs, int64_t tokens)>;

/// Every chunk of `tokensPerSlot` tokens of every sequence of `offsets` takes
/// a slot of its own, below the batch's count.
void expectDistinctSlots(const std::vector<int64_t> &offsets,
                         int64_t tokensPerSlot, const SlotOf &slotOf,
                         const SlotCount &slots) {
  const int64_t seqs = int64_t(offsets.size()) - 1;
  const int64_t count = slots(seqs, offsets.back());
  std::vector<int> taken(size_t(count), 0);
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t length = offsets[s + 1] - offsets[s];
    for (int64_t c = 0; c * tokensPerSlot < length; ++c) {
      const int64_t slot = slotOf(s, offsets[s], c);
      ASSERT_GE(slot, 0);
      ASSERT_LT(slot, count) << "sequence " << s << " chunk " << c;
      EXPECT_EQ(taken[size_t(slot)]++, 0) << "slot " << slot << " twice";
    }
  }
}

std::vector<int64_t> randomOffsets(std::mt19937 &random, int64_t chunk) {
  std::uniform_int_distribution<int> count(1, 12), kind(0, 4);
  std::uniform_int_distribution<int64_t> length(0, 5 * chunk);
  std::vector<int64_t> offsets{0};
  for (int s = count(random); s > 0; --s) {
    // Empty, one token, whole chunks, one past a chunk, or any length.
    const int64_t lengths[] = {0, 1, chunk * (1 + s % 3), chunk + 1,
                               length(random)};
    offsets.push_back(offsets.back() + lengths[kind(random)]);
  }
  return offsets;
}

TEST(Geometry, EveryChunkHasItsOwnSlot) {
  std::mt19937 random(7);
  for (int round = 0; round < 500; ++round) {
    expectDistinctSlots(randomOffsets(random, cuda::kBackwardChunk),
                        cuda::kBackwardChunk, cuda::backwardSlot,
                        cuda::backwardSlots);
    expectDistinctSlots(randomOffsets(random, cuda::kChunkSize),
                        cuda::kChunkSize, cuda::preparedSlot,
                        cuda::preparedSlots);
    expectDistinctSlots(randomOffsets(random, cuda::kCheckpointTokens),
                        cuda::kCheckpointTokens, cuda::checkpointSlot,
                        cuda::checkpointSlots);
  }
}

TEST(Geometry, ChunkwiseBackwardSizes) {
  // A record holds q, k and e (K each), u (V) and the log-gates (one, or
  // one a key under a key-vector gate); a prepared chunk P and T (C x C),
  // W, Q' and K' (C x K each), the decay (K) and U' (C x V).
  EXPECT_EQ(
      cuda::backwardRecordFloats(128, 128, cuda::backwardGates(128, false)),
      3 * 128 + 128 + 1);
  EXPECT_EQ(cuda::backwardRecordFloats(128, 64, cuda::backwardGates(128, true)),
            3 * 128 + 64 + 128);
  constexpr int64_t C = cuda::kBackwardChunk;
  EXPECT_EQ(cuda::backwardPreparedFloats(128, 64),
            2 * C * C + 3 * C * 128 + 128 + C * 64);
  EXPECT_EQ(cuda::backwardColumnTiles(128), 128 / cuda::kBackwardColumns);
  EXPECT_EQ(cuda::backwardColumnTiles(cuda::kBackwardColumns + 1), 2);
  // Two blocks a multiprocessor at K = 128 on sm_90a (228 KiB, 1 KiB a
  // block reserved) under a uniform gate, one under a key-vector gate.
  EXPECT_LE(2 * (cuda::backwardSharedBytes(128, 1) + 1024), 228 * 1024);
  EXPECT_LE(cuda::backwardSharedBytes(128, 128), 227 * 1024);
}

TEST(Geometry, WarpgroupSolvedTileLiesOverTheInverses) {
  // With an erase the producer's T, a swizzled bf16 tile of C x C, takes
  // the inverses' and the scratch's room once solved: at a boundary of
  // 1024 bytes (wgmma's swizzle), after the log-gates and before the fp32
  // A, which stays the producer's. Gated DeltaNet's block (q, k and v rows
  // of bf16 staged, two parameters) fits sm_90a's 227 KiB.
  constexpr int64_t C = cuda::kChunkSize;
  for (int keys : {64, 128})
    for (cuda::Gate gate : {cuda::Gate::None, cuda::Gate::Scalar}) {
      const cuda::WarpgroupMap map(keys, 128, gate, true, 3 * 256, 8);
      EXPECT_EQ(map.inverses % 1024, 0) << keys;
      EXPECT_GE(map.inverses, map.cumulativeGates);
      EXPECT_GE(map.a - map.inverses, C * C * 2) << keys;
      EXPECT_LE(map.a + 4 * C * cuda::WarpgroupMap::aStride, map.states);
    }
  EXPECT_LE(
      cuda::WarpgroupMap(128, 128, cuda::Gate::Scalar, true, 3 * 256, 8).bytes,
      227 * 1024);
}

} // namespace
