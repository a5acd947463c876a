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

class Interpreter {
public:
  explicit Interpreter(const Problem &problem);
  Result run() const;

private:
  size_t sizeOf(Kind kind) const;
  /// Row `row` (a token, or 0 for a parameter) of `tensor` as seen by
  /// state head `head`.
  Value argument(const Tensor &tensor, int64_t id, int64_t row,
                 int64_t head) const;
  /// Advances `state` by token `token` of head `head`; returns the output.
  std::vector<double> step(Value &state, int64_t token, int64_t head) const;
  void apply(const json &op, std::vector<Value> &values, int64_t head) const;
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

Value Interpreter::argument(const Tensor &tensor, int64_t id, int64_t row,
                            int64_t head) const {
  size_t size = sizeOf(kinds.at(id));
  int64_t argHead = head / (problem.numHeads / tensor.heads);
  auto first = tensor.values.begin() + (row * tensor.heads + argHead) * size;
  return Value{std::vector<double>(first, first + size), {}};
}

Result Interpreter::run() const {
  const std::vector<int64_t> &cu = problem.cuSeqlens;
  int64_t numSeqs = cu.size() - 1, heads = problem.numHeads;
  // States in memory are [K, V], or [K, V + 1] with the normaliser last.
  int64_t columns = valueDim + (normalized ? 1 : 0);
  size_t stateSize = keyDim * columns;
  Result result;
  result.output.assign(cu.back() * heads * valueDim, 0.0);
  result.finalState.assign(numSeqs * heads * stateSize, 0.0);
  for (int64_t n = 0; n < numSeqs; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      size_t offset = (n * heads + h) * stateSize;
      Value state{std::vector<double>(keyDim * valueDim, 0.0),
                  std::vector<double>(normalized ? keyDim : 0, 0.0)};
      if (!problem.initialState.empty())
        for (int64_t i = 0; i < keyDim; ++i) {
          const float *row = problem.initialState.data() + offset + i * columns;
          std::copy_n(row, valueDim, state.data.begin() + i * valueDim);
          if (normalized)
            state.norm[i] = row[valueDim];
        }
      for (int64_t t = cu[n]; t < cu[n + 1]; ++t) {
        std::vector<double> out = step(state, t, h);
        std::copy(out.begin(), out.end(),
                  result.output.begin() + (t * heads + h) * valueDim);
      }
      for (int64_t i = 0; i < keyDim; ++i) {
        double *row = result.finalState.data() + offset + i * columns;
        std::copy_n(state.data.begin() + i * valueDim, valueDim, row);
        if (normalized)
          row[valueDim] = state.norm[i];
      }
    }
  }
  return result;
}

std::vector<double> Interpreter::step(Value &state, int64_t token,
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
  const json &yield = program.at("yield");
  state = values.at(yield.at("state").get<int64_t>());
  return values.at(yield.at("output").get<int64_t>()).data;
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

} // namespace

Result run(const Problem &problem) { return Interpreter(problem).run(); }

} // namespace linac::reference
