//===- wgmma.h - warpgroup tensor-core products on sm_90a --------*- C++
//-*-===//
//
// The few Hopper primitives the warpgroup kernel (warpgroup.h) is built
// from, as thin wrappers over PTX: bf16 tiles in shared memory in the
// 128-byte swizzled layout that wgmma reads, their descriptors, and
// wgmma.mma_async m64n64k16 (fp32 accumulators) with A from shared memory
// or from registers.
//
// A tile is rows of 64 bf16 (128 bytes), eight rows an atom of 1024
// bytes, the 16-byte pieces of row r at piece ^ (r % 8): so a warp's
// eight rows of one piece fall in eight different bank groups. A matrix
// wider than 64 columns is several such tiles one after another. The same
// bytes serve as a K-major operand (the row index is M or N, the columns
// the reduction) and as an MN-major one (the row index is the reduction).
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_CUDA_WGMMA_H
#define LINAC_CUDA_WGMMA_H

#include "linac/cuda/vec.h"

#include <cstdint>

namespace linac::cuda::wgmma {

/// Columns a swizzled tile row holds, and its bytes.
inline constexpr int kTileColumns = 64, kRowBytes = 128, kAtomBytes = 1024;

/// Bytes from a tile's base to element (row, col) of a matrix of `rows`
/// rows stored as tiles of kTileColumns columns, swizzled. The base is
/// 1024-byte aligned.
LINAC_HOST_DEVICE constexpr int swizzledOffset(int rows, int row, int col) {
  const int tile = col / kTileColumns;
  const int linear = row * kRowBytes + (col % kTileColumns) * 2;
  return tile * rows * kRowBytes + (linear ^ ((row % 8) << 4));
}

/// A shared-memory matrix descriptor: 128-byte swizzle, atoms of eight
/// rows 1024 bytes apart (the stride dimension), and `leading` bytes
/// between tiles along the leading dimension (read only for an MN-major
/// operand wider than one tile).
LINAC_DEVICE uint64_t descriptor(const void *shared, uint32_t leading = 16) {
  const uint32_t address = uint32_t(__cvta_generic_to_shared(shared));
  return uint64_t((address & 0x3FFFF) >> 4) |
         uint64_t((leading >> 4) & 0x3FFF) << 16 |
         uint64_t(kAtomBytes >> 4) << 32 | uint64_t(1) << 62;
}

/// The descriptor of the matrix `bytes` after `d`'s (within the same
/// 256 KB of shared memory, which the start field spans).
LINAC_DEVICE uint64_t advance(uint64_t d, uint32_t bytes) {
  return d + (bytes >> 4);
}

/// Orders registers written before the next wgmma that reads them.
LINAC_DEVICE void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
/// Closes the group of wgmma issued since the last.
LINAC_DEVICE void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/// Waits until at most `Pending` groups are in flight.
template <int Pending> LINAC_DEVICE void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}
/// Orders this thread's generic writes to shared memory before the async
/// proxy (wgmma, bulk copies) reads them.
LINAC_DEVICE void fenceShared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/// A 64 x 64 fp32 accumulator of a warpgroup: warp w holds rows
/// 16w..16w+15 as mma.sync's m16n8 tiles, x[4j..4j+3] for columns
/// 8j..8j+7 (accRow, accCol).
struct Accumulator {
  float x[32];
  /// Keeps the compiler from moving reads or writes of x across a wgmma
  /// that is still in flight.
  LINAC_DEVICE void pin() {
#pragma unroll
    for (int i = 0; i < 32; ++i)
      asm volatile("" : "+f"(x[i])::"memory");
  }
};

/// The row and column of accumulator element i, of a warp's 16 rows.
LINAC_DEVICE int accumulatorRow(int i) {
  return (laneId() >> 2) + ((i & 2) ? 8 : 0);
}
LINAC_DEVICE int accumulatorColumn(int i) {
  return (i >> 2) * 8 + (laneId() & 3) * 2 + (i & 1);
}

#define LINAC_WGMMA_D                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "    \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "     \
  "%30, %31}"
#define LINAC_WGMMA_OUT(d)                                                     \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),      \
      "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]),             \
      "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),         \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),         \
      "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),         \
      "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),         \
      "+f"(d[31])

/// d (+)= A B for one k-step of 16: A (64 x 16) and B (16 x 64) from shared
/// memory, each K-major (TransposeX false) or MN-major; `accumulate` false
/// overwrites d.
template <bool TransposeA, bool TransposeB>
LINAC_DEVICE void mma(Accumulator &d, uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " LINAC_WGMMA_D
      ", %32, %33, p, 1, 1, %35, %36;\n"
      "}\n"
      : LINAC_WGMMA_OUT(d.x)
      : "l"(a), "l"(b), "r"(int(accumulate)), "n"(int(TransposeA)),
        "n"(int(TransposeB))
      : "memory");
}

/// d (+)= A B for one k-step of 16, A from registers (mma.sync's A
/// fragment of the warp's 16 rows), B from shared memory; `accumulate`
/// false overwrites d.
template <bool TransposeB>
LINAC_DEVICE void mma(Accumulator &d, const uint32_t (&a)[4], uint64_t b,
                      bool accumulate = true) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " LINAC_WGMMA_D
      ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"
      "}\n"
      : LINAC_WGMMA_OUT(d.x)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
        "r"(int(accumulate)), "n"(int(TransposeB))
      : "memory");
}

#undef LINAC_WGMMA_D
#undef LINAC_WGMMA_OUT

/// Columns 16s..16s+15 of an accumulator as the A fragment of k-step s of
/// a product that reduces over them.
LINAC_DEVICE void fragmentOf(uint32_t (&a)[4], const Accumulator &d, int s) {
  a[0] = packPair(d.x[8 * s], d.x[8 * s + 1]);
  a[1] = packPair(d.x[8 * s + 2], d.x[8 * s + 3]);
  a[2] = packPair(d.x[8 * s + 4], d.x[8 * s + 5]);
  a[3] = packPair(d.x[8 * s + 6], d.x[8 * s + 7]);
}

} // namespace linac::cuda::wgmma

#endif // LINAC_CUDA_WGMMA_H
