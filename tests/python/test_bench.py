"""bench/compare_fla.py without a GPU: the cases a run times, and the floor."""

import os
import subprocess
import sys

from conftest import EXAMPLES, ROOT

COMPARE = os.path.join(ROOT, 'bench', 'compare_fla.py')


def compare(*args):
    return subprocess.run([sys.executable, COMPARE, *args], capture_output=True, text=True)


def cases(done):
    """{shape: [examples]} from --list's lines (those with # say why an
    example is skipped)."""
    out = {}
    for line in done.stdout.splitlines():
        if line.startswith('#'):
            continue
        shape, names = line.split(': ')
        out[shape] = names.split(',')
    return out


def test_suite_lists_every_shape_the_forward_is_judged_at():
    done = compare('--suite', '--list')
    assert done.returncode == 0, done.stderr
    listed = cases(done)
    assert list(listed) == ['B8 T4096 H16', 'B1 T32768 H16', 'B4 T8192 H64 (q, k 16)',
                            'B1 T32768 H64 (q, k 16)']
    with_fla = listed['B8 T4096 H16']
    assert listed['B1 T32768 H16'] == with_fla
    assert {'gated_deltanet', 'deltanet', 'kda', 'linear_attention'} <= set(with_fla)
    assert listed['B4 T8192 H64 (q, k 16)'] == ['gated_deltanet']
    # An example without an FLA op is named with the reason it is skipped.
    specs = {f[:-5] for f in os.listdir(EXAMPLES) if f.endswith('.mlir')}
    for name in specs - set(with_fla):
        assert f'# skip {name} at B8 T4096 H16: ' in done.stdout


def test_suite_keeps_the_examples_asked_for():
    listed = cases(compare('--suite', '--list', '--examples', 'kda'))
    assert listed == {'B8 T4096 H16': ['kda'], 'B1 T32768 H16': ['kda']}


def test_one_shape_lists_its_options():
    listed = cases(compare('--list', '-B', '2', '-T', '100', '-H', '8',
                           '--examples', 'gated_deltanet'))
    assert listed == {'B2 T100 H8': ['gated_deltanet']}


def test_suite_refuses_the_backward():
    done = compare('--suite', '--backward', '--list')
    assert done.returncode != 0
    assert '--suite times the forward only' in done.stderr


def test_floor_matches_the_worked_floors():
    done = compare('--selftest')
    assert done.returncode == 0, done.stdout + done.stderr
