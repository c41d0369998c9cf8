"""The compiled collapse kernels (rag_dedup.compiled.collapse) against the numpy reference, value for value.

The reference is TextSimilarity.matrix (rag_dedup.similarity) and Collapser's greedy pass written in
Python (Collapser._greedy, the path taken when ``compiled.COMPILED`` is False); the kernels must give the
same similarities, bit for bit, and the same Kept and Fold decisions, on real text of the shipped corpus
and on generated input (random unicode, empty and long texts, NaN scores, blank texts, stamps).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_dedup import compiled
from rag_dedup.collapse import Collapser, Passage
from rag_dedup.compiled.collapse import collapse_rows, pair_counts, similarity_rows
from rag_dedup.similarity import TextSimilarity
from tests.test_collapse import _top30s, edited

pytestmark = pytest.mark.skipif(not compiled.COMPILED, reason="numba is not in use (RAG_DEDUP_KERNELS=reference)")


def _reference_matrix(texts: list[str]) -> np.ndarray:
    return TextSimilarity().matrix(texts, 5, 0)


def _kernel_matrix(texts: list[str]) -> np.ndarray:
    values, counts = TextSimilarity().sets(texts, 5, 0)
    return similarity_rows(values, counts)


def _both_paths(monkeypatch: pytest.MonkeyPatch, run) -> tuple[object, object]:
    """``run()`` on the compiled path, then on the reference path (fresh collapsers: no shared cache)."""
    fast = run()
    with monkeypatch.context() as m:
        m.setattr(compiled, "COMPILED", False)
        slow = run()
    return fast, slow


@pytest.fixture(scope="module")
def tops() -> list[list[Passage]]:
    return _top30s()


def test_the_kernel_matrix_equals_the_reference_on_real_top_30s(tops):
    for passages in tops:
        texts = [p.text for p in passages]
        assert np.array_equal(_kernel_matrix(texts), _reference_matrix(texts))  # type: ignore[arg-type]


@pytest.mark.parametrize("trust", [pytest.param(False, id="checked"), pytest.param(True, id="trusted")])
def test_the_kernel_decides_as_the_reference_on_real_top_30s(tops, monkeypatch, trust):
    """Real BM25-like top 30s full of licence copies, stamped by a DedupIndex: the same Kept and Fold."""
    fast, slow = _both_paths(monkeypatch, lambda: [Collapser(trust_clusters=trust).collapse(p, 10) for p in tops])
    assert fast == slow
    assert sum(len(k.folded) for kept in fast for k in kept) > 10  # type: ignore[union-attr]


def test_the_kernel_decides_as_the_reference_with_blank_texts_images_nan_scores_and_mixed_stamps(tops, monkeypatch):
    """Every branch of the greedy pass on real text: unstamped passages among stamped ones (trusted and
    checked), a stamp shared by a near-copy and an edited family, NaN and None scores, texts missing."""
    nan = float("nan")
    cases = []
    for j, passages in enumerate(tops):
        rows = list(passages)
        rows[3] = rows[3]._replace(cluster=None)
        rows[5] = rows[5]._replace(score=nan)
        rows[7] = rows[7]._replace(text="   ")
        rows[9] = rows[9]._replace(text=None)
        rows[11] = rows[11]._replace(score=None)
        base = rows[0].text or ""
        rows += [Passage(f"e{j}-{k}", edited(base, k), 0.1, rows[0].cluster) for k in (3, 6, 12, 40)]
        rows.append(Passage(f"up{j}", base.upper(), nan, "elsewhere"))
        cases.append(rows)
    for trust in (False, True):
        for floor in (None, 0.8):
            fast, slow = _both_paths(
                monkeypatch, lambda: [Collapser(trust_clusters=trust, floor=floor).collapse(p) for p in cases]
            )
            assert fast == slow


_texts = st.lists(
    st.one_of(
        st.text(max_size=60),
        st.text(alphabet=st.sampled_from("ab cd\n* 1. x"), max_size=200),
        st.just(""),
        st.just("one two three four five six seven " * 40),  # long
    ),
    min_size=1,
    max_size=64,
)


@settings(max_examples=150, deadline=None)
@given(texts=_texts)
def test_the_kernel_matrix_equals_the_reference_on_random_unicode(texts):
    assert np.array_equal(_kernel_matrix(texts), _reference_matrix(texts))


@settings(max_examples=150, deadline=None)
@given(
    texts=_texts,
    data=st.data(),
    trust=st.booleans(),
    threshold=st.sampled_from([0.5, 0.8, 1.0]),
)
def test_the_kernel_decides_as_the_reference_on_random_passages(texts, data, trust, threshold):
    n = len(texts)
    clusters = data.draw(st.lists(st.sampled_from([None, "a", "b", "c"]), min_size=n, max_size=n))
    scores = data.draw(st.lists(st.sampled_from([None, 1.0, 2.0, math.nan]), min_size=n, max_size=n))
    passages = [Passage(f"k{i}", t, s, c) for i, (t, s, c) in enumerate(zip(texts, scores, clusters))]
    fast = Collapser(threshold, trust_clusters=trust).collapse(passages)
    previous = compiled.COMPILED
    compiled.COMPILED = False
    try:
        slow = Collapser(threshold, trust_clusters=trust).collapse(passages)
    finally:
        compiled.COMPILED = previous
    assert fast == slow


def test_pair_counts_counts_shared_values_of_many_sets_and_keeps_the_sizes_on_the_diagonal():
    """Sets sharing values in many overlapping groups (the mask grouping), and empty sets."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(1, 65))
        pool = (rng.integers(1, 2**57, int(rng.integers(1, 40)), dtype=np.int64).astype(np.uint64)) << np.uint64(6)
        sets = [np.unique(rng.choice(pool, int(rng.integers(0, len(pool) + 1)), replace=False)) for _ in range(n)]
        inter = pair_counts(np.concatenate(sets), np.array([len(s) for s in sets], dtype=np.int64))
        expected = np.array([[len(np.intersect1d(a, b)) for b in sets] for a in sets], dtype=np.int64)
        assert np.array_equal(inter, expected)


def test_collapse_rows_without_comparing_folds_by_trusted_stamps_only():
    order = np.arange(4, dtype=np.int64)
    clusters = np.array([0, 0, -1, 1], dtype=np.int64)
    target, similarity, reason = collapse_rows(
        np.empty(0, dtype=np.uint64), np.zeros(4, dtype=np.int64), order, clusters, True, False, 0.8, 0.7
    )
    assert target.tolist() == [-1, 0, -1, -1]
    assert reason.tolist() == [-1, 0, -1, -1] and math.isnan(similarity[1])
