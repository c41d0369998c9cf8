"""The framework-free collapse (rag_dedup.collapse) on real text of the shipped corpus."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rag_dedup.collapse import Collapser, Fold, Kept, Passage

CORPUS = Path(__file__).parent / "data" / "corpus"


@pytest.fixture(scope="module")
def paragraphs() -> list[str]:
    """Real paragraphs of the licence texts, long enough to shingle, each once."""
    seen: dict[str, None] = {}
    for path in sorted((CORPUS / "licenses").glob("*.txt")):
        for block in path.read_text(encoding="utf-8").split("\n\n"):
            if len(block.split()) >= 40:
                seen.setdefault(block, None)
    return list(seen)


def test_importing_the_core_collapse_loads_no_framework():
    code = (
        "import sys, rag_dedup.collapse, rag_dedup.similarity; "
        "print(sorted(m for m in ('llama_index', 'langchain_core', 'haystack', 'pyspark') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent)
    assert out.stdout.strip() == "[]"


def test_kept_passages_come_back_in_input_order_with_their_folds(paragraphs):
    a, b = paragraphs[0], paragraphs[1]
    passages = [
        Passage("a", a, 1.0, ref_doc_id="doc-a"),
        Passage("b", b, 3.0),
        Passage("a2", "  " + a.upper() + "\n", 2.0, ref_doc_id="doc-a2"),
        Passage("img", None, 0.5),
    ]
    kept = Collapser().collapse(passages)
    assert [k.position for k in kept] == [0, 1, 3]
    assert kept[0] == Kept(0, (Fold(2, "a2", "doc-a2", 2.0, "exact", 1.0),), 1.0, None)
    assert kept[1].folded == () and kept[2].folded == ()


def test_blank_passages_pass_through_but_take_no_top_n_place(paragraphs):
    passages = [Passage("blank", "   ", 9.0), Passage("a", paragraphs[0], 2.0), Passage("b", paragraphs[1], 1.0)]
    kept = Collapser().collapse(passages, top_n=1)
    assert [k.position for k in kept] == [0, 1]
    with pytest.raises(ValueError, match="top_n"):
        Collapser().collapse(passages, top_n=0)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        pytest.param({"threshold": 0.0}, ValueError, "threshold", id="threshold-zero"),
        pytest.param({"threshold": "0.8"}, TypeError, "threshold", id="threshold-type"),
        pytest.param({"ngram": 0}, ValueError, "ngram", id="ngram-zero"),
        pytest.param({"cache_size": -1}, ValueError, "cache_size", id="cache-negative"),
        pytest.param({"index": "not an index"}, TypeError, "index", id="index-type"),
    ],
)
def test_bad_settings_are_refused_with_the_name(kwargs, error, match):
    with pytest.raises(error, match=match):
        Collapser(**kwargs)
