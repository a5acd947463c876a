"""linac.distributed on GPUs: a batch split over one NCCL rank a GPU gives
the single GPU's output, final states and gradients, over the splits of
test_distributed.py, with the sm_90a packages tests/gpu/prepare.sh
compiled. On a machine with one GPU, two gloo ranks share it (NCCL takes
one rank a GPU). Skipped without a GPU; tests/gpu/run.sh --python runs
it."""

import os

import pytest

torch = pytest.importorskip('torch')
if not torch.cuda.is_available():
    pytest.skip('no CUDA device', allow_module_level=True)

from conftest import CUDA_EXAMPLES
from test_distributed import run_ranks
from test_torch_cuda import PACKAGES

# Both sides run the CUDA packages in float32, in different orders of
# chunks and segments.
TOLERANCE = 1e-3


def test_split_batch_matches_one_gpu(tmp_path):
    packages = [(name, os.path.join(PACKAGES, name + '.linac'))
                for name in CUDA_EXAMPLES]
    missing = [path for _, path in packages if not os.path.isdir(path)]
    if missing:
        pytest.skip(f'no {missing[0]}: run tests/gpu/prepare.sh')
    gpus = min(torch.cuda.device_count(), 8)
    backend = 'nccl' if gpus > 1 else 'gloo'
    run_ranks(max(gpus, 2), backend, packages, str(tmp_path / 'store'),
              TOLERANCE, gpus)
