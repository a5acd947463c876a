"""Host time of a forward call from Python, beside the C API's.

    PYTHONPATH=python LINAC_LIBRARY=build-gpu/lib/liblinac.so \
        python3 bench/python_host_time.py .gpu-packages/gated_deltanet.linac
    ... python3 bench/python_host_time.py --fla

Times calls on one token of one head, in batches with launches queued and
the GPU drained between batches, so that the host's work, not the kernel,
sets the pace (the least batch of each, batches taken in turn), against linac_forward_device called through ctypes
with its arguments prepared once on the same package: for a package,
linac.torch.forward (the torch.library operator, its argument checks and
allocations); with --fla, every function of linac.fla that
tests/python/test_fla_cuda.py checks, with its calls' flags (their
packages from that file's --prepare, or compiled here). Prints
microseconds per call.
"""

import argparse
import ctypes
import os
import sys
import time

import torch

import linac
import linac.fla
import linac.torch
from linac import _capi

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'tests',
                                'python'))


def per_call_us(calls, n, batch=100):
    """Each call's host time in microseconds: the least over batches of
    `batch` calls, the GPU drained before each so that no call waits for a
    full launch queue (a tiny kernel can take longer on the GPU than its
    launch on the host), the calls' batches taken in turn so that a busy
    spell of the host's falls on all of them."""
    for call in calls:
        for _ in range(20):
            call()
    best = [float('inf')] * len(calls)
    for _ in range(max(n // batch, 1)):
        for i, call in enumerate(calls):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(batch):
                call()
            best[i] = min(best[i], (time.perf_counter() - start) / batch)
    torch.cuda.synchronize()
    return [b * 1e6 for b in best]


def one_token_arguments(layer):
    sizes = {'key': (layer.key_dim,), 'value': (layer.value_dim,),
             'scalar': (), 'matrix': (layer.key_dim, layer.value_dim)}
    tensors = {}
    for arg in layer.arguments:
        if arg.role == 'input':
            tensors[arg.name] = torch.randn((1, 1, 1) + sizes[arg.kind],
                                            device='cuda', dtype=torch.bfloat16)
        elif arg.role == 'param':
            tensors[arg.name] = torch.rand((1,) + sizes[arg.kind], device='cuda')
    return tensors


def c_api_call(layer, tensors):
    """linac_forward_device on `tensors`, its arguments packed once."""
    names = list(layer.inputs + layer.params)
    values = [tensors[n] for n in names]
    shapes = [_capi.shape_array(t.shape) for t in values]
    structs = (_capi.DeviceTensor * len(values))(*[
        _capi.DeviceTensor(n.encode(), t.data_ptr(), t.dim(), s)
        for n, t, s in zip(names, values, shapes)])
    output = torch.empty(1, 1, 1, layer.value_dim, device='cuda',
                         dtype=torch.bfloat16)
    final = torch.empty(1, 1, layer.key_dim, layer.state_columns, device='cuda')
    c_args = _capi.DeviceForwardArgs(
        structs, len(values), _capi.DTYPES['bfloat16'], None, 0, None,
        final.data_ptr(), output.data_ptr(), 0.0,
        torch.cuda.current_stream().cuda_stream)
    handle = layer.handle
    # The packed arguments point into these.
    alive = (shapes, structs, values, output, final)

    def call(alive=alive):
        _capi.check(_capi.lib.linac_forward_device(handle,
                                                   ctypes.byref(c_args)))
    return call


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('package', nargs='?')
    parser.add_argument('--fla', action='store_true')
    parser.add_argument('--calls', type=int, default=2000)
    args = parser.parse_args()
    print('linac.torch calls the C API ' +
          ('through its C++ module' if linac.torch._torch_ops is not None
           else 'through ctypes'))
    if args.package:
        layer = linac.load(args.package)
        tensors = one_token_arguments(layer)
        c_api, python = per_call_us(
            [c_api_call(layer, tensors),
             lambda: linac.torch.forward(layer, **tensors)], args.calls)
        print(f'{layer.name}: C API through ctypes {c_api:.1f} us a call, '
              f'linac.torch.forward {python:.1f} us, '
              f'{python - c_api:.1f} us more')
    if args.fla:
        from test_fla_cuda import CASES, call, draw
        x = draw(torch.bfloat16, 'cuda', B=1, T=1, H=1)
        for name in sorted(CASES):
            function = getattr(linac.fla, name)
            fla_args, fla_kwargs = call(name, x)
            layer = linac.fla.prepare(function, *fla_args, target='sm_90a',
                                      **fla_kwargs)
            c_api, ours = per_call_us(
                [c_api_call(layer, one_token_arguments(layer)),
                 lambda: function(*fla_args, **fla_kwargs)], args.calls)
            print(f'linac.fla.{name}: {ours:.1f} us a call, C API '
                  f'{c_api:.1f} us, {ours - c_api:.1f} us more')


if __name__ == '__main__':
    main()
