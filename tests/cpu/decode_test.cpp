//===- decode_test.cpp - decode on a state pool against the reference -----===//
//
// Every example and the extra specs: a decode step of 1 and of 8 tokens on
// a pool addressed per sequence (a -1 entry skipped, slots out of order)
// against the fp64 reference, 8 also under gates saturating to decay
// factors of 0, and a prefill followed by decode steps against one prefill
// of all the tokens.
//
//===----------------------------------------------------------------------===//

#include "harness.h"
#include "linac/runtime.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace fs = std::filesystem;
using namespace linac;
using namespace linac::harness;

namespace {

constexpr Dims kDims{16, 16};

fs::path workDir() { return fs::path(testing::TempDir()) / "linac-decode"; }


class Decode : public testing::TestWithParam<fs::path> {
protected:
  std::shared_ptr<Package> package =
      compiled(GetParam(), kDims, workDir(), Passes::ForwardOnly);
  size_t stateSize() const { return size_t(kDims.k) * package->stateColumns(); }
};

TEST_P(Decode, MatchesReferenceOnAPool) {
  for (auto [tokens, gates] : {std::pair{int64_t(1), GateRange::Moderate},
                               {int64_t(8), GateRange::Moderate},
                               {int64_t(8), GateRange::Saturating}}) {
    Case c;
    c.batch = 4;
    c.tokens = tokens;
    c.heads = 2;
    c.keyHeads = 2;
    c.initialState = true;
    c.gates = gates;
    Problem problem = makeProblem(*package, kDims, c);
    // Sequence 1 is skipped; the others sit in slots 2, 0 and 4 of 5.
    std::vector<int64_t> indices{2, -1, 0, 4};
    int64_t slots = 5;
    size_t slotSize = stateSize() * c.heads;
    std::vector<float> pool(slots * slotSize);
    std::mt19937 rng(std::random_device{}());
    std::normal_distribution<float> normal;
    for (float &x : pool)
      x = normal(rng);
    package->statesToPool(problem.initialState.data(), c.heads, indices,
                          pool.data(), slots);
    std::vector<float> before = pool;

    DecodeRequest request;
    for (const auto &[name, argument] : problem.arguments)
      request.tensors[name] = {argument.values.data(), argument.shape};
    request.statePool = pool.data();
    request.poolShape = {slots, c.heads, kDims.k, package->stateColumns()};
    request.stateIndices = indices;
    std::vector<float> output(problem.outputSize, std::nanf(""));
    request.output = output.data();
    package->decode(request);

    reference::Result want = reference::run(problem.reference);
    size_t row = size_t(tokens) * c.heads * kDims.v;
    for (size_t b = 0; b < indices.size(); ++b) {
      SCOPED_TRACE(
          "tokens " + std::to_string(tokens) +
          (gates == GateRange::Saturating ? ", saturating gates" : "") +
          ", sequence " + std::to_string(b));
      if (indices[b] < 0) {
        for (size_t i = b * row; i < (b + 1) * row; ++i)
          ASSERT_TRUE(std::isnan(output[i])) << "a skipped sequence's output";
        continue;
      }
      EXPECT_LE(relativeError(output, want.output, b * row, row), 1e-5);
      std::vector<float> slot(pool.begin() + indices[b] * slotSize,
                              pool.begin() + (indices[b] + 1) * slotSize);
      std::vector<double> wantSlot(want.finalState.begin() + b * slotSize,
                                   want.finalState.begin() + (b + 1) * slotSize);
      EXPECT_LE(relativeError(slot, wantSlot, 0, slotSize), 1e-5);
    }
    for (int64_t unused : {1, 3})
      EXPECT_TRUE(std::equal(pool.begin() + unused * slotSize,
                             pool.begin() + (unused + 1) * slotSize,
                             before.begin() + unused * slotSize))
          << "slot " << unused << " is no sequence's and must not change";
  }
}

TEST_P(Decode, PrefillThenDecodeIsOnePrefill) {
  Case c;
  c.batch = 2;
  c.tokens = 78;
  c.heads = 2;
  c.keyHeads = 2;
  c.initialState = true;
  Problem problem = makeProblem(*package, kDims, c);
  auto forward = [&](int64_t begin, int64_t end, std::vector<float> &output,
                     std::vector<float> &finalState) {
    std::map<std::string, Argument> slices;
    ForwardRequest request;
    for (const auto &[name, argument] : problem.arguments) {
      slices[name] = tokensOf(argument, begin, end);
      request.tensors[name] = {slices[name].values.data(), slices[name].shape};
    }
    output.assign(c.batch * (end - begin) * c.heads * kDims.v, std::nanf(""));
    finalState.assign(problem.stateSize, std::nanf(""));
    request.initialState = problem.initialState.data();
    request.output = output.data();
    request.finalState = finalState.data();
    package->forward(request);
  };
  std::vector<float> allOutput, allState, prefillOutput, prefillState;
  forward(0, 78, allOutput, allState);
  forward(0, 70, prefillOutput, prefillState);

  std::vector<int64_t> indices{1, 0};
  std::vector<float> pool(problem.stateSize);
  package->statesToPool(prefillState.data(), c.heads, indices, pool.data(), 2);
  size_t row = size_t(c.heads) * kDims.v;
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{70, 71}, {71, 78}}) {
    DecodeRequest request;
    std::map<std::string, Argument> slices;
    for (const auto &[name, argument] : problem.arguments) {
      slices[name] = tokensOf(argument, begin, end);
      request.tensors[name] = {slices[name].values.data(), slices[name].shape};
    }
    std::vector<float> output(c.batch * (end - begin) * row, std::nanf(""));
    request.statePool = pool.data();
    request.poolShape = {2, c.heads, kDims.k, package->stateColumns()};
    request.stateIndices = indices;
    request.output = output.data();
    package->decode(request);
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t t = begin; t < end; ++t) {
        const float *got = output.data() + (b * (end - begin) + t - begin) * row;
        const float *want = allOutput.data() + (b * 78 + t) * row;
        std::vector<double> wantRow(want, want + row);
        EXPECT_LE(relativeError(std::vector<float>(got, got + row), wantRow, 0, row),
                  1e-5)
            << "sequence " << b << ", token " << t;
      }
  }
  std::vector<float> states(problem.stateSize);
  package->statesFromPool(pool.data(), 2, c.heads, indices, states.data());
  EXPECT_LE(relativeError(states,
                          std::vector<double>(allState.begin(), allState.end()),
                          0, states.size()),
            1e-5);
}

INSTANTIATE_TEST_SUITE_P(Specs, Decode, testing::ValuesIn(testSpecs()),
                         [](const testing::TestParamInfo<fs::path> &info) {
                           return info.param.stem().string();
                         });

TEST(DecodeErrors, ArgumentsAreChecked) {
  auto package = compiled(fs::path(LINAC_EXAMPLES_DIR) / "gated_deltanet.mlir",
                          kDims, workDir(), Passes::ForwardOnly);
  Case c;
  c.batch = 2;
  c.tokens = 1;
  Problem problem = makeProblem(*package, kDims, c);
  std::vector<float> pool(3 * c.heads * kDims.k * kDims.v);
  std::vector<float> output(problem.outputSize);
  auto request = [&] {
    DecodeRequest r;
    for (const auto &[name, argument] : problem.arguments)
      r.tensors[name] = {argument.values.data(), argument.shape};
    r.statePool = pool.data();
    r.poolShape = {3, c.heads, kDims.k, kDims.v};
    r.stateIndices = {0, 2};
    r.output = output.data();
    return r;
  };
  auto expectError = [&](const DecodeRequest &r, const std::string &message) {
    try {
      package->decode(r);
      ADD_FAILURE() << "no error; expected: " << message;
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  package->decode(request());

  DecodeRequest outside = request();
  outside.stateIndices = {0, 3};
  expectError(outside, "state index 3 of sequence 1 is outside the pool's 3 slots");
  DecodeRequest twice = request();
  twice.stateIndices = {1, 1};
  expectError(twice, "pool slot 1 is given to two sequences");
  DecodeRequest count = request();
  count.stateIndices = {0};
  expectError(count, "state_indices has 1 entries for 2 sequences");
  DecodeRequest shape = request();
  shape.poolShape = {3, c.heads, kDims.k, kDims.v + 1};
  expectError(shape, "state pool has shape [3, 2, 16, 17], expected [P, 2, 16, 16]");
  DecodeRequest threads = request();
  threads.threads = -2;
  expectError(threads, "threads is -2; expected 0 (every core this process "
                       "may use) or 1 to 1024");
  DecodeRequest noPool = request();
  noPool.statePool = nullptr;
  expectError(noPool, "state pool");

  Case long9 = c;
  long9.tokens = 9;
  Problem nine = makeProblem(*package, kDims, long9);
  DecodeRequest tooMany = request();
  for (const auto &[name, argument] : nine.arguments)
    tooMany.tensors[name] = {argument.values.data(), argument.shape};
  expectError(tooMany, "decode takes 1 to 8 new tokens per sequence, got 9");
}

TEST(DecodeErrors, CApi) {
  std::string path =
      compiledPath(fs::path(LINAC_EXAMPLES_DIR) / "gated_deltanet.mlir", kDims,
                   workDir(), Passes::ForwardOnly)
          .string();
  linac_package *handle = nullptr;
  ASSERT_EQ(linac_package_open(path.c_str(), &handle), LINAC_OK);
  EXPECT_EQ(linac_decode_host(handle, nullptr), LINAC_ERROR_INVALID_ARGUMENT);
  float pool[4] = {}, states[4] = {};
  int64_t bad[] = {5};
  EXPECT_EQ(linac_states_from_pool(handle, pool, 1, 1, bad, 1, states),
            LINAC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(linac_last_error()).find("outside the pool"),
            std::string::npos);
  linac_package_close(handle);
}

} // namespace
