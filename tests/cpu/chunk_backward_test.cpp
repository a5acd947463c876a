//===- chunk_backward_test.cpp - chunkBackward against the reference ------===//
//
// The backward of the CPU's chunk products (chunkBackward), driven over a
// varlen batch chunk by chunk (the forward saving each chunk's entering
// state, then the chunks in reverse), against the fp64 reference's
// gradients (reference::gradients) of L = <dO, output> + <dS, final
// state>, on layers whose prologue the test can reverse by hand (TestLayer):
// linear attention; a scalar and a key-vector gate min(a, 0) of an input,
// whose gradient is the log-gate's where a < 0; the delta rule's erase with
// a key-vector strength b of an input (e = b (.) k) under either gate; and
// either gate with the read before the write (RWKV-6's order, without its
// bonus).
//
//===----------------------------------------------------------------------===//

#include "harness.h"
#include "linac/cpu/products.h"
#include "linac/gates.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

namespace fs = std::filesystem;
using namespace linac;
using namespace linac::harness;

namespace {

constexpr int kChunk = 64;

/// A layer of K = V = 16: inputs q, k and v, then with an erase its
/// key-vector strength b (e = b (.) k), then the input a of a gate of type
/// `gate` ("f32", "!key", or none when empty) whose log-gate is min(a, 0);
/// the read after the transitions or before them.
struct TestLayer {
  const char *name, *gate;
  bool erase, readBefore;
};

std::string specOf(const TestLayer &layer) {
  const std::string gate = layer.gate;
  std::string inputs = "%q : !key, %k : !key, %v : !value", body, state = "%S";
  if (layer.erase)
    inputs += ", %b : !key";
  if (!gate.empty())
    inputs += ", %a : " + gate;
  if (layer.readBefore)
    body += "  %o = linac.read %S, %q : !state, !key -> !value\n";
  if (!gate.empty()) {
    body += "  %zero = arith.constant " +
            std::string(gate == "f32" ? "0.0" : "dense<0.0>") + " : " + gate +
            "\n  %g = arith.minimumf %a, %zero : " + gate +
            "\n  %S1 = linac.decay %S key(%g : " + gate + ") : !state\n";
    state = "%S1";
  }
  if (layer.erase) {
    body += "  %S2 = linac.erase " + state +
            ", %k strength(%b : !key) : !state, !key\n";
    state = "%S2";
  }
  body += "  %S3 = linac.write " + state + ", %k, %v : !state, !key, !value\n";
  if (!layer.readBefore)
    body += "  %o = linac.read %S3, %q : !state, !key -> !value\n";
  return "!key = tensor<16xf32, #linac.key>\n"
         "!value = tensor<16xf32, #linac.value>\n"
         "!state = !linac.state<16x16>\n\n"
         "linac.layer @" +
         std::string(layer.name) + "(%S : !state)\n    inputs(" + inputs +
         ") {\n" + body + "  linac.yield %S3, %o : !state, !value\n}\n";
}

/// The gradients chunkBackward gives, laid out as reference::Gradients.
reference::Gradients chunkGradients(const reference::Problem &problem,
                                    Dims dims, const TestLayer &layer,
                                    const std::vector<double> &dOutput,
                                    const std::vector<double> &dFinal) {
  // A token's record: q, k, u and e.
  const int K = dims.k, V = dims.v, R = 3 * K + V;
  const int64_t H = problem.numHeads;
  const bool erase = layer.erase, readBefore = layer.readBefore;
  const int gateInput = int(problem.inputs.size()) - 1;
  const int gate =
      *layer.gate
          ? int(problem.inputs[gateInput].values.size() /
                (problem.cuSeqlens.back() * problem.inputs[gateInput].heads))
          : 0;
  const int G = std::max(gate, 1);
  const float scale = 1.0f / std::sqrt(float(K));
  reference::Gradients out;
  for (const reference::Tensor &input : problem.inputs)
    out.inputs.emplace_back(input.values.size(), 0.0);
  out.initialState.assign(dFinal.size(), 0.0);
  auto at = [&](int i, int64_t token, int64_t head, int size) {
    return (token * problem.inputs[i].heads + head) * size;
  };
  for (size_t n = 0; n + 1 < problem.cuSeqlens.size(); ++n)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t begin = problem.cuSeqlens[n],
                    end = problem.cuSeqlens[n + 1];
      const int64_t stateAt = (int64_t(n) * H + h) * K * V;
      std::vector<float> state(K * V, 0.0f);
      if (!problem.initialState.empty())
        state.assign(problem.initialState.begin() + stateAt,
                     problem.initialState.begin() + stateAt + K * V);
      const int64_t chunks = (end - begin + kChunk - 1) / kChunk;
      std::vector<std::vector<float>> records(chunks), entering(chunks);
      // Each token's cumulative log-gates, and the ones its query sees.
      std::vector<std::vector<double>> lams(chunks), lamQs(chunks);
      auto chunkOf = [&](int64_t c) {
        return linac::cpu::Chunk{kChunk,
                                 K,
                                 V,
                                 erase,
                                 readBefore,
                                 G == 1,
                                 scale,
                                 R,
                                 records[c].data(),
                                 records[c].data() + K,
                                 records[c].data() + 2 * K + V,
                                 records[c].data() + 2 * K,
                                 lams[c].data(),
                                 lamQs[c].data(),
                                 nullptr,
                                 nullptr};
      };
      std::vector<float> reads(kChunk * V);
      for (int64_t c = 0; c < chunks; ++c) {
        records[c].assign(kChunk * R, 0.0f);
        lams[c].assign(kChunk * G, 0.0);
        lamQs[c].assign(kChunk * G, 0.0);
        std::vector<double> lam(G, 0.0);
        for (int t = 0; t < kChunk; ++t) {
          if (readBefore)
            std::copy(lam.begin(), lam.end(), lamQs[c].begin() + t * G);
          const int64_t token = begin + c * kChunk + t;
          if (token < end) {
            for (int i = 0; i < 3; ++i) {
              const int size = i < 2 ? K : V;
              const float *row =
                  problem.inputs[i].values.data() + at(i, token, h, size);
              std::copy(row, row + size, records[c].begin() + t * R + i * K);
            }
            for (int d = 0; erase && d < K; ++d)
              records[c][t * R + 2 * K + V + d] =
                  problem.inputs[3].values[at(3, token, h, K) + d] *
                  records[c][t * R + K + d];
            for (int d = 0; d < gate; ++d)
              lam[d] += floorLogGate(
                  std::min(problem.inputs[gateInput]
                               .values[at(gateInput, token, h, gate) + d],
                           0.0f));
          }
          std::copy(lam.begin(), lam.end(), lams[c].begin() + t * G);
          if (!readBefore)
            std::copy(lam.begin(), lam.end(), lamQs[c].begin() + t * G);
        }
        entering[c] = state;
        linac::cpu::chunkForward(chunkOf(c), state.data(), reads.data());
      }
      std::vector<float> dState(dFinal.begin() + stateAt,
                                dFinal.begin() + stateAt + K * V);
      std::vector<float> dO(kChunk * V), grads(kChunk * R);
      std::vector<double> dGate(kChunk * G);
      for (int64_t c = chunks - 1; c >= 0; --c) {
        for (int t = 0; t < kChunk; ++t) {
          const int64_t token = begin + c * kChunk + t;
          for (int j = 0; j < V; ++j)
            dO[t * V + j] =
                token < end ? float(dOutput[(token * H + h) * V + j]) : 0.0f;
        }
        linac::cpu::chunkBackward(
            chunkOf(c), entering[c].data(), dO.data(), dState.data(),
            {R, grads.data(), grads.data() + K, grads.data() + 2 * K + V,
             grads.data() + 2 * K, dGate.data(), nullptr});
        for (int t = 0; t < kChunk; ++t) {
          const int64_t token = begin + c * kChunk + t;
          if (token >= end)
            continue;
          for (int i = 0; i < 3; ++i) {
            const int size = i < 2 ? K : V;
            for (int d = 0; d < size; ++d)
              out.inputs[i][at(i, token, h, size) + d] +=
                  grads[t * R + i * K + d];
          }
          // e = b (.) k: its gradient goes to both.
          for (int d = 0; erase && d < K; ++d) {
            const float de = grads[t * R + 2 * K + V + d];
            out.inputs[1][at(1, token, h, K) + d] +=
                problem.inputs[3].values[at(3, token, h, K) + d] * de;
            out.inputs[3][at(3, token, h, K) + d] +=
                records[c][t * R + K + d] * de;
          }
          // min(a, 0) passes its gradient to a where a <= 0, as the
          // reference's minimumf does at a tie (the strong gates' inputs
          // are exactly 0 now and then).
          for (int d = 0; d < gate; ++d)
            if (problem.inputs[gateInput]
                    .values[at(gateInput, token, h, gate) + d] <= 0.0f)
              out.inputs[gateInput][at(gateInput, token, h, gate) + d] +=
                  dGate[t * G + d];
        }
      }
      std::copy(dState.begin(), dState.end(),
                out.initialState.begin() + stateAt);
    }
  return out;
}

class ChunkBackward
    : public testing::TestWithParam<std::tuple<TestLayer, GateRange>> {};

TEST_P(ChunkBackward, MatchesReferenceGradients) {
  const Dims dims{16, 16};
  const TestLayer &layer = std::get<0>(GetParam());
  // A folder per case: ctest runs the cases of one layer side by side.
  const fs::path work =
      fs::path(testing::TempDir()) / "linac_chunk_backward" /
      testing::UnitTest::GetInstance()->current_test_info()->name();
  fs::create_directories(work);
  const fs::path spec = work / (std::string(layer.name) + ".mlir");
  std::ofstream(spec) << specOf(layer);
  auto package = compiled(spec, dims, work);
  Case c;
  c.batch = 1;
  // Sequences of 70 (a chunk and a short one), none and 130.
  c.cuSeqlens = {0, 70, 70, 200};
  c.heads = c.keyHeads = 2;
  c.initialState = true;
  // Moderate gates, or log-gates down to -20 a token (a chunk's fall to
  // -1280: factors far below fp32's smallest).
  c.gates = std::get<1>(GetParam());
  reference::Problem problem = makeProblem(*package, dims, c).reference;
  if (layer.erase) {
    // Keys of norm about 1 and strengths in [0, 1]: each erase keeps the
    // state's scale, as a trained layer's normalised keys and sigmoid
    // strengths do.
    for (float &x : problem.inputs[1].values)
      x *= 0.25f;
    for (float &x : problem.inputs[3].values)
      x = std::min(std::fabs(x), 1.0f);
  }
  std::mt19937 rng(std::random_device{}());
  const Seeds seeds = normalSeeds(reference::run(problem), rng);
  const reference::Gradients want =
      reference::gradients(problem, seeds.output, seeds.finalState);
  const reference::Gradients got =
      chunkGradients(problem, dims, layer, seeds.output, seeds.finalState);
  ASSERT_EQ(got.inputs.size(), want.inputs.size());
  for (size_t i = 0; i < want.inputs.size(); ++i)
    EXPECT_LT(
        relativeError(got.inputs[i], want.inputs[i], 0, want.inputs[i].size()),
        1e-5)
        << "input " << i;
  EXPECT_LT(relativeError(got.initialState, want.initialState, 0,
                          want.initialState.size()),
            1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Layers, ChunkBackward,
    testing::Combine(
        testing::Values(TestLayer{"ungated", "", false, false},
                        TestLayer{"scalar_gate", "f32", false, false},
                        TestLayer{"key_gate", "!key", false, false},
                        TestLayer{"scalar_gate_erase", "f32", true, false},
                        TestLayer{"key_gate_erase", "!key", true, false},
                        TestLayer{"read_before_scalar_gate", "f32", false,
                                  true},
                        TestLayer{"read_before_key_gate", "!key", false, true}),
        testing::Values(GateRange::Moderate, GateRange::Strong)),
    [](const auto &info) {
      return std::string(std::get<0>(info.param).name) +
             (std::get<1>(info.param) == GateRange::Strong ? "_strong" : "");
    });

} // namespace
