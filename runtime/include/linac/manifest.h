//===- manifest.h - the package manifest's schema ---------------*- C++ -*-===//
//
// The one definition of what a package's manifest.json holds: its enums,
// its structs, the name of every field, and the reader and writer. The
// compiler fills a Manifest and writes it; the runtime, the benchmark and
// the tests read it; the compiler's plan pass keeps the same Plan on the
// layer it plans. Each struct lists its fields once, in `fields`, which
// every serialiser walks (docs/design.md, the package format).
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_MANIFEST_H
#define LINAC_MANIFEST_H

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace linac {

/// The element type of a device call's inputs and output, and of a kernel.
enum class DType { Float32, BFloat16, Float16 };

namespace manifest {

/// The manifest format this runtime reads and the compiler writes.
inline constexpr int64_t kFormat = 5;

enum class Target { Cpu, Sm90a, Sm80 };
/// The forward pass's algorithm.
enum class Family { Recurrent, Chunkwise, DeltaChunkwise };
enum class KeyDecay { None, Fixed, Scalar, Vector };
/// An erase strength: none, a scalar or a key vector.
enum class Strength { None, Scalar, Vector };
/// A write: none, without a strength, or with a scalar or value vector.
enum class Write { None, Plain, Scalar, Vector };
/// Whether the read sees the state after the token's transitions or before.
enum class ReadOrder { After, Before };
/// How chunkwise kernels form gate differences: no gate, a scalar gate's
/// whole tile, a per-channel gate split through reference log-gates (CPU),
/// per-pair differences (CPU, value-side decays) or sub-chunks (GPUs).
enum class GateNumerics { None, ScalarTile, Reference, Pairwise, Subchunk };
enum class ChunkKernel { Lockstep, Pipelined, Warpgroup };
/// When a package's phased kernels run instead of its chunkwise entry:
/// for the shapes the runtime finds them faster at, for those only when it
/// also cuts the batch into segments, or always.
enum class PhasedUse { ByShape, Segmented, Always };
/// The instructions a CPU kernel file needs beyond x86-64's baseline.
enum class CpuIsa { Baseline, Avx2Fma };
enum class StateLayout { KeyMajor };
enum class DecodeStaging { Direct, Bulk, Tensor };
enum class DecodePlacement { BodyOrder, FirstUse };
enum class DecodeKeyRows { Whole, Split };
enum class Role { Input, Param, Runtime };
enum class Kind { Key, Value, Scalar, Matrix, State, Index };

/// The names enums have in manifests and attributes, one table per enum.
template <typename Enum> struct EnumNames;
#define LINAC_ENUM_NAMES(Enum, ...)                                            \
  template <> struct EnumNames<Enum> {                                         \
    static constexpr std::pair<Enum, std::string_view> table[] = __VA_ARGS__;  \
  };
LINAC_ENUM_NAMES(DType, {{DType::Float32, "float32"},
                         {DType::BFloat16, "bfloat16"},
                         {DType::Float16, "float16"}})
LINAC_ENUM_NAMES(Target, {{Target::Cpu, "cpu"},
                          {Target::Sm90a, "sm_90a"},
                          {Target::Sm80, "sm_80"}})
LINAC_ENUM_NAMES(Family, {{Family::Recurrent, "recurrent"},
                          {Family::Chunkwise, "chunkwise"},
                          {Family::DeltaChunkwise, "delta_chunkwise"}})
LINAC_ENUM_NAMES(KeyDecay, {{KeyDecay::None, "none"},
                            {KeyDecay::Fixed, "fixed"},
                            {KeyDecay::Scalar, "scalar"},
                            {KeyDecay::Vector, "vector"}})
LINAC_ENUM_NAMES(Strength, {{Strength::None, "none"},
                            {Strength::Scalar, "scalar"},
                            {Strength::Vector, "vector"}})
LINAC_ENUM_NAMES(Write, {{Write::None, "none"},
                         {Write::Plain, "plain"},
                         {Write::Scalar, "scalar"},
                         {Write::Vector, "vector"}})
LINAC_ENUM_NAMES(ReadOrder, {{ReadOrder::After, "after"},
                             {ReadOrder::Before, "before"}})
LINAC_ENUM_NAMES(GateNumerics, {{GateNumerics::None, "none"},
                                {GateNumerics::ScalarTile, "scalar_tile"},
                                {GateNumerics::Reference, "reference"},
                                {GateNumerics::Pairwise, "pairwise"},
                                {GateNumerics::Subchunk, "subchunk"}})
LINAC_ENUM_NAMES(ChunkKernel, {{ChunkKernel::Lockstep, "lockstep"},
                               {ChunkKernel::Pipelined, "pipelined"},
                               {ChunkKernel::Warpgroup, "warpgroup"}})
LINAC_ENUM_NAMES(PhasedUse, {{PhasedUse::ByShape, "by_shape"},
                             {PhasedUse::Segmented, "segmented"},
                             {PhasedUse::Always, "always"}})
LINAC_ENUM_NAMES(CpuIsa, {{CpuIsa::Baseline, "baseline"},
                          {CpuIsa::Avx2Fma, "avx2_fma"}})
LINAC_ENUM_NAMES(StateLayout, {{StateLayout::KeyMajor, "key_major"}})
LINAC_ENUM_NAMES(DecodeStaging, {{DecodeStaging::Direct, "direct"},
                                 {DecodeStaging::Bulk, "bulk"},
                                 {DecodeStaging::Tensor, "tensor"}})
LINAC_ENUM_NAMES(DecodePlacement, {{DecodePlacement::BodyOrder, "body_order"},
                                   {DecodePlacement::FirstUse, "first_use"}})
LINAC_ENUM_NAMES(DecodeKeyRows, {{DecodeKeyRows::Whole, "whole"},
                                 {DecodeKeyRows::Split, "split"}})
LINAC_ENUM_NAMES(Role, {{Role::Input, "input"},
                        {Role::Param, "param"},
                        {Role::Runtime, "runtime"}})
LINAC_ENUM_NAMES(Kind, {{Kind::Key, "key"},
                        {Kind::Value, "value"},
                        {Kind::Scalar, "scalar"},
                        {Kind::Matrix, "matrix"},
                        {Kind::State, "state"},
                        {Kind::Index, "index"}})
#undef LINAC_ENUM_NAMES

/// `value`'s name, or "" for a value outside the enum.
template <typename Enum> std::string_view nameOf(Enum value) {
  for (const auto &[entry, name] : EnumNames<Enum>::table)
    if (entry == value)
      return name;
  return {};
}

/// The enumerator called `name`.
template <typename Enum> std::optional<Enum> parse(std::string_view name) {
  for (const auto &[entry, entryName] : EnumNames<Enum>::table)
    if (entryName == name)
      return entry;
  return std::nullopt;
}

/// The names of all of `Enum`'s values, as "a, b or c".
template <typename Enum> std::string namesOf() {
  std::string names;
  size_t count = std::size(EnumNames<Enum>::table);
  for (size_t i = 0; i < count; ++i)
    names += std::string(i == 0 ? "" : i + 1 == count ? " or " : ", ") +
             std::string(EnumNames<Enum>::table[i].second);
  return names;
}

/// The bounds a serialiser checks an integer field against on reading.
struct Bounds {
  int64_t min = 0, max = std::numeric_limits<int64_t>::max();
};

/// Key and value dimensions beyond any layer's, small enough that sizes
/// derived from them stay far from overflow.
inline constexpr Bounds kDimBounds{1, 1 << 20};
/// CUDA's limits: 1 to 1024 threads a block, and shared memory sizes the
/// driver takes as int.
inline constexpr Bounds kThreadBounds{1, 1024};
inline constexpr Bounds kSharedMemoryBounds{0, std::numeric_limits<int>::max()};

/// What -linac-normalize found a layer's step to be.
struct NormalForm {
  bool chunkable = true;
  KeyDecay keyDecay = KeyDecay::None;
  bool valueDecay = false;
  Strength erase = Strength::None;
  Write write = Write::None;
  ReadOrder read = ReadOrder::After;
  bool normalizer = false;

  template <typename Self, typename Visit>
  static void fields(Self &self, Visit &&visit) {
    visit("chunkable", self.chunkable);
    visit("key_decay", self.keyDecay);
    visit("value_decay", self.valueDecay);
    visit("erase", self.erase);
    visit("write", self.write);
    visit("read", self.read);
    visit("normalizer", self.normalizer);
  }
};

/// What -linac-plan chose for a target. GPU-only fields are empty on the
/// CPU, chunkwise-only ones for a recurrent layer.
struct Plan {
  Target target = Target::Cpu;
  Family family = Family::Recurrent;
  /// Why a chunkable layer still runs as a recurrent scan.
  std::optional<std::string> recurrentReason;
  std::optional<int64_t> chunkSize;
  /// A GPU's chunkwise kernel (templates/linac/cuda/geometry.h).
  std::optional<ChunkKernel> chunkKernel;
  std::optional<GateNumerics> gateNumerics;
  std::optional<int64_t> subchunkSize;
  /// Inputs the chunkwise kernel copies into shared memory a chunk ahead,
  /// into their own memory and into the intra-chunk matrices'.
  std::optional<std::vector<int64_t>> sharedInputs, lateSharedInputs;
  /// Inputs the chunkwise kernel reads a chunk at a time through tensor maps
  /// the runtime encodes (linac_cuda_forward_args::input_maps).
  std::optional<std::vector<int64_t>> tensorInputs;
  /// Where the query, the key and the written value are each an input's
  /// row times a scalar of the token, those inputs (in that order): the
  /// warpgroup kernel then lands their rows in its operand tiles by tensor
  /// maps of 128-byte swizzled boxes (bf16 activations) and scales those
  /// rows by the tokens' scalars in place. Every tensor input is one of
  /// them.
  std::optional<std::vector<int64_t>> rowInputs;
  /// Whether that kernel stores a whole chunk's output by a tensor map
  /// (linac_cuda_forward_args::output_map): where the output is the read.
  std::optional<bool> tensorOutput;
  /// The forward kernel's block (the chunkwise one's where there is one)
  /// and the recurrent scan's.
  std::optional<int64_t> blockThreads, sharedMemory, scanBlockThreads;
  /// Whether fp16 activations take the chunkwise kernel.
  std::optional<bool> chunkwiseFloat16;
  StateLayout decodeStateLayout = StateLayout::KeyMajor;
  std::optional<DecodePlacement> decodePlacement;
  std::optional<DecodeStaging> decodeStaging;
  std::optional<DecodeKeyRows> decodeKeyRows;
  /// Warps a decode item takes, the strips a state splits into, the
  /// block's threads, its ring's stages and its shared memory.
  std::optional<int64_t> decodeWarps, decodeParts, decodeBlockThreads,
      decodeStages, decodeSharedMemory;
  /// A chunkwise GPU forward's segments (templates/linac/cuda/abi.h): the
  /// blocks of the LOCAL pass a segment takes besides its state's (its
  /// transition's column blocks), and the compose kernel's block and
  /// shared memory.
  std::optional<int64_t> transitionBlocks, composeBlockThreads,
      composeSharedMemory;
  /// The phased kernels (templates/linac/cuda/phased.h): when they run,
  /// the state kernel's block and shared memory, the preparing kernel's,
  /// and the bytes it stores for each chunk and head.
  std::optional<PhasedUse> phased;
  std::optional<int64_t> phasedBlockThreads, phasedSharedMemory,
      prepareBlockThreads, prepareSharedMemory, preparedChunkBytes;
  /// A GPU backward's algorithm: the plan's chunkwise family
  /// (templates/linac/cuda/chunk_backward.h) or token by token (recurrent),
  /// and the chunkwise one's state blocks' shared memory.
  std::optional<Family> backwardFamily;
  std::optional<int64_t> backwardSharedMemory;

  template <typename Self, typename Visit>
  static void fields(Self &self, Visit &&visit) {
    visit("target", self.target);
    visit("family", self.family);
    visit("recurrent_reason", self.recurrentReason);
    visit("chunk_size", self.chunkSize, Bounds{1, 1 << 16});
    visit("chunk_kernel", self.chunkKernel);
    visit("gate_numerics", self.gateNumerics);
    visit("subchunk_size", self.subchunkSize, Bounds{1, 1 << 16});
    visit("shared_inputs", self.sharedInputs);
    visit("late_shared_inputs", self.lateSharedInputs);
    visit("tensor_inputs", self.tensorInputs);
    visit("row_inputs", self.rowInputs);
    visit("tensor_output", self.tensorOutput);
    visit("block_threads", self.blockThreads, kThreadBounds);
    visit("shared_memory", self.sharedMemory, kSharedMemoryBounds);
    visit("scan_block_threads", self.scanBlockThreads, kThreadBounds);
    visit("chunkwise_float16", self.chunkwiseFloat16);
    visit("decode_state_layout", self.decodeStateLayout);
    visit("decode_placement", self.decodePlacement);
    visit("decode_staging", self.decodeStaging);
    visit("decode_key_rows", self.decodeKeyRows);
    visit("decode_warps", self.decodeWarps, Bounds{1, 32});
    visit("decode_parts", self.decodeParts, kDimBounds);
    visit("decode_block_threads", self.decodeBlockThreads, kThreadBounds);
    visit("decode_stages", self.decodeStages, Bounds{0, 1024});
    visit("decode_shared_memory", self.decodeSharedMemory,
          kSharedMemoryBounds);
    visit("transition_blocks", self.transitionBlocks, Bounds{0, 16});
    visit("compose_block_threads", self.composeBlockThreads, kThreadBounds);
    visit("compose_shared_memory", self.composeSharedMemory,
          kSharedMemoryBounds);
    visit("phased", self.phased);
    visit("phased_block_threads", self.phasedBlockThreads, kThreadBounds);
    visit("phased_shared_memory", self.phasedSharedMemory,
          kSharedMemoryBounds);
    visit("prepare_block_threads", self.prepareBlockThreads, kThreadBounds);
    visit("prepare_shared_memory", self.prepareSharedMemory,
          kSharedMemoryBounds);
    visit("prepared_chunk_bytes", self.preparedChunkBytes,
          Bounds{16, 1 << 24});
    visit("backward_family", self.backwardFamily);
    visit("backward_shared_memory", self.backwardSharedMemory,
          kSharedMemoryBounds);
  }
};

/// Whether a GPU plan's forward pass for activations of `dtype` is the
/// chunkwise kernel (else the scan): never for fp32, whose values the
/// tensor cores would round.
bool chunkwiseFor(const Plan &plan, DType dtype);

/// An input or parameter of the layer, in the kernels' order.
struct Argument {
  std::string name;
  Role role = Role::Input;
  Kind kind = Kind::Scalar;

  template <typename Self, typename Visit>
  static void fields(Self &self, Visit &&visit) {
    visit("name", self.name);
    visit("role", self.role);
    visit("kind", self.kind);
  }
};

/// An argument's feature dimensions after [B, T, H] (inputs) or [H]
/// (parameters): none for a scalar, K, V, or K, V for a matrix.
std::vector<int64_t> trailingDims(Kind kind, int64_t keyDim, int64_t valueDim);
/// An argument's shape as people read it, such as "[B, T, H, K]".
std::string shapeText(Role role, Kind kind);

/// A kernel entry in the package's kernel file. Launch shapes are a CUDA
/// kernel's; a CPU kernel names the instructions its file needs, and the
/// runtime takes the file of the most the host has.
struct Kernel {
  std::string entry, file;
  DType dtype = DType::Float32;
  Family family = Family::Recurrent;
  std::optional<int64_t> blockThreads, sharedMemory;
  std::optional<CpuIsa> isa;

  template <typename Self, typename Visit>
  static void fields(Self &self, Visit &&visit) {
    visit("entry", self.entry);
    visit("file", self.file);
    visit("dtype", self.dtype);
    visit("family", self.family);
    visit("block_threads", self.blockThreads, kThreadBounds);
    visit("shared_memory", self.sharedMemory, kSharedMemoryBounds);
    visit("isa", self.isa);
  }
};

/// The kinds of a GPU package's kernels, by which its kernel files share
/// them out.
enum class KernelGroup { Chunk, Scan, Compose, Phased, Backward, Decode };
/// A GPU package's kernels lie in this many files, compiled side by side
/// from one source (each with LINAC_KERNEL_PART set to its part).
inline constexpr int kCudaKernelParts = 2;
/// The part whose file holds a GPU package's kernels of `group`: the
/// chunk, compose and backward kernels in one, the scan, phased and decode
/// kernels in the other, halves of about equal compile time.
int cudaKernelPart(KernelGroup group);
/// A GPU package's kernel file of part `part`: layer.cubin, layer.1.cubin.
std::string cudaKernelFile(int part);

/// A package's forward kernels in the order the runtime searches them, so
/// that the first for a dtype is the fastest. For the kernel-list functions
/// below, `file` is a CPU package's kernel file; a GPU package's kernels
/// lie in the files cudaKernelFile names.
std::vector<Kernel> forwardKernels(const Plan &plan, const std::string &file);
/// A CUDA package's backward kernels, each taking the activation dtype as an
/// argument (listed as float32): the chunkwise backward's seven in launch
/// order, or linac_scan_backward; none on the CPU, whose backward is the
/// kernel file's linac_cpu_backward.
std::vector<Kernel> backwardKernels(const Plan &plan);
/// A package's decode kernels, one per activation dtype (one entry on the
/// CPU).
std::vector<Kernel> decodeKernels(const Plan &plan, const std::string &file);

/// How a chunkwise GPU package runs a forward whose sequences and heads
/// leave the GPU idle: sequences cut into segments that run side by side,
/// their states composed in between (templates/linac/cuda/abi.h).
struct Segments {
  Kernel compose;
  /// The LOCAL pass's blocks a segment takes besides its state's.
  int64_t transitionBlocks = 0;

  template <typename Self, typename Visit>
  static void fields(Self &self, Visit &&visit) {
    visit("compose", self.compose);
    visit("transition_blocks", self.transitionBlocks, Bounds{0, 16});
  }
};
/// A package's segments: for chunkwise GPU plans only.
std::optional<Segments> segmentsFor(const Plan &plan);

/// A package's phased chunkwise forward (templates/linac/cuda/abi.h,
/// linac_cuda_forward_args::prepared): per chunkwise dtype a preparing
/// kernel, launched first, and a state kernel that takes the chunkwise
/// entry's grids and passes; the workspace bytes a chunk slot and head
/// take; and when the runtime takes them.
struct Phased {
  std::vector<Kernel> prepare, state;
  int64_t chunkBytes = 0;
  PhasedUse use = PhasedUse::ByShape;

  template <typename Self, typename Visit>
  static void fields(Self &self, Visit &&visit) {
    visit("prepare", self.prepare);
    visit("state", self.state);
    visit("chunk_bytes", self.chunkBytes, Bounds{16, 1 << 24});
    visit("use", self.use);
  }
};
/// A package's phased kernels, where the plan has them.
std::optional<Phased> phasedFor(const Plan &plan);

/// New tokens per sequence one decode call takes (speculative decoding).
inline constexpr int64_t kMaxDecodeTokens = 8;

struct Decode {
  int64_t maxTokens = kMaxDecodeTokens;
  StateLayout stateLayout = StateLayout::KeyMajor;
  std::vector<Kernel> kernels;
  /// GPU only: strips of value columns a state splits into, and how states
  /// move through shared memory (tensor: by a map the runtime encodes).
  std::optional<int64_t> parts;
  std::optional<DecodeStaging> staging;

  template <typename Self, typename Visit>
  static void fields(Self &self, Visit &&visit) {
    visit("max_tokens", self.maxTokens, Bounds{1, 1 << 16});
    visit("state_layout", self.stateLayout);
    visit("kernels", self.kernels);
    visit("parts", self.parts, kDimBounds);
    visit("staging", self.staging);
  }
};

struct FileRecord {
  int64_t bytes = 0;
  std::string sha256;

  template <typename Self, typename Visit>
  static void fields(Self &self, Visit &&visit) {
    visit("bytes", self.bytes);
    visit("sha256", self.sha256);
  }
};

/// What ties the package's files together (docs/runtime.md).
struct Integrity {
  /// The hash of every other field of the manifest (contractHash).
  std::string contract;
  std::map<std::string, FileRecord> files;

  template <typename Self, typename Visit>
  static void fields(Self &self, Visit &&visit) {
    visit("contract", self.contract);
    visit("files", self.files);
  }
};

struct Manifest {
  int64_t format = kFormat;
  std::string compilerVersion;
  Target target = Target::Cpu;
  /// The version of the calling convention between the runtime and the
  /// target's kernels (templates/linac/cpu/abi.h, cuda/abi.h).
  int64_t abiVersion = 0;
  std::string specHash, layer;
  int64_t keyDim = 0, valueDim = 0;
  NormalForm normalForm;
  Plan plan;
  std::vector<Argument> arguments;
  std::vector<Kernel> kernels;
  /// False for a package compiled without its backward pass (`linac
  /// compile --no-backward`); absent for one with it.
  std::optional<bool> backward;
  std::vector<Kernel> backwardKernels;
  std::optional<Segments> segments;
  std::optional<Phased> phased;
  Decode decode;
  /// The step as a JSON program the fp64 reference interprets.
  std::string step;
  /// Empty while the compiler computes the contract.
  std::optional<Integrity> integrity;

  template <typename Self, typename Visit>
  static void fields(Self &self, Visit &&visit) {
    visit("format", self.format, Bounds{0, std::numeric_limits<int>::max()});
    visit("compiler_version", self.compilerVersion);
    visit("target", self.target);
    visit("abi_version", self.abiVersion,
          Bounds{0, std::numeric_limits<int>::max()});
    visit("spec_hash", self.specHash);
    visit("layer", self.layer);
    visit("key_dim", self.keyDim, kDimBounds);
    visit("value_dim", self.valueDim, kDimBounds);
    visit("normal_form", self.normalForm);
    visit("plan", self.plan);
    visit("arguments", self.arguments);
    visit("kernels", self.kernels);
    visit("backward", self.backward);
    visit("backward_kernels", self.backwardKernels);
    visit("segments", self.segments);
    visit("phased", self.phased);
    visit("decode", self.decode);
    visit("step", self.step, JsonText{});
    visit("integrity", self.integrity);
  }
  /// Marks a string field that holds JSON text, written and read as JSON.
  struct JsonText {};

  /// Columns of a head's state in memory: V, or V + 1 with a normaliser
  /// (its last column).
  int64_t stateColumns() const {
    return valueDim + (normalForm.normalizer ? 1 : 0);
  }
  bool hasBackward() const { return backward.value_or(true); }
};

/// A manifest that does not follow the schema; the message names the field
/// ("kernels[1].block_threads is 2048; expected ...").
struct SchemaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Reads manifest.json's text: every field present with its type, every
/// enum a known name, every integer in its bounds, the format this one.
/// Throws SchemaError.
Manifest read(const std::string &text);
/// The manifest's text, as a package holds it.
std::string write(const Manifest &manifest);

/// The files `manifest`'s kernels lie in, each once, in the order its
/// lists name them.
std::vector<std::string> kernelFiles(const Manifest &manifest);

/// Adds a CPU package's forward and decode entries in `file`, built for
/// `isa`, after the baseline's (those without an isa, which get the
/// baseline's).
void addIsaVariant(Manifest &manifest, CpuIsa isa, const std::string &file);

/// A tensor a call passes besides the layer's inputs and parameters.
struct RuntimeArgument {
  std::string name;
  Kind kind;
  std::string shape; ///< as people read it
};
/// cu_seqlens, the initial and final states and the output; a normaliser
/// persists as the states' last column.
std::vector<RuntimeArgument> runtimeArguments(bool normalizer);

} // namespace manifest
} // namespace linac

#endif // LINAC_MANIFEST_H
