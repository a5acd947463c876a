//===- linac.cpp - the linac compiler driver ------------------------------===//
//
//   linac compile SPEC --target cpu -o NAME.linac   spec -> package
//   linac run NAME.linac --inputs DIR --outputs DIR  .npy in, .npy out
//   linac describe NAME.linac                        arguments and shapes
//
//===----------------------------------------------------------------------===//

#include "linac/Compiler/Codegen.h"
#include "linac/Compiler/Passes.h"
#include "linac/Linac.h"
#include "linac/npy.h"
#include "linac/package.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <cstdlib>
#include <unistd.h>

using namespace mlir;
namespace cl = llvm::cl;
namespace fs = llvm::sys::fs;

static constexpr const char *kCompilerVersion = "0.1.0";

static cl::SubCommand compileCommand("compile", "Compile a spec into a package");
static cl::opt<std::string> specPath(cl::Positional, cl::desc("<spec.mlir>"),
                                     cl::Required, cl::sub(compileCommand));
static cl::opt<std::string> targetName("target", cl::desc("cpu, sm_90a or sm_80"),
                                       cl::init("cpu"), cl::sub(compileCommand));
static cl::opt<std::string> outputPath("o", cl::desc("Package directory"),
                                       cl::value_desc("NAME.linac"),
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

static cl::SubCommand describeCommand("describe", "Print a package's arguments");
static cl::opt<std::string> describePackage(cl::Positional, cl::desc("<NAME.linac>"),
                                            cl::Required, cl::sub(describeCommand));

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

/// Compiles the generated source into a shared object with the host compiler.
static LogicalResult buildSharedObject(StringRef source, StringRef object) {
  const char *cxx = std::getenv("CXX");
  llvm::ErrorOr<std::string> compiler =
      llvm::sys::findProgramByName(cxx ? cxx : "c++");
  if (!compiler) {
    fail("no host C++ compiler found (set CXX)");
    return failure();
  }
  std::string include = "-I" + templatesDir();
  SmallVector<StringRef> args{*compiler, "-std=c++17", "-O2", "-fPIC",
                              "-shared", include, source, "-o", object};
  std::string error;
  int status = llvm::sys::ExecuteAndWait(*compiler, args, std::nullopt, {}, 0,
                                         0, &error);
  if (status != 0) {
    fail(fmt::format("host compiler failed on {} ({})", source.str(), error));
    return failure();
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
  return nullptr;
}

static int compile() {
  if (targetName != "cpu")
    return fail("target '" + targetName +
                "' has no backend yet; this compiler builds cpu packages");
  MLIRContext context;
  context.printOpOnDiagnostic(false);
  context.loadDialect<linac::LinacDialect, arith::ArithDialect,
                      math::MathDialect>();
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(specPath, sourceMgr, &context);
  if (!module)
    return 1;
  SmallVector<linac::LayerOp> layers(module->getOps<linac::LayerOp>());
  if (layers.size() != 1)
    return fail(fmt::format("{} holds {} layers; a package holds one",
                            specPath.getValue(), layers.size()));
  linac::LayerOp layer = layers.front();

  PassManager pm(&context);
  pm.addPass(linac::createLinacNormalize());
  pm.addPass(linac::createLinacPlan({targetName}));
  if (failed(pm.run(*module)))
    return 1;
  FailureOr<std::string> source = linac::emitCpuSource(layer);
  if (failed(source))
    return 1;

  std::string normalized;
  llvm::raw_string_ostream(normalized) << *module;
  std::string hash = llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(
      normalized + targetName.getValue() + kCompilerVersion)), true);

  std::string out = outputPath.empty() ? layer.getSymName().str() + ".linac"
                                       : outputPath.getValue();
  // Build beside the destination and rename, so that a reader never sees
  // half a package.
  std::string staging = fmt::format("{}.tmp{}", out, getpid());
  fs::remove_directories(staging);
  if (std::error_code ec = fs::create_directories(staging))
    return fail("cannot create " + staging + ": " + ec.message());
  auto write = [&](StringRef name, StringRef text) {
    std::error_code ec;
    llvm::raw_fd_ostream file((staging + "/" + name).str(), ec);
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
  auto runtimeArgument = [&](StringRef name, StringRef kind, StringRef shape,
                             StringRef dtype) {
    arguments.push_back(llvm::json::Object{{"name", name}, {"role", "runtime"},
                                           {"kind", kind}, {"shape", shape},
                                           {"dtype", dtype}});
  };
  runtimeArgument("cu_seqlens", "index", "[N + 1] (optional, B = 1)", "int64");
  runtimeArgument("initial_state", "state", "[N, H, K, V] (optional)", "float32");
  runtimeArgument("final_state", "state", "[N, H, K, V]", "float32");
  runtimeArgument("o", "value", "[B, T, H, V]", "float32");

  llvm::json::Object manifest{
      {"format", 1},
      {"compiler_version", kCompilerVersion},
      {"target", targetName.getValue()},
      {"spec_hash", hash},
      {"layer", layer.getSymName()},
      {"key_dim", layer.getStateType().getKeyDim()},
      {"value_dim", layer.getStateType().getValueDim()},
      {"normal_form", toJson(layer->getAttr(linac::kNormalFormAttr))},
      {"plan", toJson(layer->getAttr(linac::kPlanAttr))},
      {"arguments", std::move(arguments)},
      {"kernels", llvm::json::Array{llvm::json::Object{
                      {"entry", "linac_cpu_forward"}, {"file", "layer.so"}}}},
      {"step", linac::emitStepProgram(layer)},
  };
  std::string manifestText;
  llvm::raw_string_ostream(manifestText)
      << llvm::formatv("{0:2}", llvm::json::Value(std::move(manifest))) << "\n";

  if (failed(write("layer.cpp", *source)) ||
      failed(write("layer.mlir", normalized)) ||
      failed(buildSharedObject(staging + "/layer.cpp", staging + "/layer.so")) ||
      failed(write("manifest.json", manifestText))) {
    fs::remove_directories(staging);
    return fail("could not write the package " + out);
  }
  fs::remove_directories(out);
  if (std::error_code ec = fs::rename(staging, out))
    return fail("cannot move the package into " + out + ": " + ec.message());
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
    if (fs::exists(path("cu_seqlens")))
      request.cuSeqlens = linac::readNpy(path("cu_seqlens")).toInt64();
    request.scale = runScale;
    linac::ForwardShape shape = package->check(request);

    int64_t stateSize =
        shape.sequences * shape.heads * package->keyDim() * package->valueDim();
    std::vector<float> initial;
    if (fs::exists(path("initial_state"))) {
      linac::NpyArray array = linac::readNpy(path("initial_state"));
      std::vector<int64_t> expected{shape.sequences, shape.heads,
                                    package->keyDim(), package->valueDim()};
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
                                        package->keyDim(), package->valueDim()},
                                       finalState));
  } catch (const linac::Error &e) {
    return fail(e.what());
  } catch (const linac::NpyError &e) {
    return fail(e.what());
  }
  return 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  linac::registerLinacPasses();
  cl::ParseCommandLineOptions(argc, argv, "linac: a compiler for linear attention\n");
  if (compileCommand)
    return compile();
  if (runCommand)
    return run();
  if (describeCommand)
    return describe();
  return fail("expected a command: compile, run or describe (see --help)");
}
