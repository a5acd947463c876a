//===- threads.cpp - spreading a CPU pass over threads --------------------===//

#include "linac/cpu/threads.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace linac::cpu {

void forEachPair(int64_t sequences, int64_t heads, int32_t threads,
                 PairBody body, void *context) {
  const int64_t total = sequences * heads;
  const int64_t workers = std::min<int64_t>(std::max(threads, 1), total);
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i = next++; i < total; i = next++)
      body(context, i / heads, i % heads);
  };
  std::vector<std::thread> pool;
  for (int64_t w = 1; w < workers; ++w)
    pool.emplace_back(work);
  work();
  for (std::thread &thread : pool)
    thread.join();
}

} // namespace linac::cpu
