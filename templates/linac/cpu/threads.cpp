//===- threads.cpp - spreading a CPU pass over threads --------------------===//

#include "linac/cpu/threads.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace linac::cpu {

namespace {

struct HeadRun {
  int64_t seq, firstHead, endHead;
};

/// Each sequence's heads in runs of about the tokens a worker's share of
/// the batch holds (one run at least, one a head at most).
std::vector<HeadRun> headRuns(const int64_t *offsets, int64_t sequences,
                              int64_t heads, int64_t threads) {
  auto length = [&](int64_t seq) {
    return offsets ? std::max<int64_t>(offsets[seq + 1] - offsets[seq], 0) : 1;
  };
  int64_t total = 0;
  for (int64_t seq = 0; seq < sequences; ++seq)
    total += length(seq);
  std::vector<HeadRun> runs;
  for (int64_t seq = 0; seq < sequences; ++seq) {
    // ceil(length * threads / total) runs: a worker's share each.
    const int64_t wanted =
        total > 0 ? (length(seq) * threads + total - 1) / total : 1;
    const int64_t count = std::clamp<int64_t>(wanted, 1, heads);
    for (int64_t r = 0; r < count; ++r)
      runs.push_back({seq, r * heads / count, (r + 1) * heads / count});
  }
  return runs;
}

} // namespace

void forEachHeadRun(const int64_t *offsets, int64_t sequences, int64_t heads,
                    int32_t threads, HeadsBody body, void *context) {
  if (sequences <= 0 || heads <= 0)
    return;
  const int64_t wanted = std::max(threads, 1);
  const std::vector<HeadRun> runs =
      headRuns(offsets, sequences, heads, wanted);
  const int64_t total = int64_t(runs.size());
  const int64_t workers = std::min(wanted, total);
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i = next++; i < total; i = next++)
      body(context, runs[i].seq, runs[i].firstHead, runs[i].endHead);
  };
  std::vector<std::thread> pool;
  for (int64_t w = 1; w < workers; ++w)
    pool.emplace_back(work);
  work();
  for (std::thread &thread : pool)
    thread.join();
}

} // namespace linac::cpu
