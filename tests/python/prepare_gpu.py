"""Run here, on the machine with the compiler: fills a folder with what the
CUDA Python tests need on a GPU machine that has no compiler.

    python3 tests/python/prepare_gpu.py .gpu-python [--target sm_90a]

DIR/packages: the examples test_torch_cuda.py opens, and in
DIR/packages/cpu their cpu packages, whose gradients it compares with the
CUDA packages'; DIR/cache: the
packages of every call test_fla_cuda.py makes, through linac.fla.prepare;
DIR/linac: a copy of the compiler, whose bytes key that cache.
tests/gpu/run.sh --python uses the folder when it exists."""

import argparse
import os
import shutil
import subprocess

import torch

import linac
import linac.fla
from conftest import CUDA_EXAMPLES, EXAMPLES
from test_fla_cuda import CASES, call, draw


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('directory')
    parser.add_argument('--target', default='sm_90a')
    options = parser.parse_args()
    directory = os.path.abspath(options.directory)
    os.makedirs(os.path.join(directory, 'packages', 'cpu'), exist_ok=True)
    compiler = linac.find_compiler()
    shutil.copy2(compiler, os.path.join(directory, 'linac'))
    for name in CUDA_EXAMPLES:
        for target, out in ((options.target, name + '.linac'),
                            ('cpu', os.path.join('cpu', name + '.linac'))):
            subprocess.run([compiler, 'compile',
                            os.path.join(EXAMPLES, name + '.mlir'),
                            '--target', target, '-o',
                            os.path.join(directory, 'packages', out),
                            '--force'], check=True)
    os.environ['LINAC_CACHE_DIR'] = os.path.join(directory, 'cache')
    x = draw(torch.float32, 'cpu', T=2)
    for name in sorted(CASES):
        args, kwargs = call(name, x)
        layer = linac.fla.prepare(getattr(linac.fla, name), *args,
                                  target=options.target, **kwargs)
        print(f'linac.fla.{name}: {os.path.basename(layer.path)}')


if __name__ == '__main__':
    main()
