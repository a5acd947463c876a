"""linac.nn.Layer: a spec becomes a torch layer with the projections its
arguments need, whose output is the fp64 reference's reads through the
output projection, and which trains on the CPU; the hybrid example
runs."""

import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip('torch')

import linac.nn
import reference
from conftest import ROOT
from test_layer import SPECS, TOLERANCE, relative_error

# A spec no layer family names: a key-vector gate from a projected input,
# a value-vector write strength, and a parameter per key channel.
UNNAMED = '''
!key = tensor<8xf32, #linac.key>
!value = tensor<12xf32, #linac.value>
!state = !linac.state<8x12>
linac.layer @unnamed(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %w : !key, %s : !value)
    params(%bias : !key) {
  %x = arith.addf %w, %bias : !key
  %sp = linac.softplus %x : !key
  %log_a = arith.negf %sp : !key
  %beta = linac.sigmoid %s : !value
  %u = arith.mulf %beta, %v : !value
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.write %S1, %k, %u : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}
'''


def reference_forward(layer, hidden, package, initial_state=None):
    """The layer's output in fp64: its projections, the step program of
    `package` run token by token, and the output projection."""
    with torch.no_grad():
        return _reference_forward(layer, hidden.double().cpu(), package,
                                  initial_state)


def _reference_forward(layer, x, package, initial_state):
    inputs, params = {}, {}
    batch, tokens, _ = x.shape
    for name in layer.input_names:
        projection = layer.projections[name]
        inputs[name] = (x @ projection.weight.double().cpu().T).reshape(
            (batch, tokens, layer.num_heads) + layer._input_shapes[name]).numpy()
    for name in layer.param_names:
        params[name] = layer.params[name].double().cpu().numpy()
    reads, final = reference.run(reference.step_program(package.path), inputs,
                                 params, initial_state=initial_state)
    reads = torch.from_numpy(reads).reshape(batch, tokens, -1)
    return reads @ layer.output.weight.double().cpu().T, final


@pytest.mark.parametrize('spec', [SPECS['scalar_delta'], UNNAMED])
def test_forward_matches_the_reference(spec, cache):
    layer = linac.nn.Layer(spec, hidden_size=24, num_heads=3, cache=cache)
    for name in layer.param_names:
        layer.params[name].data.uniform_(0.1, 0.9)
    hidden = torch.randn(2, 37, 24)
    with torch.no_grad():
        y, final = layer(hidden, output_final_state=True)
    want_y, want_final = reference_forward(layer, hidden, layer.package('cpu'))
    assert y.shape == (2, 37, 24) and final.shape[:2] == (2, 3)
    assert relative_error(y.double().numpy(), want_y.numpy()) < TOLERANCE
    assert relative_error(final.numpy(), want_final) < TOLERANCE


def test_projections_follow_the_arguments(cache):
    layer = linac.nn.Layer(UNNAMED, hidden_size=16, num_heads=2, cache=cache,
                           param_init={'bias': lambda t: t.fill_(0.5)})
    widths = {n: p.weight.shape for n, p in layer.projections.items()}
    assert widths == {'q': (16, 16), 'k': (16, 16), 'v': (24, 16),
                      'w': (16, 16), 's': (24, 16)}
    assert layer.params['bias'].shape == (2, 8)
    assert torch.all(layer.params['bias'] == 0.5)
    assert layer.output.weight.shape == (16, 24)


def test_decode_continues_the_forward_pass(cache):
    layer = linac.nn.Layer(SPECS['scalar_delta'], hidden_size=16, num_heads=2,
                           cache=cache)
    hidden = torch.randn(1, 9, 16)
    with torch.no_grad():
        y, final = layer(hidden[:, :8], output_final_state=True)
        whole, _ = layer(hidden)
        pool = final.clone()
        last = layer.step(hidden[:, 8:], state_pool=pool,
                          state_indices=torch.tensor([0]))
    assert relative_error(last.numpy(), whole[:, 8:].numpy()) < TOLERANCE


def test_errors_name_the_argument(cache):
    with pytest.raises(linac.InvalidArgument, match='not a parameter'):
        linac.nn.Layer(UNNAMED, 16, 2, cache=cache, param_init={'A': 1.0})
    layer = linac.nn.Layer(UNNAMED, 16, 2, cache=cache)
    with pytest.raises(linac.InvalidArgument, match=r'expected \[B, T, 16\]'):
        layer(torch.randn(2, 5, 15))
    with pytest.raises(linac.InvalidArgument, match='no linac target'):
        linac.torch.target_for('meta')
    # A package compiled elsewhere (opening an sm_90a one needs no GPU).
    compiled = linac.compile(UNNAMED, target='sm_90a', cache=cache).path
    opened = linac.nn.Layer(None, 16, 2, packages={'sm_90a': compiled})
    assert opened.input_names == ('q', 'k', 'v', 'w', 's')
    with pytest.raises(linac.InvalidArgument, match='no spec to compile'):
        opened.package('cpu')


@pytest.mark.parametrize('spec', [SPECS['scalar_delta'], UNNAMED])
def test_the_layer_trains_on_the_cpu(spec, cache):
    # A target the layer can reach: the output of a fixed random layer of
    # the same spec. Thirty steps of Adam must take at least half off the
    # loss.
    torch.manual_seed(0)
    teacher = linac.nn.Layer(spec, 16, 2, cache=cache)
    student = linac.nn.Layer(spec, 16, 2, cache=cache)
    x = torch.randn(2, 24, 16)
    with torch.no_grad():
        target, _ = teacher(x)
    optimizer = torch.optim.Adam(student.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        y, _ = student(x)
        loss = ((y - target) ** 2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses


def test_hybrid_example_runs(cache, monkeypatch, capsys):
    monkeypatch.setenv('LINAC_CACHE_DIR', cache)
    sys.path.insert(0, os.path.join(ROOT, 'python', 'examples'))
    try:
        import hybrid
    finally:
        sys.path.pop(0)
    logits = hybrid.main(['--layers', '4', '--hidden', '32', '--heads', '2',
                          '--tokens', '20', '--spec',
                          os.path.join(ROOT, 'examples', 'gated_deltanet.mlir')])
    assert logits.shape == (2, 20, 1024)
    assert torch.isfinite(logits).all()
    assert 'finite: True' in capsys.readouterr().out
