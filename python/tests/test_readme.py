"""The Python examples of python/README.md and of the repository's README run as written (only
the server addresses are this suite's)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
MAIN_README = Path(__file__).resolve().parents[2] / "README.md"
EXAMPLE_SERVERS = "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003"


def test_readme_examples_run(servers):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 2
    for block in blocks:
        assert EXAMPLE_SERVERS in block
        exec(compile(block.replace(EXAMPLE_SERVERS, servers), str(README), "exec"), {})


def test_the_main_readmes_python_example_runs(servers, capsys):
    blocks = re.findall(r"```python\n(.*?)```", MAIN_README.read_text(), re.S)
    assert len(blocks) == 1
    assert EXAMPLE_SERVERS in blocks[0]
    exec(compile(blocks[0].replace(EXAMPLE_SERVERS, servers), str(MAIN_README), "exec"), {})
    assert "invoice 42 is ours, fencing token" in capsys.readouterr().out
