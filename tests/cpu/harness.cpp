//===- harness.cpp - run a CPU package beside the fp64 reference ----------===//

#include "harness.h"
#include "reference.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace linac::harness {


namespace {

/// The spec text with its K x V = 128 x 128 replaced.
std::string resized(const std::string &spec, Dims dims) {
  std::string text = std::regex_replace(
      spec, std::regex("tensor<128xf32, #linac.key>"),
      "tensor<" + std::to_string(dims.k) + "xf32, #linac.key>");
  text = std::regex_replace(text, std::regex("tensor<128xf32, #linac.value>"),
                            "tensor<" + std::to_string(dims.v) +
                                "xf32, #linac.value>");
  return std::regex_replace(text, std::regex("128x128"),
                            std::to_string(dims.k) + "x" + std::to_string(dims.v));
}

std::string readFile(const fs::path &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

} // namespace

std::shared_ptr<Package> compiled(const fs::path &spec, Dims dims,
                                  const fs::path &workDir) {
  static std::map<std::string, std::shared_ptr<linac::Package>> cache;
  std::string key = spec.stem().string() + "_" + std::to_string(dims.k) + "x" +
                    std::to_string(dims.v);
  if (auto it = cache.find(key); it != cache.end())
    return it->second;
  const fs::path &dir = workDir;
  fs::create_directories(dir);
  fs::path source = dir / (key + ".mlir");
  std::ofstream(source) << resized(readFile(spec), dims);
  fs::path package = dir / (key + ".linac");
  std::string command = std::string(LINAC_TOOL) + " compile " + source.string() +
                        " -o " + package.string() + " > /dev/null";
  if (std::system(command.c_str()) != 0)
    throw std::runtime_error("failed: " + command);
  return cache[key] = Package::open(package.string());
}

namespace {

/// ||got - want|| / ||want||. Norms below 1e-30 count as 1e-30: fp32 cannot
/// hold such values (a state decayed by exp(-100) is subnormal or zero).
double relativeError(const std::vector<float> &got,
                     const std::vector<double> &want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

/// Names of the inputs that decay gates (key, value or matrix) derive from,
/// read off the step program: those are the ones the strong range drives
/// to log-decays near -20 per token. Write and erase strengths stay
/// moderate, as an unbounded exp(i) write gate has no fp32 answer to 1e-5.
std::set<std::string> decayInputs(const nlohmann::json &step) {
  std::map<int64_t, const nlohmann::json *> producers;
  for (const nlohmann::json &op : step["ops"])
    if (op.contains("result"))
      producers[op["result"].get<int64_t>()] = &op;
  std::vector<int64_t> worklist;
  for (const nlohmann::json &op : step["ops"]) {
    std::string name = op["op"];
    if (name == "linac.decay" || name == "linac.matrix_gate")
      for (size_t i = 1; i < op["operands"].size(); ++i)
        worklist.push_back(op["operands"][i].get<int64_t>());
  }
  std::set<int64_t> seen;
  while (!worklist.empty()) {
    int64_t id = worklist.back();
    worklist.pop_back();
    if (id < 0 || !seen.insert(id).second)
      continue;
    if (auto it = producers.find(id); it != producers.end())
      for (const nlohmann::json &operand : (*it->second)["operands"])
        worklist.push_back(operand.get<int64_t>());
  }
  std::set<std::string> names;
  for (const nlohmann::json &input : step["inputs"])
    if (seen.count(input["value"].get<int64_t>()))
      names.insert(input["name"].get<std::string>());
  return names;
}

} // namespace

Outcome run(const Package &package, Dims dims, const Case &c) {
  nlohmann::json manifest = nlohmann::json::parse(package.manifest());
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit(0.1f, 0.9f);
  std::uniform_real_distribution<float> strong(-20.0f, 20.0f);
  std::set<std::string> decays = decayInputs(manifest["step"]);

  reference::Problem problem;
  problem.step = manifest["step"];
  problem.numHeads = c.heads;
  problem.cuSeqlens = c.cuSeqlens;
  if (problem.cuSeqlens.empty())
    for (int64_t b = 0; b <= c.batch; ++b)
      problem.cuSeqlens.push_back(b * c.tokens);
  int64_t totalTokens = problem.cuSeqlens.back();
  int64_t sequences = int64_t(problem.cuSeqlens.size()) - 1;

  ForwardRequest request;
  if (!c.cuSeqlens.empty())
    request.cuSeqlens = c.cuSeqlens;
  std::vector<std::vector<float>> storage;
  for (const ArgumentInfo &arg : package.arguments()) {
    if (arg.role == "runtime")
      continue;
    int64_t features = arg.kind == "key"      ? dims.k
                       : arg.kind == "value"  ? dims.v
                       : arg.kind == "matrix" ? dims.k * dims.v
                                              : 1;
    bool activation = arg.name == "q" || arg.name == "k" || arg.name == "v" ||
                      arg.name == "r";
    bool param = arg.role == "param";
    int64_t heads = (arg.kind == "key" && activation) ? c.keyHeads : c.heads;
    std::vector<float> values((param ? 1 : totalTokens) * heads * features);
    for (float &x : values) {
      if (param)
        x = unit(rng);
      else if (activation)
        x = (c.zeroKeys && arg.name == "k") ? 0.0f : normal(rng);
      else if (c.gates == GateRange::Zero)
        x = 0.0f;
      else if (c.gates == GateRange::Strong && decays.count(arg.name))
        x = strong(rng);
      else
        x = normal(rng);
    }
    std::vector<int64_t> shape =
        param ? std::vector<int64_t>{heads}
              : std::vector<int64_t>{c.cuSeqlens.empty() ? c.batch : 1,
                                     c.cuSeqlens.empty() ? c.tokens : totalTokens,
                                     heads};
    if (arg.kind == "key" || arg.kind == "value")
      shape.push_back(features);
    if (arg.kind == "matrix") {
      shape.push_back(dims.k);
      shape.push_back(dims.v);
    }
    reference::Tensor tensor{values, heads};
    (param ? problem.params : problem.inputs).push_back(tensor);
    storage.push_back(std::move(values));
    request.tensors[arg.name] = {storage.back().data(), shape};
  }

  int64_t stateSize = sequences * c.heads * dims.k * dims.v;
  std::vector<float> initial;
  if (c.initialState) {
    initial.resize(stateSize);
    for (float &x : initial)
      x = normal(rng);
    problem.initialState = initial;
    request.initialState = initial.data();
  }
  // Poison the outputs so that an unwritten element shows.
  std::vector<float> output(totalTokens * c.heads * dims.v, std::nanf(""));
  std::vector<float> finalState(stateSize, std::nanf(""));
  request.output = output.data();
  request.finalState = finalState.data();
  auto begin = std::chrono::steady_clock::now();
  package.forward(request);
  Outcome outcome;
  outcome.milliseconds = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - begin)
                             .count();
  reference::Result want = reference::run(problem);
  for (const std::vector<float> *values : {&output, &finalState})
    for (float x : *values)
      outcome.finite &= std::isfinite(x);
  outcome.outputError = relativeError(output, want.output);
  outcome.stateError = relativeError(finalState, want.finalState);
  return outcome;
}

} // namespace linac::harness
