//===- torch_ops.cpp - linac's forward call on torch tensors, in C++ -------===//
//
// The per-call work of linac.torch's forward pass (argument checks and
// conversions, the output's and final state's allocations, the C API call)
// without Python in between: from Python each tensor costs about a
// microsecond of attribute reads, here a few nanoseconds. The module takes
// the C API's entry points as addresses from the ctypes binding, so it
// runs whichever liblinac.so that binding loaded and never links it.
//
//===----------------------------------------------------------------------===//

#include "linac/runtime.h"

#include <torch/extension.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace py = pybind11;

namespace {

using ForwardHost = linac_status (*)(linac_package *,
                                     const linac_forward_args *);
using ForwardDevice = linac_status (*)(linac_package *,
                                       const linac_device_forward_args *);

/// An activation dtype as the C API names it.
linac_dtype dtypeOf(at::ScalarType type) {
  switch (type) {
  case at::kFloat:
    return LINAC_FLOAT32;
  case at::kBFloat16:
    return LINAC_BFLOAT16;
  case at::kHalf:
    return LINAC_FLOAT16;
  default:
    throw std::invalid_argument(
        std::string("linac runs float32, bfloat16 and float16 activations, "
                    "not ") +
        c10::toString(type));
  }
}

at::Tensor contiguousAs(const at::Tensor &t, at::ScalarType type) {
  if (t.scalar_type() == type && t.is_contiguous())
    return t;
  return t.to(type).contiguous();
}

/// One opened package's forward pass, its argument names fixed once.
class Forward {
public:
  Forward(uintptr_t package, uintptr_t forwardHost, uintptr_t forwardDevice,
          std::vector<std::string> names, int64_t inputs, int64_t keyDim,
          int64_t valueDim, int64_t stateColumns)
      : package_(reinterpret_cast<linac_package *>(package)),
        forwardHost_(reinterpret_cast<ForwardHost>(forwardHost)),
        forwardDevice_(reinterpret_cast<ForwardDevice>(forwardDevice)),
        names_(std::move(names)), inputs_(inputs), keyDim_(keyDim),
        valueDim_(valueDim), stateColumns_(stateColumns) {}

  /// (status, output, final state or None); a nonzero status leaves the
  /// message in linac_last_error(). The tensors come in the package's
  /// argument order, inputs then parameters.
  std::tuple<int, at::Tensor, std::optional<at::Tensor>>
  operator()(const std::vector<at::Tensor> &given,
             const std::optional<at::Tensor> &initialState,
             const std::optional<at::Tensor> &cuSeqlens, double scale,
             bool finalState, uintptr_t stream) const {
    if (given.size() != names_.size())
      throw std::invalid_argument("expected " + std::to_string(names_.size()) +
                                  " tensors, got " +
                                  std::to_string(given.size()));
    const at::Tensor &first = given[0];
    const bool device = first.is_cuda();
    // The host API runs float32 throughout.
    const at::ScalarType inputType =
        device ? first.scalar_type() : at::kFloat;
    const linac_dtype dtype = dtypeOf(first.scalar_type());

    std::vector<at::Tensor> tensors;
    tensors.reserve(given.size());
    int64_t heads = 0;
    for (size_t i = 0; i < given.size(); ++i) {
      const bool input = int64_t(i) < inputs_;
      at::Tensor t = contiguousAs(given[i], input ? inputType : at::kFloat);
      const int64_t least = input ? 3 : 1;
      if (t.dim() < least)
        throw std::invalid_argument(
            std::string(input ? "input '" : "param '") + names_[i] +
            "' has shape " + c10::str(t.sizes()) +
            "; inputs are [B, T, H, ...] and parameters [H, ...]");
      heads = std::max(heads, t.size(input ? 2 : 0));
      tensors.push_back(std::move(t));
    }

    at::Tensor cu;
    if (cuSeqlens)
      cu = contiguousAs(cuSeqlens->to(at::kCPU), at::kLong);
    const int64_t batch = first.size(0), tokens = first.size(1);
    const int64_t sequences = cu.defined() ? cu.numel() - 1 : batch;
    at::Tensor output = at::empty({batch, tokens, heads, valueDim_},
                                  first.options().dtype(inputType));
    std::optional<at::Tensor> final;
    if (finalState)
      final = at::empty({sequences, heads, keyDim_, stateColumns_},
                        first.options().dtype(at::kFloat));
    at::Tensor initial;
    if (initialState)
      initial = contiguousAs(*initialState, at::kFloat);

    // The fields the host's and the device's arguments share; the tensor
    // structs point into `tensors`, which outlive the call.
    auto fill = [&](auto &args, auto &arguments) {
      for (size_t i = 0; i < tensors.size(); ++i)
        arguments[i] = {names_[i].c_str(),
                        static_cast<decltype(arguments[i].data)>(
                            tensors[i].data_ptr()),
                        int32_t(tensors[i].dim()), tensors[i].sizes().data()};
      args.tensors = arguments.data();
      args.num_tensors = arguments.size();
      args.cu_seqlens = cu.defined() ? cu.data_ptr<int64_t>() : nullptr;
      args.num_cu_seqlens = cu.defined() ? size_t(cu.numel()) : 0;
      args.initial_state =
          initial.defined() ? initial.data_ptr<float>() : nullptr;
      args.final_state = final ? final->data_ptr<float>() : nullptr;
      args.scale = float(scale);
    };
    int status;
    if (device) {
      std::vector<linac_device_tensor> arguments(tensors.size());
      linac_device_forward_args args{};
      fill(args, arguments);
      args.dtype = dtype;
      args.output = output.data_ptr();
      args.stream = reinterpret_cast<void *>(stream);
      status = forwardDevice_(package_, &args);
    } else {
      std::vector<linac_host_tensor> arguments(tensors.size());
      linac_forward_args args{};
      fill(args, arguments);
      args.output = output.data_ptr<float>();
      // The host kernel runs on its own threads for as long as it takes.
      py::gil_scoped_release release;
      status = forwardHost_(package_, &args);
    }
    if (!device && status == LINAC_OK)
      output = output.to(first.scalar_type());
    return {status, output, final};
  }

private:
  linac_package *package_;
  ForwardHost forwardHost_;
  ForwardDevice forwardDevice_;
  std::vector<std::string> names_;
  int64_t inputs_, keyDim_, valueDim_, stateColumns_;
};

} // namespace

PYBIND11_MODULE(_torch_ops, m) {
  m.doc() = "linac's forward call on torch tensors (used by linac.torch)";
  py::class_<Forward>(m, "Forward")
      .def(py::init<uintptr_t, uintptr_t, uintptr_t, std::vector<std::string>,
                    int64_t, int64_t, int64_t, int64_t>(),
           py::arg("package"), py::arg("forward_host"),
           py::arg("forward_device"), py::arg("names"), py::arg("inputs"),
           py::arg("key_dim"), py::arg("value_dim"), py::arg("state_columns"))
      .def("__call__", &Forward::operator(), py::arg("tensors"),
           py::arg("initial_state"), py::arg("cu_seqlens"), py::arg("scale"),
           py::arg("final_state"), py::arg("stream"));
}
