//===- package.h - the linac runtime's C++ API ------------------*- C++ -*-===//

#ifndef LINAC_PACKAGE_H
#define LINAC_PACKAGE_H

#include "linac/manifest.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

// The driver's context and stream handles, as cuda.h declares them.
struct CUctx_st;
struct CUstream_st;
struct linac_cuda_decode_args;
struct linac_cuda_forward_args;
struct linac_cuda_segment;

namespace linac {

namespace cuda {
class ModuleCache;
} // namespace cuda

/// A bad argument or package, or a failure below the runtime; the message
/// says which and why.
struct Error : std::runtime_error {
  /// Driver: no CUDA driver, or a driver call failed.
  enum class Kind { InvalidArgument, Package, Kernel, Driver };
  Error(Kind kind, const std::string &message)
      : std::runtime_error(message), kind(kind) {}
  Kind kind;
};

struct ArgumentInfo {
  std::string name;
  std::string role;  ///< input, param or runtime
  std::string kind;  ///< key, value, scalar, matrix, state, index
  std::string shape; ///< e.g. "[B, T, H, K]"
};

struct HostTensor {
  const float *data = nullptr;
  std::vector<int64_t> shape;
};

/// The most threads a host call may ask for.
inline constexpr int kMaxHostThreads = 1024;

struct ForwardRequest {
  std::map<std::string, HostTensor> tensors; ///< inputs and parameters
  std::vector<int64_t> cuSeqlens;            ///< empty: B sequences of T
  const float *initialState = nullptr;
  float *finalState = nullptr;
  float *output = nullptr;
  float scale = 0.0f;
  /// Threads the pass runs on (the caller's among them): 0 for every core
  /// this process may run on, else 1 to kMaxHostThreads.
  int threads = 0;
  /// How the chunkwise pass cuts sequences into pieces that run side by
  /// side: 0 where threads would otherwise idle, -1 never, n > 0 into
  /// pieces of n tokens rounded up to whole chunks.
  int64_t segmentTokens = 0;
};

/// The gradients of L = <dOutput, output> + <dFinalState, final state> of
/// the forward pass `forward` describes (its output and final state unused)
/// with respect to its inputs, parameters and initial state.
struct BackwardRequest {
  ForwardRequest forward;
  const float *dOutput = nullptr;     ///< [B, T, H, V]
  const float *dFinalState = nullptr; ///< as the states, or null for zeros
  /// Each input's and parameter's gradient, by name, shaped as its tensor;
  /// an argument left out gets none.
  std::map<std::string, float *> gradients;
  float *dInitialState = nullptr; ///< as the states, or null
};

/// The manifest's name of `dtype` ("float32", "bfloat16", "float16"), or
/// null for a value outside the enum.
const char *dtypeName(DType dtype);

/// A tensor in device memory, C order, in the call's dtype (float32 for
/// parameters).
struct DeviceTensor {
  const void *data = nullptr;
  std::vector<int64_t> shape;
};

/// A forward pass of a CUDA package: the tensors of a ForwardRequest, in
/// device memory, enqueued on `stream`.
struct DeviceForwardRequest {
  std::map<std::string, DeviceTensor> tensors; ///< inputs and parameters
  DType dtype = DType::Float32;                ///< of inputs and output
  std::vector<int64_t> cuSeqlens;              ///< host memory; empty: B of T
  const float *initialState = nullptr;         ///< device, or null for zeros
  float *finalState = nullptr;                 ///< device, or null
  void *output = nullptr;                      ///< device, [B, T, H, V]
  float scale = 0.0f;
  void *stream = nullptr; ///< a CUstream; null for the default stream
  /// How a chunkwise kernel cuts sequences into segments that run side by
  /// side (linac/segments.h): 0 as the runtime's model of the device
  /// finds fastest, -1 never, n > 0 into segments of n tokens rounded up
  /// to whole chunks.
  int64_t segmentTokens = 0;
};

/// The backward of a CUDA package's forward pass: BackwardRequest's
/// buffers in device memory, enqueued on forward.stream. Gradients are
/// float32 whatever the activations' dtype.
struct DeviceBackwardRequest {
  /// Its output, final state and segmentTokens unused.
  DeviceForwardRequest forward;
  const void *dOutput = nullptr;      ///< [B, T, H, V] in forward.dtype
  const float *dFinalState = nullptr; ///< as the states, or null for zeros
  /// Each input's and parameter's gradient, by name, shaped as its tensor;
  /// an argument left out gets none.
  std::map<std::string, float *> gradients;
  float *dInitialState = nullptr; ///< as the states, or null
};

/// A decode step of a cpu package: a few new tokens for each of B
/// sequences whose states live in a pool of P slots, addressed per sequence
/// (continuous batching).
struct DecodeRequest {
  /// Inputs [B, n, H, ...] (n new tokens, 1 to maxDecodeTokens()) and
  /// parameters, as for the forward pass.
  std::map<std::string, HostTensor> tensors;
  /// [P, H, K, stateColumns()], key-major; read and written in place.
  float *statePool = nullptr;
  std::vector<int64_t> poolShape;
  /// [B]: sequence b's pool slot, or -1 to skip it (its output rows are not
  /// written). No slot may appear twice.
  std::vector<int64_t> stateIndices;
  float *output = nullptr; ///< [B, n, H, V]
  float scale = 0.0f;
  int threads = 0; ///< as ForwardRequest's
};

/// A decode step of a CUDA package: the tensors of a DecodeRequest in
/// device memory, state indices included, enqueued on `stream`. The kernel
/// skips a sequence whose slot is outside [0, P), -1 among them; that no
/// slot appears twice is the caller's to keep.
struct DeviceDecodeRequest {
  std::map<std::string, DeviceTensor> tensors;
  DType dtype = DType::Float32;
  float *statePool = nullptr; ///< 16-byte aligned
  std::vector<int64_t> poolShape;
  const int64_t *stateIndices = nullptr; ///< device, numStateIndices = B
  size_t numStateIndices = 0;
  void *output = nullptr;
  float scale = 0.0f;
  void *stream = nullptr;
};

/// The threads a host call with `threads` runs on: itself from 1 to
/// kMaxHostThreads, or for 0 the cores this process may run on (its
/// affinity, which a container or taskset narrows); other counts throw.
int hostThreads(int threads);

/// Whether this host runs a CPU kernel file built for `isa`, at most the
/// instruction set LINAC_CPU_ISA names when it is set (to test a poorer
/// file on a host that has more).
bool hostRuns(manifest::CpuIsa isa);

/// Shapes a validated request implies.
struct ForwardShape {
  int64_t batch = 0, tokens = 0, heads = 0, sequences = 0;
};

class Package {
public:
  /// Loads NAME.linac/: checks the manifest's fields and the package's
  /// integrity (docs/runtime.md), then loads a CPU kernel or reads a CUDA
  /// package's cubin. Opening needs no CUDA driver.
  static std::unique_ptr<Package> open(const std::string &path);
  /// Throws the Error open() throws for a package with this manifest,
  /// reading none of the package's other files (for tests and fuzzing).
  static void checkManifest(const std::string &text);
  ~Package();

  const std::string &layer() const { return layer_; }
  const std::string &target() const { return target_; }
  int64_t keyDim() const { return keyDim_; }
  int64_t valueDim() const { return valueDim_; }
  /// Columns of a head's state in memory: V, or V + 1 when the layer keeps
  /// a normaliser (its last column).
  int64_t stateColumns() const { return valueDim_ + (normalizer_ ? 1 : 0); }
  const std::vector<ArgumentInfo> &arguments() const { return arguments_; }
  /// The manifest's text, for tools that show or test it.
  const std::string &manifest() const { return manifest_; }
  /// The manifest as read and checked.
  const manifest::Manifest &info() const { return info_; }
  /// Whether the package has its backward pass (not `linac compile
  /// --no-backward`).
  bool hasBackward() const { return info_.hasBackward(); }
  /// The kernel file loaded: of a cpu package, the one for the richest
  /// instruction set this host runs; of a GPU package, its first.
  const std::string &kernelFile() const { return kernelFile_; }
  /// Every kernel file loaded: a GPU package's kernels lie in several.
  const std::vector<std::string> &kernelFiles() const { return kernelFiles_; }

  /// Validates `request`'s tensors and returns the shapes they imply.
  ForwardShape check(const ForwardRequest &request) const;
  /// Validates what a device request can be checked for without a driver:
  /// shapes, dtype, and pointers' presence and alignment.
  ForwardShape check(const DeviceForwardRequest &request) const;
  /// The checks of check(DeviceForwardRequest) but the output's and the
  /// final state's, which a backward call does not write.
  ForwardShape checkDeviceInputs(const DeviceForwardRequest &request) const;
  /// Runs the forward pass of a cpu package on host buffers.
  void forward(const ForwardRequest &request) const;
  /// Runs a cpu package's sequences without reads (the request's output
  /// unused) to their final states and, unless `transitions` is null,
  /// writes their transitions (linac_states_host).
  void states(const ForwardRequest &request, float *transitions) const;
  /// Runs the backward pass of a cpu package on host buffers, overwriting
  /// the gradients.
  void backward(const BackwardRequest &request) const;
  /// Enqueues the backward pass of a CUDA package on the request's
  /// stream, as forwardDevice, overwriting the gradients; the workspace it
  /// keeps states in lives in the stream's order (backwardWorkspaceBytes).
  void backwardDevice(const DeviceBackwardRequest &request) const;
  /// The device memory a backward call on `request`'s shape takes besides
  /// its arguments.
  size_t backwardWorkspaceBytes(const DeviceForwardRequest &request) const;
  /// Runs a decode step of a cpu package on host buffers.
  void decode(const DecodeRequest &request) const;
  /// Enqueues a decode step of a CUDA package on the request's stream.
  void decodeDevice(const DeviceDecodeRequest &request) const;
  /// New tokens a decode call may take per sequence.
  int64_t maxDecodeTokens() const { return maxDecodeTokens_; }
  /// Copies states between a pool [P, H, K, stateColumns()] and the
  /// forward pass's [N, H, K, stateColumns()] layout: state n is pool slot
  /// indices[n]; entries of -1 are skipped.
  void statesFromPool(const float *pool, int64_t poolSlots, int64_t heads,
                      const std::vector<int64_t> &indices, float *states) const;
  void statesToPool(const float *states, int64_t heads,
                    const std::vector<int64_t> &indices, float *pool,
                    int64_t poolSlots) const;
  /// Enqueues the forward pass of a CUDA package on the request's stream,
  /// in the calling thread's current CUDA context (device 0's primary
  /// context if it has none). Does not synchronize.
  void forwardDevice(const DeviceForwardRequest &request) const;
  /// The entry point whose launches forwardDevice(request) ends with: the
  /// chunkwise entry, the phased state kernel or the scan, as the batch's
  /// shape and the calling thread's current CUDA context decide.
  std::string deviceForwardEntry(const DeviceForwardRequest &request) const;

private:
  struct CudaKernel {
    std::string entry;
    DType dtype;
    unsigned blockThreads, sharedMemory;
    bool chunkwise;
  };

  Package();
  /// Fills `package` from its manifest_ text; `path` names it in errors.
  static void readManifest(const std::string &path, Package *package);
  /// Loads the kernel file the manifest names: dlopens a CPU kernel or
  /// reads a cubin.
  void loadKernels(const std::string &path);
  bool runsOnDevice() const { return target_ != "cpu"; }
  /// Refuses a call of the host forward pass on a CUDA package, or of the
  /// device one (`device`) on a cpu package.
  void requireTarget(bool device) const;
  /// Refuses a backward call on a package compiled without its backward.
  void requireBackward() const;
  /// The parts of a backward call's workspace at `shape`, in floats.
  std::vector<size_t> backwardWorkspaceParts(const ForwardShape &shape) const;
  /// The checks both forward passes share, on the tensors' shapes by name.
  ForwardShape
  checkShapes(const std::map<std::string, std::vector<int64_t>> &shapes,
              const std::vector<int64_t> &cuSeqlens, float scale) const;

  std::string layer_, target_, manifest_;
  int64_t keyDim_ = 0, valueDim_ = 0;
  bool normalizer_ = false;
  std::vector<ArgumentInfo> arguments_;
  std::vector<manifest::Argument> inputs_, params_;
  manifest::Manifest info_;
  /// The manifest's kernel file (layer.so or the cubin) and, on the CPU,
  /// its entry points.
  std::string kernelFile_, forwardEntry_, decodeEntry_;
  std::vector<std::string> kernelFiles_;
  void *library_ = nullptr;
  void *forward_ = nullptr;
  void *decode_ = nullptr;
  void *backward_ = nullptr;
  int64_t maxDecodeTokens_ = 0;
  /// Decode items a (sequence, head) state makes, one per strip of it.
  int64_t decodeParts_ = 1;
  /// Whether the decode kernels stage states through a tensor map.
  bool decodeTensorMap_ = false;
  /// Encodes the tensor map of a pool of `states` K x V states into `args`.
  void encodeStateMap(float *pool, int64_t states,
                      linac_cuda_decode_args &args) const;
  std::vector<CudaKernel> decodeKernels_;
  /// The backward kernel, for every dtype (the manifest's backward_kernels).
  /// The backward's kernels in launch order: the chunkwise backward's seven
  /// or the token-by-token one (abi.h).
  std::vector<CudaKernel> backwardKernels_;
  /// Encodes the tensor maps of the plan's tensor_inputs and tensor_output
  /// into `args` when every one of them takes one.
  void encodeTensorMaps(const DeviceForwardRequest &request,
                        linac_cuda_forward_args &args) const;
  /// Launches `kernel` on a (gridX, gridY) grid with one argument struct.
  void launch(const CudaKernel &kernel, CUctx_st *context, void *args,
              int64_t gridX, int64_t gridY, CUstream_st *stream,
              int64_t gridZ = 1) const;
  /// How forwardDevice runs a checked request: the kernel of its last
  /// launches, the segments it cuts (none: whole sequences), and the
  /// workspace slots of the phased kernels' preparing kernel, which runs
  /// first unless they are 0.
  struct DeviceForward {
    const CudaKernel *kernel = nullptr;
    std::vector<linac_cuda_segment> segments;
    int64_t preparedSlots = 0;
  };
  DeviceForward planDeviceForward(const DeviceForwardRequest &request,
                                  const ForwardShape &shape,
                                  CUctx_st *context) const;
  /// Enqueues the passes of a chunkwise forward cut into `segments`.
  void forwardSegments(const CudaKernel &kernel, CUctx_st *context,
                       linac_cuda_forward_args &args,
                       const std::vector<linac_cuda_segment> &segments,
                       CUstream_st *stream) const;
  /// Fills what forward and decode arguments share: heads, input and
  /// parameter pointers, output and scale, refusing host memory.
  template <typename Args>
  void deviceArguments(const std::map<std::string, DeviceTensor> &tensors,
                       int64_t heads, void *output, float scale,
                       Args &args) const;
  /// Presence and alignment of a device call's inputs and parameters.
  void checkDevicePointers(const std::map<std::string, DeviceTensor> &tensors,
                           DType dtype) const;
  /// Validates pool indices against `poolSlots`; returns a head's state size.
  size_t checkPool(int64_t poolSlots, const std::vector<int64_t> &indices) const;
  /// The checks of a copy between a pool and states of `heads` heads;
  /// returns a state's size over all heads.
  size_t checkPoolCopy(int64_t poolSlots, int64_t heads,
                       const std::vector<int64_t> &indices) const;
  /// The checks every decode step shares: shapes, token count, pool.
  ForwardShape
  checkDecode(const std::map<std::string, std::vector<int64_t>> &shapes,
              const std::vector<int64_t> &poolShape, size_t numIndices,
              float scale) const;
  const CudaKernel &kernelFor(DType dtype,
                              const std::vector<CudaKernel> &kernels) const;
  std::vector<CudaKernel> kernels_;            ///< fastest first
  /// The compose kernel of a chunkwise CUDA package, and the transition
  /// blocks a segment takes (the manifest's segments).
  std::optional<CudaKernel> composeKernel_;
  int64_t transitionBlocks_ = 0;
  /// A package's phased kernels (the manifest's phased): preparing and
  /// state kernels, one of each per chunkwise dtype, the workspace bytes a
  /// chunk slot and head take, and when they run.
  std::vector<CudaKernel> preparingKernels_, phasedKernels_;
  int64_t preparedChunkBytes_ = 0;
  manifest::PhasedUse phasedUse_ = manifest::PhasedUse::ByShape;
  std::unique_ptr<cuda::ModuleCache> modules_; ///< the cubins, per context
};

} // namespace linac

#endif // LINAC_PACKAGE_H
