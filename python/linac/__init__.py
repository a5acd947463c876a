"""linac: a compiler for linear attention, from Python.

    import linac
    layer = linac.compile('examples/gated_deltanet.mlir')    # or spec text
    o, final_state = layer(q=q, k=k, v=v, g=g, b=b, A_log=A_log,
                           dt_bias=dt_bias)

A layer runs numpy arrays (float32, on the CPU, for a cpu package) and, with
`linac.torch`, torch tensors on the CPU or a CUDA device. Packages compiled
elsewhere open with linac.load(path).
"""

import collections
import ctypes
import json
import os

from . import _capi
from ._capi import Error, InvalidArgument, PackageError
from ._compiler import (CompileError, cache_dir, compile_package,
                        find_compiler, open_package)

__all__ = ['Argument', 'CompileError', 'Error', 'InvalidArgument', 'Layer',
           'PackageError', 'cache_dir', 'compile', 'find_compiler', 'load']
__version__ = '0.1.0'

Argument = collections.namedtuple('Argument', 'name role kind shape')
Argument.__doc__ = """An argument of a layer: role input, param or runtime;
kind key, value, scalar, matrix (or index, state); shape as people read it,
such as [B, T, H, K]."""


def _thread_count(threads):
    """`threads` as the C API's int32 (the runtime checks its range)."""
    if isinstance(threads, bool) or not isinstance(threads, int) or \
            not -2**31 <= threads < 2**31:
        raise InvalidArgument(f'threads is {threads!r}; expected 0 (every '
                              'core this process may use) or a count')
    return threads


class Layer:
    """An opened package: its arguments and dimensions, and its forward pass
    and decode step on numpy arrays."""

    def __init__(self, path):
        self.path = path
        self._handle = open_package(path)
        lib, handle = _capi.lib, self._handle
        self.target = lib.linac_package_target(handle).decode()
        self.name = lib.linac_package_layer(handle).decode()
        dims = [ctypes.c_int64() for _ in range(4)]
        _capi.check(lib.linac_package_dims(handle, *map(ctypes.byref, dims)))
        (self.key_dim, self.value_dim, self.state_columns,
         self.max_decode_tokens) = (d.value for d in dims)
        arguments = []
        for i in range(lib.linac_package_num_arguments(handle)):
            name, role, shape = (ctypes.c_char_p() for _ in range(3))
            _capi.check(lib.linac_package_argument(
                handle, i, ctypes.byref(name), ctypes.byref(role),
                ctypes.byref(shape)))
            kind = lib.linac_package_argument_kind(handle, i)
            arguments.append(Argument(name.value.decode(), role.value.decode(),
                                      kind.decode(), shape.value.decode()))
        self.arguments = tuple(arguments)
        self.inputs = tuple(a.name for a in arguments if a.role == 'input')
        self.params = tuple(a.name for a in arguments if a.role == 'param')
        # The runtime has checked the manifest against the package.
        with open(os.path.join(path, 'manifest.json')) as manifest:
            manifest = json.load(manifest)
        self.normal_form = manifest['normal_form']
        self.family = manifest['plan']['family']

    def __del__(self):
        handle = getattr(self, '_handle', None)
        # At interpreter exit the binding may be gone before the layer.
        if handle and _capi is not None and _capi.lib is not None:
            _capi.lib.linac_package_close(handle)

    def __repr__(self):
        return (f'<linac.Layer @{self.name} for {self.target}, '
                f'K={self.key_dim} V={self.value_dim}, {self.path}>')

    @property
    def handle(self):
        """The linac_package pointer, for other bindings of the C API."""
        return self._handle

    def _host_tensors(self, tensors):
        import numpy as np
        unknown = set(tensors) - set(self.inputs) - set(self.params)
        if unknown:
            raise InvalidArgument(
                f'{", ".join(sorted(unknown))}: not an argument of @{self.name}'
                f' (inputs {", ".join(self.inputs)}; parameters '
                f'{", ".join(self.params) or "none"})')
        # np.ascontiguousarray would make a 0-d array 1-d.
        arrays = {name: np.require(np.asarray(value, dtype=np.float32),
                                   requirements='C')
                  for name, value in tensors.items()}
        shapes = [_capi.shape_array(a.shape) for a in arrays.values()]
        structs = (_capi.HostTensor * max(len(arrays), 1))(*[
            _capi.HostTensor(name.encode(), a.ctypes.data, a.ndim, shape)
            for (name, a), shape in zip(arrays.items(), shapes)])
        return arrays, shapes, structs

    def _leading_dims(self, arrays):
        """The first input given, which sets B and T, and H, the most heads
        an argument has; the runtime checks the rest of the shapes."""
        for name, array in arrays.items():
            least = 3 if name in self.inputs else 1
            if array.ndim < least:
                kind = 'input' if least == 3 else 'param'
                raise InvalidArgument(
                    f"{kind} '{name}' has shape {list(array.shape)}; inputs "
                    'are [B, T, H, ...] and parameters [H, ...]')
        first = next((arrays[n] for n in self.inputs if n in arrays), None)
        if first is None:
            raise InvalidArgument(f'@{self.name} needs its inputs '
                                  f'({", ".join(self.inputs)})')
        heads = max([arrays[n].shape[2] for n in self.inputs if n in arrays] +
                    [arrays[n].shape[0] for n in self.params if n in arrays])
        return first, heads

    def _forward_args(self, tensors, initial_state, cu_seqlens, scale,
                      threads):
        """The C API's forward arguments for `tensors`, with the arrays they
        point to (keep them while the call runs), the output's and final
        states' shapes."""
        import numpy as np
        arrays, shapes, structs = self._host_tensors(tensors)
        first, heads = self._leading_dims(arrays)
        batch, tokens = first.shape[:2]
        cu = None
        sequences = batch
        if cu_seqlens is not None:
            cu = np.ascontiguousarray(cu_seqlens, dtype=np.int64)
            sequences = max(len(cu) - 1, 0)
        output_shape = (batch, tokens, heads, self.value_dim)
        state_shape = (sequences, heads, self.key_dim, self.state_columns)
        initial = None
        if initial_state is not None:
            initial = np.ascontiguousarray(initial_state, dtype=np.float32)
            if initial.shape != state_shape:
                raise InvalidArgument(f'initial_state has shape {initial.shape},'
                                      f' expected {state_shape}')
        args = _capi.ForwardArgs(
            structs, len(arrays),
            cu.ctypes.data_as(_capi.c_int64_p) if cu is not None else None,
            len(cu) if cu is not None else 0,
            initial.ctypes.data if initial is not None else None,
            None, None, scale or 0.0, _thread_count(threads))
        kept = (arrays, shapes, structs, cu, initial)
        return args, kept, output_shape, state_shape

    def forward(self, *, initial_state=None, cu_seqlens=None, scale=None,
                threads=0, **tensors):
        """Runs a cpu package: inputs [B, T, H, ...] and parameters [H, ...]
        by name, optional cu_seqlens [N + 1] (B = 1) and initial_state
        [N, H, K, V] (V + 1 with a normaliser), on `threads` threads (0:
        every core the process may use). Returns the output [B, T, H, V]
        and the final states, float32 numpy arrays."""
        import numpy as np
        args, kept, output_shape, state_shape = self._forward_args(
            tensors, initial_state, cu_seqlens, scale, threads)
        output = np.empty(output_shape, np.float32)
        final = np.empty(state_shape, np.float32)
        args.output = output.ctypes.data
        args.final_state = final.ctypes.data
        _capi.check(_capi.lib.linac_forward_host(self._handle,
                                                 ctypes.byref(args)))
        return output, final

    def states(self, *, initial_state=None, cu_seqlens=None, scale=None,
               threads=0, transitions=False, **tensors):
        """What each sequence of a cpu package's batch does to a state, for
        splitting sequences over processes: the final states from
        initial_state (zeros without one), without the reads forward makes,
        and with transitions=True the transitions A that carry any other
        entering state over each sequence, S_out = A(S_in) + final:
        [N, H, K, K] matrices (A S_in) when the layer erases, else
        [N, H, K, state_columns] factors (A * S_in). Arguments as forward's.
        Returns (final states, transitions or None), float32 numpy
        arrays."""
        import numpy as np
        args, kept, _, state_shape = self._forward_args(
            tensors, initial_state, cu_seqlens, scale, threads)
        columns = (self.key_dim if self.normal_form['erase'] != 'none'
                   else self.state_columns)
        final = np.empty(state_shape, np.float32)
        carried = (np.empty(state_shape[:3] + (columns,), np.float32)
                   if transitions else None)
        args.final_state = final.ctypes.data
        _capi.check(_capi.lib.linac_states_host(
            self._handle, ctypes.byref(args),
            None if carried is None else carried.ctypes.data))
        return final, carried

    def backward(self, *, d_output, d_final_state=None, initial_state=None,
                 cu_seqlens=None, scale=None, threads=0, **tensors):
        """The backward pass of a cpu package: the gradients of
        <d_output, output> + <d_final_state, final state> of the forward
        pass the same arguments run, with respect to every input and
        parameter (by name) and to the initial state ('initial_state'),
        float32 numpy arrays."""
        import numpy as np
        args, kept, output_shape, state_shape = self._forward_args(
            tensors, initial_state, cu_seqlens, scale, threads)
        arrays = kept[0]

        def exactly(array, shape, name):
            array = np.ascontiguousarray(array, dtype=np.float32)
            if array.shape != shape:
                raise InvalidArgument(f'{name} has shape {array.shape}, '
                                      f'expected {shape}')
            return array

        d_output = exactly(d_output, output_shape, 'd_output')
        d_final = (None if d_final_state is None else
                   exactly(d_final_state, state_shape, 'd_final_state'))
        gradients = {name: np.zeros(array.shape, np.float32)
                     for name, array in arrays.items()}
        d_initial = np.zeros(state_shape, np.float32)
        entries = (_capi.HostGradient * max(len(gradients), 1))(*[
            _capi.HostGradient(name.encode(), g.ctypes.data)
            for name, g in gradients.items()])
        backward = _capi.BackwardArgs(
            args, d_output.ctypes.data,
            d_final.ctypes.data if d_final is not None else None,
            entries, len(gradients), d_initial.ctypes.data)
        _capi.check(_capi.lib.linac_backward_host(self._handle,
                                                  ctypes.byref(backward)))
        gradients['initial_state'] = d_initial
        return gradients

    __call__ = forward

    def decode(self, *, state_pool, state_indices, scale=None, threads=0,
               **tensors):
        """A decode step of a cpu package: inputs [B, n, H, ...] (n new
        tokens, at most max_decode_tokens), parameters, and for each of the
        B sequences its slot in state_pool [P, H, K, state_columns], which
        is updated in place (-1 skips a sequence), on `threads` threads as
        forward's. Returns the output [B, n, H, V]; a skipped sequence's
        rows are zero."""
        import numpy as np
        if not (isinstance(state_pool, np.ndarray) and
                state_pool.dtype == np.float32 and
                state_pool.flags.c_contiguous):
            raise InvalidArgument('state_pool must be a C-contiguous float32 '
                                  'numpy array (it is updated in place)')
        arrays, shapes, structs = self._host_tensors(tensors)
        first, heads = self._leading_dims(arrays)
        indices = np.ascontiguousarray(state_indices, dtype=np.int64)
        output = np.zeros(first.shape[:2] + (heads, self.value_dim), np.float32)
        pool_shape = _capi.shape_array(state_pool.shape)
        args = _capi.DecodeArgs(
            structs, len(arrays), state_pool.ctypes.data, pool_shape,
            indices.ctypes.data_as(_capi.c_int64_p), len(indices),
            output.ctypes.data, scale or 0.0, _thread_count(threads))
        _capi.check(_capi.lib.linac_decode_host(self._handle,
                                                ctypes.byref(args)))
        return output


def load(path):
    """Opens a package compiled elsewhere (`linac compile ... -o path`)."""
    return Layer(os.fspath(path))


def compile(spec, target='cpu', *, options=(), cache=None):
    """Compiles `spec` (its text, or the path of a .mlir file) for `target`
    (cpu, sm_90a or sm_80), or takes it from the cache, and opens it. A
    cached package that no longer opens (a corrupt or foreign file) is
    compiled again. `options` are further `linac compile` flags."""
    path = compile_package(spec, target, options, cache=cache)
    try:
        return Layer(path)
    except PackageError:
        return Layer(compile_package(spec, target, options, cache=cache,
                                     force=True))
