//===- chunk_backward_test.cpp - chunkBackward against the reference ------===//
//
// The backward of the CPU's chunk products (chunkBackward), driven over a
// varlen batch chunk by chunk (the forward saving each chunk's entering
// state, then the chunks in reverse), against the fp64 reference's
// gradients (reference::gradients) of L = <dO, output> + <dS, final
// state>: linear attention, whose prologue passes q, k and v through; a
// scalar and a key-vector gate min(a, 0) of an input, whose gradient is the
// log-gate's where a < 0; the delta rule's erase with a key-vector strength
// b of an input (e = b (.) k) under either gate; and either gate with the
// read before the write (RWKV-6's order, without its bonus).
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

/// The gradients chunkBackward gives, laid out as reference::Gradients.
reference::Gradients chunkGradients(const reference::Problem &problem,
                                    Dims dims, bool readBefore,
                                    const std::vector<double> &dOutput,
                                    const std::vector<double> &dFinal) {
  // A token's record: q, k, u and e.
  const int K = dims.k, V = dims.v, R = 3 * K + V;
  const int64_t H = problem.numHeads;
  // Inputs q, k and v, then an erase's strength b and the gate input a, or
  // a alone, or neither.
  const bool erase = problem.inputs.size() == 5;
  const int gateInput = int(problem.inputs.size()) - 1;
  const int gate =
      problem.inputs.size() > 3
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
             grads.data() + 2 * K, dGate.data()});
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
          for (int d = 0; d < gate; ++d)
            if (problem.inputs[gateInput]
                    .values[at(gateInput, token, h, gate) + d] < 0.0f)
              out.inputs[gateInput][at(gateInput, token, h, gate) + d] +=
                  dGate[t * G + d];
        }
      }
      std::copy(dState.begin(), dState.end(),
                out.initialState.begin() + stateAt);
    }
  return out;
}

const char *kKeyGateSpec = R"(
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @key_gate_input(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %a : !key) {
  %zero = arith.constant dense<0.0> : !key
  %g = arith.minimumf %a, %zero : !key
  %S1 = linac.decay %S key(%g : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
)";

const char *kScalarGateSpec = R"(
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @scalar_gate_input(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %a : f32) {
  %zero = arith.constant 0.0 : f32
  %g = arith.minimumf %a, %zero : f32
  %S1 = linac.decay %S key(%g : f32) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
)";

const char *kEraseSpec = R"(
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @erase_input(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %b : !key, %a : f32) {
  %zero = arith.constant 0.0 : f32
  %g = arith.minimumf %a, %zero : f32
  %S1 = linac.decay %S key(%g : f32) : !state
  %S2 = linac.erase %S1, %k strength(%b : !key) : !state, !key
  %S3 = linac.write %S2, %k, %v : !state, !key, !value
  %o = linac.read %S3, %q : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
)";

const char *kKeyGateEraseSpec = R"(
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @key_gate_erase_input(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %b : !key, %a : !key) {
  %zero = arith.constant dense<0.0> : !key
  %g = arith.minimumf %a, %zero : !key
  %S1 = linac.decay %S key(%g : !key) : !state
  %S2 = linac.erase %S1, %k strength(%b : !key) : !state, !key
  %S3 = linac.write %S2, %k, %v : !state, !key, !value
  %o = linac.read %S3, %q : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}
)";

const char *kReadBeforeSpec = R"(
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @read_before_key_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %a : !key) {
  %o = linac.read %S, %q : !state, !key -> !value
  %zero = arith.constant dense<0.0> : !key
  %g = arith.minimumf %a, %zero : !key
  %S1 = linac.decay %S key(%g : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  linac.yield %S2, %o : !state, !value
}
)";

const char *kReadBeforeScalarSpec = R"(
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>

linac.layer @read_before_scalar_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %a : f32) {
  %o = linac.read %S, %q : !state, !key -> !value
  %zero = arith.constant 0.0 : f32
  %g = arith.minimumf %a, %zero : f32
  %S1 = linac.decay %S key(%g : f32) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  linac.yield %S2, %o : !state, !value
}
)";

class ChunkBackward
    : public testing::TestWithParam<std::tuple<const char *, GateRange>> {};

TEST_P(ChunkBackward, MatchesReferenceGradients) {
  const Dims dims{16, 16};
  const fs::path work = fs::path(testing::TempDir()) / "linac_chunk_backward";
  fs::path spec = std::get<0>(GetParam());
  for (auto [name, text] :
       {std::pair{"scalar_gate_input", kScalarGateSpec},
        std::pair{"key_gate_input", kKeyGateSpec},
        std::pair{"erase_input", kEraseSpec},
        std::pair{"key_gate_erase_input", kKeyGateEraseSpec},
        std::pair{"read_before_key_gate", kReadBeforeSpec},
        std::pair{"read_before_scalar_gate", kReadBeforeScalarSpec}})
    if (spec == name) {
      fs::create_directories(work);
      spec = work / (std::string(name) + ".mlir");
      std::ofstream(spec) << text;
    }
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
  if (problem.inputs.size() == 5) {
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
  const reference::Gradients got = chunkGradients(
      problem, dims, spec.stem().string().rfind("read_before", 0) == 0,
      seeds.output, seeds.finalState);
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
    testing::Combine(testing::Values(LINAC_EXAMPLES_DIR
                                     "/linear_attention.mlir",
                                     "scalar_gate_input", "key_gate_input",
                                     "erase_input", "key_gate_erase_input",
                                     "read_before_key_gate",
                                     "read_before_scalar_gate"),
                     testing::Values(GateRange::Moderate, GateRange::Strong)));

} // namespace
