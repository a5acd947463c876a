//===- differential.cpp - mutated specs on the CPU against the reference --===//
//
//   linac-differential [--jobs N] [--verbose] WORKDIR SPEC_OR_DIR...
//
// Compiles each spec (mutate_specs.py writes them) with `linac compile
// --target cpu`. A spec the compiler rejects must be rejected with a
// diagnostic: exit status 1 and an error on stderr, not a signal or a hang.
// A spec it compiles runs forward and as decode steps on fresh random
// inputs, and both must give the fp64 reference's output and final state
// within 1e-5, the CPU numerics tests' tolerance, every element written;
// an ill-conditioned spec, whose reference moves under a rounding of its
// arguments, within ten times that move. Inputs on which the reference
// has no finite fp32-sized answer, or moves by more than 1e-3, tell
// nothing and are skipped. Exits 1 if any spec shows a defect and copies
// those into WORKDIR/defects/.
//
//===----------------------------------------------------------------------===//

#include "harness.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <spawn.h>
#include <sstream>
#include <sys/wait.h>
#include <thread>

extern char **environ;

namespace fs = std::filesystem;
using namespace linac;
using namespace linac::harness;

namespace {

constexpr double kTolerance = 1e-5;
/// An ill-conditioned spec's tolerance: this many times the reference's
/// change under one rounding of its arguments. The kernels round at every
/// op of every token, and a recurrence carries those roundings on: over
/// the 60 to 300 tokens here an l2norm of a read near zero was seen 12.4
/// times past one rounding's change, on the exact scan.
constexpr double kRoundings = 30;
/// Beyond this tolerance a spec is too ill-conditioned to tell anything.
constexpr double kMaxTolerance = 1e-2;
/// Values beyond this the kernels' fp32 cannot be expected to hold.
constexpr double kFloatRange = 1e30;
/// Seconds a compilation may take before it counts as a hang.
constexpr const char *kCompileTimeout = "300";

enum class Verdict { Rejected, Passed, Undefined, Defect };

struct Finding {
  Verdict verdict;
  std::string detail;
};

std::string readFile(const fs::path &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Runs `argv` with stdout discarded and stderr into `errors`; returns the
/// wait status.
int spawn(const std::vector<std::string> &argv, const fs::path &errors) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, errors.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char *> args;
  for (const std::string &arg : argv)
    args.push_back(const_cast<char *>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  int status = -1;
  if (posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ) == 0)
    waitpid(pid, &status, 0);
  posix_spawn_file_actions_destroy(&actions);
  return status;
}

/// True if a transition takes an operand computed from the read: a
/// feedback loop, which carries every token's fp32 roundings into the next
/// token's operands, so one rounding of the arguments does not measure the
/// answer's sensitivity.
bool feedsReadBack(const nlohmann::json &step) {
  std::set<int64_t> fromRead;
  for (const nlohmann::json &op : step["ops"]) {
    std::string name = op["op"];
    const nlohmann::json &operands = op["operands"];
    bool tainted = false;
    for (size_t i = 0; i < operands.size(); ++i)
      tainted |= fromRead.count(operands[i].get<int64_t>()) > 0;
    if (name == "linac.decay" || name == "linac.matrix_gate" ||
        name == "linac.erase" || name == "linac.write") {
      if (tainted)
        return true;
    } else if (op.contains("result") && (name == "linac.read" || tainted)) {
      fromRead.insert(op["result"].get<int64_t>());
    }
  }
  return false;
}

bool allFinite(const std::vector<float> &values) {
  return std::all_of(values.begin(), values.end(),
                     [](float x) { return std::isfinite(x); });
}

/// Whether the reference has an answer fp32 kernels can be held to.
bool defined(const std::vector<double> &values) {
  return std::all_of(values.begin(), values.end(), [](double x) {
    return std::isfinite(x) && std::fabs(x) < kFloatRange;
  });
}

struct Run {
  std::vector<float> output, state;
};

Run forward(const Package &package, const Problem &problem, const Case &c) {
  ForwardRequest request;
  request.cuSeqlens = c.cuSeqlens;
  for (const auto &[name, argument] : problem.arguments)
    request.tensors[name] = {argument.values.data(), argument.shape};
  if (!problem.initialState.empty())
    request.initialState = problem.initialState.data();
  Run run{std::vector<float>(problem.outputSize, std::nanf("")),
          std::vector<float>(problem.stateSize, std::nanf(""))};
  request.output = run.output.data();
  request.finalState = run.state.data();
  package.forward(request);
  return run;
}

/// The same tokens as decode steps of up to maxDecodeTokens() each, the
/// states in a pool in reverse order: all sequences in each step, or with
/// variable lengths one sequence at a time.
Run decode(const Package &package, const Problem &problem, const Case &c,
           Dims dims) {
  const std::vector<int64_t> &cu = problem.reference.cuSeqlens;
  int64_t sequences = int64_t(cu.size()) - 1;
  std::vector<int64_t> slots;
  for (int64_t n = sequences - 1; n >= 0; --n)
    slots.push_back(n);
  size_t slot = size_t(c.heads) * dims.k * package.stateColumns();
  std::vector<float> pool(sequences * slot, 0.0f);
  if (!problem.initialState.empty())
    package.statesToPool(problem.initialState.data(), c.heads, slots,
                         pool.data(), sequences);
  Run run{std::vector<float>(problem.outputSize, std::nanf("")),
          std::vector<float>(problem.stateSize, std::nanf(""))};
  size_t row = size_t(c.heads) * dims.v;
  // Tokens [begin, end) of the argument's token axis for `indices`; the
  // output of sequence b's token t lands at row first(b) + t - begin.
  auto step = [&](int64_t begin, int64_t end, std::vector<int64_t> indices,
                  const std::function<int64_t(int64_t)> &first) {
    std::map<std::string, Argument> slices;
    DecodeRequest request;
    for (const auto &[name, argument] : problem.arguments) {
      slices[name] = tokensOf(argument, begin, end);
      request.tensors[name] = {slices[name].values.data(), slices[name].shape};
    }
    int64_t batch = indices.size(), tokens = end - begin;
    std::vector<float> output(batch * tokens * row, std::nanf(""));
    request.statePool = pool.data();
    request.poolShape = {sequences, c.heads, dims.k, package.stateColumns()};
    request.stateIndices = std::move(indices);
    request.output = output.data();
    package.decode(request);
    for (int64_t b = 0; b < batch; ++b)
      std::copy_n(output.begin() + b * tokens * row, tokens * row,
                  run.output.begin() + first(b) * row);
  };
  int64_t most = package.maxDecodeTokens();
  if (c.cuSeqlens.empty()) {
    for (int64_t begin = 0; begin < c.tokens; begin += most)
      step(begin, std::min(c.tokens, begin + most), slots,
           [&](int64_t b) { return b * c.tokens + begin; });
  } else {
    for (int64_t n = 0; n < sequences; ++n)
      for (int64_t begin = cu[n]; begin < cu[n + 1]; begin += most)
        step(begin, std::min(cu[n + 1], begin + most), {slots[n]},
             [&](int64_t) { return begin; });
  }
  package.statesFromPool(pool.data(), sequences, c.heads, slots,
                         run.state.data());
  return run;
}

/// A random shape for one spec: lengths about the chunk sizes, sometimes
/// grouped heads, variable lengths (forward only) or strong gates.
Case randomCase(std::mt19937 &rng) {
  Case c;
  std::uniform_int_distribution<int> percent(0, 99);
  const int64_t lengths[] = {1, 17, 63, 64, 65, 130};
  c.tokens = lengths[std::uniform_int_distribution<int>(0, 5)(rng)];
  c.initialState = percent(rng) < 70;
  if (percent(rng) < 25)
    c.keyHeads = 1;
  if (percent(rng) < 20)
    c.gates = GateRange::Strong;
  if (percent(rng) < 20) {
    c.batch = 1;
    c.cuSeqlens = {0, 1, 1, 40, 70};
  }
  return c;
}

double relativeChange(const std::vector<double> &got,
                      const std::vector<double> &want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

/// How far the reference moves when every argument and the initial state
/// move by a float32 rounding: an fp32 kernel cannot be held closer to it
/// than about that, and ill-conditioned mutants move far.
double sensitivity(const Problem &problem, const reference::Result &want,
                   std::mt19937 &rng) {
  reference::Problem moved = problem.reference;
  std::uniform_int_distribution<int> side(0, 2);
  auto nudge = [&](std::vector<float> &values) {
    for (float &x : values)
      if (int s = side(rng))
        x = std::nextafter(x, s == 1 ? INFINITY : -INFINITY);
  };
  for (reference::Tensor &tensor : moved.inputs)
    nudge(tensor.values);
  for (reference::Tensor &tensor : moved.params)
    nudge(tensor.values);
  nudge(moved.initialState);
  reference::Result result = reference::run(moved);
  return std::max(relativeChange(result.output, want.output),
                  relativeChange(result.finalState, want.finalState));
}

/// How `run` misses the reference by more than `tolerance`, if it does.
std::optional<std::string>
mismatch(const Run &run, const reference::Result &want, double tolerance) {
  double output = relativeError(run.output, want.output, 0, want.output.size());
  double state =
      relativeError(run.state, want.finalState, 0, want.finalState.size());
  bool finite = allFinite(run.output) && allFinite(run.state);
  if (finite && output <= tolerance && state <= tolerance)
    return std::nullopt;
  char text[160];
  std::snprintf(text, sizeof(text),
                "output error %.2e, state error %.2e%s (tolerance %.1e)",
                output, state, finite ? "" : ", not finite", tolerance);
  return std::string(text);
}

Finding check(const fs::path &spec, const fs::path &work) {
  std::string stem = spec.stem().string();
  fs::path package = work / (stem + ".linac"), errors = work / (stem + ".err");
  int status = spawn({"timeout", kCompileTimeout, LINAC_TOOL, "compile",
                      spec.string(), "--target", "cpu", "-o", package.string()},
                     errors);
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::string diagnostics = readFile(errors);
  fs::remove(errors);
  std::string first = diagnostics.substr(0, diagnostics.find('\n'));
  if (code == 124)
    return {Verdict::Defect, "linac compile hangs"};
  // A verified spec whose generated source the host compiler refuses is
  // the code generator's fault.
  if (code == 1 && diagnostics.find(" failed on ") != std::string::npos)
    return {Verdict::Defect, "the generated source does not compile: " +
                                 diagnostics.substr(0, 400)};
  if (code == 1 && diagnostics.find("error:") != std::string::npos)
    return {Verdict::Rejected, first};
  if (code != 0)
    return {Verdict::Defect, "linac compile exits with status " +
                                 std::to_string(code) + ": " +
                                 diagnostics.substr(0, 400)};
  Finding finding{Verdict::Passed, ""};
  try {
    auto opened = Package::open(package.string());
    Dims dims{int(opened->keyDim()), int(opened->valueDim())};
    std::mt19937 rng(std::random_device{}());
    Case c = randomCase(rng);
    Problem problem = makeProblem(*opened, dims, c);
    reference::Result want = reference::run(problem.reference);
    std::string family(manifest::nameOf(opened->info().plan.family));
    if (!defined(want.output) || !defined(want.finalState)) {
      fs::remove_all(package);
      return {Verdict::Undefined,
              "the reference is not finite in fp32's range"};
    }
    std::string shape = "T" + std::to_string(c.tokens) +
                        (c.cuSeqlens.empty() ? "" : " varlen") +
                        (c.keyHeads < c.heads ? " grouped" : "") +
                        (c.gates == GateRange::Strong ? " strong" : "") + ", " +
                        family;
    Run forwardRun = forward(*opened, problem, c);
    Run decodeRun = decode(*opened, problem, c, dims);
    double tolerance = kTolerance;
    std::optional<std::string> forwardBad, decodeBad;
    auto compare = [&] {
      forwardBad = mismatch(forwardRun, want, tolerance);
      decodeBad = mismatch(decodeRun, want, tolerance);
      return !forwardBad && !decodeBad;
    };
    if (!compare()) {
      tolerance =
          std::max(tolerance, kRoundings * sensitivity(problem, want, rng));
      if (tolerance > kMaxTolerance) {
        fs::remove_all(package);
        return {Verdict::Undefined, "the reference moves by more than " +
                                        std::to_string(kMaxTolerance) +
                                        " under a rounding of its arguments"};
      }
      if (compare())
        shape += ", ill-conditioned";
    }
    if (!forwardBad && !decodeBad)
      finding = {Verdict::Passed, shape};
    else if (feedsReadBack(nlohmann::json::parse(opened->info().step)) &&
             !mismatch(forwardRun,
                       {std::vector<double>(decodeRun.output.begin(),
                                            decodeRun.output.end()),
                        std::vector<double>(decodeRun.state.begin(),
                                            decodeRun.state.end())},
                       kTolerance))
      finding = {Verdict::Undefined,
                 "the read feeds the transitions, and forward and decode "
                 "agree: fp32 roundings compound through the recurrence"};
    else
      finding = {Verdict::Defect,
                 (forwardBad ? "forward " + *forwardBad + "; " : "") +
                     (decodeBad ? "decode " + *decodeBad + "; " : "") + shape};
  } catch (const std::exception &e) {
    finding = {Verdict::Defect, std::string("runtime error: ") + e.what()};
  }
  fs::remove_all(package);
  return finding;
}

} // namespace

int main(int argc, char **argv) {
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  bool verbose = false;
  std::vector<std::string> args(argv + 1, argv + argc);
  while (!args.empty() && args.front().rfind("--", 0) == 0) {
    if (args.front() == "--jobs" && args.size() > 1) {
      jobs = std::max(1, std::atoi(args[1].c_str()));
      args.erase(args.begin());
    } else if (args.front() == "--verbose") {
      verbose = true;
    } else {
      break;
    }
    args.erase(args.begin());
  }
  if (args.size() < 2) {
    std::fprintf(stderr,
                 "usage: %s [--jobs N] [--verbose] WORKDIR SPEC_OR_DIR...\n",
                 argv[0]);
    return 2;
  }
  fs::path work = args[0];
  std::vector<fs::path> specs;
  for (auto it = args.begin() + 1; it != args.end(); ++it) {
    if (!fs::is_directory(*it)) {
      specs.push_back(*it);
      continue;
    }
    for (const auto &entry : fs::directory_iterator(*it))
      if (entry.path().extension() == ".mlir")
        specs.push_back(entry.path());
  }
  std::sort(specs.begin(), specs.end());
  fs::create_directories(work / "defects");
  // Mutants' kernels would only crowd the user's cache.
  setenv("LINAC_CACHE_DIR", (work / "cache").c_str(), 1);

  std::atomic<size_t> next{0};
  std::mutex print;
  size_t counts[4] = {};
  auto worker = [&] {
    for (size_t i; (i = next++) < specs.size();) {
      Finding finding = check(specs[i], work);
      std::lock_guard<std::mutex> lock(print);
      ++counts[int(finding.verdict)];
      static const char *names[] = {"rejected", "passed", "undefined",
                                    "DEFECT"};
      if (verbose || finding.verdict == Verdict::Defect) {
        std::string first = readFile(specs[i]);
        first = first.substr(0, first.find('\n'));
        std::printf("%-9s %s: %s\n          %s\n", names[int(finding.verdict)],
                    specs[i].filename().c_str(), finding.detail.c_str(),
                    first.c_str());
        std::fflush(stdout);
      }
      if (finding.verdict == Verdict::Defect) {
        std::ofstream(work / "defects" / specs[i].filename())
            << "// " << finding.detail << "\n"
            << readFile(specs[i]);
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned j = 0; j < std::min<size_t>(jobs, specs.size()); ++j)
    threads.emplace_back(worker);
  for (std::thread &t : threads)
    t.join();
  std::printf("%zu specs: %zu rejected with a diagnostic, %zu passed, %zu "
              "without a defined answer, %zu defects\n",
              specs.size(), counts[0], counts[1], counts[2], counts[3]);
  return counts[int(Verdict::Defect)] ? 1 : 0;
}
