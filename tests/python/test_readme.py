"""The README's Python quick start runs as written."""

import os
import re

from conftest import ROOT


def test_quick_start_runs(monkeypatch, capsys):
    with open(os.path.join(ROOT, 'README.md')) as f:
        readme = f.read()
    section = readme[readme.index('## Python'):]
    code = re.search(r'```python\n(.*?)```', section, re.S).group(1)
    monkeypatch.chdir(ROOT)
    exec(compile(code, 'README.md', 'exec'), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["('q', 'k', 'v', 'g', 'b') ('A_log', 'dt_bias')",
                       '(2, 64, 4, 128) (2, 4, 128, 128)',
                       '(2, 64, 4, 128) (2, 4, 128, 128)']
