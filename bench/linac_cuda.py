"""ctypes binding of the linac runtime's device forward pass (liblinac.so).

Mirrors runtime/include/linac/runtime.h: linac_package_open / _close,
linac_forward_device, linac_backward_device (and its workspace),
linac_last_error. Tensors are torch CUDA tensors, passed
by pointer; nothing is copied. Inputs are named as in the spec: [B, T, H, D]
vectors and [B, T, H] scalars in the call's dtype, float32 parameters [H] or
[H, D]; the output is [B, T, H, V] in that dtype; states are float32
[N, H, K, V]. Only torch is needed, and only when a pass is bound.
"""

import ctypes
import glob
import os

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DTYPES = {'float32': 0, 'bfloat16': 1, 'float16': 2}  # enum linac_dtype


class _Tensor(ctypes.Structure):  # linac_device_tensor
    _fields_ = [('name', ctypes.c_char_p), ('data', ctypes.c_void_p),
                ('ndim', ctypes.c_int32), ('shape', ctypes.POINTER(ctypes.c_int64))]


class _Args(ctypes.Structure):  # linac_device_forward_args
    _fields_ = [('tensors', ctypes.POINTER(_Tensor)), ('num_tensors', ctypes.c_size_t),
                ('dtype', ctypes.c_int), ('cu_seqlens', ctypes.POINTER(ctypes.c_int64)),
                ('num_cu_seqlens', ctypes.c_size_t), ('initial_state', ctypes.c_void_p),
                ('final_state', ctypes.c_void_p), ('output', ctypes.c_void_p),
                ('scale', ctypes.c_float), ('stream', ctypes.c_void_p)]


class _Gradient(ctypes.Structure):  # linac_device_gradient
    _fields_ = [('name', ctypes.c_char_p), ('data', ctypes.c_void_p)]


class _BackwardArgs(ctypes.Structure):  # linac_device_backward_args
    _fields_ = [('forward', _Args), ('d_output', ctypes.c_void_p),
                ('d_final_state', ctypes.c_void_p), ('gradients', ctypes.POINTER(_Gradient)),
                ('num_gradients', ctypes.c_size_t), ('d_initial_state', ctypes.c_void_p)]


class LinacError(RuntimeError):
    pass


def find_library(path=None):
    """PATH, else $LINAC_LIB, else the newest liblinac.so under build*/."""
    path = path or os.environ.get('LINAC_LIB')
    if path:
        return path
    hits = glob.glob(os.path.join(_ROOT, 'build*', '**', 'liblinac.so*'), recursive=True)
    if not hits:
        raise LinacError(f'no liblinac.so under {_ROOT}/build*/; build the runtime or pass --lib')
    return max(hits, key=os.path.getmtime)


_libs = {}


def load_library(path=None):
    path = os.path.abspath(find_library(path))
    if path not in _libs:
        lib = ctypes.CDLL(path)
        lib.linac_last_error.restype = ctypes.c_char_p
        lib.linac_package_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.linac_package_close.argtypes = [ctypes.c_void_p]
        lib.linac_package_close.restype = None
        lib.linac_forward_device.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Args)]
        lib.linac_backward_device.argtypes = [ctypes.c_void_p, ctypes.POINTER(_BackwardArgs)]
        lib.linac_backward_device_workspace.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(_Args), ctypes.POINTER(ctypes.c_size_t)]
        for f in (lib.linac_package_open, lib.linac_forward_device, lib.linac_backward_device,
                  lib.linac_backward_device_workspace):
            f.restype = ctypes.c_int
        _libs[path] = lib
    return _libs[path]


class Package:
    """A compiled package (NAME.linac/) opened through liblinac.so."""

    def __init__(self, path, lib=None):
        self._handle = ctypes.c_void_p()
        self.path, self.lib = path, load_library(lib)
        self._check(self.lib.linac_package_open(os.fsencode(path), ctypes.byref(self._handle)),
                    f'open {path}')

    def _check(self, status, what):
        if status != 0:
            msg = self.lib.linac_last_error() or b''
            raise LinacError(f'{what}: status {status}: {msg.decode(errors="replace")}')

    def close(self):
        if getattr(self, '_handle', None):
            self.lib.linac_package_close(self._handle)
            self._handle = ctypes.c_void_p()

    __del__ = close

    def bind(self, tensors, out, initial_state=None, final_state=None, scale=0.0, stream=None):
        """A zero-argument callable running the forward pass on these tensors.

        tensors: {name: CUDA tensor}, inputs and parameters; out: the
        [B, T, H, V] output; states float32 [N, H, K, V] or None; scale 0
        means the spec's or K^-1/2; stream defaults to torch's current one.
        The argument structure is built once, so a call costs one C call.
        """
        import torch
        for name, t in list(tensors.items()) + [('o', out), ('initial_state', initial_state),
                                                ('final_state', final_state)]:
            if t is not None and not (t.is_cuda and t.is_contiguous()):
                raise LinacError(f'{name}: need a contiguous CUDA tensor')
        for name, t in (('initial_state', initial_state), ('final_state', final_state)):
            if t is not None and t.dtype != torch.float32:
                raise LinacError(f'{name}: states are float32')
        if stream is None:
            stream = torch.cuda.current_stream().cuda_stream
        keep = list(tensors.values()) + [out, initial_state, final_state]  # keep alive
        shapes = [(ctypes.c_int64 * t.dim())(*t.shape) for t in tensors.values()]
        names = [n.encode() for n in tensors]
        arr = (_Tensor * len(tensors))(*[
            _Tensor(n, t.data_ptr(), t.dim(), s) for n, t, s in zip(names, tensors.values(), shapes)])
        ptr = lambda t: None if t is None else t.data_ptr()  # noqa: E731
        args = _Args(arr, len(tensors), _DTYPES[str(out.dtype).removeprefix('torch.')], None, 0,
                     ptr(initial_state), ptr(final_state), out.data_ptr(), float(scale), stream)
        handle, fn, ref = self._handle, self.lib.linac_forward_device, ctypes.byref(args)

        def run():
            self._check(fn(handle, ref), f'forward {self.path}')
            return out

        run._refs = (keep, names, shapes, arr, args)  # alive as long as run is
        return run

    def forward(self, tensors, out, **kw):
        return self.bind(tensors, out, **kw)()

    def bind_backward(self, tensors, d_out, gradients, scale=0.0, stream=None):
        """A zero-argument callable running the backward pass (no states):
        d_out [B, T, H, V] in the tensors' dtype, gradients {name: float32
        CUDA tensor shaped as the tensor}. Its `workspace` attribute is the
        device memory each call takes besides its arguments, in bytes."""
        import torch
        if stream is None:
            stream = torch.cuda.current_stream().cuda_stream
        forward = self.bind(tensors, d_out, scale=scale, stream=stream)
        args = forward._refs[4]
        args.output = None
        grads = (_Gradient * len(gradients))(*[
            _Gradient(n.encode(), g.data_ptr()) for n, g in gradients.items()])
        backward = _BackwardArgs(args, d_out.data_ptr(), None, grads, len(gradients), None)
        handle, fn, ref = self._handle, self.lib.linac_backward_device, ctypes.byref(backward)
        workspace = ctypes.c_size_t()
        self._check(self.lib.linac_backward_device_workspace(handle, ctypes.byref(args),
                                                             ctypes.byref(workspace)),
                    f'backward workspace {self.path}')

        def run():
            self._check(fn(handle, ref), f'backward {self.path}')
            return gradients

        run._refs = (forward, gradients, grads, backward)
        run.workspace = workspace.value
        return run
