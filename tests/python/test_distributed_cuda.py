"""linac.distributed on GPUs: a batch split over one NCCL rank a GPU gives
the single GPU's output, final states and gradients, over the splits of
test_distributed.py, with the sm_90a packages tests/gpu/prepare.sh
compiled. Skipped with fewer than two GPUs; tests/gpu/run.sh --python runs
it on a machine with several."""

import os

import pytest

torch = pytest.importorskip('torch')
if torch.cuda.device_count() < 2:
    pytest.skip('fewer than two CUDA devices', allow_module_level=True)

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
    world = min(torch.cuda.device_count(), 8)
    run_ranks(world, 'nccl', packages, str(tmp_path / 'store'), TOLERANCE)
