"""Exact Jaccard similarity of shingle sets: against Python sets, and the batch form against the pairwise one."""

from __future__ import annotations

import numpy as np
import pytest
from tests.corpus import chunks, documents

from rag_dedup import jaccard, shingle_hashes
from rag_dedup.shingles import shingle_hashes_many


def test_jaccard_equals_python_sets() -> None:
    docs = documents()
    a, b = shingle_hashes(docs["licenses/GPL-2.txt"]), shingle_hashes(docs["licenses/LGPL-2.1.txt"])
    sa, sb = set(a.tolist()), set(b.tolist())
    assert jaccard(a, b) == pytest.approx(len(sa & sb) / len(sa | sb))
    assert 0.0 < jaccard(a, b) < 0.5


def test_jaccard_many_equals_pairwise() -> None:
    sets = shingle_hashes_many([t for _, t in chunks()[:80]]) + [np.empty(0, dtype=np.uint32)]
    from rag_dedup.similarity import jaccard_many

    for a in sets[:5] + [sets[-1]]:
        assert jaccard_many(a, sets).tolist() == [jaccard(a, b) for b in sets]
    assert jaccard_many(sets[0], []).tolist() == []


# --- the query-time matrix and its shingle cache (TextSimilarity) -------------------------------------


def _reference_matrix(texts: list[str], ngram: int) -> np.ndarray:
    sets = [set(shingle_hashes(t, ngram).tolist()) for t in texts]
    out = np.array([[len(a & b) / len(a | b) if a and b else 0.0 for b in sets] for a in sets])
    np.fill_diagonal(out, [1.0 if s else 0.0 for s in sets])
    return out


def test_the_matrix_is_the_same_cold_warm_partly_remembered_and_with_repeated_texts() -> None:
    """What the cache remembers changes the time only: every mix of remembered and fresh texts, repeats
    of one text in one call included (each is a row of its own), gives the reference matrix."""
    from rag_dedup.similarity import TextSimilarity

    texts = [t[:600] for t in list(documents().values())[:12]]
    texts = texts[:8] + [texts[2], texts[2] + " and one more clause of text here", texts[5]]
    sim = TextSimilarity()
    expected = _reference_matrix(texts, 5)
    assert np.array_equal(sim.matrix(texts, 5, 0), expected) and len(sim) == 0  # capacity 0: nothing kept
    assert np.array_equal(sim.matrix(texts[:4], 5, 4096)[:4, :4], expected[:4, :4])
    assert np.array_equal(sim.matrix(texts, 5, 4096), expected)  # four remembered, the others fresh
    assert np.array_equal(sim.matrix(texts, 5, 4096), expected)  # all remembered
    assert len(sim) == len(set(texts))


def test_the_cache_keeps_each_ngram_apart_and_stays_within_its_capacity() -> None:
    """A TextSimilarity shared by collapsers of two ngram sizes: each gets its own shingles, and the
    remembered texts (of both sizes together) never exceed the capacity, the oldest evicted first."""
    from rag_dedup.similarity import TextSimilarity

    texts = [t[:400] for t in list(documents().values())[:10]]
    sim = TextSimilarity()
    for ngram in (3, 5, 3):
        assert np.array_equal(sim.matrix(texts, ngram, 16), _reference_matrix(texts, ngram))
        assert len(sim) <= 16
    sim.matrix(texts[:4], 5, 6)
    assert len(sim) == 6
    assert np.array_equal(sim.matrix(texts, 5, 6), _reference_matrix(texts, 5))
    sim.clear()
    assert len(sim) == 0
