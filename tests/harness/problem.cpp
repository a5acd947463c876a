//===- problem.cpp - random layer problems and their fp64 answers ---------===//

#include "problem.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

namespace linac::harness {

namespace {

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

/// Norms below 1e-30 count as 1e-30 by default: fp32 cannot hold such
/// values (a state decayed by exp(-100) is subnormal or zero).
template <typename T>
static double relativeErrorOf(const std::vector<T> &got,
                              const std::vector<double> &want, size_t first,
                              size_t count, double leastNorm) {
  double diff = 0, norm = 0;
  for (size_t i = first; i < first + count; ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), leastNorm);
}

double relativeError(const std::vector<float> &got,
                     const std::vector<double> &want, size_t first,
                     size_t count, double leastNorm) {
  return relativeErrorOf(got, want, first, count, leastNorm);
}

double relativeError(const std::vector<double> &got,
                     const std::vector<double> &want, size_t first,
                     size_t count, double leastNorm) {
  return relativeErrorOf(got, want, first, count, leastNorm);
}

Seeds normalSeeds(const reference::Result &result, std::mt19937 &rng) {
  std::normal_distribution<double> normal;
  Seeds seeds{std::vector<double>(result.output.size()),
              std::vector<double>(result.finalState.size())};
  for (double &x : seeds.output)
    x = normal(rng);
  for (double &x : seeds.finalState)
    x = normal(rng);
  return seeds;
}

Argument tokensOf(const Argument &argument, int64_t begin, int64_t end) {
  if (argument.param)
    return argument;
  int64_t batch = argument.shape[0], tokens = argument.shape[1];
  size_t row = argument.values.size() / (batch * tokens);
  Argument slice = argument;
  slice.shape[1] = end - begin;
  slice.values.clear();
  for (int64_t b = 0; b < batch; ++b)
    slice.values.insert(slice.values.end(),
                        argument.values.begin() + (b * tokens + begin) * row,
                        argument.values.begin() + (b * tokens + end) * row);
  return slice;
}

Problem makeProblem(const Package &package, Dims dims, const Case &c,
                    float (*round)(float)) {
  const manifest::Manifest &info = package.info();
  nlohmann::json step = nlohmann::json::parse(info.step);
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit(0.1f, 0.9f);
  std::uniform_real_distribution<float> strong(-20.0f, 20.0f);
  std::uniform_real_distribution<float> saturated(104.0f, 200.0f);
  std::bernoulli_distribution eighth(0.125), negative(0.5);
  std::set<std::string> decays = decayInputs(step);

  Problem problem;
  problem.decayInputs = decays;
  reference::Problem &ref = problem.reference;
  ref.step = step;
  ref.numHeads = c.heads;
  ref.cuSeqlens = c.cuSeqlens;
  if (ref.cuSeqlens.empty())
    for (int64_t b = 0; b <= c.batch; ++b)
      ref.cuSeqlens.push_back(b * c.tokens);
  int64_t totalTokens = ref.cuSeqlens.back();
  int64_t sequences = int64_t(ref.cuSeqlens.size()) - 1;

  for (const manifest::Argument &arg : info.arguments) {
    std::vector<int64_t> trailing =
        manifest::trailingDims(arg.kind, dims.k, dims.v);
    int64_t features = 1;
    for (int64_t d : trailing)
      features *= d;
    bool activation = arg.name == "q" || arg.name == "k" || arg.name == "v" ||
                      arg.name == "r";
    bool param = arg.role == manifest::Role::Param;
    int64_t heads =
        (arg.kind == manifest::Kind::Key && activation) ? c.keyHeads : c.heads;
    std::vector<float> values((param ? 1 : totalTokens) * heads * features);
    for (size_t i = 0; i < values.size(); ++i) {
      float &x = values[i];
      if (param)
        x = unit(rng);
      else if (activation)
        x = (c.zeroKeys && arg.name == "k") ? 0.0f : normal(rng);
      else if (c.gates == GateRange::Zero)
        x = 0.0f;
      else if (c.gates == GateRange::Saturating && decays.count(arg.name) &&
               eighth(rng))
        x = negative(rng) ? -saturated(rng) : saturated(rng);
      else if ((c.gates == GateRange::Strong ||
                c.gates == GateRange::Saturating) &&
               decays.count(arg.name))
        x = strong(rng);
      else
        x = normal(rng);
      if (!param && decays.count(arg.name) &&
          int64_t(i) / (heads * features) == c.nanGateToken)
        x = std::nanf("");
      if (round && !param)
        x = round(x);
    }
    std::vector<int64_t> shape =
        param ? std::vector<int64_t>{heads}
              : std::vector<int64_t>{c.cuSeqlens.empty() ? c.batch : 1,
                                     c.cuSeqlens.empty() ? c.tokens : totalTokens,
                                     heads};
    shape.insert(shape.end(), trailing.begin(), trailing.end());
    (param ? ref.params : ref.inputs).push_back(reference::Tensor{values, heads});
    problem.arguments[arg.name] = {std::move(values), shape, param};
  }

  bool normalized = info.normalForm.normalizer;
  problem.stateSize = sequences * c.heads * dims.k * (dims.v + normalized);
  problem.outputSize = totalTokens * c.heads * dims.v;
  if (c.initialState) {
    problem.initialState.resize(problem.stateSize);
    for (float &x : problem.initialState)
      x = normal(rng);
    ref.initialState = problem.initialState;
  }
  return problem;
}

Outcome compare(const Problem &problem, const std::vector<float> &output,
                const std::vector<float> &finalState) {
  reference::Result want = reference::run(problem.reference);
  Outcome outcome;
  for (const std::vector<float> *values : {&output, &finalState})
    for (float x : *values)
      outcome.finite &= std::isfinite(x);
  for (auto [got, expected] :
       {std::pair{&output, &want.output}, {&finalState, &want.finalState}})
    for (size_t i = 0; i < expected->size(); ++i)
      if (std::isnan((*expected)[i])) {
        ++outcome.referenceNans;
        outcome.nansKept &= std::isnan((*got)[i]);
      }
  outcome.outputError = relativeError(output, want.output, 0, want.output.size());
  outcome.stateError =
      relativeError(finalState, want.finalState, 0, want.finalState.size());
  return outcome;
}

} // namespace linac::harness
