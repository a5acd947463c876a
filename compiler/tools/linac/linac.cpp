//===- linac.cpp - the linac compiler driver ------------------------------===//
//
//   linac compile SPEC --target cpu|sm_90a|sm_80 -o NAME.linac   spec -> package
//   linac run NAME.linac --inputs DIR --outputs DIR  .npy in, .npy out
//   linac describe NAME.linac                        arguments and shapes
//   linac bench NAME.linac... [--shape B,T,H] [--decode]  GPU timings, JSON
//
//===----------------------------------------------------------------------===//

#include "linac/Compiler/Codegen.h"
#include "linac/cpu/abi.h"
#include "linac/cuda/abi.h"
#include "linac/Compiler/Passes.h"
#include "linac/Compiler/SpecSource.h"
#include "linac/Linac.h"
#include "linac/bench.h"
#include "linac/integrity.h"
#include "linac/npy.h"
#include "linac/package.h"

#include "PackageOutput.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <csignal>
#include <cstdlib>
#include <ctime>
#include <unistd.h>

using namespace mlir;
namespace cl = llvm::cl;
namespace fs = llvm::sys::fs;

static constexpr const char *kCompilerVersion = "0.1.0";
/// New tokens per sequence a decode call takes (speculative decoding).
static constexpr int kMaxDecodeTokens = 8;
/// The calling conventions of templates/linac/cpu/abi.h and cuda/abi.h.
static constexpr int kCpuAbiVersion = LINAC_CPU_ABI_VERSION;
static constexpr int kCudaAbiVersion = LINAC_CUDA_ABI_VERSION;
/// How long a crash report may take before the process ends anyway.
static constexpr unsigned kCrashReportSeconds = 20;

static cl::SubCommand compileCommand("compile", "Compile a spec into a package");
static cl::opt<std::string> specPath(cl::Positional, cl::desc("<spec.mlir>"),
                                     cl::Required, cl::sub(compileCommand));
static cl::opt<std::string> targetName("target", cl::desc("cpu, sm_90a or sm_80"),
                                       cl::init("cpu"), cl::sub(compileCommand));
static cl::opt<int64_t> decodeWarps(
    "decode-warps",
    cl::desc("Warps of a GPU decode block that take one state: 16 (the "
             "default) or 8"),
    cl::init(16), cl::sub(compileCommand));
static cl::opt<int64_t> decodeParts(
    "decode-parts",
    cl::desc("Strips of value columns a GPU decode item holds: 1, 2 or 4 "
             "(the default)"),
    cl::init(4), cl::sub(compileCommand));
static cl::opt<std::string> outputPath("o", cl::desc("Package directory"),
                                       cl::value_desc("NAME.linac"),
                                       cl::sub(compileCommand));
static cl::opt<bool> forceOutput(
    "force",
    cl::desc("Replace -o's path even if it is not a linac package"),
    cl::sub(compileCommand));

static cl::SubCommand runCommand("run", "Run a package's forward pass on .npy files");
static cl::opt<std::string> runPackage(cl::Positional, cl::desc("<NAME.linac>"),
                                       cl::Required, cl::sub(runCommand));
static cl::opt<std::string> inputsDir("inputs", cl::desc("Directory of <argument>.npy"),
                                      cl::Required, cl::sub(runCommand));
static cl::opt<std::string> outputsDir("outputs", cl::desc("Where o.npy and final_state.npy go"),
                                       cl::Required, cl::sub(runCommand));
static cl::opt<float> runScale("scale", cl::desc("Read scale (default K^-1/2)"),
                               cl::init(0.0f), cl::sub(runCommand));
static cl::opt<bool> runDecode(
    "decode",
    cl::desc("A decode step: inputs [B, n, H, ...], state_pool.npy and "
             "state_indices.npy in; o.npy and the updated state_pool.npy out"),
    cl::sub(runCommand));

static cl::SubCommand describeCommand("describe", "Print a package's arguments");
static cl::opt<std::string> describePackage(cl::Positional, cl::desc("<NAME.linac>"),
                                            cl::Required, cl::sub(describeCommand));

static cl::SubCommand benchCommand(
    "bench", "Time CUDA packages' forward passes on the GPU (JSON lines)");
static cl::list<std::string> benchPackages(cl::Positional, cl::desc("<NAME.linac>..."),
                                           cl::OneOrMore, cl::sub(benchCommand));
static cl::list<std::string> benchShapes(
    "shape", cl::desc("B,T,H to time (repeatable; default 8,4096,16)"),
    cl::sub(benchCommand));
static cl::opt<std::string> benchDtype("dtype", cl::desc("bfloat16, float16 or float32"),
                                       cl::init("bfloat16"), cl::sub(benchCommand));
static cl::opt<int> benchReps("reps", cl::desc("Timed runs per case (median)"),
                              cl::init(50), cl::sub(benchCommand));
static cl::opt<bool> benchDecode(
    "decode",
    cl::desc("Time decode steps: --shape B,T,H is B sequences of T new "
             "tokens (default 64,1,16 and 256,1,16)"),
    cl::sub(benchCommand));

static int fail(const std::string &message) {
  llvm::errs() << "linac: error: " << message << "\n";
  return 1;
}

static std::string shapeOf(StringRef role, StringRef kind) {
  std::string features = kind == "key"      ? ", K"
                         : kind == "value"  ? ", V"
                         : kind == "matrix" ? ", K, V"
                                            : "";
  return role == "param" ? "[H" + features + "]" : "[B, T, H" + features + "]";
}

static std::string templatesDir() {
  if (const char *dir = std::getenv("LINAC_TEMPLATES"))
    return dir;
  return LINAC_TEMPLATES_DIR;
}

/// How a target's generated source becomes its kernel file.
struct Toolchain {
  std::string program; ///< the compiler's path
  std::vector<std::string> flags;
  std::string source, kernel; ///< file names inside the package
};

static FailureOr<Toolchain> toolchainFor(StringRef target) {
  Toolchain tools;
  std::string include = "-I" + templatesDir();
  const char *override = std::getenv(target == "cpu" ? "CXX" : "NVCC");
  StringRef name = override ? override : target == "cpu" ? "c++" : "nvcc";
  if (name.contains('/') && !fs::can_execute(name)) {
    fail(fmt::format("{} (from {}) is not an executable", name.str(),
                     target == "cpu" ? "CXX" : "NVCC"));
    return failure();
  }
  llvm::ErrorOr<std::string> program = llvm::sys::findProgramByName(name);
  if (!program && target != "cpu")
    program = llvm::sys::findProgramByName(name, {"/usr/local/cuda/bin"});
  if (!program) {
    fail(target == "cpu" ? "no host C++ compiler found (set CXX)"
                         : "no nvcc found on PATH or in /usr/local/cuda/bin "
                           "(set NVCC)");
    return failure();
  }
  tools.program = *program;
  if (target == "cpu") {
    tools.flags = {"-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", include};
    tools.source = "layer.cpp";
    tools.kernel = "layer.so";
  } else {
    // The a-suffixed targets need -gencode: -arch=sm_90a also runs a plain
    // sm_90 pass.
    std::string arch = target.drop_front(3).str();
    // 177: the Layer's constants the CUDA templates leave unread.
    tools.flags = {"-std=c++17", "-O3", "-cubin", "-lineinfo",
                   "-diag-suppress=177",
                   fmt::format("-gencode=arch=compute_{0},code=sm_{0}", arch),
                   include};
    tools.source = "layer.cu";
    tools.kernel = "layer.cubin";
  }
  return tools;
}

/// Runs `program args...`, returning its exit status; its output goes to
/// `capture` when given.
static int execute(const std::string &program,
                   const std::vector<std::string> &args, std::string &error,
                   StringRef capture = "") {
  SmallVector<StringRef> argv{program};
  for (const std::string &arg : args)
    argv.push_back(arg);
  std::optional<StringRef> redirects[] = {std::nullopt, capture, capture};
  if (capture.empty())
    return llvm::sys::ExecuteAndWait(program, argv, std::nullopt, {}, 0, 0,
                                     &error);
  return llvm::sys::ExecuteAndWait(program, argv, std::nullopt, redirects, 0,
                                   0, &error);
}

static std::string readFile(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  return buffer ? (*buffer)->getBuffer().str() : std::string();
}

/// Everything a kernel file depends on besides the spec: the templates'
/// text, the toolchain's flags and its own version.
static std::string toolchainFingerprint(const Toolchain &tools) {
  std::string text = tools.program;
  for (const std::string &flag : tools.flags)
    text += " " + flag;
  SmallString<128> versionFile;
  if (!fs::createTemporaryFile("linac-version", "txt", versionFile)) {
    linac::output::Temporary temporary(versionFile.str().str());
    std::string error;
    execute(tools.program, {"--version"}, error, versionFile);
    text += readFile(temporary.path());
  }
  std::vector<std::string> templates;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(templatesDir(), ec), end;
       it != end && !ec; it.increment(ec))
    if (it->type() == fs::file_type::regular_file)
      templates.push_back(it->path());
  llvm::sort(templates);
  for (const std::string &path : templates)
    text += path + readFile(path);
  return text;
}

static std::string cacheDir() {
  if (const char *dir = std::getenv("LINAC_CACHE_DIR"))
    return dir;
  SmallString<128> path;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"))
    path = xdg;
  else if (!llvm::sys::path::home_directory(path))
    return "";
  else
    llvm::sys::path::append(path, ".cache");
  llvm::sys::path::append(path, "linac");
  return path.str().str();
}

/// Compiles `source` into `kernel`, or copies the kernel a previous
/// compilation of the same source with the same toolchain left in the cache.
/// Cache entries are written to a private name and renamed, so processes
/// compiling the same spec at once never see a partial file.
static LogicalResult buildKernel(const Toolchain &tools, StringRef source,
                                 StringRef kernel, StringRef sourceText) {
  std::string key = llvm::toHex(
      llvm::SHA256::hash(llvm::arrayRefFromStringRef(
          toolchainFingerprint(tools) + "\n" + sourceText.str())),
      true);
  std::string cache = cacheDir();
  std::string cached = cache.empty() ? "" : cache + "/" + key;
  if (!cached.empty() && fs::exists(cached) && !fs::copy_file(cached, kernel))
    return success();

  std::vector<std::string> args = tools.flags;
  for (StringRef arg : {source, StringRef("-o"), kernel})
    args.push_back(arg.str());
  std::string error;
  if (execute(tools.program, args, error) != 0) {
    fail(fmt::format("{} failed on {} {}", tools.program, source.str(), error));
    return failure();
  }
  if (!cached.empty() && !fs::create_directories(cache)) {
    linac::output::Temporary staging(
        fmt::format("{}.tmp{}", cached, getpid()));
    if (!fs::copy_file(kernel, staging.path()) &&
        !fs::rename(staging.path(), cached))
      staging.release();
  }
  return success();
}

static llvm::json::Value toJson(Attribute attr) {
  if (auto dict = dyn_cast<DictionaryAttr>(attr)) {
    llvm::json::Object object;
    for (NamedAttribute entry : dict)
      object[entry.getName().getValue()] = toJson(entry.getValue());
    return object;
  }
  if (auto str = dyn_cast<StringAttr>(attr))
    return str.getValue();
  if (auto boolean = dyn_cast<BoolAttr>(attr))
    return boolean.getValue();
  if (auto integer = dyn_cast<IntegerAttr>(attr))
    return integer.getInt();
  if (auto integers = dyn_cast<DenseI64ArrayAttr>(attr))
    return llvm::json::Array(integers.asArrayRef());
  return nullptr;
}

/// The scan's block: a thread per value column, one more for a normaliser
/// (templates/linac/cuda/scan.h's scanThreads).
static int64_t scanBlockThreads(linac::LayerOp layer) {
  return (layer.getStateType().getValueDim() +
          layer.getStateType().getNormalized() + 31) / 32 * 32;
}

/// The manifest's kernel list: one shared object on the CPU; on GPUs the
/// chunkwise kernels (when planned) before the scan, per activation dtype,
/// so that the runtime's first match for a dtype is the fastest kernel.
static llvm::json::Array kernelList(linac::LayerOp layer, StringRef file) {
  if (targetName == "cpu")
    return llvm::json::Array{llvm::json::Object{
        {"entry", "linac_cpu_forward"}, {"file", file}}};
  auto plan = layer->getAttrOfType<DictionaryAttr>(linac::kPlanAttr);
  llvm::json::Array kernels;
  auto add = [&](StringRef family, StringRef dtype, int64_t threads,
                 int64_t shared) {
    kernels.push_back(llvm::json::Object{
        {"entry", fmt::format("linac_{}_{}", family.str(), dtype.str())},
        {"file", file},
        {"dtype", dtype},
        {"family", family == "chunk" ? "chunkwise" : "recurrent"},
        {"block_threads", threads},
        {"shared_memory", shared}});
  };
  for (StringRef dtype : {"bfloat16", "float16"})
    if (linac::chunkwiseFor(layer, dtype))
      add("chunk", dtype, plan.getAs<IntegerAttr>("block_threads").getInt(),
          plan.getAs<IntegerAttr>("shared_memory").getInt());
  int64_t scanThreads = scanBlockThreads(layer);
  for (StringRef dtype : {"float32", "bfloat16", "float16"})
    if (!linac::chunkwiseFor(layer, dtype))
      add("scan", dtype, scanThreads, 0);
  return kernels;
}

/// Decode kernels of a GPU package, one per activation dtype.
static llvm::json::Array decodeKernelList(linac::LayerOp layer, StringRef file) {
  auto plan = layer->getAttrOfType<DictionaryAttr>(linac::kPlanAttr);
  int64_t threads = plan.getAs<IntegerAttr>("decode_block_threads").getInt();
  int64_t shared = plan.getAs<IntegerAttr>("decode_shared_memory").getInt();
  llvm::json::Array kernels;
  for (StringRef dtype : {"float32", "bfloat16", "float16"})
    kernels.push_back(llvm::json::Object{
        {"entry", fmt::format("linac_decode_{}", dtype.str())},
        {"file", file},
        {"dtype", dtype},
        {"family", "recurrent"},
        {"block_threads", threads},
        {"shared_memory", shared}});
  return kernels;
}

/// A manifest's text, as the package holds it.
static std::string manifestJson(const llvm::json::Object &manifest) {
  std::string text;
  llvm::raw_string_ostream(text)
      << llvm::formatv("{0:2}", llvm::json::Value(llvm::json::Object(manifest)))
      << "\n";
  return text;
}

/// The manifest's integrity member: the hash of its contract, and the size
/// and SHA-256 of the kernel file `name` at `path` (docs/runtime.md).
static llvm::json::Object integrityOf(const std::string &contract,
                                      const std::string &path,
                                      const std::string &name) {
  std::string bytes = readFile(path);
  llvm::json::Object file{{"bytes", int64_t(bytes.size())},
                          {"sha256", linac::sha256Hex(bytes)}};
  return llvm::json::Object{
      {"contract", contract},
      {"files", llvm::json::Object{{name, std::move(file)}}}};
}

static int compile() {
  if (targetName != "cpu" && targetName != "sm_90a" && targetName != "sm_80")
    return fail("unknown target '" + targetName +
                "'; expected cpu, sm_90a or sm_80");
  FailureOr<Toolchain> tools = toolchainFor(targetName);
  if (failed(tools))
    return 1;
  MLIRContext context;
  context.printOpOnDiagnostic(false);
  context.loadDialect<linac::LinacDialect, arith::ArithDialect,
                      math::MathDialect>();
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> spec = openInputFile(specPath, &error);
  if (!spec)
    return fail(error);
  sourceMgr.AddNewSourceBuffer(std::move(spec), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = linac::parseSpec(sourceMgr, &context);
  if (!module)
    return 1;
  SmallVector<linac::LayerOp> layers(module->getOps<linac::LayerOp>());
  if (layers.size() != 1)
    return fail(fmt::format("{} holds {} layers; a package holds one",
                            specPath.getValue(), layers.size()));
  linac::LayerOp layer = layers.front();

  PassManager pm(&context);
  pm.addPass(linac::createLinacNormalize());
  pm.addPass(linac::createLinacPlan({targetName, decodeWarps, decodeParts}));
  if (failed(pm.run(*module)))
    return 1;
  FailureOr<std::string> source = targetName == "cpu"
                                      ? linac::emitCpuSource(layer)
                                      : linac::emitCudaSource(layer);
  if (failed(source))
    return 1;

  std::string normalized;
  llvm::raw_string_ostream(normalized) << *module;
  std::string hash = llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(
      normalized + targetName.getValue() + kCompilerVersion)), true);

  std::string out = outputPath.empty() ? layer.getSymName().str() + ".linac"
                                       : outputPath.getValue();
  std::string refusal = linac::output::refusal(out, forceOutput);
  if (!refusal.empty())
    return fail(refusal);
  std::string stagingPath = linac::output::createStaging(out, error);
  if (stagingPath.empty())
    return fail(error);
  linac::output::Temporary staging(stagingPath);
  auto write = [&](StringRef name, StringRef text) {
    std::error_code ec;
    llvm::raw_fd_ostream file((staging.path() + "/" + name).str(), ec);
    if (ec)
      return failure();
    file << text;
    return success();
  };

  llvm::json::Array arguments;
  for (BlockArgument arg : layer.getBody().getArguments().drop_front()) {
    StringRef role = layer.isParam(arg) ? "param" : "input";
    StringRef kind = linac::kindOf(arg.getType());
    arguments.push_back(llvm::json::Object{
        {"name", layer.getArgumentName(arg)}, {"role", role}, {"kind", kind},
        {"shape", shapeOf(role, kind)}, {"dtype", "float32"}});
  }
  // The JSON value owns `shape`; a StringRef would only borrow it.
  auto runtimeArgument = [&](StringRef name, StringRef kind, std::string shape,
                             StringRef dtype) {
    arguments.push_back(llvm::json::Object{{"name", name}, {"role", "runtime"},
                                           {"kind", kind},
                                           {"shape", std::move(shape)},
                                           {"dtype", dtype}});
  };
  runtimeArgument("cu_seqlens", "index", "[N + 1] (optional, B = 1)", "int64");
  // A normaliser persists as the state's last column.
  std::string state =
      layer.getStateType().getNormalized() ? "[N, H, K, V + 1]" : "[N, H, K, V]";
  runtimeArgument("initial_state", "state", state + " (optional)", "float32");
  runtimeArgument("final_state", "state", state, "float32");
  runtimeArgument("o", "value", "[B, T, H, V]", "float32");

  llvm::json::Object manifest{
      {"format", 2},
      {"compiler_version", kCompilerVersion},
      {"target", targetName.getValue()},
      {"spec_hash", hash},
      {"layer", layer.getSymName()},
      {"key_dim", layer.getStateType().getKeyDim()},
      {"value_dim", layer.getStateType().getValueDim()},
      {"normal_form", toJson(layer->getAttr(linac::kNormalFormAttr))},
      {"plan", toJson(layer->getAttr(linac::kPlanAttr))},
      {"arguments", std::move(arguments)},
      {"kernels", kernelList(layer, tools->kernel)},
      {"step", linac::emitStepProgram(layer)},
  };
  llvm::json::Object decode{
      {"max_tokens", kMaxDecodeTokens},
      {"state_layout", layer->getAttrOfType<DictionaryAttr>(linac::kPlanAttr)
                           .getAs<StringAttr>("decode_state_layout")
                           .getValue()}};
  if (targetName != "cpu") {
    manifest["cuda_abi_version"] = kCudaAbiVersion;
    decode["kernels"] = decodeKernelList(layer, tools->kernel);
    auto plan = layer->getAttrOfType<DictionaryAttr>(linac::kPlanAttr);
    decode["parts"] = plan.getAs<IntegerAttr>("decode_parts").getInt();
    // With tensor staging the runtime encodes a tensor map of each call's
    // pool for the kernel (linac_cuda_decode_args::state_map).
    decode["staging"] = plan.getAs<StringAttr>("decode_staging").getValue();
  } else {
    manifest["cpu_abi_version"] = kCpuAbiVersion;
    decode["entry"] = "linac_cpu_decode";
  }
  manifest["decode"] = std::move(decode);
  // The kernel file carries the hash of the manifest's contract, and the
  // manifest the kernel file's size and hash.
  std::string contract = linac::contractHash(manifestJson(manifest));
  *source += linac::emitContract(contract);
  std::string manifestText;
  auto writeManifest = [&] {
    manifest["integrity"] =
        integrityOf(contract, staging.path() + "/" + tools->kernel,
                    tools->kernel);
    manifestText = manifestJson(manifest);
    return write("manifest.json", manifestText);
  };

  if (failed(write(tools->source, *source)) ||
      failed(write("layer.mlir", normalized)) ||
      failed(buildKernel(*tools, staging.path() + "/" + tools->source,
                         staging.path() + "/" + tools->kernel, *source)) ||
      failed(writeManifest()))
    return fail("could not write the package " + out);
  std::string installError = linac::output::install(staging, out);
  if (!installError.empty())
    return fail(installError);
  llvm::outs() << out << "\n";
  return 0;
}

static int describe() {
  try {
    auto package = linac::Package::open(describePackage);
    llvm::outs() << fmt::format("layer @{} for {}, K = {}, V = {}\n",
                                package->layer(), package->target(),
                                package->keyDim(), package->valueDim());
    for (const linac::ArgumentInfo &arg : package->arguments())
      llvm::outs() << fmt::format("  {:<14} {:<8} {:<7} {}\n", arg.name,
                                  arg.role, arg.kind, arg.shape);
  } catch (const linac::Error &e) {
    return fail(e.what());
  }
  return 0;
}

/// `linac run --decode`: one decode step on the pool in the inputs folder.
static int decodeStep(const linac::Package &package,
                      const std::map<std::string, linac::HostTensor> &tensors,
                      llvm::function_ref<std::string(StringRef)> path) {
  for (StringRef name : {"state_pool", "state_indices"})
    if (!fs::exists(path(name)))
      return fail(fmt::format("decode needs {}", path(name)));
  linac::NpyArray poolArray = linac::readNpy(path("state_pool"));
  std::vector<float> pool = poolArray.toFloat();
  linac::DecodeRequest request;
  request.tensors = tensors;
  request.statePool = pool.data();
  request.poolShape = poolArray.shape;
  request.stateIndices = linac::readNpy(path("state_indices")).toInt64();
  request.scale = runScale;
  linac::ForwardRequest shapes;
  shapes.tensors = tensors;
  linac::ForwardShape shape = package.check(shapes);
  // Rows of skipped sequences stay zero.
  std::vector<float> output(shape.batch * shape.tokens * shape.heads *
                            package.valueDim());
  request.output = output.data();
  package.decode(request);
  fs::create_directories(outputsDir);
  linac::writeNpy(outputsDir + "/o.npy",
                  linac::makeFloat32({shape.batch, shape.tokens, shape.heads,
                                      package.valueDim()},
                                     output));
  linac::writeNpy(outputsDir + "/state_pool.npy",
                  linac::makeFloat32(poolArray.shape, pool));
  return 0;
}

static int run() {
  try {
    auto package = linac::Package::open(runPackage);
    linac::ForwardRequest request;
    std::vector<std::vector<float>> storage;
    auto path = [&](StringRef name) {
      return (inputsDir + "/" + name + ".npy").str();
    };
    for (const linac::ArgumentInfo &arg : package->arguments()) {
      if (arg.role == "runtime")
        continue;
      if (!fs::exists(path(arg.name)))
        return fail(fmt::format("missing {} '{}': no {}", arg.role, arg.name,
                                path(arg.name)));
      linac::NpyArray array = linac::readNpy(path(arg.name));
      storage.push_back(array.toFloat());
      request.tensors[arg.name] = {storage.back().data(), array.shape};
    }
    if (runDecode)
      return decodeStep(*package, request.tensors, path);
    if (fs::exists(path("cu_seqlens")))
      request.cuSeqlens = linac::readNpy(path("cu_seqlens")).toInt64();
    request.scale = runScale;
    linac::ForwardShape shape = package->check(request);

    int64_t stateSize = shape.sequences * shape.heads * package->keyDim() *
                        package->stateColumns();
    std::vector<float> initial;
    if (fs::exists(path("initial_state"))) {
      linac::NpyArray array = linac::readNpy(path("initial_state"));
      std::vector<int64_t> expected{shape.sequences, shape.heads,
                                    package->keyDim(), package->stateColumns()};
      if (array.shape != expected)
        return fail(fmt::format("initial_state has shape {}, expected [{}]",
                                array.shapeString(), fmt::join(expected, ", ")));
      initial = array.toFloat();
      request.initialState = initial.data();
    }
    std::vector<float> output(shape.batch * shape.tokens * shape.heads *
                              package->valueDim());
    std::vector<float> finalState(stateSize);
    request.output = output.data();
    request.finalState = finalState.data();
    package->forward(request);

    fs::create_directories(outputsDir);
    linac::writeNpy(outputsDir + "/o.npy",
                    linac::makeFloat32({shape.batch, shape.tokens, shape.heads,
                                        package->valueDim()},
                                       output));
    linac::writeNpy(outputsDir + "/final_state.npy",
                    linac::makeFloat32({shape.sequences, shape.heads,
                                        package->keyDim(), package->stateColumns()},
                                       finalState));
  } catch (const linac::Error &e) {
    return fail(e.what());
  } catch (const linac::NpyError &e) {
    return fail(e.what());
  } catch (const std::bad_alloc &) {
    return fail("out of memory for the inputs or outputs");
  }
  return 0;
}

static int bench() {
  std::optional<linac::DType> dtype =
      benchDtype == "bfloat16" ? std::optional(linac::DType::BFloat16)
      : benchDtype == "float16" ? std::optional(linac::DType::Float16)
      : benchDtype == "float32" ? std::optional(linac::DType::Float32)
                                : std::nullopt;
  if (!dtype)
    return fail("unknown dtype '" + benchDtype +
                "'; expected bfloat16, float16 or float32");
  std::vector<linac::bench::Shape> shapes;
  for (StringRef text : benchShapes) {
    SmallVector<StringRef> parts;
    text.split(parts, ',');
    linac::bench::Shape shape;
    if (parts.size() != 3 || parts[0].getAsInteger(10, shape.batch) ||
        parts[1].getAsInteger(10, shape.tokens) ||
        parts[2].getAsInteger(10, shape.heads) || shape.batch <= 0 ||
        shape.tokens <= 0 || shape.heads <= 0)
      return fail("--shape takes B,T,H as positive integers, got '" +
                  text.str() + "'");
    shapes.push_back(shape);
  }
  if (shapes.empty() && benchDecode)
    shapes = {{64, 1, 16}, {256, 1, 16}};
  if (shapes.empty())
    shapes.push_back({});
  if (benchReps <= 0)
    return fail("--reps must be positive");
  try {
    std::vector<std::unique_ptr<linac::Package>> packages;
    for (const std::string &path : benchPackages)
      packages.push_back(linac::Package::open(path));
    linac::bench::Ceilings ceilings = linac::bench::measureCeilings();
    for (const auto &package : packages)
      for (const linac::bench::Shape &shape : shapes) {
        linac::bench::Result result =
            benchDecode
                ? linac::bench::decode(*package, shape, *dtype, benchReps)
                : linac::bench::forward(*package, shape, *dtype, benchReps);
        llvm::outs() << linac::bench::jsonLine(*package,
                                               benchDecode ? "decode" : "forward",
                                               shape, *dtype, result, ceilings)
                     << "\n";
        llvm::outs().flush();
      }
  } catch (const linac::Error &e) {
    return fail(e.what());
  }
  return 0;
}

/// Kills the process once armed and kCrashReportSeconds have passed.
static timer_t crashReportTimer;

/// A crash inside malloc (a corrupted heap) may leave its lock held, and
/// LLVM's crash report allocates, and waits on a symbolizer: bound the
/// report, so that the process ends rather than hangs. A timer of its own,
/// since the report's own watchdog takes alarm(); timer_settime is
/// async-signal-safe.
static void boundCrashReport(void *) {
  itimerspec deadline{};
  deadline.it_value.tv_sec = kCrashReportSeconds;
  timer_settime(crashReportTimer, 0, &deadline, nullptr);
}

int main(int argc, char **argv) {
  sigevent expiry{};
  expiry.sigev_notify = SIGEV_SIGNAL;
  expiry.sigev_signo = SIGKILL;
  // Before InitLLVM's crash report, so that it runs first on a crash.
  if (timer_create(CLOCK_MONOTONIC, &expiry, &crashReportTimer) == 0)
    llvm::sys::AddSignalHandler(boundCrashReport, nullptr);
  llvm::InitLLVM init(argc, argv);
  linac::output::removeTemporariesOnSignal();
  linac::registerLinacPasses();
  cl::ParseCommandLineOptions(argc, argv, "linac: a compiler for linear attention\n");
  if (compileCommand)
    return compile();
  if (runCommand)
    return run();
  if (describeCommand)
    return describe();
  if (benchCommand)
    return bench();
  return fail("expected a command: compile, run, describe or bench (see --help)");
}
