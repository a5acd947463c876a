"""Host time of a forward call from Python, beside the C API's.

    PYTHONPATH=python LINAC_LIBRARY=build-gpu/lib/liblinac.so \
        python3 bench/python_host_time.py .gpu-packages/gated_deltanet.linac

Times N back-to-back calls with launches queued (no synchronisation inside
the loop) on a small shape, so that the host's work, not the kernel, sets
the pace: linac.torch.forward (the torch.library operator, its argument
checks and allocations) against linac_forward_device called through ctypes
with its arguments prepared once. Prints microseconds per call.
"""

import argparse
import ctypes
import time

import torch

import linac
import linac.torch
from linac import _capi


def per_call_us(call, n):
    for _ in range(20):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        call()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / n * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('package')
    parser.add_argument('--calls', type=int, default=2000)
    args = parser.parse_args()
    layer = linac.load(args.package)
    sizes = {'key': (layer.key_dim,), 'value': (layer.value_dim,),
             'scalar': (), 'matrix': (layer.key_dim, layer.value_dim)}
    tensors = {}
    for arg in layer.arguments:
        if arg.role == 'input':
            tensors[arg.name] = torch.randn((1, 1, 1) + sizes[arg.kind],
                                            device='cuda', dtype=torch.bfloat16)
        elif arg.role == 'param':
            tensors[arg.name] = torch.rand((1,) + sizes[arg.kind], device='cuda')

    def through_torch():
        linac.torch.forward(layer, **tensors)

    names = list(layer.inputs + layer.params)
    values = [tensors[n] for n in names]
    shapes, structs = linac.torch._device_tensors(names, values)
    output = torch.empty(1, 1, 1, layer.value_dim, device='cuda',
                         dtype=torch.bfloat16)
    final = torch.empty(1, 1, layer.key_dim, layer.state_columns, device='cuda')
    c_args = _capi.DeviceForwardArgs(
        structs, len(values), _capi.DTYPES['bfloat16'], None, 0, None,
        final.data_ptr(), output.data_ptr(), 0.0,
        torch.cuda.current_stream().cuda_stream)
    handle = layer.handle

    def through_c_api():
        _capi.check(_capi.lib.linac_forward_device(handle,
                                                   ctypes.byref(c_args)))

    c_api = per_call_us(through_c_api, args.calls)
    python = per_call_us(through_torch, args.calls)
    print(f'{layer.name}: C API through ctypes {c_api:.1f} us a call, '
          f'linac.torch.forward {python:.1f} us, '
          f'{python - c_api:.1f} us more')


if __name__ == '__main__':
    main()
