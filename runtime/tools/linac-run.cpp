//===- linac-run.cpp - run, describe and time packages without MLIR -------===//
//
//   linac-run run NAME.linac --inputs DIR --outputs DIR [--decode | --backward]
//                                                     .npy in and out
//   linac-run describe NAME.linac                     arguments and shapes
//   linac-run bench NAME.linac... [--shape B,T,H] [--decode]  timings, JSON
//
// Built with the runtime alone, so it runs on GPU servers that have no
// MLIR; `linac run`, `describe` and `bench` forward here.
//
//===----------------------------------------------------------------------===//

#include "linac/bench.h"
#if defined(LINAC_CPU_BENCH)
#include "linac/cpu_bench.h"
#endif
#include "linac/npy.h"
#include "linac/package.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

int fail(const std::string &message) {
  std::cerr << "linac: error: " << message << "\n";
  return 1;
}

std::string joined(const std::vector<int64_t> &values) {
  std::string text;
  for (int64_t value : values)
    text += (text.empty() ? "" : ", ") + std::to_string(value);
  return text;
}

struct RunOptions {
  std::string package, inputs, outputs;
  float scale = 0.0f;
  int threads = 0;
  bool decode = false, backward = false;

  std::string path(const std::string &name) const {
    return inputs + "/" + name + ".npy";
  }
};

/// `run --backward`: the gradients of <grad_o, o> + <grad_final_state, final
/// state> for the forward pass `forward` ran, one file an argument and the
/// initial state's, grad_NAME.npy.
int backwardPass(const RunOptions &options, const linac::Package &package,
                 const linac::ForwardRequest &forward,
                 const std::vector<int64_t> &outputShape,
                 const std::vector<int64_t> &stateShape) {
  auto readShaped = [&](const std::string &name,
                        const std::vector<int64_t> &shape,
                        std::vector<float> &into) -> std::optional<int> {
    linac::NpyArray array = linac::readNpy(options.path(name));
    if (array.shape != shape)
      return fail(name + " has shape " + array.shapeString() + ", expected [" +
                  joined(shape) + "]");
    into = array.toFloat();
    return std::nullopt;
  };
  if (!fs::exists(options.path("grad_o")))
    return fail("--backward needs the output's gradient, " +
                options.path("grad_o"));
  linac::BackwardRequest request;
  request.forward = forward;
  std::vector<float> dOutput, dFinal;
  if (auto failed = readShaped("grad_o", outputShape, dOutput))
    return *failed;
  request.dOutput = dOutput.data();
  if (fs::exists(options.path("grad_final_state"))) {
    if (auto failed = readShaped("grad_final_state", stateShape, dFinal))
      return *failed;
    request.dFinalState = dFinal.data();
  }
  std::map<std::string, std::vector<float>> gradients;
  for (const auto &[name, tensor] : forward.tensors) {
    size_t size = 1;
    for (int64_t extent : tensor.shape)
      size *= size_t(extent);
    gradients[name].assign(size, 0.0f);
    request.gradients[name] = gradients[name].data();
  }
  size_t stateSize = 1;
  for (int64_t extent : stateShape)
    stateSize *= size_t(extent);
  std::vector<float> dInitial(stateSize);
  request.dInitialState = dInitial.data();
  package.backward(request);
  for (const auto &[name, tensor] : forward.tensors)
    linac::writeNpy(options.outputs + "/grad_" + name + ".npy",
                    linac::makeFloat32(tensor.shape, gradients[name]));
  linac::writeNpy(options.outputs + "/grad_initial_state.npy",
                  linac::makeFloat32(stateShape, dInitial));
  return 0;
}

/// `run --decode`: one decode step on the pool in the inputs folder.
int decodeStep(const RunOptions &options, const linac::Package &package,
               const std::map<std::string, linac::HostTensor> &tensors) {
  for (const char *name : {"state_pool", "state_indices"})
    if (!fs::exists(options.path(name)))
      return fail("decode needs " + options.path(name));
  linac::NpyArray poolArray = linac::readNpy(options.path("state_pool"));
  std::vector<float> pool = poolArray.toFloat();
  linac::DecodeRequest request;
  request.tensors = tensors;
  request.statePool = pool.data();
  request.poolShape = poolArray.shape;
  request.stateIndices =
      linac::readNpy(options.path("state_indices")).toInt64();
  request.scale = options.scale;
  request.threads = options.threads;
  linac::ForwardRequest shapes;
  shapes.tensors = tensors;
  linac::ForwardShape shape = package.check(shapes);
  // Rows of skipped sequences stay zero.
  std::vector<float> output(shape.batch * shape.tokens * shape.heads *
                            package.valueDim());
  request.output = output.data();
  package.decode(request);
  fs::create_directories(options.outputs);
  linac::writeNpy(options.outputs + "/o.npy",
                  linac::makeFloat32({shape.batch, shape.tokens, shape.heads,
                                      package.valueDim()},
                                     output));
  linac::writeNpy(options.outputs + "/state_pool.npy",
                  linac::makeFloat32(poolArray.shape, pool));
  return 0;
}

int run(const RunOptions &options) {
  auto package = linac::Package::open(options.package);
  linac::ForwardRequest request;
  std::vector<std::vector<float>> storage;
  for (const linac::manifest::Argument &arg : package->info().arguments) {
    std::string role(linac::manifest::nameOf(arg.role));
    if (!fs::exists(options.path(arg.name)))
      return fail("missing " + role + " '" + arg.name + "': no " +
                  options.path(arg.name));
    linac::NpyArray array = linac::readNpy(options.path(arg.name));
    storage.push_back(array.toFloat());
    request.tensors[arg.name] = {storage.back().data(), array.shape};
  }
  if (options.decode)
    return decodeStep(options, *package, request.tensors);
  if (fs::exists(options.path("cu_seqlens")))
    request.cuSeqlens = linac::readNpy(options.path("cu_seqlens")).toInt64();
  request.scale = options.scale;
  request.threads = options.threads;
  linac::ForwardShape shape = package->check(request);

  std::vector<int64_t> stateShape{shape.sequences, shape.heads,
                                  package->keyDim(), package->stateColumns()};
  std::vector<float> initial;
  if (fs::exists(options.path("initial_state"))) {
    linac::NpyArray array = linac::readNpy(options.path("initial_state"));
    if (array.shape != stateShape)
      return fail("initial_state has shape " + array.shapeString() +
                  ", expected [" + joined(stateShape) + "]");
    initial = array.toFloat();
    request.initialState = initial.data();
  }
  std::vector<float> output(shape.batch * shape.tokens * shape.heads *
                            package->valueDim());
  std::vector<float> finalState(shape.sequences * shape.heads *
                                package->keyDim() * package->stateColumns());
  request.output = output.data();
  request.finalState = finalState.data();
  package->forward(request);

  fs::create_directories(options.outputs);
  linac::writeNpy(options.outputs + "/o.npy",
                  linac::makeFloat32({shape.batch, shape.tokens, shape.heads,
                                      package->valueDim()},
                                     output));
  linac::writeNpy(options.outputs + "/final_state.npy",
                  linac::makeFloat32(stateShape, finalState));
  if (options.backward)
    return backwardPass(
        options, *package, request,
        {shape.batch, shape.tokens, shape.heads, package->valueDim()},
        stateShape);
  return 0;
}

int describe(const std::string &path) {
  auto package = linac::Package::open(path);
  std::printf("layer @%s for %s, K = %lld, V = %lld\n", package->layer().c_str(),
              package->target().c_str(), (long long)package->keyDim(),
              (long long)package->valueDim());
  for (const linac::ArgumentInfo &arg : package->arguments())
    std::printf("  %-14s %-8s %-7s %s\n", arg.name.c_str(), arg.role.c_str(),
                arg.kind.c_str(), arg.shape.c_str());
  return 0;
}

struct BenchOptions {
  std::vector<std::string> packages, shapes;
  std::string dtype = "bfloat16";
  std::vector<int> threads = {1, 0};
  std::optional<int> reps; ///< unset: 50 for CUDA packages, 5 for cpu ones
  int64_t segmentTokens = 0;
  bool decode = false;
  bool open = false;
};

/// The bytes of a package's kernel files, together.
static uintmax_t kernelBytes(const std::string &path,
                             const linac::Package &package) {
  uintmax_t bytes = 0;
  for (const std::string &file : package.kernelFiles())
    bytes += std::filesystem::file_size(std::filesystem::path(path) / file);
  return bytes;
}

/// Times Package::open (its integrity checks and reading or loading its
/// kernel files; a CUDA module loads at the first call, not here): one JSON
/// line a package, the median of `reps` opens.
int benchOpen(const std::vector<std::string> &paths, int reps) {
  for (const std::string &path : paths) {
    std::unique_ptr<linac::Package> package;
    double seconds = linac::bench::medianSeconds(
        reps, [&] { package = linac::Package::open(path); });
    nlohmann::json line = {{"variant", package->layer()},
                           {"mode", "open"},
                           {"target", package->target()},
                           {"kernel_files", package->kernelFiles()},
                           {"kernel_bytes", kernelBytes(path, *package)},
                           {"ms", seconds * 1e3}};
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

/// A cpu package's forward (or decode step) at `shape` on each of
/// --threads, beside the host's GEMM rate (or copy rate) on as many
/// threads, measured once a count.
int benchCpu(const linac::Package &package, linac::bench::Shape shape,
             const BenchOptions &options) {
#if defined(LINAC_CPU_BENCH)
  static std::map<int, linac::bench::CpuGemm> gemms;
  static std::map<int, double> copies;
  const int reps = options.reps.value_or(5);
  for (int threads : options.threads) {
    int count = linac::hostThreads(threads);
    std::string line;
    if (options.decode) {
      if (!copies.count(count))
        copies[count] = linac::bench::measureCpuCopy(count);
      line = linac::bench::cpuDecodeJsonLine(
          package, shape,
          linac::bench::decodeHost(package, shape, count, reps),
          copies[count]);
    } else {
      if (!gemms.count(count))
        gemms[count] = linac::bench::measureCpuGemm(count);
      line = linac::bench::cpuJsonLine(
          package, shape,
          linac::bench::forwardHost(package, shape, count, reps,
                                    options.segmentTokens),
          gemms[count]);
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  return 0;
#else
  (void)shape;
  (void)options;
  return fail("this linac-run was built without Eigen, which the CPU bench's "
              "reference GEMM needs; it cannot time " + package.layer());
#endif
}

int bench(const BenchOptions &options) {
  std::optional<linac::DType> dtype =
      linac::manifest::parse<linac::DType>(options.dtype);
  if (!dtype)
    return fail("unknown dtype '" + options.dtype +
                "'; expected bfloat16, float16 or float32");
  std::vector<linac::bench::Shape> shapes;
  for (const std::string &text : options.shapes) {
    linac::bench::Shape shape;
    char end = 0;
    if (std::sscanf(text.c_str(), "%" SCNd64 ",%" SCNd64 ",%" SCNd64 "%c",
                    &shape.batch, &shape.tokens, &shape.heads, &end) != 3 ||
        shape.batch <= 0 || shape.tokens <= 0 || shape.heads <= 0)
      return fail("--shape takes B,T,H as positive integers, got '" + text +
                  "'");
    shapes.push_back(shape);
  }
  if (shapes.empty() && options.decode)
    shapes = {{64, 1, 16}, {256, 1, 16}};
  if (shapes.empty())
    shapes.push_back({});
  if (options.reps && *options.reps <= 0)
    return fail("--reps must be positive");
  if (options.open) {
    if (!options.shapes.empty() || options.decode || options.segmentTokens ||
        options.threads != BenchOptions().threads)
      return fail("--open times opening packages: it takes no --shape, "
                  "--decode, --threads or --segment-tokens");
    return benchOpen(options.packages, options.reps.value_or(20));
  }
  std::vector<std::unique_ptr<linac::Package>> packages;
  bool devicePackages = false;
  for (const std::string &path : options.packages) {
    packages.push_back(linac::Package::open(path));
    if (packages.back()->target() != "cpu")
      devicePackages = true;
  }
  if (devicePackages && options.threads != BenchOptions().threads)
    return fail("--threads is for cpu packages");
  std::optional<linac::bench::Ceilings> ceilings;
  if (devicePackages)
    ceilings = linac::bench::measureCeilings();
  for (const auto &package : packages)
    for (const linac::bench::Shape &shape : shapes) {
      if (package->target() == "cpu") {
        if (int status = benchCpu(*package, shape, options))
          return status;
        continue;
      }
      int reps = options.reps.value_or(50);
      linac::bench::Result result =
          options.decode
              ? linac::bench::decode(*package, shape, *dtype, reps)
              : linac::bench::forward(*package, shape, *dtype, reps,
                                      options.segmentTokens);
      std::printf("%s\n", linac::bench::jsonLine(
                              *package, options.decode ? "decode" : "forward",
                              shape, *dtype, result, *ceilings)
                              .c_str());
      std::fflush(stdout);
    }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app("linac-run: run, describe and time linac packages");
  app.require_subcommand(1);

  RunOptions runOptions;
  CLI::App *runCommand =
      app.add_subcommand("run", "Run a package's forward pass on .npy files");
  runCommand->add_option("package", runOptions.package, "NAME.linac")
      ->required();
  runCommand->add_option("--inputs", runOptions.inputs,
                         "Directory of <argument>.npy")
      ->required();
  runCommand->add_option("--outputs", runOptions.outputs,
                         "Where o.npy and final_state.npy go")
      ->required();
  runCommand->add_option("--scale", runOptions.scale,
                         "Read scale (default K^-1/2)");
  runCommand->add_option("--threads", runOptions.threads,
                         "Threads a cpu package runs on (default 0: every "
                         "core this process may use)");
  CLI::Option *decodeFlag = runCommand->add_flag(
      "--decode", runOptions.decode,
      "A decode step: inputs [B, n, H, ...], state_pool.npy and "
      "state_indices.npy in; o.npy and the updated state_pool.npy out");
  runCommand
      ->add_flag("--backward", runOptions.backward,
                 "The forward, then its backward (cpu packages): grad_o.npy "
                 "and optionally grad_final_state.npy in; grad_NAME.npy for "
                 "each input and parameter and grad_initial_state.npy out")
      ->excludes(decodeFlag);

  std::string describePackage;
  CLI::App *describeCommand =
      app.add_subcommand("describe", "Print a package's arguments");
  describeCommand->add_option("package", describePackage, "NAME.linac")
      ->required();

  BenchOptions benchOptions;
  CLI::App *benchCommand = app.add_subcommand(
      "bench", "Time packages' forward passes, CUDA packages on the GPU and "
               "cpu packages on the host beside its GEMM rate (JSON lines)");
  benchCommand->add_option("packages", benchOptions.packages, "NAME.linac...")
      ->required();
  benchCommand->add_option("--shape", benchOptions.shapes,
                           "B,T,H to time (repeatable; default 8,4096,16)");
  benchCommand->add_option("--dtype", benchOptions.dtype,
                           "bfloat16, float16 or float32");
  benchCommand->add_option("--reps", benchOptions.reps,
                           "Timed runs per case (median; default 50 on a GPU, "
                           "5 on the host)");
  benchCommand->add_option("--threads", benchOptions.threads,
                           "Threads of a cpu package's pass (repeatable; 0: "
                           "every core the process may use; default 1 and 0)");
  benchCommand->add_option(
      "--segment-tokens", benchOptions.segmentTokens,
      "Cut sequences into segments of this many tokens (0: as the runtime "
      "chooses; -1: never), on the GPU and the host alike");
  benchCommand->add_flag("--decode", benchOptions.decode,
                         "Time decode steps: --shape B,T,H is B sequences of "
                         "T new tokens (default 64,1,16 and 256,1,16)");
  benchCommand->add_flag("--open", benchOptions.open,
                         "Time opening each package (--reps opens, default "
                         "20), not its passes");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*runCommand)
      return run(runOptions);
    if (*describeCommand)
      return describe(describePackage);
    return bench(benchOptions);
  } catch (const linac::Error &e) {
    return fail(e.what());
  } catch (const linac::NpyError &e) {
    return fail(e.what());
  } catch (const std::bad_alloc &) {
    return fail("out of memory for the inputs or outputs");
  }
}
