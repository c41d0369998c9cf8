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
