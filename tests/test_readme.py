"""Every ```python block of README.md runs as written, each as its own script, as a reader would run it.

Conventions (for everyone editing the README):

- A block runs alone, from the repository root (relative paths such as ``examples/data`` work), with
  this checkout's ``rag_dedup`` first on the path.
- A block whose first line is ``# (continued)`` runs after the block before it, in the same script.
- A block whose first line is ``# not runnable: <reason>`` is skipped with that reason (an API key, a
  server this machine cannot have); the reason is required.
- A block naming ``redis://localhost:6379/0`` runs against the test session's real ``redis-server``.
- Paths under ``/tmp/`` are moved into the test's temporary folder.

The blocks' own ``assert`` statements check their claims.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
CONTINUED = "# (continued)"
NOT_RUNNABLE = re.compile(r"#\s*not runnable:\s*(.*)")


@dataclass(frozen=True)
class Block:
    line: int
    code: str
    skip: str | None


def readme_blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    blocks: list[Block] = []
    for m in FENCE.finditer(text):
        code = m.group(1)
        line = text.count("\n", 0, m.start()) + 1
        first = code.split("\n", 1)[0].strip()
        if first == CONTINUED and blocks:
            prev = blocks.pop()
            blocks.append(Block(prev.line, prev.code + "\n" + code, prev.skip))
            continue
        marker = NOT_RUNNABLE.fullmatch(first)
        blocks.append(Block(line, code, marker.group(1).strip() if marker else None))
    return blocks


def test_the_readme_has_runnable_blocks_and_every_skip_says_why():
    blocks = readme_blocks()
    assert sum(1 for b in blocks if b.skip is None) >= 4
    assert all(b.skip for b in blocks if b.skip is not None)


@pytest.mark.parametrize("block", readme_blocks(), ids=lambda b: f"README.md:{b.line}")
def test_readme_block_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if block.skip is not None:
        pytest.skip(f"marked not runnable: {block.skip}")
    code = block.code.replace("/tmp/", f"{tmp_path}/")
    if "redis://localhost:6379/0" in code:
        code = code.replace("redis://localhost:6379/0", request.getfixturevalue("redis_url"))
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, f"README.md line {block.line}:\n{proc.stderr[-3000:]}"
