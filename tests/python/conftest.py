import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, 'examples')
# The examples tests/python/test_torch_cuda.py runs on CUDA tensors.
CUDA_EXAMPLES = ['gated_deltanet', 'kda', 'gdn2', 'gla', 'mlstm']


@pytest.fixture
def cache(tmp_path):
    """A package cache of the test's own."""
    return str(tmp_path / 'cache')
