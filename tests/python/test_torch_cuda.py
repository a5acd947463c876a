"""linac's PyTorch operators on CUDA tensors, with the sm_90a packages
tests/gpu/prepare.sh compiled (LINAC_GPU_PACKAGES, default .gpu-packages):
forward and decode in bf16 and fp32 against the fp64 reference, the
backward against the cpu packages' (tests/python/prepare_gpu.py), the
operators under torch.compile and in a CUDA graph. Skipped without a GPU;
tests/gpu/run.sh --python runs them on one."""

import os

import numpy as np
import pytest

torch = pytest.importorskip('torch')
if not torch.cuda.is_available():
    pytest.skip('no CUDA device', allow_module_level=True)

import linac
import linac.torch
import reference
from conftest import CUDA_EXAMPLES, ROOT
from test_layer import random_arguments, relative_error, split

PACKAGES = os.environ.get('LINAC_GPU_PACKAGES',
                          os.path.join(ROOT, '.gpu-packages'))
TOLERANCE = {torch.bfloat16: 1e-2, torch.float32: 1e-4}


def opened(name):
    path = os.path.join(PACKAGES, name + '.linac')
    if not os.path.isdir(path):
        pytest.skip(f'no {path}: run tests/gpu/prepare.sh')
    return linac.load(path)


def cuda_arguments(layer, batch, tokens, heads, dtype):
    """Arguments on the device, and the same values (after rounding to
    `dtype`) for the reference."""
    arrays = random_arguments(layer, batch, tokens, heads,
                              np.random.default_rng())
    tensors = {}
    for name, a in arrays.items():
        t = torch.from_numpy(a).cuda()
        if name in layer.inputs:
            t = t.to(dtype)
            arrays[name] = t.float().cpu().numpy()
        tensors[name] = t
    return arrays, tensors


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float32])
@pytest.mark.parametrize('name', CUDA_EXAMPLES)
def test_forward(name, dtype):
    layer = opened(name)
    arrays, tensors = cuda_arguments(layer, 2, 100, 2, dtype)
    initial = torch.randn(2, 2, layer.key_dim, layer.state_columns,
                          device='cuda') * 0.1
    if layer.state_columns > layer.value_dim:
        initial[..., -1] = initial[..., -1].abs()
    o, final = linac.torch.forward(layer, initial_state=initial, **tensors)
    torch.cuda.synchronize()
    assert o.dtype == dtype and o.is_cuda
    want_o, want_final = reference.run(reference.step_program(layer.path),
                                       *split(layer, arrays),
                                       initial_state=initial.cpu().numpy())
    assert relative_error(o.float().cpu().numpy(), want_o) < TOLERANCE[dtype]
    assert relative_error(final.cpu().numpy(), want_final) < TOLERANCE[dtype]


@pytest.mark.parametrize('name', ['gated_deltanet', 'gdn2'])
def test_decode_continues_a_prefill(name):
    layer = opened(name)
    arrays, tensors = cuda_arguments(layer, 3, 9, 2, torch.bfloat16)
    o, final = linac.torch.forward(layer, **tensors)
    prefill = {n: t[:, :8] if n in layer.inputs else t
               for n, t in tensors.items()}
    _, states = linac.torch.forward(layer, **prefill)
    pool = torch.zeros((4,) + tuple(states.shape[1:]), device='cuda')
    pool[torch.tensor([2, 0, 3])] = states
    step = {n: t[:, 8:] if n in layer.inputs else t
            for n, t in tensors.items()}
    out = linac.torch.decode(layer, state_pool=pool,
                             state_indices=torch.tensor([2, 0, 3],
                                                        device='cuda'),
                             **step)
    torch.cuda.synchronize()
    assert relative_error(out.float().cpu().numpy(),
                          o[:, 8:].float().cpu().numpy()) < 1e-2
    assert relative_error(pool[torch.tensor([2, 0, 3])].cpu().numpy(),
                          final.cpu().numpy()) < 1e-2


def test_compile_and_cuda_graph():
    layer = opened('gated_deltanet')
    arrays, tensors = cuda_arguments(layer, 1, 64, 4, torch.bfloat16)

    def model(**kwargs):
        o, state = linac.torch.forward(layer, **kwargs)
        return o * 2, state

    want_o, want_state = model(**tensors)
    compiled = torch.compile(model, fullgraph=True)
    got_o, got_state = compiled(**tensors)
    assert torch.equal(got_o, want_o) and torch.equal(got_state, want_state)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        model(**tensors)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_o, graph_state = model(**tensors)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(graph_o, want_o) and torch.equal(graph_state, want_state)


def test_calls_outside_the_dispatcher_match_the_operator():
    layer = opened('gated_deltanet')
    _, tensors = cuda_arguments(layer, 2, 70, 2, torch.bfloat16)
    direct = linac.torch.forward(layer, **tensors)
    through = torch.ops.linac.forward(
        layer.path, [tensors[n] for n in layer.inputs + layer.params], None,
        None, 0.0)
    assert all(torch.equal(a, b) for a, b in zip(direct, through))
    # Without the final state the device writes none and the output stands.
    o, final = linac.torch.forward(layer, output_final_state=False, **tensors)
    assert final is None and torch.equal(o, direct[0])
    # A state in another dtype or layout is made contiguous float32 first.
    state = torch.randn(2, 2, layer.state_columns, layer.key_dim,
                        device='cuda').transpose(-1, -2) * 0.1
    narrow = linac.torch.forward(layer, initial_state=state.bfloat16(),
                                 **tensors)
    wide = linac.torch.forward(
        layer, initial_state=state.bfloat16().float().contiguous(), **tensors)
    assert all(torch.equal(a, b) for a, b in zip(narrow, wide))


def test_cpp_module_matches_the_ctypes_path(monkeypatch):
    if linac.torch._torch_ops is None:
        pytest.skip('linac.torch runs without its C++ module here')
    layer = opened('gated_deltanet')
    _, tensors = cuda_arguments(layer, 3, 70, 2, torch.bfloat16)
    cu_seqlens = torch.tensor([0, 20, 150, 210])
    flat = {n: t.reshape((1, -1) + t.shape[2:]) if n in layer.inputs else t
            for n, t in tensors.items()}
    initial = torch.randn(3, 2, layer.key_dim, layer.state_columns,
                          device='cuda') * 0.1
    calls = [dict(tensors, initial_state=initial),
             dict(flat, cu_seqlens=cu_seqlens),
             dict(tensors, output_final_state=False)]
    through_cpp = [linac.torch.forward(layer, **c) for c in calls]
    monkeypatch.setattr(linac.torch, '_torch_ops', None)
    through_ctypes = [linac.torch.forward(layer, **c) for c in calls]
    for cpp, plain in zip(through_cpp, through_ctypes):
        assert torch.equal(cpp[0], plain[0])
        assert (cpp[1] is None and plain[1] is None) or torch.equal(cpp[1],
                                                                    plain[1])
    # Asking for a gradient takes the operator and its backward.
    first = layer.inputs[0]
    q = tensors[first].clone().requires_grad_()
    o, _ = linac.torch.forward(layer, **dict(tensors, **{first: q}))
    o.float().sum().backward()
    assert q.grad.dtype == q.dtype and torch.isfinite(q.grad).all()


GRADIENT_TOLERANCE = {torch.bfloat16: 2e-2, torch.float32: 1e-4}


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float32])
@pytest.mark.parametrize('name', CUDA_EXAMPLES)
def test_gradients_match_the_cpu_package(name, dtype):
    # The cpu package's backward, checked against the fp64 reference in
    # the CPU tests, on the same values: a varlen batch with an initial
    # state.
    layer = opened(name)
    cpu_path = os.path.join(PACKAGES, 'cpu', name + '.linac')
    if not os.path.isdir(cpu_path):
        pytest.skip(f'no {cpu_path}: run tests/python/prepare_gpu.py')
    host = linac.load(cpu_path)
    arrays, tensors = cuda_arguments(layer, 1, 130, 2, dtype)
    cu_seqlens = torch.tensor([0, 1, 65, 130])
    initial = torch.randn(3, 2, layer.key_dim, layer.state_columns,
                          device='cuda') * 0.1
    if layer.state_columns > layer.value_dim:
        initial[..., -1] = initial[..., -1].abs() + 1
    leaves = {n: t.clone().requires_grad_() for n, t in tensors.items()}
    start = initial.clone().requires_grad_()
    o, final = linac.torch.forward(layer, initial_state=start,
                                   cu_seqlens=cu_seqlens, **leaves)
    d_o, d_final = torch.randn_like(o), torch.randn_like(final)
    ((o.float() * d_o.float()).sum() + (final * d_final).sum()).backward()
    want = host.backward(d_output=d_o.float().cpu().numpy(),
                         d_final_state=d_final.cpu().numpy(),
                         initial_state=initial.cpu().numpy(),
                         cu_seqlens=cu_seqlens.numpy(), **arrays)
    tolerance = GRADIENT_TOLERANCE[dtype]
    for n, leaf in leaves.items():
        assert leaf.grad.dtype == leaf.dtype
        assert relative_error(leaf.grad.float().cpu().numpy(),
                              want[n]) < tolerance, n
    assert relative_error(start.grad.cpu().numpy(),
                          want['initial_state']) < tolerance


def test_nn_layer_matches_the_reference():
    import linac.nn
    from test_nn import reference_forward
    path = os.path.join(PACKAGES, 'gated_deltanet.linac')
    if not os.path.isdir(path):
        pytest.skip(f'no {path}: run tests/gpu/prepare.sh')
    layer = linac.nn.Layer(None, 64, 2, packages={'sm_90a': path},
                           device='cuda', dtype=torch.bfloat16)
    hidden = torch.randn(2, 100, 64, device='cuda', dtype=torch.bfloat16)
    with torch.no_grad():
        y, final = layer(hidden, output_final_state=True)
    want_y, want_final = reference_forward(layer, hidden, layer.package('cuda'))
    assert y.dtype == torch.bfloat16
    assert relative_error(y.double().cpu().numpy(), want_y.numpy()) < 2e-2
    assert relative_error(final.cpu().numpy(), want_final) < 2e-2
