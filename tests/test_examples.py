"""The examples/ scripts run as a user would run them, offline, and show what they promise."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(script: str) -> str:
    # PYTHONPATH: the rag_dedup of this checkout, not whichever one is installed in the environment.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)], capture_output=True, text=True, timeout=300, cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def quickstart() -> str:
    return run("quickstart.py")


def test_quickstart_dedups_at_ingest_and_at_query_time(quickstart: str) -> None:
    out = quickstart
    assert "exact and" in out and "near duplicates" in out
    assert "With DedupPostprocessor(top_n=10) over the top 30:" in out
    distinct = out.split("DistinctRetriever(top_k=10):\n", 1)[1].split("\n\n", 1)[0]
    assert len(distinct.splitlines()) == 10  # k distinct passages, always
    assert "folded in:" in out  # citations of the suppressed copies are kept


def test_quickstart_and_the_command_see_the_same_corpus(quickstart: str, capsys) -> None:
    """Regression (issue 19 item 7): examples/data gave 26 documents / 572 chunks in the command and
    25 / 722 in the quickstart (README.md left out, HTML and JSON read as raw markup in one)."""
    from rag_dedup.app.cli import main

    m = re.match(r"(\d+) documents -> (\d+) chunks", quickstart)
    assert m, "the quickstart no longer prints its counts"
    assert main(["scan", str(ROOT / "examples" / "data"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (int(m[1]), int(m[2])) == (d["documents"], d["chunks"])


@pytest.mark.parametrize("script", ["vector_index.py"])
def test_other_examples_run(script: str) -> None:
    assert run(script).strip()
