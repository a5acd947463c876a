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
