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
