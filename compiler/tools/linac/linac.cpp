//===- linac.cpp - the linac compiler driver ------------------------------===//
//
//   linac compile SPEC --target cpu|sm_90a|sm_80 -o NAME.linac   spec -> package
//   linac compile SPEC --emit=mlir|normal|plan|source            a stage, printed
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
#include "Toolchain.h"

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

/// What `linac compile` produces: the IR after a stage, the generated
/// source (no host compiler needed), or the package.
enum class Emit { Mlir, Normal, Plan, Source, Package };
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
static cl::opt<std::string> chunkKernel(
    "chunk-kernel",
    cl::desc("A GPU's chunkwise kernels: auto (the default: lockstep, and "
             "the phased kernels for the shapes they win at where the layer "
             "has them), lockstep, pipelined (an erase under no gate or a "
             "scalar one), phased (always; an erase under any key-side "
             "gate or none), or warpgroup (wgmma; no erase, a scalar gate "
             "or none); the last three on sm_90a"),
    cl::init("auto"), cl::sub(compileCommand));
static cl::opt<Emit> emitStage(
    "emit", cl::desc("What to produce (printed, except the package)"),
    cl::values(clEnumValN(Emit::Mlir, "mlir", "the parsed and verified spec"),
               clEnumValN(Emit::Normal, "normal",
                          "the spec with its normal form"),
               clEnumValN(Emit::Plan, "plan", "the spec with its plan"),
               clEnumValN(Emit::Source, "source",
                          "the generated C++ or CUDA C++"),
               clEnumValN(Emit::Package, "package",
                          "the package (the default)")),
    cl::init(Emit::Package), cl::sub(compileCommand));
static cl::opt<std::string> outputPath("o", cl::desc("Package directory"),
                                       cl::value_desc("NAME.linac"),
                                       cl::sub(compileCommand));
static cl::opt<bool> noBackward(
    "no-backward",
    cl::desc("Leave the backward pass out of the package (for inference: "
             "a kernel file that compiles faster; gradients are refused)"),
    cl::sub(compileCommand));
static cl::opt<bool> lineInfo(
    "line-info",
    cl::desc("Keep the CUDA source's line table in a GPU package's cubin "
             "(nvcc -lineinfo), for profilers: about three times the bytes, "
             "which the runtime hashes at every open"),
    cl::sub(compileCommand));
static cl::opt<bool> forceOutput(
    "force",
    cl::desc("Replace -o's path even if it is not a linac package"),
    cl::sub(compileCommand));

static int fail(const std::string &message) {
  llvm::errs() << "linac: error: " << message << "\n";
  return 1;
}

/// The size and SHA-256 of the kernel file at `path` (docs/runtime.md).
static linac::manifest::FileRecord recordOf(const std::string &path) {
  std::string bytes = linac::toolchain::readFile(path);
  return {int64_t(bytes.size()), linac::sha256Hex(bytes)};
}

/// The manifest of `layer`'s package, without its integrity: what the
/// runtime needs to check and launch the kernels (a CPU package's in the
/// file `kernelFile`).
static linac::manifest::Manifest
manifestOf(linac::LayerOp layer, const linac::manifest::NormalForm &form,
           const linac::manifest::Plan &plan, const std::string &specHash,
           const std::string &kernelFile) {
  namespace manifest = linac::manifest;
  manifest::Manifest contents;
  contents.compilerVersion = kCompilerVersion;
  contents.target = plan.target;
  contents.abiVersion = plan.target == manifest::Target::Cpu ? kCpuAbiVersion
                                                             : kCudaAbiVersion;
  contents.specHash = specHash;
  contents.layer = layer.getSymName().str();
  contents.keyDim = layer.getStateType().getKeyDim();
  contents.valueDim = layer.getStateType().getValueDim();
  contents.normalForm = form;
  contents.plan = plan;
  for (BlockArgument arg : layer.getBody().getArguments().drop_front())
    contents.arguments.push_back(
        {layer.getArgumentName(arg).str(),
         layer.isParam(arg) ? manifest::Role::Param : manifest::Role::Input,
         linac::kindOf(arg.getType())});
  contents.kernels = manifest::forwardKernels(plan, kernelFile);
  if (noBackward)
    contents.backward = false;
  else
    contents.backwardKernels = manifest::backwardKernels(plan);
  contents.segments = manifest::segmentsFor(plan);
  contents.phased = manifest::phasedFor(plan);
  contents.decode.kernels = manifest::decodeKernels(plan, kernelFile);
  // With tensor staging the runtime encodes a tensor map of each call's
  // pool for the kernel (linac_cuda_decode_args::state_map).
  contents.decode.parts = plan.decodeParts;
  contents.decode.staging = plan.decodeStaging;
  contents.step = linac::emitStepProgram(layer);
  return contents;
}

static int compile() {
  if (targetName != "cpu" && targetName != "sm_90a" && targetName != "sm_80")
    return fail("unknown target '" + targetName +
                "'; expected cpu, sm_90a or sm_80");
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

  // Runs each stage's pass; the command ends with the module printed after
  // the stage --emit asks for, or with the status of a pass that failed.
  std::optional<int> status;
  auto stage = [&](std::unique_ptr<Pass> pass, Emit emitted) {
    if (status)
      return;
    PassManager pm(&context);
    if (pass)
      pm.addPass(std::move(pass));
    if (failed(pm.run(*module)))
      status = 1;
    else if (emitStage == emitted) {
      llvm::outs() << *module << "\n";
      status = 0;
    }
  };
  stage(nullptr, Emit::Mlir);
  stage(linac::createLinacNormalize(), Emit::Normal);
  stage(linac::createLinacPlan(
            {targetName, decodeWarps, decodeParts, chunkKernel}),
        Emit::Plan);
  if (status)
    return *status;
  FailureOr<linac::manifest::NormalForm> form = linac::getNormalForm(layer);
  FailureOr<linac::manifest::Plan> plan = linac::getPlan(layer);
  if (failed(form) || failed(plan))
    return 1;
  bool cpu = plan->target == linac::manifest::Target::Cpu;
  FailureOr<std::string> source =
      cpu ? linac::emitCpuSource(layer, *plan, !noBackward)
          : linac::emitCudaSource(layer, *plan, !noBackward);
  if (failed(source))
    return 1;
  if (emitStage == Emit::Source) {
    llvm::outs() << *source;
    return 0;
  }
  if (lineInfo && cpu)
    return fail("--line-info is for the GPU targets (sm_90a, sm_80)");
  std::optional<linac::toolchain::Toolchain> tools =
      linac::toolchain::find(targetName, error);
  if (!tools)
    return fail(error);
  if (lineInfo)
    tools->flags.push_back("-lineinfo");

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

  linac::manifest::Manifest contents =
      manifestOf(layer, *form, *plan, hash, tools->kernel);
  for (const linac::toolchain::IsaVariant &variant : tools->isaVariants)
    linac::manifest::addIsaVariant(contents, variant.isa, variant.kernel);
  // The kernel file carries the hash of the manifest's contract, and the
  // manifest the kernel file's size and hash.
  std::string contract =
      linac::contractHash(linac::manifest::write(contents));
  *source += linac::emitContract(contract);
  // A CPU package's file and one a variant; a GPU package's file a part
  // that holds kernels, the source compiled for each part side by side.
  std::vector<linac::toolchain::KernelBuild> builds;
  auto addBuild = [&](const std::string &file, std::vector<std::string> flags,
                      std::vector<std::string> libraries) {
    builds.push_back(
        {staging.path() + "/" + file, std::move(flags), std::move(libraries)});
  };
  if (cpu) {
    addBuild(tools->kernel, {}, tools->libraries);
    for (const linac::toolchain::IsaVariant &variant : tools->isaVariants)
      addBuild(variant.kernel, variant.flags, variant.libraries);
  } else {
    std::vector<std::string> files = linac::manifest::kernelFiles(contents);
    for (int part = 0; part < linac::manifest::kCudaKernelParts; ++part)
      if (llvm::is_contained(files, linac::manifest::cudaKernelFile(part)))
        addBuild(linac::manifest::cudaKernelFile(part),
                 {fmt::format("-DLINAC_KERNEL_PART={}", part)},
                 tools->libraries);
  }
  auto writeManifest = [&] {
    contents.integrity = linac::manifest::Integrity{contract, {}};
    for (const linac::toolchain::KernelBuild &build : builds)
      contents.integrity->files[llvm::sys::path::filename(build.kernel).str()] =
          recordOf(build.kernel);
    return write("manifest.json", linac::manifest::write(contents));
  };

  if (failed(write(tools->source, *source)) ||
      failed(write("layer.mlir", normalized)))
    return fail("could not write the package " + out);
  if (!linac::toolchain::build(*tools, staging.path() + "/" + tools->source,
                               builds, *source, error))
    return fail(error);
  if (failed(writeManifest()))
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
