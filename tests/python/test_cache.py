"""The package cache: shared by processes, safe when several compile the
same spec at once, rebuilt when an entry is corrupt."""

import multiprocessing
import os
import shutil

import numpy as np
import pytest

import linac
from test_layer import SPECS, random_arguments


def compile_and_run(cache):
    # A kernel cache of this test's own, so that every process builds the
    # kernel and their compiles overlap.
    os.environ['LINAC_CACHE_DIR'] = os.path.join(os.path.dirname(cache),
                                                 'kernels')
    layer = linac.compile(SPECS['scalar_delta'], cache=None)
    tensors = random_arguments(layer, 1, 5, 1, np.random.default_rng(0))
    o, _ = layer(**tensors)
    return layer.path, float(np.abs(o).sum())


def test_processes_compiling_one_spec_at_once_share_a_whole_package(cache):
    context = multiprocessing.get_context('spawn')
    with context.Pool(4) as pool:
        results = pool.map(compile_and_run, [cache] * 4)
    assert len({path for path, _ in results}) == 1
    assert len({total for _, total in results}) == 1
    packages = os.path.dirname(results[0][0])
    assert os.listdir(packages) == [os.path.basename(results[0][0])]


def test_the_cache_serves_a_compiled_spec(cache):
    first = linac.compile(SPECS['vector_gate'], cache=cache)
    stamp = os.stat(os.path.join(first.path, 'manifest.json')).st_mtime_ns
    again = linac.compile(SPECS['vector_gate'], cache=cache)
    assert again.path == first.path
    assert os.stat(os.path.join(again.path, 'manifest.json')).st_mtime_ns == stamp
    other = linac.compile(SPECS['vector_gate'], 'cpu', cache=cache,
                          options=['--decode-warps', '8'])
    assert other.path != first.path


@pytest.mark.parametrize('damage', ['truncate', 'not_a_package'])
def test_a_corrupt_entry_is_compiled_again(cache, damage):
    path = linac.compile(SPECS['vector_gate'], cache=cache).path
    if damage == 'truncate':
        library = os.path.join(path, 'layer.so')
        with open(library, 'r+b') as f:
            f.truncate(os.path.getsize(library) // 2)
    else:
        for name in os.listdir(path):
            os.unlink(os.path.join(path, name))
        with open(os.path.join(path, 'notes.txt'), 'w') as f:
            f.write('not a package')
    layer = linac.compile(SPECS['vector_gate'], cache=cache)
    assert layer.path == path
    tensors = random_arguments(layer, 1, 3, 1, np.random.default_rng(1))
    o, _ = layer(**tensors)
    assert np.isfinite(o).all()


def test_a_change_to_the_templates_compiles_again(cache, tmp_path,
                                                  monkeypatch):
    templates = tmp_path / 'templates'
    source = os.path.join(os.path.dirname(__file__), '..', '..', 'templates')
    shutil.copytree(source, templates)
    monkeypatch.setenv('LINAC_TEMPLATES', str(templates))
    first = linac.compile(SPECS['vector_gate'], cache=cache)
    assert linac.compile(SPECS['vector_gate'], cache=cache).path == first.path
    with open(templates / 'linac' / 'cpu' / 'layer.h', 'a') as f:
        f.write('\n// A change the kernel must be compiled with.\n')
    assert linac.compile(SPECS['vector_gate'], cache=cache).path != first.path


def test_the_compiler_is_known_by_its_bytes_not_its_path(cache, tmp_path,
                                                         monkeypatch):
    first = linac.compile(SPECS['vector_gate'], cache=cache)
    copy = tmp_path / 'elsewhere' / 'linac'
    copy.parent.mkdir()
    shutil.copy2(linac.find_compiler(), copy)
    monkeypatch.setenv('LINAC_COMPILER', str(copy))
    assert linac.compile(SPECS['vector_gate'], cache=cache).path == first.path
    with open(copy, 'ab') as f:
        f.write(b'\0')
    assert linac.compile(SPECS['vector_gate'], cache=cache).path != first.path
