"""linac from Python: compile, load, forward and decode on numpy arrays,
against the fp64 interpretation of each package's step."""

import ctypes
import os

import numpy as np
import pytest

import linac
import reference
from conftest import EXAMPLES

# Small layers nobody ships, at K = V = 16: a scalar-gated delta rule, a
# key-vector gate with a value-vector write strength, a normaliser, a decay
# on both sides.
SPECS = {
    'scalar_delta': '''
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
linac.layer @scalar_delta(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : f32, %b : f32)
    params(%A_log : f32) {
  %kn = linac.l2norm %k : !key
  %A = math.exp %A_log : f32
  %sp = linac.softplus %g : f32
  %Asp = arith.mulf %A, %sp : f32
  %log_a = arith.negf %Asp : f32
  %beta = linac.sigmoid %b : f32
  %S1 = linac.decay %S key(%log_a : f32) : !state
  %S2 = linac.erase %S1, %kn strength(%beta : f32) : !state, !key
  %S3 = linac.write %S2, %kn, %v strength(%beta : f32) : !state, !key, !value
  %o = linac.read %S3, %q : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}''',
    'vector_gate': '''
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
linac.layer @vector_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key, %w : !value) {
  %sp = linac.softplus %g : !key
  %log_a = arith.negf %sp : !key
  %strength = linac.sigmoid %w : !value
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.write %S1, %k, %v strength(%strength : !value) : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}''',
    'normalized': '''
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16, normalized>
linac.layer @normalized(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %f : f32, %i : f32) {
  %sp = linac.softplus %f : f32
  %log_f = arith.negf %sp : f32
  %gate = linac.sigmoid %i : f32
  %S1 = linac.decay %S key(%log_f : f32) : !state
  %S2 = linac.write %S1, %k, %v strength(%gate : f32) : !state, !key, !value
  %o = linac.read %S2, %q normalized : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}''',
    'two_sided': '''
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
linac.layer @two_sided(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key, %h : !value) {
  %sp_g = linac.softplus %g : !key
  %log_a = arith.negf %sp_g : !key
  %sp_h = linac.softplus %h : !value
  %log_b = arith.negf %sp_h : !value
  %S1 = linac.decay %S key(%log_a : !key) value(%log_b : !value) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}''',
    'two_sided_erase': '''
!key = tensor<16xf32, #linac.key>
!value = tensor<16xf32, #linac.value>
!state = !linac.state<16x16>
linac.layer @two_sided_erase(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key, %h : !value,
           %b : f32) {
  %kn = linac.l2norm %k : !key
  %sp_g = linac.softplus %g : !key
  %log_a = arith.negf %sp_g : !key
  %sp_h = linac.softplus %h : !value
  %log_b = arith.negf %sp_h : !value
  %beta = linac.sigmoid %b : f32
  %S1 = linac.decay %S key(%log_a : !key) value(%log_b : !value) : !state
  %S2 = linac.erase %S1, %kn strength(%beta : f32) : !state, !key
  %S3 = linac.write %S2, %kn, %v strength(%beta : f32) : !state, !key, !value
  %o = linac.read %S3, %q : !state, !key -> !value
  linac.yield %S3, %o : !state, !value
}''',
}

TOLERANCE = 1e-4


def random_arguments(layer, batch, tokens, heads, rng):
    sizes = {'key': (layer.key_dim,), 'value': (layer.value_dim,),
             'scalar': (), 'matrix': (layer.key_dim, layer.value_dim)}
    tensors = {}
    for arg in layer.arguments:
        if arg.role == 'input':
            tensors[arg.name] = rng.standard_normal(
                (batch, tokens, heads) + sizes[arg.kind]).astype(np.float32)
        elif arg.role == 'param':
            tensors[arg.name] = rng.uniform(
                0.1, 0.9, (heads,) + sizes[arg.kind]).astype(np.float32)
    return tensors


def split(layer, tensors):
    inputs = {n: tensors[n] for n in layer.inputs}
    params = {n: tensors[n] for n in layer.params}
    return inputs, params


def relative_error(got, want):
    return np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)


# None: the kernel file of the richest instruction set this host runs;
# baseline: the file every x86-64 host runs (LINAC_CPU_ISA caps the choice).
@pytest.mark.parametrize('isa', [None, 'baseline'])
@pytest.mark.parametrize('name', sorted(SPECS))
def test_forward_matches_the_reference(name, isa, cache, monkeypatch):
    if isa:
        monkeypatch.setenv('LINAC_CPU_ISA', isa)
    layer = linac.compile(SPECS[name], cache=cache)
    rng = np.random.default_rng()
    tensors = random_arguments(layer, 2, 70, 2, rng)
    initial = rng.standard_normal(
        (2, 2, layer.key_dim, layer.state_columns)).astype(np.float32)
    if name == 'normalized':
        initial[..., -1] = np.abs(initial[..., -1])
    o, final = layer(initial_state=initial, **tensors)
    program = reference.step_program(layer.path)
    want_o, want_final = reference.run(program, *split(layer, tensors),
                                       initial_state=initial)
    assert relative_error(o, want_o) < TOLERANCE
    assert relative_error(final, want_final) < TOLERANCE


def test_an_unknown_instruction_set_cap_is_refused(cache, monkeypatch):
    path = linac.compile(SPECS['scalar_delta'], cache=cache).path
    monkeypatch.setenv('LINAC_CPU_ISA', 'avx9')
    with pytest.raises(linac.Error, match="LINAC_CPU_ISA is 'avx9'; expected "
                       'baseline or avx2_fma'):
        linac.load(path)


def test_variable_lengths_and_grouped_heads(cache):
    layer = linac.compile(SPECS['scalar_delta'], cache=cache)
    rng = np.random.default_rng()
    tensors = random_arguments(layer, 1, 90, 4, rng)
    for name in ('q', 'k'):  # 2 query and key heads for 4 value heads
        tensors[name] = np.ascontiguousarray(tensors[name][:, :, :2])
    cu = np.array([0, 7, 7, 64, 90])
    o, final = layer(cu_seqlens=cu, **tensors)
    assert final.shape == (4, 4, 16, 16)
    want_o, want_final = reference.run(reference.step_program(layer.path),
                                       *split(layer, tensors), cu_seqlens=cu)
    assert relative_error(o, want_o) < TOLERANCE
    assert relative_error(final, want_final) < TOLERANCE


@pytest.mark.parametrize('example', ['gated_deltanet', 'gla', 'mlstm'])
def test_examples(example, cache):
    layer = linac.compile(os.path.join(EXAMPLES, example + '.mlir'), cache=cache)
    rng = np.random.default_rng()
    tensors = random_arguments(layer, 1, 9, 2, rng)
    o, final = layer(**tensors)
    want_o, want_final = reference.run(reference.step_program(layer.path),
                                       *split(layer, tensors))
    assert relative_error(o, want_o) < TOLERANCE
    assert relative_error(final, want_final) < TOLERANCE


def test_prefill_then_decode_is_one_prefill(cache):
    layer = linac.compile(SPECS['vector_gate'], cache=cache)
    rng = np.random.default_rng()
    tensors = random_arguments(layer, 3, 20, 2, rng)
    o, final = layer(**tensors)
    prefill = {n: np.ascontiguousarray(x[:, :17]) if n in layer.inputs else x
               for n, x in tensors.items()}
    _, states = layer(**prefill)
    # The pool keeps sequence b in slot 3 - b; slot 0 is not used.
    pool = np.zeros((4,) + states.shape[1:], np.float32)
    pool[[3, 2, 1]] = states
    steps = {n: np.ascontiguousarray(x[:, 17:]) if n in layer.inputs else x
             for n, x in tensors.items()}
    out = layer.decode(state_pool=pool, state_indices=[3, 2, 1], **steps)
    assert relative_error(out, o[:, 17:]) < TOLERANCE
    assert relative_error(pool[[3, 2, 1]], final) < TOLERANCE


def test_a_skipped_sequence_keeps_its_slot(cache):
    layer = linac.compile(SPECS['vector_gate'], cache=cache)
    rng = np.random.default_rng()
    tensors = random_arguments(layer, 2, 1, 2, rng)
    pool = rng.standard_normal((2, 2, 16, 16)).astype(np.float32)
    before = pool.copy()
    out = layer.decode(state_pool=pool, state_indices=[-1, 0], **tensors)
    assert np.array_equal(pool[1], before[1])
    assert not np.array_equal(pool[0], before[0])
    assert not out[0].any() and out[1].any()


def test_arguments_and_dimensions(cache):
    layer = linac.compile(SPECS['normalized'], cache=cache)
    assert layer.name == 'normalized' and layer.target == 'cpu'
    assert (layer.key_dim, layer.value_dim, layer.state_columns) == (16, 16, 17)
    assert layer.inputs == ('q', 'k', 'v', 'f', 'i') and layer.params == ()
    assert layer.arguments[0] == linac.Argument('q', 'input', 'key',
                                                '[B, T, H, K]')
    assert layer.arguments[-1].name == 'o'
    assert layer.max_decode_tokens == 8
    assert linac.load(layer.path).arguments == layer.arguments


def test_bad_calls_are_errors_that_name_the_argument(cache):
    layer = linac.compile(SPECS['vector_gate'], cache=cache)
    tensors = random_arguments(layer, 1, 4, 2, np.random.default_rng())
    with pytest.raises(linac.InvalidArgument, match='colour: not an argument'):
        layer(colour=tensors['q'], **tensors)
    del tensors['w']
    with pytest.raises(linac.InvalidArgument, match="missing input 'w'"):
        layer(**tensors)
    tensors['w'] = np.zeros((1, 4, 2, 15), np.float32)
    with pytest.raises(linac.InvalidArgument, match="input 'w' has shape"):
        layer(**tensors)
    tensors['w'] = np.zeros((4, 2), np.float32)
    with pytest.raises(linac.InvalidArgument, match=r"input 'w' has shape \[4, 2\]"):
        layer(**tensors)


def test_thread_counts_give_the_same_answer(cache):
    layer = linac.compile(SPECS['scalar_delta'], cache=cache)
    tensors = random_arguments(layer, 3, 70, 2, np.random.default_rng())
    o, final = layer(threads=1, **tensors)
    for threads in (0, 2, 7):
        o_t, final_t = layer(threads=threads, **tensors)
        assert np.array_equal(o_t, o) and np.array_equal(final_t, final)
    pool = np.zeros((3, 2, 16, 16), np.float32)
    steps = {n: np.ascontiguousarray(x[:, :2]) if n in layer.inputs else x
             for n, x in tensors.items()}
    one = layer.decode(state_pool=pool.copy(), state_indices=[0, 1, 2],
                       threads=1, **steps)
    assert np.array_equal(layer.decode(state_pool=pool.copy(),
                                       state_indices=[0, 1, 2], threads=3,
                                       **steps), one)
    for bad in (-1, 1025):
        with pytest.raises(linac.InvalidArgument, match=f'threads is {bad};'):
            layer(threads=bad, **tensors)
    with pytest.raises(linac.InvalidArgument, match='threads is 2.5'):
        layer(threads=2.5, **tensors)


# Shifts of the gate inputs that make each decay weak, so that a
# transition over a sequence of 100 tokens is far from zero.
WEAK_GATES = {'scalar_delta': {'g': -5}, 'vector_gate': {'g': -5},
              'normalized': {'f': -5}, 'two_sided': {'g': -5, 'h': -5}}


@pytest.mark.parametrize('name', sorted(WEAK_GATES))
def test_states_and_transitions_carry_any_entering_state(name, cache):
    # final(S0 + X) = final(S0) + A(X) for every sequence, empty and
    # longer than a chunk among them.
    layer = linac.compile(SPECS[name], cache=cache)
    rng = np.random.default_rng()
    cu = np.array([0, 7, 7, 40, 140])
    tensors = random_arguments(layer, 1, cu[-1], 2, rng)
    for input_name, shift in WEAK_GATES[name].items():
        tensors[input_name] += shift
    shape = (len(cu) - 1, 2, layer.key_dim, layer.state_columns)
    start = rng.standard_normal(shape).astype(np.float32)
    entering = rng.standard_normal(shape).astype(np.float32)
    final, transition = layer.states(initial_state=start, cu_seqlens=cu,
                                     transitions=True, **tensors)
    alone, none = layer.states(initial_state=start, cu_seqlens=cu, **tensors)
    assert none is None and np.array_equal(alone, final)
    _, want_final = layer(initial_state=start, cu_seqlens=cu, **tensors)
    _, moved = layer(initial_state=start + entering, cu_seqlens=cu, **tensors)
    assert relative_error(final, want_final) < TOLERANCE
    if layer.normal_form['erase'] != 'none':
        assert transition.shape == shape[:3] + (layer.key_dim,)
        carried = transition @ entering
    else:
        assert transition.shape == shape
        carried = transition * entering
    assert relative_error(carried, moved - want_final) < TOLERANCE
    # An empty sequence carries every state as it is.
    assert np.array_equal(carried[1], entering[1])


def test_states_refuses_what_it_cannot_carry(cache):
    erase = linac.compile(SPECS['two_sided_erase'], cache=cache)
    tensors = random_arguments(erase, 1, 5, 1, np.random.default_rng())
    with pytest.raises(linac.InvalidArgument,
                       match='erases under a value-side decay'):
        erase.states(**tensors)
    scan = linac.compile(os.path.join(EXAMPLES, 'full_matrix_gate.mlir'),
                         cache=cache)
    tensors = random_arguments(scan, 1, 5, 1, np.random.default_rng())
    with pytest.raises(linac.InvalidArgument,
                       match='runs as a recurrent scan'):
        scan.states(**tensors)
    layer = linac.compile(SPECS['scalar_delta'], cache=cache)
    tensors = random_arguments(layer, 1, 5, 1, np.random.default_rng())
    args, kept, _, _ = layer._forward_args(tensors, None, None, None, 0)
    with pytest.raises(linac.InvalidArgument,
                       match='a states call needs a final_state buffer'):
        linac._capi.check(linac._capi.lib.linac_states_host(
            layer.handle, ctypes.byref(args), None))


def test_a_bad_spec_is_a_compile_error(cache):
    with pytest.raises(linac.CompileError, match='may be positive'):
        linac.compile(SPECS['vector_gate'].replace('%log_a = arith.negf %sp',
                                                   '%log_a = arith.addf %sp, %sp'),
                      cache=cache)


def test_load_refuses_what_is_not_a_package(tmp_path):
    with pytest.raises(linac.PackageError, match='no manifest.json'):
        linac.load(tmp_path)
