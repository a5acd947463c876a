//===- reference_gradients_test.cpp - the reference's gradients, checked --===//
//
// For every example and extra spec at K = V = 16, a varlen batch of two
// heads sharing one q/k head, from a random initial state: the fp64
// reference's gradients (reverse mode, reference::gradients) of
// L = <dO, output> + <dS, final state> against central differences of L
// along a random direction, one for each input, each parameter and the
// initial state. The step moves every float exactly, so the differences
// see the direction as drawn.
//
//===----------------------------------------------------------------------===//

#include "harness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace fs = std::filesystem;
using namespace linac;
using namespace linac::harness;

namespace {

double dot(const std::vector<double> &a, const std::vector<double> &b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    sum += a[i] * b[i];
  return sum;
}

class ReferenceGradients : public testing::TestWithParam<fs::path> {};

TEST_P(ReferenceGradients, MatchCentralDifferences) {
  const Dims dims{16, 16};
  auto package = compiled(GetParam(), dims,
                          fs::path(testing::TempDir()) / "linac_cpu_numerics");
  Case c;
  c.batch = 1;
  c.cuSeqlens = {0, 5, 5, 17};
  c.heads = 2;
  c.keyHeads = 1;
  c.initialState = true;
  reference::Problem problem = makeProblem(*package, dims, c).reference;
  // Every float on a grid of 2^-14 (all are below 2^9 in magnitude), so
  // that a step of 2^-13 or 2^-12 either way moves each exactly; and none
  // nearer zero than 2^-11, where abs or max(x, 0) of it has a kink that
  // the steps would cross whatever their direction.
  constexpr float kGrid = 16384.0f, kNearest = 1.0f / 2048;
  auto toGrid = [&](std::vector<float> &x) {
    for (float &e : x) {
      ASSERT_LT(std::fabs(e), 512.0f);
      e = std::nearbyint(e * kGrid) / kGrid;
      if (std::fabs(e) < kNearest)
        e = std::copysign(kNearest, e);
    }
  };
  for (reference::Tensor &tensor : problem.inputs)
    toGrid(tensor.values);
  for (reference::Tensor &tensor : problem.params)
    toGrid(tensor.values);
  toGrid(problem.initialState);

  std::mt19937 rng(std::random_device{}());
  const Seeds seeds = normalSeeds(reference::run(problem), rng);
  const std::vector<double> &dOutput = seeds.output, &dFinal = seeds.finalState;
  const reference::Gradients gradients =
      reference::gradients(problem, dOutput, dFinal);
  auto loss = [&] {
    const reference::Result r = reference::run(problem);
    return dot(r.output, dOutput) + dot(r.finalState, dFinal);
  };

  // Central differences at steps h and h / 2 extrapolated (Richardson), so
  // that their h^2 terms cancel. Where the two disagree the loss is not
  // smooth along the direction (a step crossed a kink, such as mLSTM's
  // max(|n . q|, 1)), and a new direction is drawn, up to three.
  constexpr double kStep = 1.0 / 4096;
  auto check = [&](std::vector<float> &x, const std::vector<double> &gradient,
                   const std::string &what) {
    SCOPED_TRACE(what);
    ASSERT_EQ(x.size(), gradient.size());
    const std::vector<float> saved = x;
    double size = 0.0;
    for (double g : gradient)
      size += std::fabs(g);
    std::bernoulli_distribution coin;
    std::vector<float> direction(x.size());
    auto moved = [&](double by) {
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = float(saved[i] + by * direction[i]);
      return loss();
    };
    auto central = [&](double step) {
      return (moved(step) - moved(-step)) / (2 * step);
    };
    for (int attempt = 0; attempt < 3; ++attempt) {
      double along = 0.0;
      for (size_t i = 0; i < x.size(); ++i) {
        direction[i] = coin(rng) ? 1.0f : -1.0f;
        along += gradient[i] * direction[i];
      }
      const double wide = central(kStep), narrow = central(kStep / 2);
      x = saved;
      if (std::fabs(wide - narrow) > 1e-5 * size + 1e-12 && attempt < 2)
        continue;
      EXPECT_NEAR((4 * narrow - wide) / 3, along, 1e-6 * size + 1e-12);
      return;
    }
  };
  for (size_t i = 0; i < problem.inputs.size(); ++i)
    check(problem.inputs[i].values, gradients.inputs[i],
          "input " + std::to_string(i));
  for (size_t i = 0; i < problem.params.size(); ++i)
    check(problem.params[i].values, gradients.params[i],
          "parameter " + std::to_string(i));
  check(problem.initialState, gradients.initialState, "initial state");
}

INSTANTIATE_TEST_SUITE_P(Specs, ReferenceGradients,
                         testing::ValuesIn(testSpecs()),
                         [](const testing::TestParamInfo<fs::path> &info) {
                           return info.param.stem().string();
                         });

} // namespace
