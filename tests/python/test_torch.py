"""linac's PyTorch operators on CPU tensors: results against the fp64
reference, torch.library.opcheck, torch.compile(fullgraph=True),
gradients against autograd through the same layer written in float64
torch, and torch.autograd.gradcheck."""

import numpy as np
import pytest

torch = pytest.importorskip('torch')

import linac
import linac.torch
import reference
from test_layer import SPECS, TOLERANCE, random_arguments, relative_error, split


def torch_arguments(layer, batch, tokens, heads):
    arrays = random_arguments(layer, batch, tokens, heads,
                              np.random.default_rng())
    return arrays, {n: torch.from_numpy(a) for n, a in arrays.items()}


@pytest.fixture
def layer(cache):
    return linac.compile(SPECS['scalar_delta'], cache=cache)


def test_forward_matches_the_reference(layer):
    arrays, tensors = torch_arguments(layer, 2, 33, 2)
    initial = torch.randn(2, 2, 16, 16)
    o, final = linac.torch.forward(layer, initial_state=initial, **tensors)
    assert o.dtype == torch.float32 and final.shape == (2, 2, 16, 16)
    want_o, want_final = reference.run(reference.step_program(layer.path),
                                       *split(layer, arrays),
                                       initial_state=initial.numpy())
    assert relative_error(o.numpy(), want_o) < TOLERANCE
    assert relative_error(final.numpy(), want_final) < TOLERANCE
    o_only, none = linac.torch.forward(layer, initial_state=initial,
                                       output_final_state=False, **tensors)
    assert none is None and torch.equal(o_only, o)
    # States are float32: an initial state in another dtype is widened.
    o_half, _ = linac.torch.forward(
        layer, initial_state=initial.to(torch.bfloat16), **tensors)
    o_wide, _ = linac.torch.forward(
        layer, initial_state=initial.to(torch.bfloat16).float(), **tensors)
    assert torch.equal(o_half, o_wide)


def test_cpp_module_matches_the_ctypes_path(layer, monkeypatch):
    if linac.torch._torch_ops is None:
        pytest.skip('linac.torch runs without its C++ module here')
    arrays, tensors = torch_arguments(layer, 2, 33, 2)
    initial = torch.randn(2, 2, 16, 16)
    tensors['q'] = tensors['q'].to(torch.bfloat16)
    through_cpp = linac.torch.forward(layer, initial_state=initial, **tensors)
    monkeypatch.setattr(linac.torch, '_torch_ops', None)
    through_ctypes = linac.torch.forward(layer, initial_state=initial,
                                         **tensors)
    assert through_cpp[0].dtype == torch.bfloat16
    assert all(torch.equal(a, b) for a, b in zip(through_cpp, through_ctypes))


def test_decode_updates_the_pool_in_place(layer):
    arrays, tensors = torch_arguments(layer, 2, 3, 2)
    o, final = linac.torch.forward(layer, **tensors)
    pool = torch.zeros(2, 2, 16, 16)
    step = {n: (t[:, :1] if n in layer.inputs else t) for n, t in tensors.items()}
    first = linac.torch.decode(layer, state_pool=pool,
                               state_indices=torch.tensor([1, 0]), **step)
    assert relative_error(first.numpy(), o[:, :1].numpy()) < TOLERANCE
    assert pool.abs().sum() > 0


def test_opcheck(layer):
    arrays, tensors = torch_arguments(layer, 1, 5, 2)
    values = [tensors[n] for n in layer.inputs + layer.params]
    torch.library.opcheck(torch.ops.linac.forward.default,
                          (layer.path, values, None, None, 0.0))
    pool = torch.randn(3, 2, 16, 16)
    step = [tensors[n][:, :1].contiguous() for n in layer.inputs] + [
        tensors[n] for n in layer.params]
    torch.library.opcheck(torch.ops.linac.decode.default,
                          (layer.path, step, pool, torch.tensor([2]), 0.0))


def test_torch_compile_fullgraph(layer):
    arrays, tensors = torch_arguments(layer, 1, 12, 2)

    def model(q, k, v, g, b, A_log):
        o, state = linac.torch.forward(layer, q=q * 2, k=k, v=v, g=g, b=b,
                                       A_log=A_log)
        return o.relu() + 1, state

    compiled = torch.compile(model, fullgraph=True, backend='eager')
    got_o, got_state = compiled(**tensors)
    want_o, want_state = model(**tensors)
    assert torch.equal(got_o, want_o) and torch.equal(got_state, want_state)


def scalar_delta_by_token(q, k, v, g, b, A_log, initial_state, scale):
    """test_layer's scalar_delta spec token by token in float64 torch ops,
    written from its text, so that autograd gives its gradients."""
    kn = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    log_a = -torch.exp(A_log) * torch.nn.functional.softplus(g)
    beta = torch.sigmoid(b)
    batch, tokens, heads = g.shape
    outputs, finals = [], []
    for n in range(batch):
        for h in range(heads):
            S = initial_state[n, h]
            for t in range(tokens):
                key = kn[n, t, h]
                S = S * torch.exp(log_a[n, t, h])
                S = S - beta[n, t, h] * torch.outer(key, key @ S)
                S = S + beta[n, t, h] * torch.outer(key, v[n, t, h])
                outputs.append(scale * (S.T @ q[n, t, h]))
            finals.append(S)
    o = torch.stack(outputs).reshape(batch, heads, tokens, -1).transpose(1, 2)
    return o, torch.stack(finals).reshape(initial_state.shape)


def test_gradients_match_autograd_through_the_recurrence(layer):
    # 70 tokens: a whole chunk and a short one.
    arrays, tensors = torch_arguments(layer, 2, 70, 2)
    initial = torch.randn(2, 2, 16, 16)
    leaves = {n: t.clone().requires_grad_() for n, t in tensors.items()}
    start = initial.clone().requires_grad_()
    o, final = linac.torch.forward(layer, initial_state=start, **leaves)
    d_o, d_final = torch.randn_like(o), torch.randn_like(final)
    ((o * d_o).sum() + (final * d_final).sum()).backward()

    wide = {n: t.double().requires_grad_() for n, t in tensors.items()}
    wide_start = initial.double().requires_grad_()
    want_o, want_final = scalar_delta_by_token(
        initial_state=wide_start, scale=16 ** -0.5, **wide)
    assert relative_error(o.detach().numpy(), want_o.detach().numpy()) < TOLERANCE
    ((want_o * d_o.double()).sum() +
     (want_final * d_final.double()).sum()).backward()
    for name, leaf in leaves.items():
        assert relative_error(leaf.grad.numpy(),
                              wide[name].grad.numpy()) < TOLERANCE, name
    assert relative_error(start.grad.numpy(),
                          wide_start.grad.numpy()) < TOLERANCE


def test_gradients_without_an_initial_state_or_a_final_state(layer):
    arrays, tensors = torch_arguments(layer, 1, 9, 2)
    leaves = {n: t.clone().requires_grad_() for n, t in tensors.items()}
    o, _ = linac.torch.forward(layer, **leaves)
    o.sum().backward()
    assert all(torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0
               for t in leaves.values())


def test_normalized_layer_gradients_are_finite(cache):
    # A normaliser goes back by chunks, as one more column of the state.
    layer = linac.compile(SPECS['normalized'], cache=cache)
    arrays, tensors = torch_arguments(layer, 1, 9, 2)
    leaves = {n: t.clone().requires_grad_() for n, t in tensors.items()}
    o, final = linac.torch.forward(layer, **leaves)
    (o.sum() + final.sum()).backward()
    assert all(torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0
               for t in leaves.values())


def test_bad_arguments_name_themselves(layer):
    arrays, tensors = torch_arguments(layer, 1, 4, 1)
    with pytest.raises(linac.InvalidArgument, match='x: not an argument'):
        linac.torch.forward(layer, x=tensors['q'], **tensors)
    with pytest.raises(linac.InvalidArgument, match=r"param 'A_log' has shape \[\]"):
        linac.torch.forward(layer, **dict(tensors, A_log=torch.tensor(0.5)))
    tensors['q'] = tensors['q'].to(torch.int32)
    with pytest.raises(linac.InvalidArgument, match='not torch.int32'):
        linac.torch.forward(layer, **tensors)


def test_device_arguments_are_checked_before_any_launch(layer):
    # The device path's own checks, on CPU tensors: each fails before the
    # stream is asked for.
    _, tensors = torch_arguments(layer, 1, 4, 1)
    arguments = linac.torch._arguments(layer, tensors)
    call = linac.torch._device_call(layer)
    ready, heads = call.fill(layer, arguments)
    assert heads == 1 and [t.data_ptr() for t in ready] == [
        call.tensors[i].data for i in range(len(ready))]
    deep = [t.reshape(t.shape + (1,) * (9 - t.dim())) if i == 0 else t
            for i, t in enumerate(arguments)]
    with pytest.raises(linac.InvalidArgument, match='9 dimensions; at most 8'):
        call.fill(layer, deep)
    pool = torch.zeros(2, 1, layer.key_dim, layer.state_columns)
    with pytest.raises(linac.InvalidArgument, match=r'state_pool has shape'):
        linac.torch._decode_device(layer, arguments, pool[0],
                                   torch.tensor([0]), 0.0)


@pytest.mark.filterwarnings('ignore:Input #:UserWarning')
@pytest.mark.parametrize(
    'spec', ['scalar_delta', 'normalized', 'two_sided', 'two_sided_erase'])
def test_gradcheck(spec, cache):
    # torch.autograd.gradcheck over every argument and the initial state,
    # by chunks (an erase; a normaliser; a value-side decay) and token by
    # token (a value-side decay with an erase). The packages compute in
    # float32, so the finite differences take a wider step and looser
    # tolerances than float64's defaults.
    layer = linac.compile(SPECS[spec], cache=cache)
    _, tensors = torch_arguments(layer, 2, 5, 1)
    names = list(tensors)
    initial = torch.randn(2, 1, layer.key_dim, layer.state_columns) * 0.1
    if layer.state_columns > layer.value_dim:
        # The read divides by max(|scale n^T q|, 1): positive q, k and n
        # keep that read above 2, clear of the kink a finite difference
        # cannot step over (random signs failed 3 seeds in 40).
        initial[..., -1] = initial[..., -1].abs() + 1
        tensors['q'] = tensors['q'].abs() + 0.5
        tensors['k'] = tensors['k'].abs()

    def run(*leaves):
        *arguments, start = leaves
        return linac.torch.forward(layer, initial_state=start,
                                   **dict(zip(names, arguments)))

    leaves = [t.clone().requires_grad_() for t in tensors.values()]
    assert torch.autograd.gradcheck(
        run, (*leaves, initial.requires_grad_()), eps=1e-2, atol=2e-3,
        rtol=2e-2, nondet_tol=0.0)
