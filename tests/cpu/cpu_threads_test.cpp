//===- cpu_threads_test.cpp - runs of heads over the CPU's workers --------===//

#include "linac/cpu/threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <vector>

namespace {

struct Seen {
  int64_t heads;
  std::vector<std::atomic<int>> times;
  std::atomic<int64_t> calls{0}, largestRun{0};
  Seen(int64_t sequences, int64_t heads)
      : heads(heads), times(size_t(sequences * heads)) {}
};

/// Every (sequence, head) visited once over runs of `offsets`' batch.
void expectEachOnce(const std::vector<int64_t> &offsets, int64_t heads,
                    int32_t threads, Seen &seen) {
  const int64_t sequences = int64_t(offsets.size()) - 1;
  linac::cpu::forEachHeadRun(
      offsets.data(), sequences, heads, threads,
      [&](int64_t seq, int64_t firstHead, int64_t endHead) {
        ASSERT_LT(firstHead, endHead);
        ++seen.calls;
        int64_t run = endHead - firstHead, largest = seen.largestRun;
        while (run > largest &&
               !seen.largestRun.compare_exchange_weak(largest, run))
          ;
        for (int64_t head = firstHead; head < endHead; ++head)
          ++seen.times[size_t(seq * heads + head)];
      });
  for (size_t i = 0; i < seen.times.size(); ++i)
    EXPECT_EQ(seen.times[i], 1) << "sequence " << i / heads << " head "
                                << i % heads;
}

TEST(CpuThreads, RunsCoverEveryHeadOnce) {
  std::mt19937 random(std::random_device{}());
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t sequences = 1 + random() % 9, heads = 1 + random() % 17;
    std::vector<int64_t> offsets{0};
    for (int64_t s = 0; s < sequences; ++s)
      offsets.push_back(offsets.back() + int64_t(random() % 3000));
    Seen seen(sequences, heads);
    expectEachOnce(offsets, heads, int32_t(1 + random() % 12), seen);
  }
}

TEST(CpuThreads, ManySequencesTakeWholeHeads) {
  // As many equally long sequences as workers: one run a sequence.
  const std::vector<int64_t> offsets{0, 100, 200, 300, 400};
  Seen seen(4, 8);
  expectEachOnce(offsets, 8, 4, seen);
  EXPECT_EQ(seen.calls, 4);
  EXPECT_EQ(seen.largestRun, 8);
}

TEST(CpuThreads, OneSequenceSplitsOverWorkers) {
  // One sequence: a run a worker, heads shared out evenly.
  const std::vector<int64_t> offsets{0, 16384};
  Seen seen(1, 8);
  expectEachOnce(offsets, 8, 2, seen);
  EXPECT_EQ(seen.calls, 2);
  EXPECT_EQ(seen.largestRun, 4);
}

TEST(CpuThreads, MoreWorkersThanHeads) {
  const std::vector<int64_t> offsets{0, 50};
  Seen seen(1, 3);
  expectEachOnce(offsets, 3, 64, seen);
  EXPECT_EQ(seen.calls, 3);
  EXPECT_EQ(seen.largestRun, 1);
}

TEST(CpuThreads, EmptySequencesAndEqualLengths) {
  Seen empty(3, 4);
  expectEachOnce({0, 0, 0, 0}, 4, 2, empty);
  Seen equal(2, 5);
  linac::cpu::forEachHeadRun(
      nullptr, 2, 5, 2, [&](int64_t seq, int64_t firstHead, int64_t endHead) {
        for (int64_t head = firstHead; head < endHead; ++head)
          ++equal.times[size_t(seq * 5 + head)];
      });
  for (const std::atomic<int> &times : equal.times)
    EXPECT_EQ(times, 1);
}

} // namespace

/// Pieces tile each sequence in order, of whole chunks but for the last.
void expectTiles(const std::vector<linac::cpu::SequencePiece> &pieces,
                 const std::vector<int64_t> &offsets, int chunkSize) {
  size_t p = 0;
  for (size_t seq = 0; seq + 1 < offsets.size(); ++seq) {
    int64_t at = offsets[seq];
    for (int32_t index = 0;; ++index, ++p) {
      ASSERT_LT(p, pieces.size());
      const linac::cpu::SequencePiece &piece = pieces[p];
      EXPECT_EQ(piece.seq, int64_t(seq));
      EXPECT_EQ(piece.index, index);
      EXPECT_EQ(piece.begin, at);
      if (!piece.last) {
        EXPECT_EQ((piece.end - piece.begin) % chunkSize, 0);
      }
      at = piece.end;
      if (piece.last) {
        ++p;
        break;
      }
    }
    EXPECT_EQ(at, offsets[seq + 1]);
  }
  EXPECT_EQ(p, pieces.size());
}

TEST(CpuThreads, PiecesOnRequest) {
  using linac::cpu::cutSequences;
  const std::vector<int64_t> offsets{0, 70, 70, 330};
  // Pieces of two chunks; the empty and short sequences stay whole.
  auto pieces = cutSequences(offsets.data(), 3, 2, 1, 64, false, 100);
  expectTiles(pieces, offsets, 64);
  ASSERT_EQ(pieces.size(), 5u);
  EXPECT_EQ(pieces[2].end - pieces[2].begin, 128);
  EXPECT_TRUE(cutSequences(offsets.data(), 3, 2, 64, 64, false, -1).empty());
  // Pieces as long as the sequences: none cut.
  EXPECT_TRUE(cutSequences(offsets.data(), 3, 2, 1, 64, true, 4096).empty());
}

TEST(CpuThreads, PiecesWhereWorkersIdle) {
  using linac::cpu::cutSequences;
  const std::vector<int64_t> offsets{0, 16384};
  // Eight heads keep two workers busy: whole sequences.
  EXPECT_TRUE(cutSequences(offsets.data(), 1, 8, 2, 64, false, 0).empty());
  // One head on two workers: three pieces without an erase, none with one
  // (its middle piece's transition doubles it).
  auto pieces = cutSequences(offsets.data(), 1, 1, 2, 64, false, 0);
  expectTiles(pieces, offsets, 64);
  EXPECT_EQ(pieces.size(), 3u);
  EXPECT_TRUE(cutSequences(offsets.data(), 1, 1, 2, 64, true, 0).empty());
  // Eight workers: nine pieces either way.
  EXPECT_EQ(cutSequences(offsets.data(), 1, 1, 8, 64, true, 0).size(), 9u);
  // The first piece half as long as the others, where it runs once
  // beside middle pieces that take half a piece's time; a request keeps
  // equal pieces.
  pieces = cutSequences(offsets.data(), 1, 1, 2, 64, false, 0, 0.5);
  expectTiles(pieces, offsets, 64);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].end - pieces[0].begin, 52 * 64);
  EXPECT_EQ(pieces[1].end - pieces[1].begin, 103 * 64);
  EXPECT_EQ(pieces[2].end - pieces[2].begin, 101 * 64);
  pieces = cutSequences(offsets.data(), 1, 1, 2, 64, false, 4096, 0.5);
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].end - pieces[0].begin, 4096);
  const std::vector<int64_t> shortOne{0, 500};
  // Eight chunks keep two pieces of four at most, which gain nothing.
  EXPECT_TRUE(cutSequences(shortOne.data(), 1, 1, 8, 64, false, 0).empty());
}
