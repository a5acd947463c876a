//===- reference.h - fp64 token-by-token reference of a linac step -*- C++ -*-===//
//
// Interprets the step program that `linac compile` writes into a package's
// manifest ("step", see docs/design.md, the package) one token at a time in
// double precision, applying the primitive transitions of docs/design.md
// literally, and its gradients by reverse mode through the same step. It
// shares no code with the chunked kernels and is what their tests compare
// against.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_TESTS_REFERENCE_H
#define LINAC_TESTS_REFERENCE_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace linac::reference {

/// One input or parameter: its values and its head count. Inputs are laid
/// out [total_tokens, heads, ...] (a packed token axis), parameters
/// [heads, ...]; "..." is K, V, K x V or nothing, per the argument's kind.
/// State head h reads argument head h / (num_heads / heads).
struct Tensor {
  std::vector<float> values;
  int64_t heads = 1;
};

struct Problem {
  nlohmann::json step;                  ///< the manifest's "step" object
  std::vector<int64_t> cuSeqlens;       ///< N + 1 offsets into the token axis
  int64_t numHeads = 1;                 ///< H, the state's head count
  std::vector<Tensor> inputs;           ///< in the step's input order
  std::vector<Tensor> params;           ///< in the step's parameter order
  /// [N, H, K, V], [N, H, K, V + 1] with a normaliser (its last column),
  /// or empty for zeros.
  std::vector<float> initialState;
  double scale = 0.0;                   ///< 0 means K^-1/2
};

struct Result {
  std::vector<double> output;           ///< [total_tokens, H, V]
  std::vector<double> finalState;       ///< as initialState
};

/// Runs the step over every sequence and head. Throws std::runtime_error
/// for an op it does not know.
Result run(const Problem &problem);

/// The gradients of L = <dOutput, output> + <dFinalState, finalState> with
/// respect to each input, parameter and the initial state, laid out as
/// they are (an argument shared by a group of heads sums its heads', a
/// parameter its tokens'; initialState is full size even when the problem's
/// is empty). Reverse mode through the same token-by-token step, each
/// token's values recomputed from the state entering it.
struct Gradients {
  std::vector<std::vector<double>> inputs;
  std::vector<std::vector<double>> params;
  std::vector<double> initialState;
};

/// `dOutput` is [total_tokens, H, V]; `dFinalState` as Result::finalState,
/// or empty for zeros. Throws std::runtime_error for an op it does not know.
Gradients gradients(const Problem &problem, const std::vector<double> &dOutput,
                    const std::vector<double> &dFinalState);

} // namespace linac::reference

#endif // LINAC_TESTS_REFERENCE_H
