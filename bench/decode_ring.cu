// decode_ring.cu - the decode kernel's staging with no step: states of a
// pool [P, H, 128, 128] fp32 move through a ring of shared-memory stages by
// 2-D tensor copies (boxes of 32 columns by 128 rows, 128-byte swizzle),
// into registers and back, in items of a strip of W value columns, through
// the kernel's own DecodeSplit and DecodeState (templates/linac/cuda/
// decode.h). Prints each ring's time as a share of the copy ceiling (a
// 1 GiB device-to-device copy) and of a copy of the pool's own bytes.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -Itemplates bench/decode_ring.cu \
//     -lcuda -o ring
#include "linac/cuda/decode.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

using namespace linac::cuda;

constexpr int K = 128, V = 128, H = 16,
              kBoxColumns = LINAC_CUDA_DECODE_BOX_COLUMNS;

/// W columns a strip, CW columns a warp, S stages, R of them a group's;
/// with Tiled the pool is [P, H, V / W, K, W], a strip's rows contiguous.
/// With Dynamic a group takes its next item from a counter shared by the
/// grid (less `base`, the counter at launch), else the block's items in turn.
template <int W, int CW, int S, bool Tiled, bool Dynamic>
__global__ void __launch_bounds__(512, 1)
    ring(const __grid_constant__ linac_cuda_tensor_map map, int64_t items,
         const int64_t *indices, float factor, unsigned long long *counter,
         unsigned long long base) {
  using Split = DecodeSplit<K, W, W / CW, /*InterleavedRows=*/true>;
  using State = DecodeState<K, W, 1, false, Split, DecodeStaging::Tensor>;
  constexpr int kGroups = Split::kGroups, kStrips = V / W,
                kStageFloats = State::stageFloats(), R = S / kGroups;
  static_assert(S % kGroups == 0, "a ring a group");
  extern __shared__ unsigned char raw[];
  float *area = reinterpret_cast<float *>(
      (reinterpret_cast<uintptr_t>(raw) + kSwizzleAlignment - 1) &
      ~uintptr_t(kSwizzleAlignment - 1));
  __shared__ uint64_t landed[S];
  __shared__ int64_t stageItem[S];
  const int group = Split::group();
  const bool leader = Split::warp() == 0 && laneId() == 0;
  // Item i: strip i % kStrips of head (i / kStrips) % H of sequence i / (kStrips H).
  auto stateAt = [&](int64_t item) {
    int64_t strip = item % kStrips, head = item / kStrips % H,
            seq = item / kStrips / H;
    int row = Tiled ? int(((indices[seq] * H + head) * kStrips + strip) * K)
                    : int((indices[seq] * H + head) * K);
    return StateAt{nullptr, row, Tiled ? 0 : int(strip * W)};
  };
  int64_t nextStatic = blockIdx.x + int64_t(gridDim.x) * group;
  bool exhausted = false;
  // The group's leader starts its next item towards `stage`; past the last
  // item the stage's phase completes with no bytes and the item -1.
  auto prefetch = [&](int stage) {
    int64_t item = -1;
    if (!exhausted) {
      if constexpr (Dynamic) {
        item = int64_t(atomicAdd(counter, 1ull) - base);
      } else {
        item = nextStatic;
        nextStatic += int64_t(gridDim.x) * kGroups;
      }
      if (item >= items) {
        item = -1;
        exhausted = true;
      }
    }
    stageItem[stage] = item;
    arriveExpecting(&landed[stage], item >= 0 ? kStageFloats * 4 : 0);
    if (item >= 0)
      State::prefetch(stateAt(item), map, area + stage * kStageFloats,
                      &landed[stage]);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s)
      initBarrier(&landed[s]);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (leader)
    for (int j = 0; j < R; ++j)
      prefetch(group * R + j);
  State state;
  for (int64_t j = 0;; ++j) {
    const int stage = group * R + int(j % R);
    float *staged = area + stage * kStageFloats;
    waitBarrier(&landed[stage], unsigned(j / R) & 1u);
    const int64_t item = stageItem[stage];
    if (item < 0)
      break;
    state.loadStaged(staged);
    for (auto &row : state.s)
      for (float &x : row)
        x *= factor;
    state.storeStaged(staged);
    Split::sync();
    if (leader) {
      State::drain(stateAt(item), map, staged, /*waitForRead=*/true);
      prefetch(stage);
    }
  }
  if (leader)
    waitBulkStores();
}

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

/// Cleared before each timed run, as the runtime's benchmark does, so that
/// no run finds the last one's data in L2.
constexpr size_t kFlushBytes = size_t(256) << 20;
void *flush;

template <typename F> float medianMs(F f, int reps = 50) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 5; ++i)
    f();
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    cudaMemsetAsync(flush, 0, kFlushBytes);
    cudaEventRecord(a);
    f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    times.push_back(ms);
  }
  check(cudaGetLastError(), "timed work");
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct Pool {
  int64_t seqs;
  float *states;
  int64_t *indices;
  linac_cuda_tensor_map map;
  /// Over strips of 32 and 64 columns.
  linac_cuda_tensor_map tiledMap[2];
};

linac_cuda_tensor_map encode(float *states, cuuint64_t columns,
                             cuuint64_t rows) {
  linac_cuda_tensor_map map;
  cuuint64_t dims[2] = {columns, rows};
  cuuint64_t strides[1] = {columns * 4};
  cuuint32_t box[2] = {kBoxColumns, K}, elementStrides[2] = {1, 1};
  CUresult r = cuTensorMapEncodeTiled(
      reinterpret_cast<CUtensorMap *>(&map), CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2,
      states, dims, strides, box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled: %d\n", int(r));
    std::exit(1);
  }
  return map;
}

Pool makePool(int64_t seqs) {
  Pool pool{seqs};
  size_t bytes = size_t(seqs) * H * K * V * 4;
  check(cudaMalloc(&pool.states, bytes), "cudaMalloc");
  check(cudaMalloc(&pool.indices, seqs * 8), "cudaMalloc");
  std::vector<float> host(bytes / 4);
  for (size_t i = 0; i < host.size(); ++i)
    host[i] = float(i % 1000003) * 1e-3f;
  check(cudaMemcpy(pool.states, host.data(), bytes, cudaMemcpyHostToDevice),
        "upload");
  std::vector<int64_t> indices(seqs);
  for (int64_t i = 0; i < seqs; ++i)
    indices[i] = i;
  check(cudaMemcpy(pool.indices, indices.data(), seqs * 8,
                   cudaMemcpyHostToDevice),
        "upload");
  pool.map = encode(pool.states, V, seqs * H * K);
  pool.tiledMap[0] = encode(pool.states, 32, seqs * H * K * V / 32);
  pool.tiledMap[1] = encode(pool.states, 64, seqs * H * K * V / 64);
  return pool;
}

unsigned long long *counter, counterBase = 0;

/// What a ring is set against, and the grid it runs on.
struct Baseline {
  double copyBytesPerSecond, poolCopyMs;
  int multiprocessors;
};

template <int W, int CW, int S, bool Tiled = false, bool Dynamic = false>
void runRing(const char *name, Pool &pool, const Baseline &baseline) {
  const int multiprocessors = baseline.multiprocessors;
  auto kernel = ring<W, CW, S, Tiled, Dynamic>;
  int shared = S * K * W * 4 + int(kSwizzleAlignment);
  check(cudaFuncSetAttribute(kernel,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             shared),
        "shared memory");
  int64_t items = pool.seqs * H * (V / W);
  // A first pass checks the copy is the identity (factor 1, then back).
  size_t bytes = size_t(pool.seqs) * H * K * V * 4;
  std::vector<float> before(bytes / 4), after(bytes / 4);
  check(cudaMemcpy(before.data(), pool.states, bytes, cudaMemcpyDeviceToHost),
        "download");
  const linac_cuda_tensor_map &map = Tiled ? pool.tiledMap[W / 64] : pool.map;
  constexpr int kGroups = kDecodeBlockWarps / (W / CW);
  auto launch = [&](float factor) {
    kernel<<<multiprocessors, 512, shared>>>(map, items, pool.indices, factor,
                                             counter, counterBase);
    // Each group takes one number past the last item.
    if (Dynamic)
      counterBase += items + multiprocessors * kGroups;
  };
  launch(2.0f);
  check(cudaMemcpy(after.data(), pool.states, bytes, cudaMemcpyDeviceToHost),
        "download");
  size_t wrong = 0;
  for (size_t i = 0; i < before.size(); ++i)
    wrong += after[i] != 2.0f * before[i];
  launch(0.5f);
  float ms = medianMs([&] {
    launch(1.0f);
  });
  double floorMs = 2.0 * bytes / baseline.copyBytesPerSecond * 1e3;
  std::printf("| %-28s | B%-4lld | %7.4f | %5.1f%% | %5.1f%% | %zu |\n", name,
              (long long)pool.seqs, ms, 100.0 * floorMs / ms,
              100.0 * baseline.poolCopyMs / ms, wrong);
}

} // namespace

int main() {
  cuInit(0);
  check(cudaMalloc(&counter, 8), "cudaMalloc");
  check(cudaMemset(counter, 0, 8), "cudaMemset");
  check(cudaMalloc(&flush, kFlushBytes), "cudaMalloc");
  int multiprocessors;
  cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, 0);
  size_t big = size_t(1) << 30;
  void *from, *to;
  check(cudaMalloc(&from, big), "cudaMalloc");
  check(cudaMalloc(&to, big), "cudaMalloc");
  cudaMemset(from, 1, big);
  float bigMs = medianMs([&] {
    cudaMemcpyAsync(to, from, big, cudaMemcpyDeviceToDevice);
  });
  double copyBytesPerSecond = 2.0 * big / (bigMs * 1e-3);
  std::printf("copy ceiling %.3f TB/s\n", copyBytesPerSecond * 1e-12);
  std::printf("| ring | batch | ms | %% of ceiling | %% of same-size copy | "
              "wrong |\n|---|---|---|---|---|---|\n");
  for (int64_t seqs : {64, 256}) {
    Pool pool = makePool(seqs);
    size_t bytes = size_t(seqs) * H * K * V * 4;
    float poolCopyMs = medianMs([&] {
      cudaMemcpyAsync(to, pool.states, bytes, cudaMemcpyDeviceToDevice);
    });
    std::printf("| %-28s | B%-4lld | %7.4f | %5.1f%% | 100.0%% | 0 |\n",
                "same-size copy", (long long)seqs, poolCopyMs,
                100.0 * 2.0 * bytes / copyBytesPerSecond * 1e3 / poolCopyMs);
    const Baseline baseline{copyBytesPerSecond, poolCopyMs, multiprocessors};
    runRing<64, 8, 6>("64 cols, 8/warp, 6 stages", pool, baseline);
    runRing<64, 8, 6, false, true>("dyn 64, 8/warp, 6 stages", pool, baseline);
    runRing<32, 8, 12, true>("tiled 32, 8/warp, 12 stages", pool, baseline);
    runRing<32, 8, 12, true, true>("dyn tiled 32, 8/warp, 12 st", pool,
                                   baseline);
    runRing<32, 8, 12, false, true>("dyn 32, 8/warp, 12 stages", pool,
                                    baseline);
    runRing<128, 16, 2, false, true>("dyn whole, 2 stages", pool, baseline);
    runRing<64, 16, 4, false, true>("dyn 64, 16/warp, 4 stages", pool,
                                    baseline);
    cudaFree(pool.states);
    cudaFree(pool.indices);
  }
  return 0;
}
