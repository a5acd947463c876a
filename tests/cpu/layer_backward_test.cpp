//===- layer_backward_test.cpp - packages' backward against the reference -===//
//
// Every example and extra spec, compiled as a package and run through
// Package::backward on fresh random inputs, against the fp64 reference's
// gradients of L = <dO, output> + <dS, final state>: each input's, each
// parameter's and the initial state's within 1e-5 (3e-5 under a
// normaliser; a parameter's sum over the batch 1e-4, 1e-3 under strong
// gates), by chunks or token by token as the layer goes; and the same
// bits on any thread count.
//
//===----------------------------------------------------------------------===//

#include "harness.h"

#include <gtest/gtest.h>

#include <random>

namespace fs = std::filesystem;
using namespace linac;
using namespace linac::harness;

namespace {

std::shared_ptr<Package> packageOf(const fs::path &spec) {
  return compiled(spec, {16, 16},
                  fs::path(testing::TempDir()) / "linac_cpu_layer_backward");
}

/// The gradients of every argument and the initial state, by name
/// ("initial_state" for the last), of Package::backward on `problem`.
std::map<std::string, std::vector<float>> gradientsOf(const Package &package,
                                                      const Problem &problem,
                                                      const Case &c,
                                                      const Seeds &seeds) {
  BackwardRequest request;
  request.forward.cuSeqlens = c.cuSeqlens;
  request.forward.threads = c.threads;
  for (const auto &[name, argument] : problem.arguments)
    request.forward.tensors[name] = {argument.values.data(), argument.shape};
  if (!problem.initialState.empty())
    request.forward.initialState = problem.initialState.data();
  const std::vector<float> dOutput(seeds.output.begin(), seeds.output.end());
  const std::vector<float> dFinal(seeds.finalState.begin(),
                                  seeds.finalState.end());
  request.dOutput = dOutput.data();
  request.dFinalState = dFinal.data();
  // Poisoned, so that a gradient the backward leaves unwritten shows.
  std::map<std::string, std::vector<float>> gradients;
  for (const auto &[name, argument] : problem.arguments)
    request.gradients[name] =
        gradients
            .emplace(name,
                     std::vector<float>(argument.values.size(), std::nanf("")))
            .first->second.data();
  std::vector<float> &dInitial = gradients["initial_state"];
  dInitial.assign(problem.stateSize, std::nanf(""));
  request.dInitialState = dInitial.data();
  package.backward(request);
  return gradients;
}

/// The relative error an input's and the initial state's gradient may
/// have: 1e-5, and 3e-5 under a normaliser, where a read is a ratio r / m
/// of two fp32 sums and a write strength's or gate's gradient goes through
/// dO . (v - r / m), a difference of near terms once the state is mostly
/// the latest writes (mLSTM's i and f reached 1.44e-5 over about 3000
/// draws, every other layer's inputs stay under 1e-5).
double toleranceOf(const Package &package) {
  return package.stateColumns() > package.valueDim() ? 3e-5 : 1e-5;
}

/// A parameter's gradient is a sum over every token of the batch of terms
/// of either sign, whose fp32 rounding the sum's cancellation magnifies:
/// every_elementwise_op's p (a factor e^p of a log-gate) reached 2e-5 over
/// 300 draws, and 4.7e-4 under strong gates, whose terms lambda e^lambda
/// span many orders of magnitude, over 1600.
double parameterToleranceOf(const Case &c) {
  return c.gates == GateRange::Strong ? 1e-3 : 1e-4;
}

/// A log-gate below kLogGateFloor (-60) is raised to it, so where strong
/// gates leave the reference's gradient of the initial state at e^-1000
/// of the unit seeds, the package's is a sum of e^-60 terms and their
/// fp32 rounding (5e-25 seen): an error is measured against a norm of at
/// least 1e-15.
constexpr double kFloorNorm = 1e-15;

/// A gradient's relative error, against a norm of at least kFloorNorm.
double gradientError(const std::vector<float> &got,
                     const std::vector<double> &want) {
  return relativeError(got, want, 0, want.size(), kFloorNorm);
}

void check(const Package &package, const Case &c) {
  const Dims dims{16, 16};
  Problem problem = makeProblem(package, dims, c);
  std::mt19937 rng(std::random_device{}());
  const Seeds seeds = normalSeeds(reference::run(problem.reference), rng);
  const reference::Gradients want =
      reference::gradients(problem.reference, seeds.output, seeds.finalState);

  const std::map<std::string, std::vector<float>> gradients =
      gradientsOf(package, problem, c, seeds);

  const nlohmann::json &step = problem.reference.step;
  auto compareAll = [&](const char *role,
                        const std::vector<std::vector<double>> &expected,
                        double tolerance) {
    for (size_t i = 0; i < expected.size(); ++i) {
      const std::string name = step[role][i]["name"];
      EXPECT_LE(gradientError(gradients.at(name), expected[i]), tolerance)
          << "gradient of " << name;
    }
  };
  compareAll("inputs", want.inputs, toleranceOf(package));
  compareAll("params", want.params, parameterToleranceOf(c));
  EXPECT_LE(gradientError(gradients.at("initial_state"), want.initialState),
            toleranceOf(package))
      << "gradient of the initial state";
}

class LayerBackward : public testing::TestWithParam<fs::path> {};

TEST_P(LayerBackward, VariableLengthsWithInitialState) {
  auto package = packageOf(GetParam());
  Case c;
  c.batch = 1;
  // Empty, short, a chunk and a short one, two and a piece.
  c.cuSeqlens = {0, 0, 1, 70, 200};
  c.initialState = true;
  check(*package, c);
}

TEST_P(LayerBackward, GroupedHeads) {
  auto package = packageOf(GetParam());
  Case c;
  c.tokens = 90;
  c.heads = 4;
  c.keyHeads = 2;
  check(*package, c);
}

TEST_P(LayerBackward, StrongAndZeroGates) {
  auto package = packageOf(GetParam());
  for (GateRange gates : {GateRange::Strong, GateRange::Zero}) {
    SCOPED_TRACE(gates == GateRange::Strong ? "strong gates" : "zero gates");
    Case c;
    c.tokens = 130;
    c.gates = gates;
    c.initialState = true;
    check(*package, c);
  }
}

TEST_P(LayerBackward, SameGradientsOnAnyThreadCount) {
  auto package = packageOf(GetParam());
  Case c;
  c.batch = 1;
  c.cuSeqlens = {0, 70, 70, 130, 135};
  c.heads = 4;
  c.keyHeads = 2;
  c.initialState = true;
  c.threads = 1;
  Problem problem = makeProblem(*package, {16, 16}, c);
  std::mt19937 rng(std::random_device{}());
  const Seeds seeds = normalSeeds(reference::run(problem.reference), rng);
  const auto one = gradientsOf(*package, problem, c, seeds);
  for (int threads : {2, 5}) {
    c.threads = threads;
    EXPECT_EQ(gradientsOf(*package, problem, c, seeds), one)
        << threads << " threads";
  }
}

INSTANTIATE_TEST_SUITE_P(Specs, LayerBackward, testing::ValuesIn(testSpecs()),
                         [](const auto &info) {
                           return info.param.stem().string();
                         });

} // namespace
