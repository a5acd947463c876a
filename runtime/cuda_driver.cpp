//===- cuda_driver.cpp - the CUDA driver API, resolved at run time --------===//

#include "cuda_driver.h"

#include "linac/package.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <set>
#include <dlfcn.h>
#include <type_traits>

namespace linac::cuda {

static Error driverError(const std::string &what) {
  return Error(Error::Kind::Driver, what);
}

#define LINAC_CUDA_STRINGIFY_EXPANDED(name) #name
#define LINAC_CUDA_STRINGIFY(name) LINAC_CUDA_STRINGIFY_EXPANDED(name)

/// The driver's reason and name for `result`, e.g. "out of memory
/// (CUDA_ERROR_OUT_OF_MEMORY)".
static std::string describe(const Driver &driver, CUresult result) {
  const char *reason = nullptr, *name = nullptr;
  driver.cuGetErrorString(result, &reason);
  driver.cuGetErrorName(result, &name);
  return std::string(reason ? reason : "unknown error") + " (" +
         (name ? name : std::to_string(result)) + ")";
}

static Driver load() {
  // The driver stays loaded for the life of the process: the modules and
  // contexts it hands out outlive any one package.
  void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library)
    throw driverError(std::string("no CUDA driver: ") + dlerror());
  Driver loaded;
  auto resolve = [&](auto &function, const char *symbol) {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(
        dlsym(library, symbol));
    if (!function)
      throw driverError(std::string("the CUDA driver has no ") + symbol +
                        "; it is older than this runtime needs");
  };
#define LINAC_CUDA_RESOLVE(name)                                               \
  resolve(loaded.name, LINAC_CUDA_STRINGIFY(name));
  LINAC_CUDA_DRIVER_FUNCTIONS(LINAC_CUDA_RESOLVE)
#undef LINAC_CUDA_RESOLVE
  if (CUresult result = loaded.cuInit(0); result != CUDA_SUCCESS)
    throw driverError("cuInit: " + describe(loaded, result));
  return loaded;
}

const Driver &driver() {
  // A failed load throws out of the initialisation, so the next call tries
  // again and reports the same reason.
  static const Driver loaded = load();
  return loaded;
}

void check(CUresult result, const std::string &call) {
  if (result != CUDA_SUCCESS)
    throw driverError(call + ": " + describe(driver(), result));
}

static CUcontext retainPrimaryContext() {
  CUdevice device;
  check(driver().cuDeviceGet(&device, 0), "cuDeviceGet");
  CUcontext context = nullptr;
  check(driver().cuDevicePrimaryCtxRetain(&context, device),
        "cuDevicePrimaryCtxRetain");
  return context;
}

CUcontext currentContext() {
  CUcontext context = nullptr;
  check(driver().cuCtxGetCurrent(&context), "cuCtxGetCurrent");
  if (context)
    return context;
  // Retained once and never released: the process keeps it as the CUDA
  // runtime API would.
  static const CUcontext primary = retainPrimaryContext();
  check(driver().cuCtxSetCurrent(primary), "cuCtxSetCurrent");
  return primary;
}

bool isDeviceMemory(const void *pointer) {
  // Unlike cuPointerGetAttribute, cuPointerGetAttributes leaves the values
  // zero for memory the driver does not know, such as plain host memory,
  // rather than failing. The driver writes IS_MANAGED as a bool, which a
  // zeroed unsigned reads right whatever the bool's width.
  unsigned memoryType = 0, isManaged = 0;
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                      CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void *values[] = {&memoryType, &isManaged};
  check(driver().cuPointerGetAttributes(2, attributes, values,
                                        reinterpret_cast<CUdeviceptr>(pointer)),
        "cuPointerGetAttributes");
  return memoryType == CU_MEMORYTYPE_DEVICE || isManaged;
}

size_t freeMemory() {
  size_t free = 0, total = 0;
  check(driver().cuMemGetInfo(&free, &total), "cuMemGetInfo");
  return free;
}

int64_t multiprocessors(CUcontext context) {
  static std::mutex mutex;
  static std::map<CUcontext, int64_t> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto found = known.find(context); found != known.end())
    return found->second;
  CUdevice device;
  check(driver().cuCtxGetDevice(&device), "cuCtxGetDevice");
  int count = 0;
  check(driver().cuDeviceGetAttribute(
            &count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device),
        "cuDeviceGetAttribute");
  return known.emplace(context, count).first->second;
}

void keepPoolMemory(CUcontext context) {
  static std::mutex mutex;
  static std::set<CUcontext> kept;
  std::lock_guard<std::mutex> lock(mutex);
  if (!kept.insert(context).second)
    return;
  CUdevice device;
  check(driver().cuCtxGetDevice(&device), "cuCtxGetDevice");
  CUmemoryPool pool;
  check(driver().cuDeviceGetDefaultMemPool(&pool, device),
        "cuDeviceGetDefaultMemPool");
  cuuint64_t threshold = 0;
  check(driver().cuMemPoolGetAttribute(
            pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
        "cuMemPoolGetAttribute");
  if (threshold != 0)
    return;
  threshold = std::numeric_limits<cuuint64_t>::max();
  check(driver().cuMemPoolSetAttribute(
            pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
        "cuMemPoolSetAttribute");
}

StreamBuffer::StreamBuffer(const void *data, size_t bytes, CUstream stream)
    : stream_(stream) {
  check(driver().cuMemAllocAsync(&address_, bytes, stream), "cuMemAllocAsync");
  CUresult copied = driver().cuMemcpyHtoDAsync(address_, data, bytes, stream);
  if (copied != CUDA_SUCCESS) {
    driver().cuMemFreeAsync(address_, stream);
    check(copied, "cuMemcpyHtoDAsync");
  }
}

StreamBuffer::StreamBuffer(size_t bytes, CUstream stream) : stream_(stream) {
  check(driver().cuMemAllocAsync(&address_, bytes, stream), "cuMemAllocAsync");
}

StreamBuffer::~StreamBuffer() {
  // A destructor cannot report a failure; one here means the stream is
  // already broken, which the caller's next synchronisation reports.
  driver().cuMemFreeAsync(address_, stream_);
}

/// Runs f in `context`, if it still exists.
template <typename F> static void inContext(CUcontext context, F f) {
  if (driver().cuCtxPushCurrent(context) != CUDA_SUCCESS)
    return;
  f();
  CUcontext popped;
  driver().cuCtxPopCurrent(&popped);
}

ModuleCache::~ModuleCache() {
  // Best effort: a context the caller destroyed took its modules and
  // memory with it, and pushing it fails.
  for (const auto &loaded : modules_)
    inContext(loaded.first, [&] {
      for (CUmodule module : loaded.second.modules)
        driver().cuModuleUnload(module);
    });
  for (const auto &counters : workCounters_)
    inContext(counters.first.first,
              [&] { driver().cuMemFree(counters.second); });
}

CUfunction ModuleCache::function(CUcontext context, const std::string &entry,
                                 unsigned sharedMemory) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto loaded = modules_.find(context);
  if (loaded == modules_.end()) {
    // Every module or none, so that a failed load is tried again.
    Modules fresh;
    for (const std::string &image : images_) {
      CUmodule module;
      CUresult result = driver().cuModuleLoadData(&module, image.data());
      if (result != CUDA_SUCCESS)
        for (CUmodule done : fresh.modules)
          driver().cuModuleUnload(done);
      check(result, "cuModuleLoadData");
      fresh.modules.push_back(module);
    }
    loaded = modules_.emplace(context, std::move(fresh)).first;
  }
  std::map<std::string, CUfunction> &functions = loaded->second.functions;
  if (auto known = functions.find(entry); known != functions.end())
    return known->second;
  CUfunction function;
  CUresult found = CUDA_ERROR_NOT_FOUND;
  for (CUmodule module : loaded->second.modules)
    if ((found = driver().cuModuleGetFunction(
             &function, module, entry.c_str())) != CUDA_ERROR_NOT_FOUND)
      break;
  check(found, "cuModuleGetFunction('" + entry + "')");
  // Kernels get 48 KiB of dynamic shared memory unless they opt in to more.
  constexpr unsigned kDefaultSharedMemory = 48 * 1024;
  if (sharedMemory > kDefaultSharedMemory)
    check(driver().cuFuncSetAttribute(
              function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
              static_cast<int>(sharedMemory)),
          "cuFuncSetAttribute('" + entry + "')");
  functions.emplace(entry, function);
  return function;
}

int64_t ModuleCache::residentBlocks(CUcontext context, const std::string &entry,
                                    unsigned blockThreads,
                                    unsigned sharedMemory) {
  CUfunction kernel = function(context, entry, sharedMemory);
  std::lock_guard<std::mutex> lock(mutex_);
  auto key = std::make_pair(context, entry);
  if (auto known = residentBlocks_.find(key); known != residentBlocks_.end())
    return known->second;
  int perMultiprocessor = 0;
  check(driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(
            &perMultiprocessor, kernel, int(blockThreads), sharedMemory),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor('" + entry + "')");
  int64_t blocks =
      int64_t(std::max(perMultiprocessor, 1)) * multiprocessors(context);
  residentBlocks_.emplace(key, blocks);
  return blocks;
}

CUdeviceptr ModuleCache::workCounters(CUcontext context, CUstream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto key = std::make_pair(context, stream);
  if (auto known = workCounters_.find(key); known != workCounters_.end())
    return known->second;
  constexpr size_t kBytes = 2 * sizeof(unsigned long long);
  CUdeviceptr counters;
  check(driver().cuMemAlloc(&counters, kBytes), "cuMemAlloc");
  if (CUresult zeroed = driver().cuMemsetD8Async(counters, 0, kBytes, stream);
      zeroed != CUDA_SUCCESS) {
    driver().cuMemFree(counters);
    check(zeroed, "cuMemsetD8Async");
  }
  workCounters_.emplace(key, counters);
  return counters;
}

} // namespace linac::cuda
