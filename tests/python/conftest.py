import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, 'examples')


@pytest.fixture
def cache(tmp_path):
    """A package cache of the test's own."""
    return str(tmp_path / 'cache')
