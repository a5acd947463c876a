//===- reference.cpp - fp64 token-by-token reference of a linac step ------===//
//
// Deliberately plain: every token evaluates every op on freshly built
// values, with loops written out as the primitives define them. Speed does
// not matter here; being obviously right does.
//
//===----------------------------------------------------------------------===//

#include "reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

namespace linac::reference {
namespace {

using nlohmann::json;

enum class Kind { State, Key, Value, Scalar, Matrix };

Kind parseKind(const std::string &name) {
  static const std::map<std::string, Kind> kinds = {{"state", Kind::State},
                                                    {"key", Kind::Key},
                                                    {"value", Kind::Value},
                                                    {"scalar", Kind::Scalar},
                                                    {"matrix", Kind::Matrix}};
  auto it = kinds.find(name);
  if (it == kinds.end())
    throw std::runtime_error("reference: unknown value kind '" + name + "'");
  return it->second;
}

/// One SSA value of a token's step. A state keeps S (K x V, row-major) in
/// `data` and its normaliser in `norm`; every other kind uses `data` only.
struct Value {
  std::vector<double> data;
  std::vector<double> norm;
};

/// Element i of a gate or strength that is either a scalar or a vector.
double lane(const Value &x, size_t i) {
  return x.data.size() == 1 ? x.data[0] : x.data[i];
}

double dot(const std::vector<double> &a, const std::vector<double> &b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    sum += a[i] * b[i];
  return sum;
}

using UnaryFn = double (*)(double);
using BinaryFn = double (*)(double, double);

const std::map<std::string, UnaryFn> &unaryOps() {
  static const std::map<std::string, UnaryFn> ops = {
      {"arith.negf", [](double x) { return -x; }},
      {"math.exp", [](double x) { return std::exp(x); }},
      {"math.exp2", [](double x) { return std::exp2(x); }},
      {"math.log", [](double x) { return std::log(x); }},
      {"math.log2", [](double x) { return std::log2(x); }},
      {"math.log1p", [](double x) { return std::log1p(x); }},
      {"math.sqrt", [](double x) { return std::sqrt(x); }},
      {"math.rsqrt", [](double x) { return 1.0 / std::sqrt(x); }},
      {"math.tanh", [](double x) { return std::tanh(x); }},
      {"math.absf", [](double x) { return std::fabs(x); }},
      {"linac.sigmoid", [](double x) { return 1.0 / (1.0 + std::exp(-x)); }},
      // Stable for large |x|, where log(1 + exp(x)) would overflow.
      {"linac.softplus",
       [](double x) {
         return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0);
       }},
  };
  return ops;
}

// maximumf and minimumf propagate NaN, unlike std::fmax and std::fmin.
double maximum(double a, double b) {
  return std::isnan(a) || std::isnan(b)
             ? std::numeric_limits<double>::quiet_NaN()
             : std::max(a, b);
}
double minimum(double a, double b) {
  return std::isnan(a) || std::isnan(b)
             ? std::numeric_limits<double>::quiet_NaN()
             : std::min(a, b);
}

const std::map<std::string, BinaryFn> &binaryOps() {
  static const std::map<std::string, BinaryFn> ops = {
      {"arith.addf", [](double a, double b) { return a + b; }},
      {"arith.subf", [](double a, double b) { return a - b; }},
      {"arith.mulf", [](double a, double b) { return a * b; }},
      {"arith.divf", [](double a, double b) { return a / b; }},
      {"arith.maximumf", maximum},
      {"arith.minimumf", minimum},
      {"math.powf", [](double a, double b) { return std::pow(a, b); }},
  };
  return ops;
}

/// d y / d x of each unary op at x, given y = f(x).
using UnaryDerivative = double (*)(double x, double y);

const std::map<std::string, UnaryDerivative> &unaryDerivatives() {
  static const std::map<std::string, UnaryDerivative> ops = {
      {"arith.negf", [](double, double) { return -1.0; }},
      {"math.exp", [](double, double y) { return y; }},
      {"math.exp2", [](double, double y) { return y * std::log(2.0); }},
      {"math.log", [](double x, double) { return 1.0 / x; }},
      {"math.log2", [](double x, double) { return 1.0 / (x * std::log(2.0)); }},
      {"math.log1p", [](double x, double) { return 1.0 / (1.0 + x); }},
      {"math.sqrt", [](double, double y) { return 0.5 / y; }},
      {"math.rsqrt", [](double, double y) { return -0.5 * y * y * y; }},
      {"math.tanh", [](double, double y) { return 1.0 - y * y; }},
      {"math.absf",
       [](double x, double) { return x > 0.0   ? 1.0
                                     : x < 0.0 ? -1.0
                                               : 0.0; }},
      {"linac.sigmoid", [](double, double y) { return y * (1.0 - y); }},
      {"linac.softplus",
       [](double x, double) { return 1.0 / (1.0 + std::exp(-x)); }},
  };
  return ops;
}

/// d y / d a and d y / d b of each binary op at (a, b).
using BinaryDerivative = std::pair<double, double> (*)(double a, double b);

const std::map<std::string, BinaryDerivative> &binaryDerivatives() {
  static const std::map<std::string, BinaryDerivative> ops = {
      {"arith.addf",
       [](double, double) { return std::pair<double, double>(1.0, 1.0); }},
      {"arith.subf",
       [](double, double) { return std::pair<double, double>(1.0, -1.0); }},
      {"arith.mulf",
       [](double a, double b) { return std::pair<double, double>(b, a); }},
      {"arith.divf",
       [](double a, double b) {
         return std::pair<double, double>(1.0 / b, -a / (b * b));
       }},
      // The operand the result is; the first on a tie.
      {"arith.maximumf",
       [](double a, double b) {
         return a >= b ? std::pair<double, double>(1.0, 0.0)
                       : std::pair<double, double>(0.0, 1.0);
       }},
      {"arith.minimumf",
       [](double a, double b) {
         return a <= b ? std::pair<double, double>(1.0, 0.0)
                       : std::pair<double, double>(0.0, 1.0);
       }},
      {"math.powf",
       [](double a, double b) {
         return std::pair<double, double>(b * std::pow(a, b - 1.0),
                                          std::pow(a, b) * std::log(a));
       }},
  };
  return ops;
}

/// Adds `x` to element i of a gate or strength's gradient, which sums every
/// element's when the gate is a scalar.
void addToLane(Value &gradient, size_t i, double x) {
  gradient.data[gradient.data.size() == 1 ? 0 : i] += x;
}

class Interpreter {
public:
  explicit Interpreter(const Problem &problem);
  Result run() const;
  Gradients gradients(const std::vector<double> &dOutput,
                      const std::vector<double> &dFinalState) const;

private:
  size_t sizeOf(Kind kind) const;
  /// Row `row` (a token, or 0 for a parameter) of `tensor` as seen by
  /// state head `head`.
  Value argument(const Tensor &tensor, int64_t id, int64_t row,
                 int64_t head) const;
  /// Every value of token `token`'s step of head `head` from `state`.
  std::vector<Value> evaluate(const Value &state, int64_t token,
                              int64_t head) const;
  void apply(const json &op, std::vector<Value> &values, int64_t head) const;
  /// Adds to the gradients of `op`'s operands those its result's gradient
  /// gives, at the token's `values`.
  void backward(const json &op, const std::vector<Value> &values,
                std::vector<Value> &grads) const;
  /// The state of sequence n and head h at `offset` of a [N, H, K, V (+ 1)]
  /// array (zeros for an empty one), and back.
  template <typename T>
  Value loadState(const std::vector<T> &states, size_t offset) const;
  template <typename T>
  void storeState(const Value &state, std::vector<T> &states,
                  size_t offset) const;
  /// Where row `row` of `tensor` (argument `id`) is for state head `head`.
  size_t argumentOffset(const Tensor &tensor, int64_t id, int64_t row,
                        int64_t head) const;
  void checkTensor(const Tensor &tensor, int64_t id, int64_t rows,
                   const std::string &what) const;

  const Problem &problem;
  const json &program;
  int64_t keyDim;
  int64_t valueDim;
  bool normalized;
  std::vector<Kind> kinds;
  std::vector<int64_t> inputIds;
  std::vector<int64_t> paramIds;
};

Interpreter::Interpreter(const Problem &problem)
    : problem(problem), program(problem.step),
      keyDim(program.at("key_dim").get<int64_t>()),
      valueDim(program.at("value_dim").get<int64_t>()),
      normalized(program.value("normalized", false)) {
  for (const json &value : program.at("values"))
    kinds.push_back(parseKind(value.at("kind").get<std::string>()));
  for (const json &input : program.at("inputs"))
    inputIds.push_back(input.at("value").get<int64_t>());
  for (const json &param : program.value("params", json::array()))
    paramIds.push_back(param.at("value").get<int64_t>());

  const std::vector<int64_t> &cu = problem.cuSeqlens;
  if (cu.empty() || cu.front() != 0 || !std::is_sorted(cu.begin(), cu.end()))
    throw std::runtime_error(
        "reference: cuSeqlens must start at 0 and not decrease");
  if (problem.inputs.size() != inputIds.size() ||
      problem.params.size() != paramIds.size())
    throw std::runtime_error(
        "reference: input or parameter count does not match the step");
  for (size_t i = 0; i < inputIds.size(); ++i)
    checkTensor(problem.inputs[i], inputIds[i], cu.back(),
                "input " + std::to_string(i));
  for (size_t i = 0; i < paramIds.size(); ++i)
    checkTensor(problem.params[i], paramIds[i], 1,
                "param " + std::to_string(i));
  size_t stateSize = (cu.size() - 1) * problem.numHeads * keyDim *
                     (valueDim + (normalized ? 1 : 0));
  if (!problem.initialState.empty() && problem.initialState.size() != stateSize)
    throw std::runtime_error(
        "reference: initialState is not [N, H, K, V (+ 1 with a normaliser)]");
}

void Interpreter::checkTensor(const Tensor &tensor, int64_t id, int64_t rows,
                              const std::string &what) const {
  if (tensor.heads <= 0 || problem.numHeads % tensor.heads != 0)
    throw std::runtime_error("reference: " + what + " has " +
                             std::to_string(tensor.heads) +
                             " heads, which do not divide the state's");
  if (tensor.values.size() != rows * tensor.heads * sizeOf(kinds.at(id)))
    throw std::runtime_error("reference: " + what + " has the wrong size");
}

size_t Interpreter::sizeOf(Kind kind) const {
  switch (kind) {
  case Kind::Key:
    return keyDim;
  case Kind::Value:
    return valueDim;
  case Kind::Scalar:
    return 1;
  case Kind::Matrix:
  case Kind::State:
    return keyDim * valueDim;
  }
  return 0;
}

size_t Interpreter::argumentOffset(const Tensor &tensor, int64_t id,
                                   int64_t row, int64_t head) const {
  int64_t argHead = head / (problem.numHeads / tensor.heads);
  return (row * tensor.heads + argHead) * sizeOf(kinds.at(id));
}

Value Interpreter::argument(const Tensor &tensor, int64_t id, int64_t row,
                            int64_t head) const {
  auto first = tensor.values.begin() + argumentOffset(tensor, id, row, head);
  return Value{std::vector<double>(first, first + sizeOf(kinds.at(id))), {}};
}

template <typename T>
Value Interpreter::loadState(const std::vector<T> &states,
                             size_t offset) const {
  const int64_t columns = valueDim + (normalized ? 1 : 0);
  Value state{std::vector<double>(keyDim * valueDim, 0.0),
              std::vector<double>(normalized ? keyDim : 0, 0.0)};
  if (!states.empty())
    for (int64_t i = 0; i < keyDim; ++i) {
      const T *row = states.data() + offset + i * columns;
      std::copy_n(row, valueDim, state.data.begin() + i * valueDim);
      if (normalized)
        state.norm[i] = row[valueDim];
    }
  return state;
}

template <typename T>
void Interpreter::storeState(const Value &state, std::vector<T> &states,
                             size_t offset) const {
  const int64_t columns = valueDim + (normalized ? 1 : 0);
  for (int64_t i = 0; i < keyDim; ++i) {
    T *row = states.data() + offset + i * columns;
    std::copy_n(state.data.begin() + i * valueDim, valueDim, row);
    if (normalized)
      row[valueDim] = state.norm[i];
  }
}

Result Interpreter::run() const {
  const std::vector<int64_t> &cu = problem.cuSeqlens;
  int64_t numSeqs = cu.size() - 1, heads = problem.numHeads;
  // States in memory are [K, V], or [K, V + 1] with the normaliser last.
  int64_t columns = valueDim + (normalized ? 1 : 0);
  size_t stateSize = keyDim * columns;
  const json &yield = program.at("yield");
  Result result;
  result.output.assign(cu.back() * heads * valueDim, 0.0);
  result.finalState.assign(numSeqs * heads * stateSize, 0.0);
  for (int64_t n = 0; n < numSeqs; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      size_t offset = (n * heads + h) * stateSize;
      Value state = loadState(problem.initialState, offset);
      for (int64_t t = cu[n]; t < cu[n + 1]; ++t) {
        std::vector<Value> values = evaluate(state, t, h);
        const std::vector<double> &out =
            values.at(yield.at("output").get<int64_t>()).data;
        std::copy(out.begin(), out.end(),
                  result.output.begin() + (t * heads + h) * valueDim);
        state = std::move(values.at(yield.at("state").get<int64_t>()));
      }
      storeState(state, result.finalState, offset);
    }
  }
  return result;
}

Gradients Interpreter::gradients(const std::vector<double> &dOutput,
                                 const std::vector<double> &dFinalState) const {
  const std::vector<int64_t> &cu = problem.cuSeqlens;
  const int64_t numSeqs = cu.size() - 1, heads = problem.numHeads;
  const size_t stateSize = keyDim * (valueDim + (normalized ? 1 : 0));
  if (dOutput.size() != size_t(cu.back() * heads * valueDim) ||
      (!dFinalState.empty() &&
       dFinalState.size() != size_t(numSeqs * heads) * stateSize))
    throw std::runtime_error(
        "reference: dOutput or dFinalState has the wrong size");
  const json &yield = program.at("yield");
  const int64_t stateId = program.at("state").get<int64_t>(),
                outputId = yield.at("output").get<int64_t>(),
                nextId = yield.at("state").get<int64_t>();
  Gradients result;
  for (const Tensor &tensor : problem.inputs)
    result.inputs.emplace_back(tensor.values.size(), 0.0);
  for (const Tensor &tensor : problem.params)
    result.params.emplace_back(tensor.values.size(), 0.0);
  result.initialState.assign(numSeqs * heads * stateSize, 0.0);
  auto addTo = [&](std::vector<double> &to, size_t offset,
                   const std::vector<double> &from) {
    for (size_t e = 0; e < from.size(); ++e)
      to[offset + e] += from[e];
  };
  for (int64_t n = 0; n < numSeqs; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      const size_t offset = (n * heads + h) * stateSize;
      // The state entering each token.
      std::vector<Value> entering{loadState(problem.initialState, offset)};
      for (int64_t t = cu[n]; t + 1 < cu[n + 1]; ++t)
        entering.push_back(
            std::move(evaluate(entering.back(), t, h).at(nextId)));
      Value dState = loadState(dFinalState, offset);
      for (int64_t t = cu[n + 1] - 1; t >= cu[n]; --t) {
        const std::vector<Value> values =
            evaluate(entering.at(t - cu[n]), t, h);
        std::vector<Value> grads(values.size());
        for (size_t i = 0; i < values.size(); ++i)
          grads[i] = Value{std::vector<double>(values[i].data.size(), 0.0),
                           std::vector<double>(values[i].norm.size(), 0.0)};
        addTo(grads[nextId].data, 0, dState.data);
        addTo(grads[nextId].norm, 0, dState.norm);
        for (int64_t j = 0; j < valueDim; ++j)
          grads[outputId].data[j] += dOutput[(t * heads + h) * valueDim + j];
        const json &ops = program.at("ops");
        for (auto op = ops.rbegin(); op != ops.rend(); ++op)
          backward(*op, values, grads);
        dState = std::move(grads[stateId]);
        for (size_t i = 0; i < inputIds.size(); ++i)
          addTo(result.inputs[i],
                argumentOffset(problem.inputs[i], inputIds[i], t, h),
                grads[inputIds[i]].data);
        for (size_t i = 0; i < paramIds.size(); ++i)
          addTo(result.params[i],
                argumentOffset(problem.params[i], paramIds[i], 0, h),
                grads[paramIds[i]].data);
      }
      storeState(dState, result.initialState, offset);
    }
  }
  return result;
}

std::vector<Value> Interpreter::evaluate(const Value &state, int64_t token,
                                         int64_t head) const {
  std::vector<Value> values(kinds.size());
  values.at(program.at("state").get<int64_t>()) = state;
  for (size_t i = 0; i < inputIds.size(); ++i)
    values.at(inputIds[i]) =
        argument(problem.inputs[i], inputIds[i], token, head);
  for (size_t i = 0; i < paramIds.size(); ++i)
    values.at(paramIds[i]) = argument(problem.params[i], paramIds[i], 0, head);
  for (const json &op : program.at("ops"))
    apply(op, values, head);
  return values;
}

void Interpreter::apply(const json &op, std::vector<Value> &values,
                        int64_t head) const {
  const std::string name = op.at("op").get<std::string>();
  const std::vector<int64_t> ids = op.value("operands", std::vector<int64_t>{});
  const json attrs = op.value("attrs", json::object());
  const int64_t resultId = op.value("result", int64_t(-1));
  // An absent optional operand is -1, or left off the end of the list.
  auto has = [&](size_t i) { return i < ids.size() && ids[i] >= 0; };
  auto operand = [&](size_t i) -> const Value & {
    return values.at(ids.at(i));
  };
  const int64_t K = keyDim, V = valueDim;

  Value result;
  if (name == "linac.decay") {
    result = operand(0);
    for (int64_t i = 0; i < K; ++i) {
      double gk = has(1) ? std::exp(lane(operand(1), i)) : 1.0;
      for (int64_t j = 0; j < V; ++j) {
        double gv = has(2) ? std::exp(operand(2).data[j]) : 1.0;
        result.data[i * V + j] *= gk * gv;
      }
      if (normalized)
        result.norm[i] *= gk;
    }
  } else if (name == "linac.matrix_gate") {
    result = operand(0);
    for (int64_t i = 0; i < K * V; ++i)
      result.data[i] *= std::exp(operand(1).data[i]);
  } else if (name == "linac.erase") {
    result = operand(0);
    const std::vector<double> &k = operand(1).data;
    std::vector<double> e(K);
    for (int64_t i = 0; i < K; ++i)
      e[i] = lane(operand(2), i) * k[i];
    // e^T S is taken from the incoming state before any row changes.
    std::vector<double> eS(V, 0.0);
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j)
        eS[j] += e[i] * operand(0).data[i * V + j];
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j)
        result.data[i * V + j] -= k[i] * eS[j];
    if (normalized) {
      double en = dot(e, operand(0).norm);
      for (int64_t i = 0; i < K; ++i)
        result.norm[i] -= k[i] * en;
    }
  } else if (name == "linac.write") {
    result = operand(0);
    const std::vector<double> &k = operand(1).data;
    const std::vector<double> &v = operand(2).data;
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j)
        result.data[i * V + j] +=
            k[i] * (has(3) ? lane(operand(3), j) : 1.0) * v[j];
    if (normalized) {
      if (has(3) && kinds.at(ids[3]) != Kind::Scalar)
        throw std::runtime_error("reference: linac.write on a normalized state "
                                 "needs a scalar strength");
      double beta = has(3) ? operand(3).data[0] : 1.0;
      for (int64_t i = 0; i < K; ++i)
        result.norm[i] += k[i] * beta;
    }
  } else if (name == "linac.read") {
    double scale = attrs.contains("scale") ? attrs.at("scale").get<double>()
                   : problem.scale != 0.0  ? problem.scale
                                           : 1.0 / std::sqrt(double(K));
    std::vector<double> qs = operand(1).data;
    for (double &x : qs)
      x *= scale;
    result.data.assign(V, 0.0);
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j)
        result.data[j] += operand(0).data[i * V + j] * qs[i];
    if (attrs.value("normalized", false)) {
      double denom = std::max(std::fabs(dot(operand(0).norm, qs)), 1.0);
      for (double &x : result.data)
        x /= denom;
    }
  } else if (name == "linac.head_index") {
    result.data = {double(head)};
  } else if (name == "linac.l2norm") {
    // 1e-6 is the dialect's default for an omitted eps.
    double eps = attrs.value("eps", 1.0e-6);
    const std::vector<double> &x = operand(0).data;
    double norm = std::sqrt(dot(x, x) + eps);
    for (double v : x)
      result.data.push_back(v / norm);
  } else if (name == "linac.dot") {
    result.data = {dot(operand(0).data, operand(1).data)};
  } else if (name == "linac.broadcast") {
    result.data.assign(sizeOf(kinds.at(resultId)), operand(0).data.at(0));
  } else if (name == "arith.constant") {
    result.data.assign(sizeOf(kinds.at(resultId)),
                       attrs.at("value").get<double>());
  } else if (auto it = unaryOps().find(name); it != unaryOps().end()) {
    for (double x : operand(0).data)
      result.data.push_back(it->second(x));
  } else if (auto it = binaryOps().find(name); it != binaryOps().end()) {
    const std::vector<double> &a = operand(0).data, &b = operand(1).data;
    if (a.size() != b.size())
      throw std::runtime_error("reference: " + name +
                               " on operands of different sizes");
    for (size_t i = 0; i < a.size(); ++i)
      result.data.push_back(it->second(a[i], b[i]));
  } else {
    throw std::runtime_error("reference: unknown op '" + name + "'");
  }
  if (resultId >= 0)
    values.at(resultId) = std::move(result);
}

void Interpreter::backward(const json &op, const std::vector<Value> &values,
                           std::vector<Value> &grads) const {
  const std::string name = op.at("op").get<std::string>();
  const std::vector<int64_t> ids = op.value("operands", std::vector<int64_t>{});
  const json attrs = op.value("attrs", json::object());
  const int64_t resultId = op.value("result", int64_t(-1));
  if (resultId < 0)
    return;
  auto has = [&](size_t i) { return i < ids.size() && ids[i] >= 0; };
  auto operand = [&](size_t i) -> const Value & {
    return values.at(ids.at(i));
  };
  auto grad = [&](size_t i) -> Value & { return grads.at(ids.at(i)); };
  const Value &g = grads.at(resultId);
  const Value &r = values.at(resultId);
  const int64_t K = keyDim, V = valueDim;

  if (name == "linac.decay") {
    // d r_ij / d (a log-gate of row i or column j) = r_ij.
    for (int64_t i = 0; i < K; ++i) {
      double gk = has(1) ? std::exp(lane(operand(1), i)) : 1.0;
      for (int64_t j = 0; j < V; ++j) {
        double gv = has(2) ? std::exp(operand(2).data[j]) : 1.0;
        double gr = g.data[i * V + j] * r.data[i * V + j];
        grad(0).data[i * V + j] += g.data[i * V + j] * gk * gv;
        if (has(1))
          addToLane(grad(1), i, gr);
        if (has(2))
          grad(2).data[j] += gr;
      }
      if (normalized) {
        grad(0).norm[i] += g.norm[i] * gk;
        if (has(1))
          addToLane(grad(1), i, g.norm[i] * r.norm[i]);
      }
    }
  } else if (name == "linac.matrix_gate") {
    for (int64_t i = 0; i < K * V; ++i) {
      grad(0).data[i] += g.data[i] * std::exp(operand(1).data[i]);
      grad(1).data[i] += g.data[i] * r.data[i];
    }
    for (int64_t i = 0; i < int64_t(g.norm.size()); ++i)
      grad(0).norm[i] += g.norm[i];
  } else if (name == "linac.erase") {
    // r = (I - k e^T) S with e = beta (.) k.
    const Value &S = operand(0);
    const std::vector<double> &k = operand(1).data;
    std::vector<double> e(K), eS(V, 0.0), kG(V, 0.0), de(K, 0.0);
    for (int64_t i = 0; i < K; ++i)
      e[i] = lane(operand(2), i) * k[i];
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) {
        eS[j] += e[i] * S.data[i * V + j];
        kG[j] += k[i] * g.data[i * V + j];
      }
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) {
        grad(0).data[i * V + j] += g.data[i * V + j] - e[i] * kG[j];
        grad(1).data[i] -= g.data[i * V + j] * eS[j];
        de[i] -= kG[j] * S.data[i * V + j];
      }
    if (normalized) {
      double en = dot(e, S.norm), kGn = dot(k, g.norm);
      for (int64_t i = 0; i < K; ++i) {
        grad(0).norm[i] += g.norm[i] - e[i] * kGn;
        grad(1).data[i] -= g.norm[i] * en;
        de[i] -= kGn * S.norm[i];
      }
    }
    for (int64_t i = 0; i < K; ++i) {
      grad(1).data[i] += de[i] * lane(operand(2), i);
      addToLane(grad(2), i, de[i] * k[i]);
    }
  } else if (name == "linac.write") {
    // r = S + k (w (.) v)^T, w the strength (a scalar or a value vector).
    const std::vector<double> &k = operand(1).data;
    const std::vector<double> &v = operand(2).data;
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) {
        double gij = g.data[i * V + j];
        double w = has(3) ? lane(operand(3), j) : 1.0;
        grad(0).data[i * V + j] += gij;
        grad(1).data[i] += gij * w * v[j];
        grad(2).data[j] += gij * w * k[i];
        if (has(3))
          addToLane(grad(3), j, gij * k[i] * v[j]);
      }
    if (normalized) {
      double beta = has(3) ? operand(3).data[0] : 1.0;
      for (int64_t i = 0; i < K; ++i) {
        grad(0).norm[i] += g.norm[i];
        grad(1).data[i] += g.norm[i] * beta;
        if (has(3))
          grad(3).data[0] += g.norm[i] * k[i];
      }
    }
  } else if (name == "linac.read") {
    double scale = attrs.contains("scale") ? attrs.at("scale").get<double>()
                   : problem.scale != 0.0  ? problem.scale
                                           : 1.0 / std::sqrt(double(K));
    const Value &S = operand(0);
    std::vector<double> qs = operand(1).data;
    for (double &x : qs)
      x *= scale;
    // r = S^T qs, then over max(|n . qs|, 1) when normalized.
    std::vector<double> dr = g.data, dqs(K, 0.0);
    if (attrs.value("normalized", false)) {
      std::vector<double> raw(V, 0.0);
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j)
          raw[j] += S.data[i * V + j] * qs[i];
      double m = dot(S.norm, qs), denom = std::max(std::fabs(m), 1.0);
      double dDenom = 0.0;
      for (int64_t j = 0; j < V; ++j) {
        dr[j] = g.data[j] / denom;
        dDenom -= g.data[j] * raw[j] / (denom * denom);
      }
      double dm = std::fabs(m) > 1.0 ? (m > 0.0 ? dDenom : -dDenom) : 0.0;
      for (int64_t i = 0; i < K; ++i) {
        grad(0).norm[i] += dm * qs[i];
        dqs[i] += dm * S.norm[i];
      }
    }
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) {
        grad(0).data[i * V + j] += dr[j] * qs[i];
        dqs[i] += S.data[i * V + j] * dr[j];
      }
    for (int64_t i = 0; i < K; ++i)
      grad(1).data[i] += dqs[i] * scale;
  } else if (name == "linac.l2norm") {
    double eps = attrs.value("eps", 1.0e-6);
    const std::vector<double> &x = operand(0).data;
    double norm = std::sqrt(dot(x, x) + eps), xg = dot(x, g.data);
    for (size_t i = 0; i < x.size(); ++i)
      grad(0).data[i] += g.data[i] / norm - x[i] * xg / (norm * norm * norm);
  } else if (name == "linac.dot") {
    for (size_t i = 0; i < operand(0).data.size(); ++i) {
      grad(0).data[i] += g.data[0] * operand(1).data[i];
      grad(1).data[i] += g.data[0] * operand(0).data[i];
    }
  } else if (name == "linac.broadcast") {
    for (double x : g.data)
      grad(0).data[0] += x;
  } else if (name == "linac.head_index" || name == "arith.constant") {
    // No operands.
  } else if (auto it = unaryDerivatives().find(name);
             it != unaryDerivatives().end()) {
    for (size_t i = 0; i < g.data.size(); ++i)
      grad(0).data[i] += g.data[i] * it->second(operand(0).data[i], r.data[i]);
  } else if (auto it = binaryDerivatives().find(name);
             it != binaryDerivatives().end()) {
    for (size_t i = 0; i < g.data.size(); ++i) {
      auto [da, db] = it->second(operand(0).data[i], operand(1).data[i]);
      grad(0).data[i] += g.data[i] * da;
      grad(1).data[i] += g.data[i] * db;
    }
  } else {
    throw std::runtime_error("reference: no derivative for op '" + name + "'");
  }
}

} // namespace

Result run(const Problem &problem) { return Interpreter(problem).run(); }

Gradients gradients(const Problem &problem, const std::vector<double> &dOutput,
                    const std::vector<double> &dFinalState) {
  return Interpreter(problem).gradients(dOutput, dFinalState);
}

} // namespace linac::reference
