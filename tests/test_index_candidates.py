"""The bulk candidate path of add_many: a Jaccard upper bound that never drops a true duplicate pair,
and the bulk exact verification that equals the one-pair reference value for value."""

from __future__ import annotations

import random

import numpy as np
import pytest
from tests.corpus import chunks, edited
from hypothesis import given, settings
from hypothesis import strategies as st

import rag_dedup.index as index_module
from rag_dedup import DedupIndex, compiled, jaccard
from rag_dedup.shingles import shingle_hashes_many
from rag_dedup.similarity import jaccard_pairs, jaccard_upper_bounds
from rag_dedup.storage.base import Storage
from rag_dedup.storage.memory import MemoryStorage


def all_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    left, right = np.triu_indices(n, k=1)
    return left.astype(np.int64), right.astype(np.int64)


@pytest.fixture(scope="module")
def real_sets() -> list[np.ndarray]:
    """Real chunks and near-copies of them: half lightly edited (J around and above 0.8), half
    heavily (J from ~0.8 down to ~0.2), so that pairs sit on both sides of the threshold."""
    base = list(chunks())[:150]
    rng = random.Random(3)
    texts = [t for _, t in base]
    texts += [edited(t, rng.uniform(0.0, 0.04) if i % 2 else rng.uniform(0.04, 0.25), seed=i) for i, (_, t) in enumerate(base)]
    return shingle_hashes_many(texts)


def test_bound_is_never_below_the_exact_jaccard_on_real_text(real_sets: list[np.ndarray]) -> None:
    """The filter's guarantee: bound >= exact Jaccard for every pair, so a pair with J >= threshold
    always passes (and verification, not the bound, decides)."""
    left, right = all_pairs(len(real_sets))
    bounds = jaccard_upper_bounds(real_sets, left, right)
    exact = np.array([jaccard(real_sets[i], real_sets[j]) for i, j in zip(left.tolist(), right.tolist())])
    assert (bounds >= exact).all()
    assert (exact >= 0.8).sum() >= 40
    assert ((exact >= 0.6) & (exact < 0.8)).sum() >= 10  # the planted near-copies: the guarantee is exercised
    assert bounds[exact >= 0.8].min() >= 0.8


def test_bound_rejects_most_unrelated_pairs(real_sets: list[np.ndarray]) -> None:
    """The filter is worth having: almost every pair of unrelated chunks has a bound far below 0.8."""
    left, right = all_pairs(len(real_sets))
    bounds = jaccard_upper_bounds(real_sets, left, right)
    exact = np.array([jaccard(real_sets[i], real_sets[j]) for i, j in zip(left.tolist(), right.tolist())])
    unrelated = exact < 0.5
    assert unrelated.sum() > 10_000
    assert (bounds[unrelated] < 0.8).mean() > 0.999


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 2**32 - 1), max_size=300),
    st.lists(st.integers(0, 2**32 - 1), max_size=300),
    st.lists(st.integers(0, 2**32 - 1), max_size=300),
)
def test_bound_property(shared: list[int], only_a: list[int], only_b: list[int]) -> None:
    """For any two sets (overlapping by construction), bound >= exact Jaccard; equal sets give 1.0
    (0.0 when empty, as jaccard)."""
    a = np.unique(np.array(shared + only_a, dtype=np.uint32))
    b = np.unique(np.array(shared + only_b, dtype=np.uint32))
    bounds = jaccard_upper_bounds([a, b], np.array([0, 0, 1]), np.array([1, 0, 1]))
    assert bounds[0] >= jaccard(a, b)
    assert bounds[1] == jaccard(a, a) == (1.0 if len(a) else 0.0)
    assert bounds[2] == (1.0 if len(b) else 0.0)


@pytest.mark.parametrize(
    "size",
    [pytest.param(300, id="uint8-overflow"), pytest.param(70_000, id="uint16-overflow")],
)
def test_bound_counts_do_not_wrap_for_large_sets(size: int) -> None:
    """Regression guard: counts kept in too narrow a dtype wrap around (300 mod 256, 70,000 mod 65,536),
    which makes the bound too small and would drop a true pair; the counts widen instead."""
    a = np.arange(size, dtype=np.uint32)  # all in bucket 0 (top 8 bits are zero)
    b = np.arange(size // 2, dtype=np.uint32)
    small = np.array([1 << 31], dtype=np.uint32)  # a set with small counts in the same call
    bounds = jaccard_upper_bounds([small, a, b], np.array([1, 0]), np.array([2, 1]))
    assert bounds.tolist() == [0.5, 0.0]
    assert jaccard(a, b) == 0.5


def test_bulk_exact_jaccard_equals_the_pairwise_reference(real_sets: list[np.ndarray]) -> None:
    """jaccard_pairs gives the very floats jaccard gives (similarities are stored and compared across
    build orders), over several blocks of pairs, in both orders, with empty sets and repeated sets."""
    sets = [*real_sets[:70], np.empty(0, dtype=np.uint32), real_sets[0]]
    left, right = all_pairs(len(sets))
    left, right = np.concatenate((left, right, [70, 3])), np.concatenate((right, left, [70, 3]))
    got = jaccard_pairs(sets, left, right)
    assert len(left) > 2 * 256
    assert got.tolist() == [jaccard(sets[i], sets[j]) for i, j in zip(left.tolist(), right.tolist())]
    assert got[-1] == 1.0 and got[-2] == 0.0
    assert jaccard_pairs(sets, np.array([], dtype=np.int64), np.array([], dtype=np.int64)).tolist() == []


def test_bound_of_no_pairs() -> None:
    assert jaccard_upper_bounds([], np.array([], dtype=np.int64), np.array([], dtype=np.int64)).tolist() == []


def test_filtered_index_equals_verifying_every_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference path (every LSH candidate verified exactly: the filter switched off by a bound
    of 1.0) gives the same clusters, representatives and similarities as the filtered bulk path (the
    numpy path's), and as the compiled path (every candidate's exact Jaccard by the kernel, no bound)."""
    base = list(chunks())
    rng = random.Random(8)
    items = base + [(f"near/{i}", edited(t, rng.uniform(0.0, 0.2), seed=i)) for i, (_, t) in enumerate(rng.sample(base, 80))]
    keys = [k for k, _ in items]
    kernel = DedupIndex(threshold=0.8)
    kernel.add_many(items)
    monkeypatch.setattr(compiled, "COMPILED", False)
    filtered = DedupIndex(threshold=0.8)
    filtered.add_many(items)
    monkeypatch.setattr(index_module, "jaccard_upper_bounds", lambda sets, left, right: np.ones(len(left)))
    reference = DedupIndex(threshold=0.8)
    reference.add_many(items)
    assert filtered.matches(keys) == reference.matches(keys) == kernel.matches(keys)
    assert sum(m.duplicate_of is not None for m in filtered.matches(keys)) >= 40


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.booleans()), min_size=1, max_size=6), st.integers(0, 2**32 - 1))
def test_memory_band_pairs_equal_the_generic_ones(batches: list[tuple[int, bool]], seed: int) -> None:
    """MemoryStorage's array path answers exactly as the Storage default built from query_bands,
    with buffered single inserts and deleted groups."""
    rng = np.random.default_rng(seed)
    storage = MemoryStorage()
    pool = rng.integers(0, 2**64 - 1, size=50, dtype=np.uint64)  # few distinct keys: many shared buckets
    gid = 0
    for size, delete in batches:
        keys = rng.choice(pool, size=(size, 4))
        storage.bands.insert(list(range(gid, gid + size)), keys)
        gid += size
        if delete:
            storage.bands.delete(int(rng.integers(0, gid)))
    probe = rng.choice(pool, size=(20, 4))
    rows, gids = storage.query_band_pairs(probe)
    ref_rows, ref_gids = Storage.query_band_pairs(storage, probe)
    assert rows.tolist() == ref_rows.tolist()
    assert gids.tolist() == ref_gids.tolist()
    assert rows.dtype == gids.dtype == np.int64


def test_two_text_clusters_equal_cluster_component() -> None:
    """A component of two texts gets what cluster_component gives for the two on their own, with the
    default policy and with a custom one (shortest text first)."""
    from rag_dedup.clusters import cluster_component
    from rag_dedup.policy import Member, longest_then_authority

    def shortest(members):
        return min(members, key=lambda m: (m.length, m.key))

    base = list(chunks())[:120]
    rng = random.Random(4)
    items = base + [(f"near/{i}", edited(t, rng.uniform(0.0, 0.03), seed=i)) for i, (_, t) in enumerate(base[:40])]
    texts = dict(items)
    for policy in (None, shortest):
        index = DedupIndex(threshold=0.8, policy=policy)
        index.add_many(items)
        pairs = [ms for _, ms in index.clusters(include_singletons=False) if len(ms) == 2]
        assert len(pairs) >= 20
        for a, b in pairs:
            sets = dict(zip((a, b), shingle_hashes_many([texts[a], texts[b]])))
            members = [(Member(k, len(texts[k]), None, 0.0, None), i) for i, k in enumerate((a, b))]
            expected = cluster_component(
                members, {0: sets[a], 1: sets[b]}, index.drift_floor, policy or longest_then_authority
            )
            got = sorted([(a, index.match(a).similarity), (b, index.match(b).similarity)])
            assert [(rep, sorted(ms)) for rep, ms in expected] == [(index.resolve(a), got)]


def _apart_pairs_by_definition(parts: list[tuple[list[int], list[int]]]) -> list[tuple[int, int, int]]:
    """Every two parts, new groups against all of the later part, old groups against its new ones."""
    out = []
    for i, (a_old, a_new) in enumerate(parts):
        for b_old, b_new in parts[i + 1 :]:
            for x in a_new:
                out.extend((rank, x, y) for rank, y in enumerate([*b_old, *b_new]))
            for x in a_old:
                out.extend((rank, x, y) for rank, y in enumerate(b_new))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)).filter(lambda t: sum(t) > 0), max_size=12))
def test_apart_pairs_equal_the_definition(shape: list[tuple[int, int]]) -> None:
    """_link's pairs across the parts of a bucket: the same pairs in the same order as listing every two parts."""
    ids = iter(range(1000))
    parts = [([next(ids) for _ in range(o)], [next(ids) for _ in range(n)]) for o, n in shape]
    assert index_module._apart_pairs(parts) == _apart_pairs_by_definition(parts)


def test_apart_pairs_of_a_bucket_of_many_old_components() -> None:
    """A bucket of 50,000 stored components and one new group (boilerplate shared by many texts) lists
    the new group's 50,000 pairs without visiting the 1.25e9 pairs of old components (which took minutes)."""
    parts = [([g], []) for g in range(50_000)] + [([], [10**6])]
    got = index_module._apart_pairs(parts)
    assert got == [(0, g, 10**6) for g in range(50_000)]
