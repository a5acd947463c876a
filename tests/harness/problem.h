//===- problem.h - random layer problems and their fp64 answers -*- C++ -*-===//
//
// Draws fresh random arguments for a package's layer at a given shape and
// compares a kernel's outputs with the fp64 reference on them. Knows no
// target: the CPU tests run the problem on the host, the GPU check on the
// device.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_TESTS_HARNESS_PROBLEM_H
#define LINAC_TESTS_HARNESS_PROBLEM_H

#include "linac/package.h"
#include "reference.h"

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace linac::harness {

struct Dims {
  int k, v;
};

/// Raw gate inputs: N(0, 1); uniform in [-20, 20] for the inputs decays
/// derive from; as Strong with one element in eight of magnitude 104 to 200
/// and either sign, past which fp32's sigmoid is 0 or 1 and exp overflows
/// (log-decays of -inf, a decay factor of 0, for log(sigmoid(x)) and
/// -exp(x)); all zero.
enum class GateRange { Moderate, Strong, Saturating, Zero };

struct Case {
  int64_t batch = 2, tokens = 65, heads = 2;
  int64_t keyHeads = 2;           ///< heads of q and k (grouped when < heads)
  std::vector<int64_t> cuSeqlens; ///< with batch 1
  bool initialState = false;
  bool zeroKeys = false;
  GateRange gates = GateRange::Moderate;
  /// A token of the packed token axis whose decay inputs are all NaN, or -1.
  int64_t nanGateToken = -1;
  int threads = 0; ///< a CPU forward's, as ForwardRequest takes them
  int64_t segmentTokens = 0; ///< likewise
};

struct Argument {
  std::vector<float> values;
  std::vector<int64_t> shape;
  bool param = false;
};

struct Problem {
  std::map<std::string, Argument> arguments; ///< inputs and parameters
  std::vector<float> initialState;           ///< empty for zeros
  int64_t outputSize = 0, stateSize = 0;
  std::set<std::string> decayInputs; ///< the inputs decays derive from
  reference::Problem reference;
};

/// Fresh random arguments for `c`. Inputs pass through `round` (what the
/// kernel's activation dtype keeps of them) before the reference sees them;
/// parameters and states stay float32.
Problem makeProblem(const Package &package, Dims dims, const Case &c,
                    float (*round)(float) = nullptr);

struct Outcome {
  double outputError = 0, stateError = 0; ///< relative to the reference
  bool finite = true;                     ///< every element written and finite
  int64_t referenceNans = 0;              ///< the reference's NaN elements
  bool nansKept = true;                   ///< NaN wherever the reference is
  double milliseconds = 0;                ///< the package's forward pass
};

/// ||got - want|| / ||want|| over elements [first, first + count), with
/// ||want|| taken as at least `leastNorm`.
double relativeError(const std::vector<float> &got,
                     const std::vector<double> &want, size_t first,
                     size_t count, double leastNorm = 1e-30);
double relativeError(const std::vector<double> &got,
                     const std::vector<double> &want, size_t first,
                     size_t count, double leastNorm = 1e-30);

/// Standard normal gradients of a problem's output and final state, sized
/// as `result`'s: the seeds of a backward check.
struct Seeds {
  std::vector<double> output, finalState;
};
Seeds normalSeeds(const reference::Result &result, std::mt19937 &rng);

/// Tokens [begin, end) of every sequence of a [B, T, H, ...] input;
/// parameters as they are.
Argument tokensOf(const Argument &argument, int64_t begin, int64_t end);

/// Compares outputs (poisoned with NaN before the run) with the reference.
Outcome compare(const Problem &problem, const std::vector<float> &output,
                const std::vector<float> &finalState);

} // namespace linac::harness

#endif // LINAC_TESTS_HARNESS_PROBLEM_H
