//===- cuda_driver.h - the CUDA driver, resolved at run time ----*- C++ -*-===//
//
// The runtime finds the driver in libcuda.so.1 when a CUDA package first
// runs rather than linking it, so that it builds, opens packages and runs
// cpu packages on machines without a driver. cuda.h supplies the types.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_RUNTIME_CUDA_DRIVER_H
#define LINAC_RUNTIME_CUDA_DRIVER_H

#include <cuda.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace linac::cuda {

// The driver functions the runtime calls. cuda.h defines several of these
// names as macros for versioned symbols (cuMemcpyHtoDAsync is
// cuMemcpyHtoDAsync_v2); an entry is expanded before it is declared or
// looked up, so both match the headers' declarations.
#define LINAC_CUDA_DRIVER_FUNCTIONS(X)                                         \
  X(cuInit)                                                                    \
  X(cuGetErrorName)                                                            \
  X(cuGetErrorString)                                                          \
  X(cuDeviceGet)                                                               \
  X(cuDevicePrimaryCtxRetain)                                                  \
  X(cuCtxGetCurrent)                                                           \
  X(cuCtxSetCurrent)                                                           \
  X(cuCtxPushCurrent)                                                          \
  X(cuCtxPopCurrent)                                                           \
  X(cuCtxGetDevice)                                                            \
  X(cuDeviceGetAttribute)                                                      \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor)                               \
  X(cuModuleLoadData)                                                          \
  X(cuModuleUnload)                                                            \
  X(cuModuleGetFunction)                                                       \
  X(cuFuncSetAttribute)                                                        \
  X(cuPointerGetAttributes)                                                    \
  X(cuMemAllocAsync)                                                           \
  X(cuDeviceGetDefaultMemPool)                                                 \
  X(cuMemPoolGetAttribute)                                                     \
  X(cuMemPoolSetAttribute)                                                     \
  X(cuMemcpyHtoDAsync)                                                         \
  X(cuMemFreeAsync)                                                            \
  X(cuMemAlloc)                                                                \
  X(cuMemFree)                                                                 \
  X(cuMemGetInfo)                                                              \
  X(cuMemsetD8Async)                                                           \
  X(cuTensorMapEncodeTiled)                                                    \
  X(cuLaunchKernel)

/// The driver's entry points, called as `driver().cuLaunchKernel(...)`.
struct Driver {
#define LINAC_CUDA_DECLARE(name) decltype(&::name) name = nullptr;
  LINAC_CUDA_DRIVER_FUNCTIONS(LINAC_CUDA_DECLARE)
#undef LINAC_CUDA_DECLARE
};

/// The driver, loaded and initialised on first use. Throws an Error of kind
/// Driver when there is none or it lacks a function.
const Driver &driver();

/// Throws an Error of kind Driver naming `call` and the driver's reason
/// unless `result` is CUDA_SUCCESS.
void check(CUresult result, const std::string &call);

/// The context this thread's calls run in: its current one, or else device
/// 0's primary context, which becomes current.
CUcontext currentContext();

/// Whether `pointer` is device or managed memory; false for host memory,
/// pinned or not, and for addresses the driver does not know.
bool isDeviceMemory(const void *pointer);

/// Multiprocessors of the current device of `context`, which must be
/// current. Safe to call from several threads.
int64_t multiprocessors(CUcontext context);

/// Bytes free on the current device of the current context.
size_t freeMemory();

/// Lets the default memory pool of `context`'s device keep what stream-
/// ordered frees return, unless the process already set how much it keeps:
/// by default the pool hands it back to the device at each synchronisation,
/// and every call would map its workspace again. Safe to call from several
/// threads.
void keepPoolMemory(CUcontext context);

/// A device copy of host bytes, allocated, filled and freed in the order of
/// `stream`, so it lives exactly as long as the work enqueued meanwhile.
class StreamBuffer {
public:
  StreamBuffer(const void *data, size_t bytes, CUstream stream);
  /// Uninitialised device bytes, allocated and freed in the stream's order.
  StreamBuffer(size_t bytes, CUstream stream);
  ~StreamBuffer();
  StreamBuffer(const StreamBuffer &) = delete;
  StreamBuffer &operator=(const StreamBuffer &) = delete;

  CUdeviceptr address() const { return address_; }

private:
  CUdeviceptr address_ = 0;
  CUstream stream_;
};

/// One cubin, loaded as a module in each context that runs it, with the
/// functions looked up so far.
class ModuleCache {
public:
  /// The kernel files' images, each a module in every context.
  explicit ModuleCache(std::vector<std::string> images)
      : images_(std::move(images)) {}
  ~ModuleCache();
  ModuleCache(const ModuleCache &) = delete;
  ModuleCache &operator=(const ModuleCache &) = delete;

  /// The kernel `entry` (of whichever module has it) in `context`, allowed
  /// `sharedMemory` bytes of
  /// dynamic shared memory. Safe to call from several threads.
  CUfunction function(CUcontext context, const std::string &entry,
                      unsigned sharedMemory);
  /// How many blocks of `entry` the current context's device runs at once
  /// (at least one per multiprocessor). Safe to call from several threads.
  int64_t residentBlocks(CUcontext context, const std::string &entry,
                         unsigned blockThreads, unsigned sharedMemory);

  /// Two counters in `context`, zero before the first launch, for the
  /// launches of one kernel at a time on `stream`, each carrying them on
  /// for the next: kernels that share out work through a counter. Safe to
  /// call from several threads.
  CUdeviceptr workCounters(CUcontext context, CUstream stream);

private:
  struct Modules {
    std::vector<CUmodule> modules;
    std::map<std::string, CUfunction> functions;
  };
  std::vector<std::string> images_;
  std::mutex mutex_;
  std::map<CUcontext, Modules> modules_;
  std::map<std::pair<CUcontext, std::string>, int64_t> residentBlocks_;
  std::map<std::pair<CUcontext, CUstream>, CUdeviceptr> workCounters_;
};

} // namespace linac::cuda

#endif // LINAC_RUNTIME_CUDA_DRIVER_H
