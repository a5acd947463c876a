"""linac.distributed: a batch split over gloo processes by token gives the
single process's output, final states and gradients, for every family of
the normal form, sequences straddling ranks, a rank inside one sequence and
a rank with no tokens."""

import datetime
import os

import numpy as np
import pytest

torch = pytest.importorskip('torch')
import torch.distributed as dist
import torch.multiprocessing as mp

import linac
import linac.distributed
import linac.torch
from conftest import EXAMPLES, ROOT
import test_layer
from test_layer import SPECS, random_arguments

# Families: an erase under a scalar gate, a key-vector gate with a
# value-vector write, a normaliser, a decay on both sides; read before the
# write with a bonus (RWKV-6), a key-vector gate with an erase (KDA), the
# delta rule without a gate (DeltaNet), a decay that may grow (chunkable,
# but planned as a scan).
LAYERS = ['scalar_delta', 'vector_gate', 'normalized', 'two_sided', 'rwkv6',
          'kda', 'deltanet', 'growing_decay']
# Shifts of the gate inputs that make each decay weak (a factor of about
# 0.99 a token), so that a rank's transition carries the state across it:
# these layers' and test_distributed_cuda.py's.
WEAK_GATES = dict(test_layer.WEAK_GATES, rwkv6={'w': -5}, kda={'g': -5},
                  gated_deltanet={'g': -5}, gdn2={'g': -5}, gla={'g': 5},
                  mlstm={'f': 5})
# Layers whose queries and keys have one head for the state's two.
GROUPED = {'scalar_delta', 'kda'}



def splits(world):
    """(cu_seqlens, tokens a rank or None for an even split): sequences
    ending and starting inside a rank, an empty sequence; one sequence over
    every rank (the middle ones inside it); ranks with no tokens inside a
    sequence; several chunks a rank."""
    return [([0, 5, 40, 41, 41, 90, 100], None), ([0, 50 * world], None),
            ([0, 20, 100], [50] + [0] * (world - 2) + [50]),
            ([0, 30, 70 * world], [70] * world)]


TOLERANCE = 2e-5


def _compile(name, cache):
    if name in SPECS:
        return linac.compile(SPECS[name], cache=cache)
    path = os.path.join(EXAMPLES, name + '.mlir')
    if not os.path.exists(path):
        path = os.path.join(ROOT, 'tests', 'cpu', 'specs', name + '.mlir')
    return linac.compile(path, cache=cache)


def _arguments(layer, name, tokens, heads, rng):
    arrays = random_arguments(layer, 1, tokens, heads, rng)
    for input_name, shift in WEAK_GATES.get(name, {}).items():
        arrays[input_name] += shift
    if name in GROUPED:
        for input_name in ('q', 'k'):
            arrays[input_name] = arrays[input_name][:, :, :1].copy()
    return {n: torch.from_numpy(a) for n, a in arrays.items()}


def _relative_error(got, want):
    got, want = got.detach(), want.detach()
    if want.numel() == 0:
        return 0.0
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def _check(layer, name, cu, tokens, seed, device):
    """This rank's output, final states and gradients against one process
    running the whole batch, on the same inputs, on `device`."""
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return torch.from_numpy(rng.standard_normal(shape, np.float32)).to(
            device)

    heads = 2
    total = cu[-1]
    whole = {n: t.to(device)
             for n, t in _arguments(layer, name, total, heads, rng).items()}
    initial = 0.1 * normal(len(cu) - 1, heads, layer.key_dim,
                           layer.state_columns)
    d_output = normal(1, total, heads, layer.value_dim)
    d_final = normal(*initial.shape)

    leaves = {n: t.clone().requires_grad_() for n, t in whole.items()}
    start = initial.clone().requires_grad_()
    want_o, want_final = linac.torch.forward(
        layer, initial_state=start, cu_seqlens=torch.tensor(cu), **leaves)
    ((want_o * d_output).sum() + (want_final * d_final).sum()).backward()

    context = linac.distributed.context(cu, tokens=tokens)
    lo, hi = context.begin, context.end
    mine = {n: (t[:, lo:hi] if n in layer.inputs else t).clone()
            .requires_grad_() for n, t in whole.items()}
    mine_start = initial.clone().requires_grad_()
    o, final = linac.distributed.forward(
        layer, context, initial_state=mine_start, output_final_state=True,
        **mine)
    ((o * d_output[:, lo:hi]).sum() + (final * d_final).sum()).backward()

    # Without a gradient to keep, the messages come from the package's pass
    # without reads, also from leaves that would take one.
    with torch.no_grad():
        o_fast, final_fast = linac.distributed.forward(
            layer, context, initial_state=mine_start,
            output_final_state=True, **mine)
    dist.all_reduce(final_fast)

    errors = {'output': _relative_error(o, want_o[:, lo:hi]),
              'output by state pass': _relative_error(o_fast,
                                                      want_o[:, lo:hi]),
              'final by state pass': _relative_error(final_fast, want_final)}
    # Each final state comes from exactly one rank, the others give zeros;
    # each parameter's and initial state's gradient is a sum over ranks.
    shared = [('final', final, want_final),
              ('d initial', mine_start.grad, start.grad)]
    shared += [('d ' + n, mine[n].grad, leaves[n].grad) for n in layer.params]
    for name, value, want in shared:
        value = torch.zeros_like(want) if value is None else value.detach()
        dist.all_reduce(value)
        errors[name] = _relative_error(value, want)
    for n in layer.inputs:
        if hi > lo:
            errors['d ' + n] = _relative_error(mine[n].grad,
                                               leaves[n].grad[:, lo:hi])
    return errors


def worker(rank, world, store_path, packages, queue, backend, gpus):
    """Checks every package over every split on this rank, on the CPU when
    `gpus` is 0, else on GPU `rank` mod `gpus`, and puts (rank, [(name,
    split, worst quantity, its error)]) on `queue`."""
    device = 'cpu'
    if gpus:
        device = f'cuda:{rank % gpus}'
        torch.cuda.set_device(device)
    # A collective one rank never joins fails in a minute, not in 30.
    dist.init_process_group(backend, init_method=f'file://{store_path}',
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        report = []
        for name, path in packages:
            layer = linac.load(path)
            for case, (cu, tokens) in enumerate(splits(world)):
                errors = _check(layer, name, cu, tokens,
                                seed=1000 * case + world, device=device)
                worst = max(errors, key=errors.get)
                report.append((name, case, worst, errors[worst]))
        queue.put((rank, report))
        # No rank tears its gloo pairs down while a peer still uses them:
        # a pair closed under a peer's exchange aborted the process.
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # The report is on the queue. gloo's transport threads outlive the
    # group, and a rank that then went through the interpreter's teardown
    # aborted now and then ('terminate called without an active
    # exception'): leave without it.
    os._exit(0)


def run_ranks(world, backend, packages, store_path, tolerance, gpus=0):
    """Spawns `world` ranks of `worker` (on the CPU, or shared out over
    `gpus` GPUs) and fails with every quantity off by `tolerance` or
    more."""
    context = mp.get_context('spawn')
    queue = context.SimpleQueue()
    mp.start_processes(worker, args=(world, store_path, packages, queue,
                                     backend, gpus),
                       nprocs=world, start_method='spawn')
    failures = []
    for _ in range(world):
        rank, report = queue.get()
        assert len(report) == len(packages) * len(splits(world))
        failures += [
            f'rank {rank} {name} split {case}: {what} off by {error:.2e}'
            for name, case, what, error in report if not error < tolerance]
    assert not failures, '\n'.join(failures)


@pytest.mark.parametrize('world', [2, 3])
def test_split_batch_matches_one_process(world, cache, tmp_path):
    packages = [(name, _compile(name, cache).path) for name in LAYERS]
    run_ranks(world, 'gloo', packages, str(tmp_path / 'store'), TOLERANCE)


@pytest.fixture
def single_rank(tmp_path):
    """A gloo group of this process alone."""
    dist.init_process_group('gloo', init_method=f'file://{tmp_path}/store',
                            rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize('name, message', [
    ('two_sided_erase', 'an erase under a value-side decay'),
    ('full_matrix_gate', 'outside the normal form')])
def test_refuses_transitions_it_cannot_compose(name, message, single_rank,
                                               cache):
    layer = _compile(name, cache)
    context = linac.distributed.context([0, 4])
    tensors = _arguments(layer, name, 4, 1, np.random.default_rng())
    with pytest.raises(linac.InvalidArgument, match=message):
        linac.distributed.forward(layer, context, **tensors)


def test_context_checks_its_arguments(single_rank):
    for cu in ([5], [1, 4], [0, 4, 2]):
        with pytest.raises(linac.InvalidArgument, match='cu_seqlens is'):
            linac.distributed.context(cu)
    with pytest.raises(linac.InvalidArgument, match=r"tokens is \[3\]; "
                       r"expected 1 counts, one a rank, that add up to the "
                       r"batch's 4"):
        linac.distributed.context([0, 4], tokens=[3])
    context = linac.distributed.context(torch.tensor([0, 3, 4]))
    assert context.tokens == 4 and not context.entering and \
        not context.leaving
    assert context.pieces == [(0, 0, 3), (1, 3, 4)]


def test_forward_checks_its_arguments(single_rank, cache):
    layer = _compile('scalar_delta', cache)
    context = linac.distributed.context([0, 6, 10])
    tensors = _arguments(layer, 'scalar_delta', 10, 2,
                         np.random.default_rng())
    with pytest.raises(linac.InvalidArgument,
                       match=r"input 'q' has shape \[1, 9, 1, 16\]; expected "
                       r"this rank's \[1, 10, ...\]"):
        linac.distributed.forward(layer, context,
                                  **dict(tensors, q=tensors['q'][:, :9]))
    with pytest.raises(linac.InvalidArgument,
                       match=r'initial_state has shape \[1, 2, 16, 16\]; '
                       r'expected \[2, 2, 16, 16\]'):
        linac.distributed.forward(layer, context,
                                  initial_state=torch.zeros(1, 2, 16, 16),
                                  **tensors)
    with pytest.raises(linac.InvalidArgument, match='missing input'):
        linac.distributed.forward(layer, context,
                                  **{n: t for n, t in tensors.items()
                                     if n != 'v'})
    # One rank is the single-process forward.
    o, final = linac.distributed.forward(layer, context,
                                         output_final_state=True, **tensors)
    want_o, want_final = linac.torch.forward(
        layer, cu_seqlens=torch.tensor([0, 6, 10]), **tensors)
    assert torch.equal(o, want_o) and torch.equal(final, want_final)
