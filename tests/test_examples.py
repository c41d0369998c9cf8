"""The examples/ scripts run as a user would run them, offline, and show what they promise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(script: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_quickstart_dedups_at_ingest_and_at_query_time() -> None:
    out = run("quickstart.py")
    assert "exact and" in out and "near duplicates" in out
    assert "With DedupPostprocessor(top_n=10) over the top 30:" in out
    assert "DistinctRetriever(top_k=10):" in out
    assert "folded in:" in out  # citations of the suppressed copies are kept


@pytest.mark.parametrize("script", ["vector_index.py"])
def test_other_examples_run(script: str) -> None:
    assert run(script).strip()


def readme_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = text.split("```python\n")[1:]
    return [b.split("```", 1)[0] for b in blocks if b.startswith("from rag_dedup import DedupIndex")]


@pytest.mark.parametrize("block", readme_blocks(), ids=lambda b: b.splitlines()[0][:40])
def test_readme_code_runs(block: str, tmp_path: Path) -> None:
    """The README's self-contained examples are executed, so they cannot drift from the code."""
    from rag_dedup import DedupIndex

    code = block.replace("/tmp/dedup-index", str(tmp_path / "dedup-index"))
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # the block's own asserts check its claims
    assert isinstance(namespace["index"], DedupIndex)
    assert (tmp_path / "dedup-index" / "manifest.json").is_file()


def test_readme_has_runnable_examples() -> None:
    assert readme_blocks()
