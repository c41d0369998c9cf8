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


def test_the_arena_keeps_every_remembered_set_through_repacks_evictions_and_repeats() -> None:
    """The cache's one arena (similarity._ShingleCache): many queries of fresh and remembered texts, more
    than the arena holds (it is repacked), with evictions (capacity 40) and repeats: every remembered set
    read back (sets of all-remembered texts, remembered_sets' places) is the set computed without a cache;
    the sets a reader took stay as they were through later puts; a text without shingles is not remembered."""
    from rag_dedup.similarity import TextSimilarity

    pool = [t[:300 + 37 * i % 900] for i, t in enumerate(list(documents().values())[:60])]
    sim = TextSimilarity()
    warm = 0
    for q in range(40):
        texts = [pool[(q * 7 + j * 3) % len(pool)] for j in range(12)]
        fresh = TextSimilarity().sets(texts, 5, 0)
        got = sim.sets(texts, 5, 40)
        assert np.array_equal(got[0], fresh[0]) and np.array_equal(got[1], fresh[1])
        remembered = sim.remembered_sets(texts, 5)
        assert (remembered is None) == any(t not in sim.remembered(5) for t in texts) and len(sim) <= 40
        if remembered is None:  # the oldest evicted, some of this query's among them
            continue
        warm += 1
        arena, places = remembered
        sets = [arena[p >> 32 : (p >> 32) + (p & 0xFFFFFFFF)] for p in places.tolist()]
        assert np.array_equal(np.concatenate(sets), fresh[0]) and [len(s) for s in sets] == fresh[1].tolist()
        sim.sets(pool[q % 7 :: 7], 5, 40)  # more puts: appends after the used length, or a repack into a new arena
        assert np.array_equal(np.concatenate(sets), fresh[0])  # what a reader took is left as it was
    assert warm >= 10
    assert sim.remembered_sets([pool[0], "never seen before, not once"], 5) is None
    sim.sets(["   ", pool[1]], 5, 40)
    assert "   " not in sim.remembered(5) and pool[1] in sim.remembered(5)
    sim.clear()
    assert len(sim) == 0 and sim.remembered_sets([pool[1]], 5) is None
