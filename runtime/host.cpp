//===- host.cpp - running cpu packages ------------------------------------===//
//
// The forward pass and decode steps of a cpu package, through the entry
// points of its layer.so (templates/linac/cpu/abi.h), and the copies between
// a state pool and the forward pass's states.
//
//===----------------------------------------------------------------------===//

#include "linac/package.h"

#include "checks.h"
#include "linac/cpu/abi.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#if defined(__linux__)
#include <sched.h>
#endif

namespace linac {

using namespace detail;

/// A validated request's host tensors in manifest order, as the CPU ABI
/// takes them.
struct HostArguments {
  std::vector<const float *> inputs, params;
  std::vector<int64_t> inputHeads, paramHeads;

  HostArguments(const std::map<std::string, HostTensor> &tensors,
                const std::vector<manifest::Argument> &inputInfos,
                const std::vector<manifest::Argument> &paramInfos) {
    for (const manifest::Argument &arg : inputInfos) {
      const HostTensor &t = tensors.at(arg.name);
      inputs.push_back(t.data);
      inputHeads.push_back(t.shape[2]);
    }
    for (const manifest::Argument &arg : paramInfos) {
      const HostTensor &t = tensors.at(arg.name);
      params.push_back(t.data);
      paramHeads.push_back(t.shape[0]);
    }
  }

  /// Fills the pointer and head fields the forward and decode ABIs share.
  template <typename Args> void into(Args &args) const {
    args.inputs = inputs.data();
    args.input_heads = inputHeads.data();
    args.params = params.data();
    args.param_heads = paramHeads.data();
  }
};

int hostThreads(int threads) {
  if (threads < 0 || threads > kMaxHostThreads)
    throw argumentError("threads is " + std::to_string(threads) +
                        "; expected 0 (every core this process may use) or "
                        "1 to " +
                        std::to_string(kMaxHostThreads));
  if (threads > 0)
    return threads;
#if defined(__linux__)
  cpu_set_t cores;
  if (sched_getaffinity(0, sizeof cores, &cores) == 0 && CPU_COUNT(&cores) > 0)
    return CPU_COUNT(&cores);
#endif
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

/// A validated request's forward pass as the CPU ABI takes it; the
/// offsets and pointer arrays `args` points into live here.
struct HostForward {
  std::vector<int64_t> cu;
  HostArguments host;
  linac_cpu_forward_args args{};

  HostForward(const ForwardRequest &request, const ForwardShape &shape,
              const std::vector<manifest::Argument> &inputs,
              const std::vector<manifest::Argument> &params, int64_t keyDim)
      : cu(request.cuSeqlens), host(request.tensors, inputs, params) {
    if (cu.empty())
      for (int64_t b = 0; b <= shape.batch; ++b)
        cu.push_back(b * shape.tokens);
    args.num_seqs = shape.sequences;
    args.cu_seqlens = cu.data();
    args.num_heads = shape.heads;
    host.into(args);
    args.initial_state = request.initialState;
    args.scale = scaleOrDefault(request.scale, keyDim);
    args.threads = hostThreads(request.threads);
    args.segment_tokens = request.segmentTokens;
  }
  HostForward(const HostForward &) = delete;
  HostForward &operator=(const HostForward &) = delete;
};

/// Throws for a kernel's nonzero status.
static void checkStatus(int status) {
  if (status != 0)
    throw Error(Error::Kind::Kernel,
                "kernel failed with status " + std::to_string(status));
}

void Package::forward(const ForwardRequest &request) const {
  requireTarget(/*device=*/false);
  ForwardShape shape = check(request);
  if (!request.output)
    throw argumentError("no output buffer");
  HostForward call(request, shape, inputs_, params_, keyDim_);
  call.args.final_state = request.finalState;
  call.args.output = request.output;
  checkStatus(reinterpret_cast<linac_cpu_forward_fn>(forward_)(&call.args));
}

void Package::states(const ForwardRequest &request, float *transitions) const {
  requireTarget(/*device=*/false);
  ForwardShape shape = check(request);
  if (!request.finalState)
    throw argumentError("a states call needs a final_state buffer");
  const manifest::NormalForm &form = info_.normalForm;
  if (info_.plan.family == manifest::Family::Recurrent)
    throw argumentError("@" + layer_ +
                        " runs as a recurrent scan, whose transition over a "
                        "sequence is not known to be a scaling or a K x K "
                        "product");
  if (form.valueDecay && form.erase != manifest::Strength::None)
    throw argumentError("@" + layer_ +
                        " erases under a value-side decay: its transition "
                        "over a sequence is neither a scaling nor a K x K "
                        "product");
  HostForward call(request, shape, inputs_, params_, keyDim_);
  call.args.final_state = request.finalState;
  call.args.transitions = transitions;
  checkStatus(reinterpret_cast<linac_cpu_forward_fn>(forward_)(&call.args));
}

void Package::backward(const BackwardRequest &request) const {
  requireTarget(/*device=*/false);
  requireBackward();
  const ForwardRequest &forward = request.forward;
  ForwardShape shape = check(forward);
  checkBackward(request, forward.tensors, sizeof(float), layer_);
  // Every argument's gradient, zeroed: the caller's buffer or, for one it
  // left out, one of ours.
  std::vector<std::vector<float>> discarded;
  auto gradientsOf = [&](const std::vector<manifest::Argument> &infos) {
    std::vector<float *> out;
    for (const manifest::Argument &arg : infos) {
      const HostTensor &tensor = forward.tensors.at(arg.name);
      size_t size = 1;
      for (int64_t extent : tensor.shape)
        size *= size_t(extent);
      auto given = request.gradients.find(arg.name);
      float *gradient = given != request.gradients.end()
                            ? given->second
                            : discarded.emplace_back(size).data();
      std::fill_n(gradient, size, 0.0f);
      out.push_back(gradient);
    }
    return out;
  };
  std::vector<float *> inputGradients = gradientsOf(inputs_),
                       paramGradients = gradientsOf(params_);

  HostForward call(forward, shape, inputs_, params_, keyDim_);
  linac_cpu_backward_args args{};
  args.forward = call.args;
  args.d_output = request.dOutput;
  args.d_final_state = request.dFinalState;
  args.input_grads = inputGradients.data();
  args.param_grads = paramGradients.data();
  args.d_initial_state = request.dInitialState;
  checkStatus(reinterpret_cast<linac_cpu_backward_fn>(backward_)(&args));
}

void Package::decode(const DecodeRequest &request) const {
  requireTarget(/*device=*/false);
  ForwardShape shape = checkDecode(shapesOf(request.tensors), request.poolShape,
                                   request.stateIndices.size(), request.scale);
  checkPool(request.poolShape[0], request.stateIndices);
  for (const std::vector<manifest::Argument> *args : {&inputs_, &params_})
    for (const manifest::Argument &arg : *args)
      checkPointer(request.tensors.at(arg.name).data, sizeof(float),
                   describe(arg));
  checkPointer(request.statePool, sizeof(float), "state pool");
  if (!request.output)
    throw argumentError("no output buffer");

  HostArguments host(request.tensors, inputs_, params_);
  linac_cpu_decode_args args{};
  args.num_seqs = shape.batch;
  args.tokens = shape.tokens;
  args.num_heads = shape.heads;
  host.into(args);
  args.state_pool = request.statePool;
  args.state_indices = request.stateIndices.data();
  args.output = request.output;
  args.scale = scaleOrDefault(request.scale, keyDim_);
  args.threads = hostThreads(request.threads);
  checkStatus(reinterpret_cast<linac_cpu_decode_fn>(decode_)(&args));
}

void Package::statesFromPool(const float *pool, int64_t poolSlots,
                             int64_t heads, const std::vector<int64_t> &indices,
                             float *states) const {
  size_t size = checkPoolCopy(poolSlots, heads, indices);
  for (size_t n = 0; n < indices.size(); ++n)
    if (indices[n] >= 0)
      std::copy_n(pool + indices[n] * size, size, states + n * size);
}

void Package::statesToPool(const float *states, int64_t heads,
                           const std::vector<int64_t> &indices, float *pool,
                           int64_t poolSlots) const {
  size_t size = checkPoolCopy(poolSlots, heads, indices);
  for (size_t n = 0; n < indices.size(); ++n)
    if (indices[n] >= 0)
      std::copy_n(states + n * size, size, pool + indices[n] * size);
}

} // namespace linac
