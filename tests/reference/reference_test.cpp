//===- reference_test.cpp - the fp64 reference against closed forms -------===//
//
// Each test hand-writes a step program and checks the interpreter against a
// formula or a recurrence computed here, independently, on random inputs.
//
//===----------------------------------------------------------------------===//

#include "reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace {

using linac::reference::Problem;
using linac::reference::Result;
using linac::reference::Tensor;
using nlohmann::json;

constexpr int K = 3, V = 2;
constexpr double kTol = 1e-10;

std::vector<float> randomValues(size_t n, float lo = -1.0f, float hi = 1.0f) {
  static std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(n);
  for (float &v : values)
    v = dist(rng);
  return values;
}

Tensor randomTensor(size_t n, int64_t heads, float lo = -1.0f,
                    float hi = 1.0f) {
  return Tensor{randomValues(n, lo, hi), heads};
}

/// The `size` elements of `t` at `token` for state head h of H, widened
/// first so that the closed forms below compute in double throughout.
std::vector<double> row(const Tensor &t, int64_t token, int64_t h, int64_t H,
                        int size) {
  auto first = t.values.begin() + (token * t.heads + h / (H / t.heads)) * size;
  return {first, first + size};
}

double scalar(const Tensor &t, int64_t token, int64_t h = 0, int64_t H = 1) {
  return row(t, token, h, H, 1)[0];
}

double dot(const std::vector<double> &a, const std::vector<double> &b) {
  double sum = 0.0;
  for (int i = 0; i < K; ++i)
    sum += a[i] * b[i];
  return sum;
}

Problem problem(json step, std::vector<int64_t> cuSeqlens, int64_t numHeads,
                std::vector<Tensor> inputs, std::vector<Tensor> params = {}) {
  Problem p;
  p.step = std::move(step);
  p.cuSeqlens = std::move(cuSeqlens);
  p.numHeads = numHeads;
  p.inputs = std::move(inputs);
  p.params = std::move(params);
  return p;
}

json op(const char *name, std::vector<int> operands, int result,
        json attrs = json::object()) {
  return {{"op", name},
          {"operands", operands},
          {"result", result},
          {"attrs", attrs}};
}

// S' = S + k v^T, o = S'^T q * scale: plain linear attention.
const char *kLinear = R"({"key_dim": 3, "value_dim": 2, "normalized": false,
  "values": [{"kind": "state"}, {"kind": "key"}, {"kind": "key"},
             {"kind": "value"}, {"kind": "state"}, {"kind": "value"}],
  "state": 0, "params": [],
  "inputs": [{"name": "q", "value": 1}, {"name": "k", "value": 2},
             {"name": "v", "value": 3}],
  "ops": [{"op": "linac.write", "operands": [0, 2, 3, -1], "result": 4},
          {"op": "linac.read", "operands": [4, 1], "result": 5}],
  "yield": {"state": 4, "output": 5}})";

TEST(Reference, LinearAttention) {
  const int H = 2, T = 5;
  Problem p = problem(json::parse(kLinear), {0, T}, H,
                      {randomTensor(T * H * K, H), randomTensor(T * H * K, H),
                       randomTensor(T * H * V, H)});
  Result r = linac::reference::run(p);
  const Tensor &q = p.inputs[0], &k = p.inputs[1], &v = p.inputs[2];
  for (int h = 0; h < H; ++h)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < V; ++c) {
        double expected = 0.0;
        for (int j = 0; j <= t; ++j)
          expected += dot(row(q, t, h, H, K), row(k, j, h, H, K)) *
                      row(v, j, h, H, V)[c];
        EXPECT_NEAR(r.output[(t * H + h) * V + c], expected / std::sqrt(3.0),
                    kTol);
      }
}

TEST(Reference, ScalarDecay) {
  json step = json::parse(kLinear);
  step["values"].push_back({{"kind", "scalar"}});
  step["values"].push_back({{"kind", "state"}});
  step["inputs"].push_back({{"name", "g"}, {"value", 6}});
  step["ops"][0]["operands"][0] = 7;
  step["ops"].insert(step["ops"].begin(), op("linac.decay", {0, 6, -1}, 7));
  const int T = 6;
  Problem p =
      problem(step, {0, T}, 1,
              {randomTensor(T * K, 1), randomTensor(T * K, 1),
               randomTensor(T * V, 1), randomTensor(T, 1, -1.0f, 0.0f)});
  p.scale = 0.5;
  Result r = linac::reference::run(p);
  const Tensor &q = p.inputs[0], &k = p.inputs[1], &v = p.inputs[2],
               &g = p.inputs[3];
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < V; ++c) {
      double expected = 0.0;
      for (int j = 0; j <= t; ++j) {
        double logDecay = 0.0;
        for (int s = j + 1; s <= t; ++s)
          logDecay += scalar(g, s);
        expected += std::exp(logDecay) *
                    dot(row(q, t, 0, 1, K), row(k, j, 0, 1, K)) *
                    row(v, j, 0, 1, V)[c];
      }
      EXPECT_NEAR(r.output[t * V + c], 0.5 * expected, kTol);
    }
}

TEST(Reference, GatedDeltaRule) {
  // Gated DeltaNet as in examples/gated_deltanet.mlir.
  json step = json::parse(R"({"key_dim": 3, "value_dim": 2, "normalized": false,
    "values": [{"kind": "state"}, {"kind": "key"}, {"kind": "key"},
      {"kind": "value"}, {"kind": "scalar"}, {"kind": "scalar"},
      {"kind": "scalar"}, {"kind": "scalar"}, {"kind": "key"}, {"kind": "key"},
      {"kind": "scalar"}, {"kind": "scalar"}, {"kind": "scalar"},
      {"kind": "scalar"}, {"kind": "scalar"}, {"kind": "scalar"},
      {"kind": "state"}, {"kind": "state"}, {"kind": "state"},
      {"kind": "value"}],
    "state": 0,
    "inputs": [{"name": "q", "value": 1}, {"name": "k", "value": 2},
      {"name": "v", "value": 3}, {"name": "g", "value": 4},
      {"name": "b", "value": 5}],
    "params": [{"name": "A_log", "value": 6}, {"name": "dt_bias", "value": 7}],
    "ops": [
      {"op": "linac.l2norm", "operands": [1], "result": 8,
       "attrs": {"eps": 1e-6}},
      {"op": "linac.l2norm", "operands": [2], "result": 9,
       "attrs": {"eps": 1e-6}},
      {"op": "math.exp", "operands": [6], "result": 10},
      {"op": "arith.addf", "operands": [4, 7], "result": 11},
      {"op": "linac.softplus", "operands": [11], "result": 12},
      {"op": "arith.mulf", "operands": [10, 12], "result": 13},
      {"op": "arith.negf", "operands": [13], "result": 14},
      {"op": "linac.sigmoid", "operands": [5], "result": 15},
      {"op": "linac.decay", "operands": [0, 14, -1], "result": 16},
      {"op": "linac.erase", "operands": [16, 9, 15], "result": 17},
      {"op": "linac.write", "operands": [17, 9, 3, 15], "result": 18},
      {"op": "linac.read", "operands": [18, 8], "result": 19}],
    "yield": {"state": 18, "output": 19}})");
  const int H = 2, T = 6;
  Problem p = problem(step, {0, T}, H,
                      {randomTensor(T * H * K, H), randomTensor(T * H * K, H),
                       randomTensor(T * H * V, H), randomTensor(T * H, H),
                       randomTensor(T * H, H)},
                      {randomTensor(H, H), randomTensor(H, H)});
  Result r = linac::reference::run(p);
  for (int h = 0; h < H; ++h) {
    double S[K][V] = {};
    for (int t = 0; t < T; ++t) {
      std::vector<double> q = row(p.inputs[0], t, h, H, K),
                          k = row(p.inputs[1], t, h, H, K),
                          v = row(p.inputs[2], t, h, H, V);
      double qNorm = std::sqrt(dot(q, q) + 1e-6),
             kNorm = std::sqrt(dot(k, k) + 1e-6);
      for (int i = 0; i < K; ++i) {
        q[i] /= qNorm;
        k[i] /= kNorm;
      }
      double x = scalar(p.inputs[3], t, h, H) + scalar(p.params[1], 0, h, H);
      double a = std::exp(-std::exp(scalar(p.params[0], 0, h, H)) *
                          std::log(1.0 + std::exp(x)));
      double beta = 1.0 / (1.0 + std::exp(-scalar(p.inputs[4], t, h, H)));
      for (int j = 0; j < V; ++j) {
        double kS = 0.0;
        for (int i = 0; i < K; ++i)
          kS += k[i] * a * S[i][j];
        for (int i = 0; i < K; ++i)
          S[i][j] = a * S[i][j] - beta * k[i] * kS + beta * k[i] * v[j];
      }
      for (int j = 0; j < V; ++j) {
        double o = 0.0;
        for (int i = 0; i < K; ++i)
          o += S[i][j] * q[i] / std::sqrt(3.0);
        EXPECT_NEAR(r.output[(t * H + h) * V + j], o, kTol);
      }
    }
    for (int i = 0; i < K; ++i)
      for (int j = 0; j < V; ++j)
        EXPECT_NEAR(r.finalState[(h * K + i) * V + j], S[i][j], kTol);
  }
}

TEST(Reference, HeadGroupingVarlenAndInitialState) {
  // Write strength head_index + 1 tells the heads apart.
  json step = json::parse(kLinear);
  for (const char *kind : {"scalar", "scalar", "scalar"})
    step["values"].push_back({{"kind", kind}});
  step["ops"][0]["operands"][3] = 8;
  json &ops = step["ops"];
  ops.insert(ops.begin(), op("arith.addf", {6, 7}, 8));
  ops.insert(ops.begin(), op("arith.constant", {}, 7, {{"value", 1.0}}));
  ops.insert(ops.begin(), op("linac.head_index", {}, 6));
  const int H = 4, T = 7, N = 3;
  std::vector<int64_t> cu = {0, 3, 3, 7};
  Problem p = problem(step, cu, H,
                      {randomTensor(T * K, 1), randomTensor(T * 2 * K, 2),
                       randomTensor(T * H * V, H)});
  p.initialState = randomValues(N * H * K * V);
  Result r = linac::reference::run(p);
  const Tensor &q = p.inputs[0], &k = p.inputs[1], &v = p.inputs[2];
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h) {
      std::vector<double> S0(p.initialState.begin() + (n * H + h) * K * V,
                             p.initialState.begin() + (n * H + h + 1) * K * V);
      for (int t = cu[n]; t < cu[n + 1]; ++t)
        for (int c = 0; c < V; ++c) {
          double expected = 0.0;
          for (int i = 0; i < K; ++i)
            expected += S0[i * V + c] * row(q, t, h, H, K)[i];
          for (int j = cu[n]; j <= t; ++j)
            expected += (h + 1) * dot(row(q, t, h, H, K), row(k, j, h, H, K)) *
                        row(v, j, h, H, V)[c];
          EXPECT_NEAR(r.output[(t * H + h) * V + c], expected / std::sqrt(3.0),
                      kTol);
        }
      for (int i = 0; i < K; ++i)
        for (int c = 0; c < V; ++c) {
          double expected = S0[i * V + c];
          for (int j = cu[n]; j < cu[n + 1]; ++j)
            expected += (h + 1) * row(k, j, h, H, K)[i] * row(v, j, h, H, V)[c];
          EXPECT_NEAR(r.finalState[((n * H + h) * K + i) * V + c], expected,
                      kTol);
        }
    }
  // The empty sequence keeps its initial state exactly.
  for (int e = 0; e < H * K * V; ++e)
    EXPECT_EQ(r.finalState[H * K * V + e],
              double(p.initialState[H * K * V + e]));
}

TEST(Reference, NormalizedRead) {
  // mLSTM-like: decay by f, write with strength beta, normalised read.
  json step = json::parse(kLinear);
  step["normalized"] = true;
  for (const char *kind : {"scalar", "scalar", "state"})
    step["values"].push_back({{"kind", kind}});
  step["inputs"].push_back({{"name", "f"}, {"value", 6}});
  step["inputs"].push_back({{"name", "beta"}, {"value", 7}});
  step["ops"][0]["operands"] = {8, 2, 3, 7};
  step["ops"][1]["attrs"] = {{"normalized", true}, {"scale", 1.0}};
  step["ops"].insert(step["ops"].begin(), op("linac.decay", {0, 6, -1}, 8));
  const int T = 8;
  Problem p =
      problem(step, {0, T}, 1,
              {randomTensor(T * K, 1, -3.0f, 3.0f), randomTensor(T * K, 1),
               randomTensor(T * V, 1), randomTensor(T, 1, -0.5f, 0.0f),
               randomTensor(T, 1, 0.0f, 2.0f)});
  Result r = linac::reference::run(p);
  const Tensor &q = p.inputs[0], &k = p.inputs[1], &v = p.inputs[2];
  for (int t = 0; t < T; ++t) {
    double num[V] = {}, den = 0.0;
    for (int j = 0; j <= t; ++j) {
      double w = scalar(p.inputs[4], j);
      for (int s = j + 1; s <= t; ++s)
        w *= std::exp(scalar(p.inputs[3], s));
      double qk = dot(row(q, t, 0, 1, K), row(k, j, 0, 1, K));
      den += w * qk;
      for (int c = 0; c < V; ++c)
        num[c] += w * qk * row(v, j, 0, 1, V)[c];
    }
    for (int c = 0; c < V; ++c)
      EXPECT_NEAR(r.output[t * V + c], num[c] / std::max(std::fabs(den), 1.0),
                  kTol);
  }
}

TEST(Reference, VectorAndMatrixGates) {
  // Both decay sides, a matrix gate, a key-vector erase and a value-vector
  // write, against the recurrence written out with loops.
  json step = json::parse(kLinear);
  for (const char *kind :
       {"key", "value", "matrix", "key", "value", "state", "state", "state"})
    step["values"].push_back({{"kind", kind}});
  for (const char *name : {"gk", "gv", "G", "b", "w"})
    step["inputs"].push_back(
        {{"name", name}, {"value", step["inputs"].size() + 3}});
  step["ops"] = {
      op("linac.decay", {0, 6, 7}, 11), op("linac.matrix_gate", {11, 8}, 12),
      op("linac.erase", {12, 2, 9}, 13), op("linac.write", {13, 2, 3, 10}, 4),
      op("linac.read", {4, 1}, 5, {{"scale", 1.0}})};
  const int T = 5;
  Problem p = problem(
      step, {0, T}, 1,
      {randomTensor(T * K, 1), randomTensor(T * K, 1), randomTensor(T * V, 1),
       randomTensor(T * K, 1, -1.0f, 0.0f), randomTensor(T * V, 1, -1.0f, 0.0f),
       randomTensor(T * K * V, 1, -1.0f, 0.0f), randomTensor(T * K, 1),
       randomTensor(T * V, 1)});
  Result r = linac::reference::run(p);
  auto in = [&](int i, int t, int size) {
    return row(p.inputs[i], t, 0, 1, size);
  };
  double S[K][V] = {};
  for (int t = 0; t < T; ++t) {
    std::vector<double> q = in(0, t, K), k = in(1, t, K), v = in(2, t, V),
                        gk = in(3, t, K), gv = in(4, t, V), G = in(5, t, K * V),
                        b = in(6, t, K), w = in(7, t, V);
    for (int i = 0; i < K; ++i)
      for (int j = 0; j < V; ++j)
        S[i][j] *= std::exp(gk[i]) * std::exp(gv[j]) * std::exp(G[i * V + j]);
    for (int j = 0; j < V; ++j) {
      double eS = 0.0;
      for (int i = 0; i < K; ++i)
        eS += b[i] * k[i] * S[i][j];
      for (int i = 0; i < K; ++i)
        S[i][j] += k[i] * (w[j] * v[j] - eS);
    }
    for (int j = 0; j < V; ++j) {
      double o = 0.0;
      for (int i = 0; i < K; ++i)
        o += S[i][j] * q[i];
      EXPECT_NEAR(r.output[t * V + j], o, kTol);
    }
  }
}

TEST(Reference, UnknownOpThrows) {
  json step = json::parse(kLinear);
  step["ops"][1]["op"] = "linac.bogus";
  Problem p =
      problem(step, {0, 1}, 1,
              {randomTensor(K, 1), randomTensor(K, 1), randomTensor(V, 1)});
  for (bool gradients : {false, true}) {
    try {
      if (gradients)
        linac::reference::gradients(p, std::vector<double>(V, 1.0), {});
      else
        linac::reference::run(p);
      FAIL() << "expected std::runtime_error";
    } catch (const std::runtime_error &error) {
      EXPECT_NE(std::string(error.what()).find("linac.bogus"),
                std::string::npos);
    }
  }
}

TEST(Reference, GradientsRefuseMisshapedSeeds) {
  Problem p =
      problem(json::parse(kLinear), {0, 2}, 1,
              {randomTensor(2 * K, 1), randomTensor(2 * K, 1),
               randomTensor(2 * V, 1)});
  const std::vector<double> dOutput(2 * V, 1.0), dFinal(K * V, 1.0);
  EXPECT_NO_THROW(linac::reference::gradients(p, dOutput, dFinal));
  EXPECT_NO_THROW(linac::reference::gradients(p, dOutput, {}));
  for (auto [out, fin] :
       {std::pair{std::vector<double>(V, 1.0), dFinal},
        std::pair{dOutput, std::vector<double>(K * V + 1, 1.0)}}) {
    try {
      linac::reference::gradients(p, out, fin);
      FAIL() << "expected std::runtime_error";
    } catch (const std::runtime_error &error) {
      EXPECT_NE(std::string(error.what()).find("wrong size"),
                std::string::npos);
    }
  }
}

} // namespace
