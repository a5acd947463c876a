//===- cpu_numerics_test.cpp - CPU packages against the fp64 reference ----===//
//
// Compiles every example (and specs no seed system uses) at several K and V
// with `linac compile`, runs the package through the runtime on fresh random
// inputs, and compares output and final state with the reference.
//
//===----------------------------------------------------------------------===//

#include "linac/package.h"
#include "reference.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <sstream>

namespace fs = std::filesystem;

namespace {

struct Dims {
  int k, v;
};

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

/// Compiles (once per spec and size) and opens the package.
std::shared_ptr<linac::Package> compiled(const fs::path &spec, Dims dims) {
  static std::map<std::string, std::shared_ptr<linac::Package>> cache;
  std::string key = spec.stem().string() + "_" + std::to_string(dims.k) + "x" +
                    std::to_string(dims.v);
  if (auto it = cache.find(key); it != cache.end())
    return it->second;
  fs::path dir = fs::path(testing::TempDir()) / "linac_cpu_numerics";
  fs::create_directories(dir);
  fs::path source = dir / (key + ".mlir");
  std::ofstream(source) << resized(readFile(spec), dims);
  fs::path package = dir / (key + ".linac");
  std::string command = std::string(LINAC_TOOL) + " compile " + source.string() +
                        " -o " + package.string() + " > /dev/null";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return cache[key] = linac::Package::open(package.string());
}

enum class GateRange { Moderate, Strong, Zero };

struct Case {
  int64_t batch = 2, tokens = 65, heads = 2;
  int64_t keyHeads = 2;             ///< heads of q and k (grouped when < heads)
  std::vector<int64_t> cuSeqlens;   ///< with batch 1
  bool initialState = false;
  bool zeroKeys = false;
  GateRange gates = GateRange::Moderate;
};

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

void check(const fs::path &spec, Dims dims, const Case &c) {
  std::shared_ptr<linac::Package> package = compiled(spec, dims);
  ASSERT_TRUE(package);
  nlohmann::json manifest = nlohmann::json::parse(package->manifest());
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit(0.1f, 0.9f);

  linac::reference::Problem problem;
  problem.step = manifest["step"];
  problem.numHeads = c.heads;
  problem.cuSeqlens = c.cuSeqlens;
  if (problem.cuSeqlens.empty())
    for (int64_t b = 0; b <= c.batch; ++b)
      problem.cuSeqlens.push_back(b * c.tokens);
  int64_t totalTokens = problem.cuSeqlens.back();
  int64_t sequences = int64_t(problem.cuSeqlens.size()) - 1;

  linac::ForwardRequest request;
  if (!c.cuSeqlens.empty())
    request.cuSeqlens = c.cuSeqlens;
  std::vector<std::vector<float>> storage;
  for (const linac::ArgumentInfo &arg : package->arguments()) {
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
      else if (c.gates == GateRange::Strong)
        x = 20.0f * (2.0f * unit(rng) - 1.0f);
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
    linac::reference::Tensor tensor{values, heads};
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
  package->forward(request);
  linac::reference::Result want = linac::reference::run(problem);

  for (float x : output)
    ASSERT_TRUE(std::isfinite(x)) << "non-finite output";
  for (float x : finalState)
    ASSERT_TRUE(std::isfinite(x)) << "non-finite final state";
  EXPECT_LE(relativeError(output, want.output), 1e-5);
  EXPECT_LE(relativeError(finalState, want.finalState), 1e-5);
}

std::vector<fs::path> specs() {
  std::vector<fs::path> all;
  for (const char *dir : {LINAC_EXAMPLES_DIR, LINAC_EXTRA_SPECS_DIR})
    for (const auto &entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".mlir")
        all.push_back(entry.path());
  std::sort(all.begin(), all.end());
  return all;
}

class CpuNumerics : public testing::TestWithParam<fs::path> {};

TEST_P(CpuNumerics, Lengths) {
  for (int64_t tokens : {1, 63, 64, 65, 300}) {
    SCOPED_TRACE("T = " + std::to_string(tokens));
    Case c;
    c.tokens = tokens;
    check(GetParam(), {64, 64}, c);
  }
}

TEST_P(CpuNumerics, Dimensions) {
  for (Dims dims : {Dims{16, 16}, Dims{100, 64}, Dims{64, 100}, Dims{128, 128}}) {
    SCOPED_TRACE("K = " + std::to_string(dims.k) + ", V = " + std::to_string(dims.v));
    Case c;
    c.tokens = 130;
    c.initialState = true;
    check(GetParam(), dims, c);
  }
}

TEST_P(CpuNumerics, VariableLengthsWithInitialState) {
  Case c;
  c.batch = 1;
  c.cuSeqlens = {0, 1, 1, 66, 130, 330};
  c.initialState = true;
  check(GetParam(), {64, 64}, c);
}

TEST_P(CpuNumerics, GroupedHeads) {
  Case c;
  c.heads = 4;
  c.keyHeads = 2;
  c.tokens = 70;
  c.initialState = true;
  check(GetParam(), {64, 64}, c);
}

TEST_P(CpuNumerics, StrongGates) {
  Case c;
  c.tokens = 150;
  c.gates = GateRange::Strong;
  check(GetParam(), {64, 64}, c);
}

TEST_P(CpuNumerics, ZeroKeysAndGates) {
  Case c;
  c.tokens = 100;
  c.zeroKeys = true;
  c.gates = GateRange::Zero;
  c.initialState = true;
  check(GetParam(), {64, 64}, c);
}

INSTANTIATE_TEST_SUITE_P(Specs, CpuNumerics, testing::ValuesIn(specs()),
                         [](const testing::TestParamInfo<fs::path> &info) {
                           return info.param.stem().string();
                         });

} // namespace
