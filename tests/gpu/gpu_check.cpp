//===- gpu_check.cpp - CUDA packages against the fp64 reference -----------===//
//
//   linac-gpu-check [--bench | --bench-only] [--reps N] [--rounds N]
//   NAME.linac...
//
// Runs each package on the GPU over the cases below on fresh random inputs,
// outputs poisoned with NaN first, each sequence whole and then cut into
// segments (one chunk each, three chunks across a varlen batch, and the
// runtime's own cut of a long sequence), and compares outputs and final
// states with the fp64 reference: relative error at most 1e-2 for bf16 and fp16
// inputs, 1e-4 for fp32, every element written and finite; gates moderate,
// strong, saturating to decay factors of 0 and zero; one case puts every
// argument and the output one element off alignment, and one makes a
// token's gates NaN, which must leave NaN wherever the reference has NaN. Then
// decode in bf16 and fp32: steps of 1 and 8 tokens for 5 sequences (8 also
// under saturating gates) and of 1 for 300 on a state pool (sequences skipped,
// slots out of order) against the reference, and a prefill followed by a
// decode step against one prefill of all the tokens. Then, unless the package
// was compiled with --no-backward, the backward pass in bf16, fp16 and fp32
// against the reference's gradients (relative error at most 2e-2 in 16-bit
// types, 1e-4 in fp32; backwardCases). With --bench it then times every
// package at B8 T4096 H16 in bf16 (one JSON line each, as `linac bench`
// prints) and prints a table last; --bench-only skips the checks (for
// profilers). --rounds N runs the checks N times, each on fresh
// inputs, and reports each check's largest errors over the rounds. Each
// check's row (errors, verdict, seconds) is printed as the check ends, and
// a table of every check's largest errors after the last round. Exits
// non-zero on any failed check.
//
//===----------------------------------------------------------------------===//

#include "linac/bench.h"
#include "linac/package.h"
#include "problem.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace linac;
using namespace linac::harness;
using linac::bench::bytesOf;
using linac::bench::DeviceBuffer;
using linac::bench::decodeFrom;
using linac::bench::elementSize;
using linac::bench::encodeAs;

namespace {

void check(cudaError_t status, const char *what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(2);
  }
}

float roundBFloat16(float x) { return __bfloat162float(__float2bfloat16(x)); }
float roundHalf(float x) { return __half2float(__float2half(x)); }

std::vector<char> nanBytes(size_t count, DType dtype) {
  return encodeAs(std::vector<float>(count, std::nanf("")), dtype);
}

using RoundFn = float (*)(float);
RoundFn roundingOf(DType dtype) {
  return dtype == DType::BFloat16 ? roundBFloat16
         : dtype == DType::Float16 ? roundHalf
                                   : nullptr;
}

/// `bytes` on the device, one element past the start of their buffer when
/// `misaligned`: aligned to the element only, as the runtime allows, so
/// that kernels take their element-at-a-time paths.
struct ShiftedBuffer {
  std::unique_ptr<DeviceBuffer> buffer;
  void *data;

  ShiftedBuffer(std::vector<char> bytes, size_t elementBytes, bool misaligned) {
    if (misaligned)
      bytes.insert(bytes.begin(), elementBytes, 0);
    buffer = std::make_unique<DeviceBuffer>(bytes);
    data = static_cast<char *>(buffer->data()) + (misaligned ? elementBytes : 0);
  }
};

/// A problem's arguments in device memory: activations in `dtype`,
/// parameters in float32.
struct DeviceArguments {
  std::vector<ShiftedBuffer> buffers;
  std::map<std::string, DeviceTensor> tensors;

  DeviceArguments(const std::map<std::string, Argument> &arguments, DType dtype,
                  bool misaligned = false) {
    for (const auto &[name, argument] : arguments) {
      DType type = argument.param ? DType::Float32 : dtype;
      buffers.emplace_back(encodeAs(argument.values, type), elementSize(type),
                           misaligned);
      tensors[name] = {buffers.back().data, argument.shape};
    }
  }
};

/// A forward pass on the device from `initialState` (or zeros), its
/// sequences cut as `segmentTokens` says (DeviceForwardRequest); returns the
/// outputs and final states as floats.
std::pair<std::vector<float>, std::vector<float>>
forwardOnDevice(const Package &package,
                const std::map<std::string, Argument> &arguments,
                const std::vector<int64_t> &cuSeqlens,
                const std::vector<float> &initialState, size_t outputSize,
                size_t stateSize, DType dtype, bool misaligned = false,
                int64_t segmentTokens = 0) {
  DeviceArguments device(arguments, dtype, misaligned);
  DeviceForwardRequest request;
  request.dtype = dtype;
  request.segmentTokens = segmentTokens;
  request.cuSeqlens = cuSeqlens;
  request.tensors = device.tensors;
  std::unique_ptr<DeviceBuffer> initial;
  if (!initialState.empty()) {
    initial = std::make_unique<DeviceBuffer>(encodeAs(initialState, DType::Float32));
    request.initialState = static_cast<const float *>(initial->data());
  }
  ShiftedBuffer output(nanBytes(outputSize, dtype), elementSize(dtype),
                       misaligned);
  DeviceBuffer finalState(nanBytes(stateSize, DType::Float32));
  request.output = output.data;
  request.finalState = static_cast<float *>(finalState.data());
  package.forwardDevice(request);
  check(cudaDeviceSynchronize(), "the forward pass");
  std::vector<float> outputs = decodeFrom(output.buffer->download(), dtype);
  outputs.erase(outputs.begin(), outputs.begin() + (misaligned ? 1 : 0));
  return {outputs, decodeFrom(finalState.download(), DType::Float32)};
}

/// A decode step on the device; `pool` is updated in place and the outputs
/// (NaN where a sequence is skipped) are returned.
std::vector<float> decodeOnDevice(const Package &package,
                                  const std::map<std::string, Argument> &arguments,
                                  std::vector<float> &pool,
                                  const std::vector<int64_t> &poolShape,
                                  const std::vector<int64_t> &indices,
                                  size_t outputSize, DType dtype) {
  DeviceArguments device(arguments, dtype);
  DeviceBuffer devicePool(encodeAs(pool, DType::Float32));
  DeviceBuffer output(nanBytes(outputSize, dtype));
  DeviceDecodeRequest request;
  request.dtype = dtype;
  request.tensors = device.tensors;
  request.statePool = static_cast<float *>(devicePool.data());
  request.poolShape = poolShape;
  DeviceBuffer deviceIndices(bytesOf(indices));
  request.stateIndices = static_cast<const int64_t *>(deviceIndices.data());
  request.numStateIndices = indices.size();
  request.output = output.data();
  package.decodeDevice(request);
  check(cudaDeviceSynchronize(), "the decode step");
  pool = decodeFrom(devicePool.download(), DType::Float32);
  return decodeFrom(output.download(), dtype);
}

/// Runs `c` on the device in `dtype` and compares with the reference:
/// each sequence whole, then cut into segments of `segmentTokens` (0: as
/// the runtime chooses), the worse of the two outcomes.
Outcome runCase(const Package &package, const Case &c, DType dtype,
                bool misaligned, int64_t segmentTokens) {
  Dims dims{int(package.keyDim()), int(package.valueDim())};
  Problem problem = makeProblem(package, dims, c, roundingOf(dtype));
  Outcome worst;
  for (int64_t tokens : {int64_t(-1), segmentTokens}) {
    auto [output, finalState] =
        forwardOnDevice(package, problem.arguments, c.cuSeqlens,
                        problem.initialState, problem.outputSize,
                        problem.stateSize, dtype, misaligned, tokens);
    Outcome outcome = compare(problem, output, finalState);
    worst.outputError = std::max(worst.outputError, outcome.outputError);
    worst.stateError = std::max(worst.stateError, outcome.stateError);
    worst.finite = worst.finite && outcome.finite;
    worst.nansKept = worst.nansKept && outcome.nansKept;
    worst.referenceNans = outcome.referenceNans;
  }
  return worst;
}

/// A decode step of `tokens` for `batch` sequences on a pool of `batch`
/// slots, gates drawn from `gates`, in reverse order: every fifth sequence from
/// the second skipped (slot -1), and the last too (a slot past the pool).
/// Errors are the worst over the decoded sequences and their slots; `finite`
/// also requires the skipped sequences' outputs and the unused slots to be left
/// alone.
Outcome runDecodeCase(const Package &package, int64_t batch, int64_t tokens,
                      DType dtype, GateRange gates = GateRange::Moderate) {
  Dims dims{int(package.keyDim()), int(package.valueDim())};
  Case c;
  c.batch = batch;
  c.tokens = tokens;
  c.heads = 4;
  c.keyHeads = 4;
  c.initialState = true;
  c.gates = gates;
  Problem problem = makeProblem(package, dims, c, roundingOf(dtype));
  int64_t slots = batch;
  std::vector<int64_t> indices(batch);
  for (int64_t b = 0; b < batch; ++b)
    indices[b] = b % 5 == 1 ? -1 : b == batch - 1 ? slots : batch - 1 - b;
  auto skipped = [&](size_t b) { return indices[b] < 0 || indices[b] >= slots; };
  std::vector<int64_t> poolIndices = indices;
  poolIndices.back() = -1;
  size_t slotSize = size_t(package.keyDim()) * package.stateColumns() * c.heads;
  std::vector<float> pool(slots * slotSize, 0.5f);
  package.statesToPool(problem.initialState.data(), c.heads, poolIndices,
                       pool.data(), slots);
  std::vector<float> before = pool;
  std::vector<float> output = decodeOnDevice(
      package, problem.arguments, pool,
      {slots, c.heads, package.keyDim(), package.stateColumns()}, indices,
      problem.outputSize, dtype);

  reference::Result want = reference::run(problem.reference);
  Outcome outcome;
  std::vector<bool> used(slots, false);
  size_t row = size_t(tokens) * c.heads * package.valueDim();
  for (size_t b = 0; b < indices.size(); ++b) {
    if (skipped(b)) {
      for (size_t i = b * row; i < (b + 1) * row; ++i)
        outcome.finite &= std::isnan(output[i]);
      continue;
    }
    used[indices[b]] = true;
    for (size_t i = b * row; i < (b + 1) * row; ++i)
      outcome.finite &= std::isfinite(output[i]);
    std::vector<float> slot(pool.begin() + indices[b] * slotSize,
                            pool.begin() + (indices[b] + 1) * slotSize);
    outcome.outputError = std::max(
        outcome.outputError, relativeError(output, want.output, b * row, row));
    outcome.stateError = std::max(
        outcome.stateError,
        relativeError(slot,
                      std::vector<double>(want.finalState.begin() + b * slotSize,
                                          want.finalState.begin() +
                                              (b + 1) * slotSize),
                      0, slotSize));
  }
  for (int64_t unused = 0; unused < slots; ++unused)
    if (!used[unused])
      outcome.finite &= std::equal(pool.begin() + unused * slotSize,
                                   pool.begin() + (unused + 1) * slotSize,
                                   before.begin() + unused * slotSize);
  return outcome;
}

/// A prefill of 70 tokens, its states put in a pool, then a decode step of
/// 8: compared with one prefill of all 78 tokens on the device.
Outcome runPrefillThenDecode(const Package &package, DType dtype) {
  Dims dims{int(package.keyDim()), int(package.valueDim())};
  Case c;
  c.batch = 2;
  c.tokens = 78;
  c.heads = 4;
  c.keyHeads = 4;
  c.initialState = true;
  Problem problem = makeProblem(package, dims, c, roundingOf(dtype));
  auto slices = [&](int64_t begin, int64_t end) {
    std::map<std::string, Argument> part;
    for (const auto &[name, argument] : problem.arguments)
      part[name] = tokensOf(argument, begin, end);
    return part;
  };
  size_t row = size_t(c.heads) * package.valueDim();
  auto [allOutput, allState] =
      forwardOnDevice(package, problem.arguments, {}, problem.initialState,
                      problem.outputSize, problem.stateSize, dtype);
  auto [prefillOutput, prefillState] =
      forwardOnDevice(package, slices(0, 70), {}, problem.initialState,
                      c.batch * 70 * row, problem.stateSize, dtype);
  std::vector<int64_t> indices{1, 0};
  std::vector<float> pool(problem.stateSize);
  package.statesToPool(prefillState.data(), c.heads, indices, pool.data(), 2);
  std::vector<float> output = decodeOnDevice(
      package, slices(70, 78), pool,
      {2, c.heads, package.keyDim(), package.stateColumns()}, indices,
      c.batch * 8 * row, dtype);
  std::vector<float> states(problem.stateSize);
  package.statesFromPool(pool.data(), 2, c.heads, indices, states.data());

  Outcome outcome;
  for (float x : output)
    outcome.finite &= std::isfinite(x);
  for (int64_t b = 0; b < c.batch; ++b) {
    std::vector<double> want(allOutput.begin() + (b * 78 + 70) * row,
                             allOutput.begin() + (b * 78 + 78) * row);
    std::vector<float> got(output.begin() + b * 8 * row,
                           output.begin() + (b + 1) * 8 * row);
    outcome.outputError =
        std::max(outcome.outputError, relativeError(got, want, 0, want.size()));
  }
  outcome.stateError = relativeError(
      states, std::vector<double>(allState.begin(), allState.end()), 0,
      states.size());
  return outcome;
}

/// The backward pass on the device, gradients poisoned with NaN first,
/// against the reference's gradients of L = <dO, output> + <dS, final
/// state> on standard normal dO (rounded to `dtype`) and dS: the worst
/// relative error over the inputs' and parameters' gradients as the
/// outcome's output error, the initial state's as its state error.
Outcome runBackwardCase(const Package &package, const Case &c, DType dtype) {
  Dims dims{int(package.keyDim()), int(package.valueDim())};
  Problem problem = makeProblem(package, dims, c, roundingOf(dtype));
  std::mt19937 rng(std::random_device{}());
  Seeds seeds = normalSeeds(reference::run(problem.reference), rng);
  std::vector<float> dOutput(seeds.output.begin(), seeds.output.end());
  if (RoundFn round = roundingOf(dtype))
    for (size_t i = 0; i < dOutput.size(); ++i)
      seeds.output[i] = dOutput[i] = round(dOutput[i]);
  const reference::Gradients want =
      reference::gradients(problem.reference, seeds.output, seeds.finalState);

  DeviceArguments device(problem.arguments, dtype);
  DeviceBackwardRequest request;
  request.forward.dtype = dtype;
  request.forward.cuSeqlens = c.cuSeqlens;
  request.forward.tensors = device.tensors;
  std::unique_ptr<DeviceBuffer> initial;
  if (!problem.initialState.empty()) {
    initial = std::make_unique<DeviceBuffer>(
        encodeAs(problem.initialState, DType::Float32));
    request.forward.initialState = static_cast<const float *>(initial->data());
  }
  DeviceBuffer deviceDOutput(encodeAs(dOutput, dtype));
  DeviceBuffer dFinal(encodeAs(
      std::vector<float>(seeds.finalState.begin(), seeds.finalState.end()),
      DType::Float32));
  request.dOutput = deviceDOutput.data();
  request.dFinalState = static_cast<const float *>(dFinal.data());
  std::map<std::string, std::unique_ptr<DeviceBuffer>> gradients;
  for (const auto &[name, argument] : problem.arguments) {
    auto &buffer = gradients[name] = std::make_unique<DeviceBuffer>(
        nanBytes(argument.values.size(), DType::Float32));
    request.gradients[name] = static_cast<float *>(buffer->data());
  }
  DeviceBuffer dInitial(nanBytes(problem.stateSize, DType::Float32));
  request.dInitialState = static_cast<float *>(dInitial.data());
  package.backwardDevice(request);
  check(cudaDeviceSynchronize(), "the backward pass");

  Outcome outcome;
  auto compareGradient = [&](const std::vector<float> &got,
                             const std::vector<double> &expected) {
    for (float x : got)
      outcome.finite &= std::isfinite(x);
    return relativeError(got, expected, 0, expected.size());
  };
  const nlohmann::json &step = problem.reference.step;
  for (const char *role : {"inputs", "params"}) {
    const auto &expected =
        std::string(role) == "inputs" ? want.inputs : want.params;
    for (size_t i = 0; i < expected.size(); ++i) {
      const std::string name = step[role][i]["name"];
      outcome.outputError =
          std::max(outcome.outputError,
                   compareGradient(decodeFrom(gradients.at(name)->download(),
                                              DType::Float32),
                                   expected[i]));
    }
  }
  outcome.stateError = compareGradient(
      decodeFrom(dInitial.download(), DType::Float32), want.initialState);
  return outcome;
}

struct NamedCase {
  const char *name;
  Case c;
  DType dtype;
  bool misaligned = false;
  /// The segments of the second run (runCase): one chunk each unless set.
  int64_t segmentTokens = 1;
  /// Only for packages whose forward pass in `dtype` is chunkwise: the
  /// recurrent scan takes no segments, and its layers' reference is slow.
  bool chunkwiseOnly = false;
};

std::vector<NamedCase> cases() {
  std::vector<NamedCase> all;
  auto add = [&](const char *name, DType dtype, auto edit) {
    Case c;
    c.batch = 2;
    c.tokens = 300;
    c.heads = 4;
    c.keyHeads = 4;
    c.initialState = true;
    edit(c);
    all.push_back({name, c, dtype});
  };
  add("T300+init", DType::BFloat16, [](Case &) {});
  add("varlen", DType::BFloat16,
      [](Case &c) { c.batch = 1, c.cuSeqlens = {0, 1, 1, 66, 130, 330}; });
  add("grouped", DType::BFloat16, [](Case &c) { c.keyHeads = 2; });
  add("gates-20", DType::BFloat16,
      [](Case &c) { c.gates = GateRange::Strong; });
  // Decay factors of exactly 0 where the gate math saturates in fp32: on
  // the chunkwise kernel in bf16, on the scan in fp32.
  add("saturating", DType::BFloat16,
      [](Case &c) { c.gates = GateRange::Saturating; });
  add("satur-fp32", DType::Float32, [](Case &c) {
    c.tokens = 130;
    c.gates = GateRange::Saturating;
  });
  // A NaN gate is no reset: NaN wherever the reference has NaN.
  add("nan-gates", DType::BFloat16, [](Case &c) { c.nanGateToken = 150; });
  add("T1", DType::BFloat16, [](Case &c) { c.batch = 3, c.tokens = 1; });
  add("zero-gates", DType::BFloat16, [](Case &c) {
    c.tokens = 100;
    c.gates = GateRange::Zero;
  });
  add("fp16", DType::Float16, [](Case &c) { c.tokens = 130; });
  add("misaligned", DType::BFloat16, [](Case &c) { c.tokens = 130; });
  all.back().misaligned = true;
  add("fp32", DType::Float32, [](Case &c) { c.tokens = 130; });
  // Segments of three chunks across a varlen batch, and the runtime's own
  // cut of a long sequence that leaves the GPU idle.
  add("varlen-seg3", DType::BFloat16, [](Case &c) {
    c.batch = 1, c.cuSeqlens = {0, 200, 201, 393, 394, 1000};
  });
  all.back().segmentTokens = 192;
  add("T4096-auto", DType::BFloat16, [](Case &c) {
    c.batch = 1, c.tokens = 4096, c.heads = 2, c.keyHeads = 1;
  });
  all.back().segmentTokens = 0;
  all.back().chunkwiseOnly = true;
  // The longest sequence the forward issue names, one head, on the
  // runtime's cut; and 1024 (sequence, head) pairs, each a chunk and a part.
  add("T65536-auto", DType::BFloat16, [](Case &c) {
    c.batch = 1, c.tokens = 65536, c.heads = 1, c.keyHeads = 1;
  });
  all.back().segmentTokens = 0;
  all.back().chunkwiseOnly = true;
  add("BH1024", DType::BFloat16, [](Case &c) {
    c.batch = 64, c.tokens = 70, c.heads = 16, c.keyHeads = 16;
  });
  return all;
}

/// The backward pass's cases: varlen batches with empty and one-token
/// sequences, grouped heads and an initial state, strong gates, each
/// dtype, long sequences.
std::vector<NamedCase> backwardCases() {
  std::vector<NamedCase> all;
  auto add = [&](const char *name, DType dtype, auto edit) {
    Case c;
    c.batch = 1;
    c.cuSeqlens = {0, 1, 1, 66, 200};
    c.heads = 4;
    c.keyHeads = 2;
    c.initialState = true;
    edit(c);
    all.push_back({name, c, dtype});
  };
  add("bwd-varlen", DType::BFloat16, [](Case &) {});
  add("bwd-gates-20", DType::BFloat16, [](Case &c) {
    c.gates = GateRange::Strong;
    c.keyHeads = 4;
  });
  add("bwd-fp16", DType::Float16, [](Case &c) { c.cuSeqlens = {0, 130}; });
  add("bwd-fp32", DType::Float32,
      [](Case &c) { c.batch = 2, c.tokens = 70, c.cuSeqlens.clear(); });
  // Sequences of many chunks, which the chunkwise backward walks.
  add("bwd-long", DType::BFloat16, [](Case &c) {
    c.batch = 2, c.tokens = 1000, c.cuSeqlens.clear();
    c.heads = 2, c.keyHeads = 1;
  });
  return all;
}

} // namespace

int main(int argc, char **argv) {
  bool bench = false, runChecks = true;
  int reps = 50, rounds = 1;
  std::vector<std::string> packages;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--bench"))
      bench = true;
    else if (!std::strcmp(argv[i], "--bench-only"))
      bench = true, runChecks = false;
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = std::atoi(argv[++i]);
    else
      packages.push_back(argv[i]);
  }
  if (packages.empty() || rounds < 1) {
    std::fprintf(stderr,
                 "usage: %s [--bench | --bench-only] [--reps N] [--rounds N] "
                 "NAME.linac...\n",
                 argv[0]);
    return 2;
  }
  check(cudaFree(nullptr), "CUDA initialisation");

  bool ok = true;
  std::vector<std::string> failures; ///< repeated last, after the benchmarks
  std::vector<std::unique_ptr<Package>> opened;
  std::vector<std::string> names; ///< package directories' stems

  struct Check {
    const Package *package;
    std::string name;
    DType dtype;
    std::function<Outcome()> run;
    bool nanGates = false; ///< judged by nansKept alone
    /// 16-bit activations' tolerance (fp32's is 1e-4): gradients take
    /// twice the forward's.
    double tolerance16 = 1e-2;
    /// The largest errors over the rounds, and the rounds it failed.
    double outputError = 0, stateError = 0;
    std::string verdict = "ok";
  };
  std::vector<Check> checks;
  for (const std::string &path : packages) {
    try {
      opened.push_back(Package::open(path));
      std::string stem = path.substr(path.find_last_of('/') + 1);
      names.push_back(stem.substr(0, stem.find(".linac")));
    } catch (const Error &e) {
      failures.push_back(path + ": " + e.what());
      std::printf("%s\n", failures.back().c_str());
      ok = false;
      continue;
    }
    const Package &package = *opened.back();
    for (const NamedCase &named : cases())
      if (!named.chunkwiseOnly ||
          manifest::chunkwiseFor(package.info().plan, named.dtype))
        checks.push_back({&package, named.name, named.dtype,
                          [&package, named] {
                            return runCase(package, named.c, named.dtype,
                                           named.misaligned,
                                           named.segmentTokens);
                          },
                          named.c.nanGateToken >= 0});
    // A package compiled with --no-backward refuses gradients (the CUDA
    // package tests check that).
    if (package.hasBackward())
      for (const NamedCase &named : backwardCases())
        checks.push_back({&package, named.name, named.dtype,
                          [&package, named] {
                            return runBackwardCase(package, named.c,
                                                   named.dtype);
                          },
                          false, 2e-2});
    for (DType dtype : {DType::BFloat16, DType::Float32}) {
      for (int64_t tokens : {1, 8})
        checks.push_back({&package, "decode-" + std::to_string(tokens), dtype,
                          [&package, tokens, dtype] {
                            return runDecodeCase(package, 5, tokens, dtype);
                          }});
      // More items than the grid's leaders are dealt, so most come from the
      // counter's tickets, which carry on from the launches before.
      checks.push_back({&package, "decode-B300", dtype, [&package, dtype] {
                          return runDecodeCase(package, 300, 1, dtype);
                        }});
      checks.push_back({&package, "decode-sat", dtype, [&package, dtype] {
                          return runDecodeCase(package, 5, 8, dtype,
                                               GateRange::Saturating);
                        }});
      checks.push_back({&package, "prefill+dec", dtype, [&package, dtype] {
                          return runPrefillThenDecode(package, dtype);
                        }});
    }
  }

  // Every round draws fresh inputs; a check's row shows its largest errors
  // over the rounds.
  for (int round = 1; runChecks && round <= rounds; ++round) {
    int failed = 0;
    for (Check &check : checks) {
      double tolerance =
          check.dtype == DType::Float32 ? 1e-4 : check.tolerance16;
      std::string verdict;
      Outcome outcome;
      const auto started = std::chrono::steady_clock::now();
      try {
        outcome = check.run();
        bool good = check.nanGates
                        ? outcome.nansKept
                        : outcome.finite && outcome.outputError <= tolerance &&
                              outcome.stateError <= tolerance;
        verdict = good             ? "ok"
                  : check.nanGates ? "FAIL (a NaN gate became a number)"
                  : outcome.finite ? "FAIL"
                                   : "FAIL (NaN or unwritten)";
      } catch (const Error &e) {
        verdict = std::string("FAIL: ") + e.what();
      }
      const double seconds = std::chrono::duration<double>(
                                 std::chrono::steady_clock::now() - started)
                                 .count();
      check.outputError = std::max(check.outputError, outcome.outputError);
      check.stateError = std::max(check.stateError, outcome.stateError);
      // Each check's row as it ends, so that a run cut short (a timeout)
      // still says what passed and which check it was in.
      char row[200];
      std::snprintf(row, sizeof row, "round %d: %-22s %-11s %-9s %10.2e %10.2e ",
                    round, check.package->layer().c_str(), check.name.c_str(),
                    dtypeName(check.dtype), outcome.outputError,
                    outcome.stateError);
      std::printf("%s%s (%.2f s)\n", row, verdict.c_str(), seconds);
      std::fflush(stdout);
      if (verdict == "ok")
        continue;
      ++failed;
      ok = false;
      failures.push_back(row + verdict);
      check.verdict = "FAIL";
    }
    std::printf("round %d of %d: %zu checks, %d failed\n", round, rounds,
                checks.size(), failed);
    std::fflush(stdout);
  }
  if (runChecks) {
    std::printf("%-22s %-11s %-9s %10s %10s %s\n", "layer", "case", "dtype",
                "out err", "state err", "result");
    for (const Check &check : checks)
      std::printf("%-22s %-11s %-9s %10.2e %10.2e %s\n",
                  check.package->layer().c_str(), check.name.c_str(),
                  dtypeName(check.dtype), check.outputError, check.stateError,
                  check.verdict.c_str());
  }

  if (bench) {
    bench::Ceilings ceilings = bench::measureCeilings();
    bench::Shape shape;
    std::vector<std::string> table;
    for (size_t p = 0; p < opened.size(); ++p) {
      const auto &package = opened[p];
      bench::Result result = bench::forward(*package, shape, DType::BFloat16, reps);
      std::printf("%s\n", bench::jsonLine(*package, "forward", shape,
                                          DType::BFloat16, result, ceilings)
                             .c_str());
      char row[160];
      double floorMs = bench::floorMilliseconds(result, ceilings);
      std::snprintf(row, sizeof row, "%-22s %-22s %9.3f %9.3f %7.1f%%",
                    names[p].c_str(), result.kernel.c_str(),
                    result.milliseconds, floorMs, 100.0 * floorMs / result.milliseconds);
      table.push_back(row);
    }
    std::printf("\ncopy %.2f TB/s, bf16 GEMM %.0f TFLOP/s; B%lld T%lld H%lld bf16\n",
                ceilings.copyBytesPerSecond * 1e-12, ceilings.gemmFlopsPerSecond * 1e-12,
                (long long)shape.batch, (long long)shape.tokens, (long long)shape.heads);
    std::printf("%-22s %-22s %9s %9s %8s\n", "package", "kernel", "ms", "floor ms",
                "of floor");
    for (const std::string &row : table)
      std::printf("%s\n", row.c_str());

    // Decode: one token, H16, fp32 state, bf16 activations; the floor is
    // the copy ceiling's time for the state read and written once.
    std::vector<std::string> decodeTable;
    for (size_t p = 0; p < opened.size(); ++p)
      for (int64_t batch : {64, 256}) {
        bench::Shape decodeShape{batch, 1, 16};
        bench::Result result = bench::decode(*opened[p], decodeShape,
                                             DType::BFloat16, reps);
        std::printf("%s\n", bench::jsonLine(*opened[p], "decode", decodeShape,
                                            DType::BFloat16, result, ceilings)
                               .c_str());
        char row[160];
        double floorMs = bench::floorMilliseconds(result, ceilings);
        std::snprintf(
            row, sizeof row, "%-22s B%-4lld %9.4f %9.4f %7.1f%% %8.1f",
            names[p].c_str(), (long long)batch, result.milliseconds, floorMs,
            100.0 * floorMs / result.milliseconds, result.hostMicroseconds);
        decodeTable.push_back(row);
      }
    std::printf("\ndecode, one token, H16 K=V=128, fp32 state\n");
    std::printf("%-22s %-5s %9s %9s %8s %8s\n", "package", "batch", "ms",
                "floor ms", "of copy", "host us");
    for (const std::string &row : decodeTable)
      std::printf("%s\n", row.c_str());
  }
  for (const std::string &failure : failures)
    std::printf("%s\n", failure.c_str());
  std::printf("%s\n", ok ? "all checks passed" : "some checks FAILED");
  return ok ? 0 : 1;
}
