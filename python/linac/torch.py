"""linac's layers as PyTorch operators.

    import linac, linac.torch
    layer = linac.compile(spec)                 # a cpu package for CPU tensors
    o, final_state = linac.torch.forward(layer, q=q, k=k, v=v, g=g, b=b, ...)

The operators `linac::forward` and `linac::decode` are registered with
torch.library, with fake implementations, so that torch.compile(fullgraph=True)
traces through them and CUDA graphs capture them. CPU tensors run cpu
packages (float32); CUDA tensors run sm_90a or sm_80 packages in their
dtype (float32, bfloat16, float16) on the current stream. Parameters and
states are float32. A package is named by its path and its arguments come
in its order (inputs, then parameters), so the operators take only a
string, tensors and numbers.
"""

import ctypes
import functools
import importlib.util
import os
import sysconfig
import threading
import warnings
from typing import List, Optional, Tuple

import torch
from torch.utils import _python_dispatch

from . import Layer, InvalidArgument, _capi, load

_layers = {}


def _layer(path) -> Layer:
    """The process's one opened Layer for the package at `path`."""
    if path not in _layers:
        _layers[path] = load(path)
    return _layers[path]


_targets = {}


def target_for(device):
    """The package target that runs on `device`."""
    target = _targets.get(device)
    if target is not None:
        return target
    device = torch.device(device)
    index = device.index
    if device.type == 'cuda' and index is None:
        index = torch.cuda.current_device()
    target = _target_for(device.type, index)
    # A tensor's device always has its index; a bare 'cuda' follows the
    # current device, so it is not kept.
    if device.type == 'cpu' or device.index is not None:
        _targets[device] = target
    return target


@functools.lru_cache(maxsize=None)
def _target_for(kind, index):
    if kind == 'cpu':
        return 'cpu'
    if kind == 'cuda':
        major, _ = torch.cuda.get_device_capability(index)
        if major >= 9:
            return 'sm_90a'
        if major == 8:
            return 'sm_80'
    raise InvalidArgument(f'no linac target runs on {torch.device(kind, index)}; '
                          'linac runs on the CPU and on CUDA devices of sm_80 '
                          'or newer')


def _names(layer):
    return layer.inputs + layer.params


def _heads(layer, tensors):
    """H, the most heads an argument has (inputs [B, T, H, ...], parameters
    [H, ...]); the runtime checks the rest of the shapes."""
    count = len(layer.inputs)
    try:
        return max([t.shape[2] for t in tensors[:count]] +
                   [t.shape[0] for t in tensors[count:]])
    except IndexError:
        pass
    for i, (name, t) in enumerate(zip(_names(layer), tensors)):
        if t.dim() < (3 if i < count else 1):
            role = 'input' if i < count else 'param'
            raise InvalidArgument(
                f"{role} '{name}' has shape {list(t.shape)}; inputs are "
                '[B, T, H, ...] and parameters [H, ...]')
    return max([t.shape[2] for t in tensors[:count]] +
               [t.shape[0] for t in tensors[count:]])


# The most dimensions an argument has (a matrix input: [B, T, H, K, V]).
_MAX_DIMS = 8


class _DeviceCall:
    """One thread's ctypes arguments for a layer's device calls, made once
    and refilled each call: making ctypes structures costs more host time
    than the rest of a call."""

    def __init__(self, layer):
        names = _names(layer)
        self.names = [n.encode() for n in names]
        self.shapes = [(ctypes.c_int64 * _MAX_DIMS)() for _ in names]
        self.tensors = (_capi.DeviceTensor * max(len(names), 1))(*[
            _capi.DeviceTensor(n, None, 0, s)
            for n, s in zip(self.names, self.shapes)])
        self.forward = _capi.DeviceForwardArgs()
        self.forward.tensors = self.tensors
        self.forward.num_tensors = len(names)
        self.decode = _capi.DeviceDecodeArgs()
        self.decode.tensors = self.tensors
        self.decode.num_tensors = len(names)
        self.pool_shape = (ctypes.c_int64 * _MAX_DIMS)()
        self.decode.pool_shape = self.pool_shape

        # The structures as 64-bit words (linac_device_tensor: name, data,
        # ndim, shape), so that a call sets a pointer by one index; and the
        # shape each slot holds, rewritten only when it changes.
        words = ctypes.sizeof(_capi.DeviceTensor) // 8
        self.words = (ctypes.c_uint64 * (words * len(names))).from_buffer(
            self.tensors)
        self.data = [words * i + 1 for i in range(len(names))]
        self.held = [None] * len(names)

    def fill(self, layer, tensors):
        """Points the structures at `tensors`, inputs in the first one's
        dtype and parameters in float32, contiguous (converted where they
        are not); returns those and H."""
        dtype = tensors[0].dtype
        count = len(layer.inputs)
        words, data, held = self.words, self.data, self.held
        ready = []
        changed = False
        for i, t in enumerate(tensors):
            want = dtype if i < count else torch.float32
            if t.dtype != want or not t.is_contiguous():
                t = t.to(want).contiguous()
            ready.append(t)
            words[data[i]] = t.data_ptr()
            changed = changed or t.shape != held[i]
        if changed:
            self.heads = _heads(layer, ready)
            for i, t in enumerate(ready):
                if t.dim() > _MAX_DIMS:
                    raise InvalidArgument(
                        f'{self.names[i].decode()} has {t.dim()} '
                        f'dimensions; at most {_MAX_DIMS}')
                self.tensors[i].ndim = t.dim()
                self.shapes[i][:t.dim()] = t.shape
                held[i] = t.shape
        return ready, self.heads


_device_calls = threading.local()


def _device_call(layer):
    calls = getattr(_device_calls, 'by_path', None)
    if calls is None:
        calls = _device_calls.by_path = {}
    call = calls.get(layer.path)
    if call is None:
        call = calls[layer.path] = _DeviceCall(layer)
    return call


def _stream(device):
    """The current stream of `device`, as the driver's handle."""
    return torch._C._cuda_getCurrentRawStream(device.index)


def _float32(tensor):
    """`tensor` as contiguous float32, as states are."""
    if tensor.dtype is torch.float32 and tensor.is_contiguous():
        return tensor
    return tensor.to(torch.float32).contiguous()


_DTYPE_CODES = {torch.float32: _capi.DTYPES['float32'],
                torch.bfloat16: _capi.DTYPES['bfloat16'],
                torch.float16: _capi.DTYPES['float16']}


def _dtype_code(dtype):
    """The C API's code of an activation dtype."""
    code = _DTYPE_CODES.get(dtype)
    if code is None:
        raise InvalidArgument(f'linac runs float32, bfloat16 and float16 '
                              f'activations, not {dtype}')
    return code


def _load_torch_ops():
    """linac.torch's C++ module (python/csrc/torch_ops.cpp): installed in
    this package, or built beside the liblinac.so that the ctypes binding
    loaded. None without one, or with LINAC_TORCH_OPS=0 in the environment:
    calls then go through ctypes, with a few microseconds more host time for
    each tensor. LINAC_TORCH_OPS=1 makes a missing module an ImportError."""
    wanted = os.environ.get('LINAC_TORCH_OPS')
    if wanted == '0':
        return None
    name = '_torch_ops' + sysconfig.get_config_var('EXT_SUFFIX')
    for directory in (os.path.dirname(os.path.abspath(__file__)),
                      os.path.dirname(os.path.abspath(_capi.lib._name))):
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            continue
        spec = importlib.util.spec_from_file_location('linac._torch_ops', path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except ImportError as error:
            # Built against another torch than the one imported.
            if wanted == '1':
                raise
            warnings.warn(f'linac: {path} does not load ({error}); '
                          'linac.torch calls the C API through ctypes')
            return None
        return module
    if wanted == '1':
        raise ImportError(f'linac: LINAC_TORCH_OPS=1 and no {name} was built '
                          '(pip install --no-build-isolation, with torch)')
    return None


_torch_ops = _load_torch_ops()


def _address(function):
    return ctypes.cast(function, ctypes.c_void_p).value


def _forward_ops(layer, tensors, initial_state, cu_seqlens, scale,
                 output_final_state, stream):
    """The forward pass through the C++ module: (output, final or None)."""
    _dtype_code(tensors[0].dtype)
    forward = layer.__dict__.get('_torch_ops_forward')
    if forward is None:
        forward = layer._torch_ops_forward = _torch_ops.Forward(
            layer.handle.value, _address(_capi.lib.linac_forward_host),
            _address(_capi.lib.linac_forward_device), list(_names(layer)),
            len(layer.inputs), layer.key_dim, layer.value_dim,
            layer.state_columns)
    try:
        status, output, final = forward(tensors, initial_state, cu_seqlens,
                                        scale, output_final_state, stream)
    except ValueError as error:
        raise InvalidArgument(str(error)) from None
    _capi.check(status)
    return output, final


@torch.library.custom_op('linac::forward', mutates_args=())
def _forward(package: str, tensors: List[torch.Tensor],
             initial_state: Optional[torch.Tensor],
             cu_seqlens: Optional[torch.Tensor],
             scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
    layer = _layer(package)
    first = tensors[0]
    _dtype_code(first.dtype)
    if first.device.type == 'cpu':
        if _torch_ops is not None:
            return _forward_ops(
                layer, [t.detach() for t in tensors],
                None if initial_state is None else initial_state.detach(),
                cu_seqlens, scale, True, 0)
        arrays = {n: t.detach().to(torch.float32).contiguous().numpy()
                  for n, t in zip(_names(layer), tensors)}
        o, final = layer.forward(
            initial_state=(None if initial_state is None else
                           _float32(initial_state.detach()).numpy()),
            cu_seqlens=None if cu_seqlens is None else cu_seqlens.cpu().numpy(),
            scale=scale, **arrays)
        return torch.from_numpy(o).to(first.dtype), torch.from_numpy(final)
    return _forward_device(layer, tensors, initial_state, cu_seqlens, scale)


def _forward_device(layer, tensors, initial_state, cu_seqlens, scale,
                    output_final_state=True):
    first = tensors[0]
    if _torch_ops is not None:
        return _forward_ops(layer, tensors, initial_state, cu_seqlens, scale,
                            output_final_state, _stream(first.device))
    dtype = first.dtype
    call = _device_call(layer)
    tensors, heads = call.fill(layer, tensors)
    batch, tokens = first.shape[:2]
    cu = None if cu_seqlens is None else cu_seqlens.to('cpu', torch.int64)
    sequences = batch if cu is None else cu.numel() - 1
    output = first.new_empty((batch, tokens, heads, layer.value_dim))
    final = None
    if output_final_state:
        final = first.new_empty(
            (sequences, heads, layer.key_dim, layer.state_columns),
            dtype=torch.float32)
    initial = None if initial_state is None else _float32(initial_state)
    args = call.forward
    args.dtype = _dtype_code(dtype)
    args.cu_seqlens = (None if cu is None else
                       ctypes.cast(cu.data_ptr(), _capi.c_int64_p))
    args.num_cu_seqlens = 0 if cu is None else cu.numel()
    args.initial_state = None if initial is None else initial.data_ptr()
    args.final_state = None if final is None else final.data_ptr()
    args.output = output.data_ptr()
    args.scale = scale
    args.stream = _stream(first.device)
    _capi.check(_capi.lib.linac_forward_device(layer.handle,
                                               ctypes.byref(args)))
    return output, final


@_forward.register_fake
def _(package, tensors, initial_state, cu_seqlens, scale):
    layer = _layer(package)
    first = tensors[0]
    batch, tokens = first.shape[:2]
    heads = _heads(layer, tensors)
    sequences = batch if cu_seqlens is None else cu_seqlens.shape[0] - 1
    output = first.new_empty((batch, tokens, heads, layer.value_dim))
    final = first.new_empty(
        (sequences, heads, layer.key_dim, layer.state_columns),
        dtype=torch.float32)
    return output, final


def _keep_arguments(ctx, inputs, output):
    package, tensors, initial_state, cu_seqlens, scale = inputs
    ctx.package, ctx.cu_seqlens, ctx.scale = package, cu_seqlens, scale
    ctx.count = len(tensors)
    ctx.has_initial = initial_state is not None
    ctx.save_for_backward(*tensors, *([initial_state] if ctx.has_initial
                                      else []))


def _backward_device(layer, tensors, initial, grad_output, grad_final,
                     cu_seqlens, scale):
    """The CUDA package's backward pass: float32 gradients of `tensors` and
    of the initial state, on the tensors' stream."""
    first = tensors[0]
    call = _device_call(layer)
    tensors, heads = call.fill(layer, tensors)
    cu = None if cu_seqlens is None else cu_seqlens.to('cpu', torch.int64)
    sequences = first.shape[0] if cu is None else cu.numel() - 1
    grad_output = grad_output.to(first.dtype).contiguous()
    grad_final = None if grad_final is None else _float32(grad_final)
    gradients = [torch.empty(t.shape, dtype=torch.float32, device=t.device)
                 for t in tensors]
    grad_initial = first.new_empty(
        (sequences, heads, layer.key_dim, layer.state_columns),
        dtype=torch.float32)
    initial = None if initial is None else _float32(initial)
    args = _capi.DeviceBackwardArgs()
    args.forward = call.forward
    args.forward.dtype = _dtype_code(first.dtype)
    args.forward.cu_seqlens = (None if cu is None else
                               ctypes.cast(cu.data_ptr(), _capi.c_int64_p))
    args.forward.num_cu_seqlens = 0 if cu is None else cu.numel()
    args.forward.initial_state = None if initial is None else initial.data_ptr()
    args.forward.final_state = None
    args.forward.output = None
    args.forward.scale = scale
    args.forward.stream = _stream(first.device)
    args.d_output = grad_output.data_ptr()
    args.d_final_state = None if grad_final is None else grad_final.data_ptr()
    buffers = (_capi.DeviceGradient * max(len(gradients), 1))(*[
        _capi.DeviceGradient(n, g.data_ptr())
        for n, g in zip(call.names, gradients)])
    args.gradients = buffers
    args.num_gradients = len(gradients)
    args.d_initial_state = grad_initial.data_ptr()
    _capi.check(_capi.lib.linac_backward_device(layer.handle,
                                                ctypes.byref(args)))
    return gradients, grad_initial


def _backward(ctx, grad_output, grad_final):
    """The gradients of linac::forward's tensors and initial state from the
    package's backward pass, on the CPU or the CUDA device the tensors are
    on."""
    saved = ctx.saved_tensors
    tensors = saved[:ctx.count]
    initial = saved[ctx.count] if ctx.has_initial else None
    first = tensors[0]
    layer = _layer(ctx.package)
    if first.device.type != 'cpu':
        gradients, grad_initial = _backward_device(
            layer, tensors, initial, grad_output, grad_final, ctx.cu_seqlens,
            ctx.scale)
        return (None, [g.to(t.dtype) for g, t in zip(gradients, tensors)],
                None if initial is None else grad_initial, None, None)

    def array(tensor):
        return None if tensor is None else _float32(tensor.detach()).numpy()

    names = _names(layer)
    gradients = layer.backward(
        d_output=array(grad_output), d_final_state=array(grad_final),
        initial_state=array(initial),
        cu_seqlens=None if ctx.cu_seqlens is None else
        ctx.cu_seqlens.cpu().numpy(),
        scale=ctx.scale,
        **{n: array(t) for n, t in zip(names, tensors)})
    tensor_gradients = [torch.from_numpy(gradients[n]).to(t.dtype)
                        for n, t in zip(names, tensors)]
    initial_gradient = (None if initial is None else
                        torch.from_numpy(gradients['initial_state']))
    return None, tensor_gradients, initial_gradient, None, None


_forward.register_autograd(_backward, setup_context=_keep_arguments)


@torch.library.custom_op('linac::decode', mutates_args=('state_pool',))
def _decode(package: str, tensors: List[torch.Tensor],
            state_pool: torch.Tensor, state_indices: torch.Tensor,
            scale: float) -> torch.Tensor:
    layer = _layer(package)
    first = tensors[0]
    _dtype_code(first.dtype)
    if first.device.type == 'cpu':
        if state_pool.dtype != torch.float32 or not state_pool.is_contiguous():
            raise InvalidArgument('state_pool must be a contiguous float32 '
                                  'tensor (it is updated in place)')
        arrays = {n: t.detach().to(torch.float32).contiguous().numpy()
                  for n, t in zip(_names(layer), tensors)}
        o = layer.decode(state_pool=state_pool.detach().numpy(),
                         state_indices=state_indices.cpu().numpy(),
                         scale=scale, **arrays)
        return torch.from_numpy(o).to(first.dtype)
    return _decode_device(layer, tensors, state_pool, state_indices, scale)


def _decode_device(layer, tensors, state_pool, state_indices, scale):
    first = tensors[0]
    dtype = first.dtype
    call = _device_call(layer)
    tensors, heads = call.fill(layer, tensors)
    output = torch.zeros(tuple(first.shape[:2]) + (heads, layer.value_dim),
                         dtype=dtype, device=first.device)
    indices = state_indices.to(first.device, torch.int64).contiguous()
    if state_pool.dim() != 4:
        raise InvalidArgument(f'state_pool has shape {list(state_pool.shape)}; '
                              'it is [P, H, K, state_columns]')
    call.pool_shape[:4] = state_pool.shape
    args = call.decode
    args.dtype = _dtype_code(dtype)
    args.state_pool = state_pool.data_ptr()
    args.state_indices = indices.data_ptr()
    args.num_sequences = indices.numel()
    args.output = output.data_ptr()
    args.scale = scale
    args.stream = _stream(first.device)
    _capi.check(_capi.lib.linac_decode_device(layer.handle, ctypes.byref(args)))
    return output


@_decode.register_fake
def _(package, tensors, state_pool, state_indices, scale):
    layer = _layer(package)
    first = tensors[0]
    heads = _heads(layer, tensors)
    return first.new_empty(tuple(first.shape[:2]) + (heads, layer.value_dim))


def _arguments(layer, tensors):
    """The tensors named as the layer's arguments, in its order."""
    names = _names(layer)
    if len(tensors) == len(names):
        try:
            return [tensors[n] for n in names]
        except KeyError:
            pass
    unknown = set(tensors) - set(_names(layer))
    if unknown:
        raise InvalidArgument(
            f'{", ".join(sorted(unknown))}: not an argument of @{layer.name}')
    for name in _names(layer):
        if name not in tensors:
            role = 'input' if name in layer.inputs else 'param'
            raise InvalidArgument(f"missing {role} '{name}' of @{layer.name}")
    return [tensors[n] for n in _names(layer)]


def _direct(tensors, *optional):
    """Whether a call on `tensors` and the `optional` ones given may skip
    the dispatcher, whose Python custom op costs more host time than the
    launch: CUDA tensors of no subclass, no gradient asked for, and nothing
    that must see the operator (torch.compile's tracing, a dispatch or
    function mode, a functorch transform)."""
    if not tensors[0].is_cuda or torch.compiler.is_compiling():
        return False
    grad = torch.is_grad_enabled()
    for group in (tensors, optional):
        for t in group:
            if t is not None and (type(t) is not torch.Tensor or
                                  (grad and t.requires_grad)):
                return False
    return (_python_dispatch._get_current_dispatch_mode() is None
            and not torch._C._is_torch_function_mode_enabled()
            and torch._C._functorch.maybe_current_level() is None)


def forward(layer, *, initial_state=None, cu_seqlens=None, scale=None,
            output_final_state=True, **tensors):
    """The layer's forward pass on torch tensors, by name: the output
    [B, T, H, V] in the inputs' dtype and the final states
    [N, H, K, state_columns] in float32 (None with output_final_state
    False, which saves their memory and writes)."""
    return _forward_arguments(layer, _arguments(layer, tensors),
                              initial_state, cu_seqlens, scale,
                              output_final_state)


def _forward_arguments(layer, arguments, initial_state, cu_seqlens, scale,
                       output_final_state):
    """forward() on the layer's arguments in its order."""
    scale = float(scale or 0.0)
    if _direct(arguments, initial_state, cu_seqlens):
        return _forward_device(layer, arguments, initial_state, cu_seqlens,
                               scale, output_final_state)
    o, final = torch.ops.linac.forward(layer.path, arguments, initial_state,
                                       cu_seqlens, scale)
    return o, final if output_final_state else None


def decode(layer, *, state_pool, state_indices, scale=None, **tensors):
    """A decode step on torch tensors: the states live in `state_pool`
    [P, H, K, state_columns] (float32, updated in place), sequence b in slot
    state_indices[b] (-1 skips it). Returns the output [B, n, H, V]."""
    arguments = _arguments(layer, tensors)
    scale = float(scale or 0.0)
    if _direct(arguments, state_pool, state_indices):
        return _decode_device(layer, arguments, state_pool, state_indices,
                              scale)
    return torch.ops.linac.decode(layer.path, arguments, state_pool,
                                  state_indices, scale)
