//===- bench.cpp - timing packages on the GPU -----------------------------===//

#include "linac/bench.h"

#include "bench_json.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <dlfcn.h>
#include <functional>
#include <map>
#include <random>

namespace linac::bench {

size_t elementSize(DType dtype) { return dtype == DType::Float32 ? 4 : 2; }

std::vector<char> encodeAs(const std::vector<float> &values, DType dtype) {
  std::vector<char> bytes(values.size() * elementSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::Float32)
      reinterpret_cast<float *>(bytes.data())[i] = values[i];
    else if (dtype == DType::BFloat16)
      reinterpret_cast<__nv_bfloat16 *>(bytes.data())[i] =
          __float2bfloat16(values[i]);
    else
      reinterpret_cast<__half *>(bytes.data())[i] = __float2half(values[i]);
  }
  return bytes;
}

std::vector<float> decodeFrom(const std::vector<char> &bytes, DType dtype) {
  std::vector<float> values(bytes.size() / elementSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::Float32)
      values[i] = reinterpret_cast<const float *>(bytes.data())[i];
    else if (dtype == DType::BFloat16)
      values[i] = __bfloat162float(
          reinterpret_cast<const __nv_bfloat16 *>(bytes.data())[i]);
    else
      values[i] =
          __half2float(reinterpret_cast<const __half *>(bytes.data())[i]);
  }
  return values;
}

namespace {

void check(cudaError_t status, const char *what) {
  if (status != cudaSuccess)
    throw Error(Error::Kind::Driver,
                std::string(what) + ": " + cudaGetErrorString(status));
}

} // namespace

std::vector<char> bytesOf(const std::vector<int64_t> &values) {
  const char *first = reinterpret_cast<const char *>(values.data());
  return std::vector<char>(first, first + values.size() * sizeof(int64_t));
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  // A zero-byte tensor still gets an address the runtime can check.
  check(cudaMalloc(&data_, std::max<size_t>(bytes, 1)), "cudaMalloc");
}

DeviceBuffer::DeviceBuffer(const std::vector<char> &host)
    : DeviceBuffer(host.size()) {
  check(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice),
        "cudaMemcpy to the device");
}

DeviceBuffer::~DeviceBuffer() { cudaFree(data_); }

std::vector<char> DeviceBuffer::download() const {
  std::vector<char> host(bytes_);
  check(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost),
        "cudaMemcpy to the host");
  return host;
}

namespace {

struct Timing {
  double milliseconds = 0, hostMicroseconds = 0;
};

/// Bytes cleared before each timed run: more than the L2 of any GPU we
/// time on.
constexpr size_t kFlushBytes = size_t(256) << 20;

/// Times `reps` runs of `body` after three untimed ones: the median
/// milliseconds of each between two events, and the host's microseconds a
/// call. Each timed run starts behind a clear of kFlushBytes, as Triton's
/// do_bench does, so that it finds nothing of the last run in L2 and the
/// host's work before the launch is not counted as the kernel's.
Timing timeRuns(int reps, const std::function<void()> &body) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  DeviceBuffer flush(kFlushBytes);
  for (int i = 0; i < 3; ++i)
    body();
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    check(cudaMemsetAsync(flush.data(), 0, kFlushBytes), "cudaMemsetAsync");
    check(cudaEventRecord(start), "cudaEventRecord");
    body();
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(times.begin(), times.begin() + reps / 2, times.end());
  Timing timing;
  timing.milliseconds = times[reps / 2];
  auto hostStart = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i)
    body();
  std::chrono::duration<double, std::micro> host =
      std::chrono::steady_clock::now() - hostStart;
  timing.hostMicroseconds = host.count() / reps;
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return timing;
}

/// `count` random values in `dtype` (randomValues), uploaded.
std::unique_ptr<DeviceBuffer> randomTensor(size_t count, DType dtype,
                                           bool uniform, std::mt19937 &rng) {
  return std::make_unique<DeviceBuffer>(
      encodeAs(randomValues(count, uniform, rng), dtype));
}

double gemmFlopsPerSecond(int reps) {
  // cuBLAS is opened at run time, like the driver, so that tools linking
  // this library start on machines without it.
  void *library = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!library)
    library = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
  if (!library)
    throw Error(Error::Kind::Driver, std::string("no cuBLAS: ") + dlerror());
  auto create = reinterpret_cast<decltype(&cublasCreate_v2)>(
      dlsym(library, "cublasCreate_v2"));
  auto destroy = reinterpret_cast<decltype(&cublasDestroy_v2)>(
      dlsym(library, "cublasDestroy_v2"));
  // cublasGemmEx is overloaded in C++; the symbol is the 32-bit-index one.
  using GemmEx = cublasStatus_t (*)(
      cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
      const void *, const void *, cudaDataType, int, const void *,
      cudaDataType, int, const void *, void *, cudaDataType, int,
      cublasComputeType_t, cublasGemmAlgo_t);
  auto gemm = reinterpret_cast<GemmEx>(dlsym(library, "cublasGemmEx"));
  if (!create || !destroy || !gemm)
    throw Error(Error::Kind::Driver, "cuBLAS lacks cublasGemmEx");
  constexpr int n = 8192;
  std::mt19937 rng(1);
  auto a = randomTensor(size_t(n) * n, DType::BFloat16, false, rng);
  auto b = randomTensor(size_t(n) * n, DType::BFloat16, false, rng);
  DeviceBuffer c(size_t(n) * n * 2);
  cublasHandle_t handle;
  if (create(&handle) != CUBLAS_STATUS_SUCCESS)
    throw Error(Error::Kind::Driver, "cublasCreate failed");
  float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  double ms = timeRuns(reps, [&] {
                status = gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha,
                              a->data(), CUDA_R_16BF, n, b->data(), CUDA_R_16BF,
                              n, &beta, c.data(), CUDA_R_16BF, n,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
              }).milliseconds;
  destroy(handle);
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(Error::Kind::Driver, "cublasGemmEx failed");
  return 2.0 * n * n * double(n) / (ms * 1e-3);
}

} // namespace

Ceilings measureCeilings(int reps) {
  Ceilings ceilings;
  constexpr size_t bytes = size_t(1) << 30;
  DeviceBuffer from(bytes), to(bytes);
  check(cudaMemset(from.data(), 1, bytes), "cudaMemset");
  double ms = timeRuns(reps, [&] {
                check(cudaMemcpyAsync(to.data(), from.data(), bytes,
                                      cudaMemcpyDeviceToDevice),
                      "cudaMemcpyAsync");
              }).milliseconds;
  ceilings.copyBytesPerSecond = 2.0 * bytes / (ms * 1e-3);
  ceilings.gemmFlopsPerSecond = gemmFlopsPerSecond(reps);
  return ceilings;
}

namespace {

/// Random device tensors for every input ([B, T, H, ...] in `dtype`) and
/// parameter of `package`, and the activation bytes per token and head.
struct RandomArguments {
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::map<std::string, DeviceTensor> tensors;
  double bytesPerTokenHead = 0;

  RandomArguments(const Package &package, Shape shape, DType dtype) {
    std::mt19937 rng(std::random_device{}());
    int64_t k = package.keyDim(), v = package.valueDim();
    for (const manifest::Argument &arg : package.info().arguments) {
      std::vector<int64_t> features = manifest::trailingDims(arg.kind, k, v);
      int64_t size = 1;
      for (int64_t f : features)
        size *= f;
      bool param = arg.role == manifest::Role::Param;
      std::vector<int64_t> dims =
          param ? std::vector<int64_t>{shape.heads}
                : std::vector<int64_t>{shape.batch, shape.tokens, shape.heads};
      dims.insert(dims.end(), features.begin(), features.end());
      size_t count = size_t(size) * shape.heads *
                     (param ? 1 : shape.batch * shape.tokens);
      buffers.push_back(
          randomTensor(count, param ? DType::Float32 : dtype, param, rng));
      tensors[arg.name] = {buffers.back()->data(), dims};
      if (!param)
        bytesPerTokenHead += double(size) * elementSize(dtype);
    }
    // The output.
    bytesPerTokenHead += double(v) * elementSize(dtype);
  }
};

/// The manifest's first kernel for `dtype` in `kernels`.
std::string entryFor(const std::vector<manifest::Kernel> &kernels,
                     DType dtype) {
  for (const manifest::Kernel &kernel : kernels)
    if (kernel.dtype == dtype)
      return kernel.entry;
  return "";
}

} // namespace

Result forward(const Package &package, Shape shape, DType dtype, int reps,
               int64_t segmentTokens) {
  int64_t v = package.valueDim();
  RandomArguments arguments(package, shape, dtype);
  DeviceForwardRequest request;
  request.dtype = dtype;
  request.tensors = arguments.tensors;
  request.segmentTokens = segmentTokens;
  DeviceBuffer output(size_t(shape.batch * shape.tokens) * shape.heads * v *
                      elementSize(dtype));
  request.output = output.data();

  Result result;
  result.kernel = package.deviceForwardEntry(request);
  Timing timing = timeRuns(reps, [&] { package.forwardDevice(request); });
  result.milliseconds = timing.milliseconds;
  result.hostMicroseconds = timing.hostMicroseconds;
  check(cudaGetLastError(), "the forward pass");
  double tokenHeads = double(shape.batch * shape.tokens) * shape.heads;
  result.bytes = arguments.bytesPerTokenHead * tokenHeads;
  result.flops = forwardFlops(package, shape);
  return result;
}

Result decode(const Package &package, Shape shape, DType dtype, int reps) {
  RandomArguments arguments(package, shape, dtype);
  // One slot per sequence, in reverse order so that no sequence reads the
  // slot of its own index.
  size_t stateFloats =
      size_t(shape.batch) * shape.heads * package.keyDim() * package.stateColumns();
  std::mt19937 rng(std::random_device{}());
  auto pool = randomTensor(stateFloats, DType::Float32, false, rng);
  DeviceBuffer output(size_t(shape.batch * shape.tokens) * shape.heads *
                      package.valueDim() * elementSize(dtype));
  DeviceDecodeRequest request;
  request.dtype = dtype;
  request.tensors = arguments.tensors;
  request.statePool = static_cast<float *>(pool->data());
  request.poolShape = {shape.batch, shape.heads, package.keyDim(),
                       package.stateColumns()};
  std::vector<int64_t> indices;
  for (int64_t b = shape.batch - 1; b >= 0; --b)
    indices.push_back(b);
  DeviceBuffer deviceIndices(bytesOf(indices));
  request.stateIndices = static_cast<const int64_t *>(deviceIndices.data());
  request.numStateIndices = indices.size();
  request.output = output.data();

  Result result;
  result.kernel = entryFor(package.info().decode.kernels, dtype);
  Timing timing = timeRuns(reps, [&] { package.decodeDevice(request); });
  result.milliseconds = timing.milliseconds;
  result.hostMicroseconds = timing.hostMicroseconds;
  check(cudaGetLastError(), "the decode step");
  // The state is read and written once; decode has no FLOP floor.
  result.bytes = 2.0 * stateFloats * sizeof(float) +
                 arguments.bytesPerTokenHead * shape.batch * shape.tokens *
                     shape.heads;
  return result;
}

double floorMilliseconds(const Result &result, const Ceilings &ceilings) {
  return 1e3 * std::max(result.bytes / ceilings.copyBytesPerSecond,
                        result.flops / ceilings.gemmFlopsPerSecond);
}

std::string jsonLine(const Package &package, const char *mode, Shape shape,
                     DType dtype, const Result &result,
                     const Ceilings &ceilings) {
  double seconds = result.milliseconds * 1e-3;
  double floorMs = floorMilliseconds(result, ceilings);
  nlohmann::json line = {
      {"variant", package.layer()},
      {"mode", mode},
      {"shape", shapeJson(package, shape)},
      {"dtype", dtypeName(dtype)},
      {"kernel", result.kernel},
      {"ms", result.milliseconds},
      {"host_us", result.hostMicroseconds},
      {"gb_per_s", result.bytes / seconds * 1e-9},
      {"tflop_per_s", result.flops / seconds * 1e-12},
      {"floor_ms", floorMs},
      {"pct_of_floor", 100.0 * floorMs / result.milliseconds},
      {"copy_tb_per_s", ceilings.copyBytesPerSecond * 1e-12},
      {"gemm_tflop_per_s", ceilings.gemmFlopsPerSecond * 1e-12},
  };
  return line.dump();
}

} // namespace linac::bench
