"""linac.fla beside flash-linear-attention on CUDA tensors: each function
against FLA's own on the same bf16 inputs (relative error at most 2e-2, the
output and the final state), and linac registered as FLA's backend.
Skipped without a GPU or without the `fla` package.

The GPU machine needs no compiler: tests/python/prepare_gpu.py compiles
every package these calls run into a cache that tests/gpu/run.sh --python
points linac at."""

import math

import pytest

torch = pytest.importorskip('torch')

import linac.fla

B, T, H, K, V = 2, 300, 4, 128, 128
TOLERANCE = 2e-2


def draw(dtype, device, B=B, T=T, H=H, K=K, V=V):
    """Raw inputs; log decays near logsigmoid(randn) / 16, as FLA's layers
    make them."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(device)

    x = {'q': randn(B, T, H, K), 'k': randn(B, T, H, K), 'v': randn(B, T, H, V),
         'g_raw': randn(B, T, H), 'gk_raw': randn(B, T, H, K),
         'b': randn(B, T, H), 'bk': randn(B, T, H, K), 'wv': randn(B, T, H, V)}
    x = {name: t.to(dtype) for name, t in x.items()}
    x['g'] = (torch.nn.functional.logsigmoid(randn(B, T, H)) / 16).to(dtype)
    x['gk'] = (torch.nn.functional.logsigmoid(randn(B, T, H, K)) / 16).to(dtype)
    x['beta'] = torch.sigmoid(x['b'].float()).to(dtype)
    x['b_erase'] = (2 * torch.sigmoid(x['bk'].float())).to(dtype)
    x['w_write'] = torch.sigmoid(x['wv'].float()).to(dtype)
    x['A_log'] = (0.25 * randn(H) - math.log(16)).float()
    x['dt_bias'] = (0.25 * randn(H)).float()
    x['dt_bias_k'] = (0.25 * randn(H * K)).float()
    x['h0'] = 0.1 * randn(B, H, K, V).float()
    return x


GATE = lambda x, bias: dict(use_gate_in_kernel=True, A_log=x['A_log'],  # noqa: E731
                            dt_bias=x[bias])
L2 = dict(use_qk_l2norm_in_kernel=True)

# name: (FLA's module, positional and keyword arguments[, the positions or
# names of log-gates FLA takes in float32: it gets the same bf16 values,
# widened]).
CASES = {
    'chunk_gated_delta_rule': ('gated_delta_rule', lambda x: (
        (x['q'], x['k'], x['v'], x['g_raw'], x['b']),
        dict(L2, use_beta_sigmoid_in_kernel=True, **GATE(x, 'dt_bias')))),
    'fused_recurrent_gated_delta_rule': ('gated_delta_rule', lambda x: (
        (x['q'], x['k'], x['v']),
        dict(L2, g=x['g_raw'], beta=x['beta'], **GATE(x, 'dt_bias')))),
    'chunk_kda': ('kda', lambda x: (
        (x['q'], x['k'], x['v'], x['gk_raw'], x['b']),
        dict(L2, use_beta_sigmoid_in_kernel=True, **GATE(x, 'dt_bias_k')))),
    'fused_recurrent_kda': ('kda', lambda x: (
        (x['q'], x['k'], x['v'], x['gk_raw'], x['beta']),
        dict(L2, **GATE(x, 'dt_bias_k')))),
    'chunk_gdn2': ('gdn2', lambda x: (
        (x['q'], x['k'], x['v'], x['gk_raw'], x['b_erase'], x['w_write']),
        dict(L2, **GATE(x, 'dt_bias_k')))),
    'fused_recurrent_gdn2': ('gdn2', lambda x: (
        (x['q'], x['k'], x['v'], x['gk_raw'], x['b_erase'], x['w_write']),
        dict(L2, **GATE(x, 'dt_bias_k')))),
    'chunk_delta_rule': ('delta_rule', lambda x: (
        (x['q'], x['k'], x['v'], x['beta']), dict(L2))),
    'fused_recurrent_delta_rule': ('delta_rule', lambda x: (
        (x['q'], x['k'], x['v'], x['beta']), dict(L2))),
    'chunk_simple_gla': ('simple_gla', lambda x: (
        (x['q'], x['k'], x['v']), dict(g=x['g'])), ('g',)),
    'chunk_linear_attn': ('linear_attn', lambda x: (
        (x['q'], x['k'], x['v']), dict(normalize=False))),
    'chunk_retention': ('retention', lambda x: ((x['q'], x['k'], x['v']), {})),
    'chunk_gla': ('gla', lambda x: ((x['q'], x['k'], x['v'], x['gk']), {}),
                  (3,)),
}


def call(name, x, **extra):
    args, kwargs = CASES[name][1](x)
    return args, dict(kwargs, initial_state=x['h0'], output_final_state=True,
                      **extra)


def for_fla(name, args, kwargs):
    """The call's arguments with the gates FLA takes in float32 widened."""
    widen = CASES[name][2] if len(CASES[name]) > 2 else ()
    return ([a.float() if i in widen else a for i, a in enumerate(args)],
            {k: v.float() if k in widen else v for k, v in kwargs.items()})


def relative_error(got, want):
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def fla_function(name):
    pytest.importorskip('fla.ops')
    module = __import__(f'fla.ops.{CASES[name][0]}', fromlist=[name])
    return getattr(module, name)


def needs_gpu():
    if not torch.cuda.is_available():
        pytest.skip('no CUDA device')


@pytest.mark.parametrize('name', sorted(CASES))
def test_same_outputs_as_fla(name):
    needs_gpu()
    fla_call = fla_function(name)
    x = draw(torch.bfloat16, 'cuda')
    args, kwargs = call(name, x)
    with torch.no_grad():
        o, final = getattr(linac.fla, name)(*args, **kwargs)
        fla_args, fla_kwargs = for_fla(name, args, kwargs)
        want_o, want_final = fla_call(*fla_args, **fla_kwargs)
    assert o.shape == want_o.shape and o.dtype == want_o.dtype
    assert final.shape == want_final.shape
    errors = relative_error(o, want_o), relative_error(final, want_final)
    print(f'{name}: relative error of o {errors[0]:.2e}, final state '
          f'{errors[1]:.2e}')
    assert max(errors) <= TOLERANCE


def test_fla_dispatches_to_linac():
    needs_gpu()
    fla_gdn = fla_function('chunk_gated_delta_rule')
    linac.fla.register_fla_backend()
    x = draw(torch.bfloat16, 'cuda')
    args, kwargs = call('chunk_gated_delta_rule', x)
    with torch.no_grad():
        ours = linac.fla.chunk_gated_delta_rule(*args, **kwargs)
        dispatched = fla_gdn(*args, **kwargs)
    # linac's kernel ran: the same bits as calling it directly.
    assert torch.equal(ours[0], dispatched[0])
    # A call that needs a backward runs linac's kernels too, both ways.
    q = x['q'].clone().requires_grad_()
    through = fla_gdn(q, *args[1:], **kwargs)
    assert torch.equal(through[0].detach(), ours[0])
    through[0].float().sum().backward()
    assert q.grad.dtype == q.dtype and torch.isfinite(q.grad).all()
