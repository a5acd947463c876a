//===- threads.cpp - spreading a CPU pass over threads --------------------===//

#include "linac/cpu/threads.h"

#include <algorithm>
#include <atomic>
#include <cmath>
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

void forEachTask(int64_t count, int32_t threads, TaskBody body, void *context) {
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i = next++; i < count; i = next++)
      body(context, i);
  };
  const int64_t workers = std::min<int64_t>(std::max(threads, 1), count);
  std::vector<std::thread> pool;
  for (int64_t w = 1; w < workers; ++w)
    pool.emplace_back(work);
  work();
  for (std::thread &thread : pool)
    thread.join();
}

std::vector<SequencePiece> cutSequences(const int64_t *offsets,
                                        int64_t sequences, int64_t heads,
                                        int32_t threads, int chunkSize,
                                        bool erase, int64_t segmentTokens,
                                        double firstShare) {
  if (segmentTokens < 0 || sequences <= 0 || heads <= 0)
    return {};
  // With P workers a (sequence, head) pair and n = P + 1 pieces, the first
  // piece and the middle ones' local states run side by side, then every
  // piece after the first from its true state: 2/n of the pass where the
  // whole sequence took all of it, or with an erase (a middle piece's
  // transition doubling it) 3/n; with the first piece r of a later one,
  // where a middle piece's local state takes r of its whole time,
  // (1 + r) / (n - 1 + r). Pieces keep a few chunks each.
  constexpr int64_t kFewestChunks = 4;
  const int64_t pairs = sequences * heads;
  const int64_t perPair = std::max<int32_t>(threads, 1) / pairs;
  const int64_t fewestPieces = erase ? 4 : 3;
  const int64_t most =
      segmentTokens > 0 ? (segmentTokens + chunkSize - 1) / chunkSize : 0;
  if (most == 0 && perPair + 1 < fewestPieces)
    return {};
  std::vector<SequencePiece> pieces;
  bool cut = false;
  for (int64_t seq = 0; seq < sequences; ++seq) {
    const int64_t begin = offsets[seq], end = offsets[seq + 1];
    const int64_t chunks = (end - begin + chunkSize - 1) / chunkSize;
    int64_t count = most > 0 ? (chunks + most - 1) / most
                             : std::min(perPair + 1, chunks / kFewestChunks);
    if (count < 1 || (most == 0 && count < fewestPieces))
      count = 1;
    // Pieces of whole chunks, as many as that takes: equal, or with the
    // first one firstShare of the others where the workers call for them.
    const double share = most == 0 && count > 2 ? firstShare : 1.0;
    const int64_t perPiece = std::max<int64_t>(
        int64_t(std::ceil(double(chunks) / (double(count - 1) + share))), 1);
    const int64_t firstChunks =
        std::max<int64_t>(std::llround(share * double(perPiece)), 1);
    count = 1 + std::max<int64_t>(
                    (chunks - firstChunks + perPiece - 1) / perPiece, 0);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t from = i == 0 ? 0 : firstChunks + (i - 1) * perPiece;
      const int64_t to = firstChunks + i * perPiece;
      pieces.push_back(
          {seq, std::min(end, begin + from * chunkSize),
           i + 1 == count ? end : std::min(end, begin + to * chunkSize),
           int32_t(i), i + 1 == count});
    }
    cut = cut || pieces.back().index > 0;
  }
  if (!cut)
    pieces.clear();
  return pieces;
}

void forEachHeadRun(const int64_t *offsets, int64_t sequences, int64_t heads,
                    int32_t threads, HeadsBody body, void *context) {
  if (sequences <= 0 || heads <= 0)
    return;
  const int64_t wanted = std::max(threads, 1);
  const std::vector<HeadRun> runs = headRuns(offsets, sequences, heads, wanted);
  forEachTask(int64_t(runs.size()), int32_t(wanted), [&](int64_t i) {
    body(context, runs[i].seq, runs[i].firstHead, runs[i].endHead);
  });
}

} // namespace linac::cpu
