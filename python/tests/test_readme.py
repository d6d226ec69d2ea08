"""python/README.md's examples run as written (only the server addresses are this suite's)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
EXAMPLE_SERVERS = "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003"


def test_readme_examples_run(servers):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 2
    for block in blocks:
        assert EXAMPLE_SERVERS in block
        exec(compile(block.replace(EXAMPLE_SERVERS, servers), str(README), "exec"), {})
