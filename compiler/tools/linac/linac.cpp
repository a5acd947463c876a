//===- linac.cpp - the linac compiler driver ------------------------------===//
//
//   linac compile SPEC --target cpu|sm_90a|sm_80 -o NAME.linac   spec -> package
//   linac run|describe|bench ...   forwarded to linac-run, which needs no MLIR
//
//===----------------------------------------------------------------------===//

#include "linac/Compiler/Codegen.h"
#include "linac/cpu/abi.h"
#include "linac/cuda/abi.h"
#include "linac/Compiler/LayerAttributes.h"
#include "linac/Compiler/Passes.h"
#include "linac/Compiler/SpecSource.h"
#include "linac/Linac.h"
#include "linac/integrity.h"
#include "linac/manifest.h"

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
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <unistd.h>

using namespace mlir;
namespace cl = llvm::cl;
namespace fs = llvm::sys::fs;

static constexpr const char *kCompilerVersion = "0.1.0";
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

static int fail(const std::string &message) {
  llvm::errs() << "linac: error: " << message << "\n";
  return 1;
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

/// The size and SHA-256 of the kernel file at `path` (docs/runtime.md).
static linac::manifest::FileRecord recordOf(const std::string &path) {
  std::string bytes = readFile(path);
  return {int64_t(bytes.size()), linac::sha256Hex(bytes)};
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
  FailureOr<linac::manifest::NormalForm> form = linac::getNormalForm(layer);
  FailureOr<linac::manifest::Plan> plan = linac::getPlan(layer);
  if (failed(form) || failed(plan))
    return 1;
  bool cpu = plan->target == linac::manifest::Target::Cpu;
  FailureOr<std::string> source = cpu ? linac::emitCpuSource(layer, *plan)
                                      : linac::emitCudaSource(layer, *plan);
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

  namespace manifest = linac::manifest;
  manifest::Manifest contents;
  contents.compilerVersion = kCompilerVersion;
  contents.target = plan->target;
  contents.abiVersion = cpu ? kCpuAbiVersion : kCudaAbiVersion;
  contents.specHash = hash;
  contents.layer = layer.getSymName().str();
  contents.keyDim = layer.getStateType().getKeyDim();
  contents.valueDim = layer.getStateType().getValueDim();
  contents.normalForm = *form;
  contents.plan = *plan;
  for (BlockArgument arg : layer.getBody().getArguments().drop_front())
    contents.arguments.push_back(
        {layer.getArgumentName(arg).str(),
         layer.isParam(arg) ? manifest::Role::Param : manifest::Role::Input,
         linac::kindOf(arg.getType())});
  contents.kernels = manifest::forwardKernels(*plan, tools->kernel);
  contents.decode.kernels = manifest::decodeKernels(*plan, tools->kernel);
  // With tensor staging the runtime encodes a tensor map of each call's
  // pool for the kernel (linac_cuda_decode_args::state_map).
  contents.decode.parts = plan->decodeParts;
  contents.decode.staging = plan->decodeStaging;
  contents.step = linac::emitStepProgram(layer);
  // The kernel file carries the hash of the manifest's contract, and the
  // manifest the kernel file's size and hash.
  std::string contract = linac::contractHash(manifest::write(contents));
  *source += linac::emitContract(contract);
  auto writeManifest = [&] {
    contents.integrity = manifest::Integrity{
        contract,
        {{tools->kernel, recordOf(staging.path() + "/" + tools->kernel)}}};
    return write("manifest.json", manifest::write(contents));
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

/// Runs linac-run, from beside this program, with this program's
/// arguments; returns only if it cannot.
static int forwardToRunner(int argc, char **argv) {
  std::string self = llvm::sys::fs::getMainExecutable(
      argv[0], reinterpret_cast<void *>(&forwardToRunner));
  SmallString<256> runner(llvm::sys::path::parent_path(self));
  llvm::sys::path::append(runner, "linac-run");
  std::vector<char *> args(argv, argv + argc);
  args[0] = runner.data();
  args.push_back(nullptr);
  execv(runner.c_str(), args.data());
  return fail(fmt::format("cannot run {}: {}", runner.str().str(),
                          std::strerror(errno)));
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
  if (argc > 1 && (StringRef(argv[1]) == "run" ||
                   StringRef(argv[1]) == "describe" ||
                   StringRef(argv[1]) == "bench"))
    return forwardToRunner(argc, argv);
  llvm::InitLLVM init(argc, argv);
  linac::output::removeTemporariesOnSignal();
  linac::registerLinacPasses();
  cl::ParseCommandLineOptions(
      argc, argv,
      "linac: a compiler for linear attention\n\n"
      "  linac run, describe and bench are linac-run's (see linac-run --help)\n");
  if (compileCommand)
    return compile();
  return fail("expected a command: compile, run, describe or bench (see --help)");
}
