"""The one-item paths of ``DedupIndex.add`` (issue 14) against the paths they shortcut, value for value.

* :func:`rag_dedup.compiled.index.pair_intersections` / :func:`~rag_dedup.compiled.index.pair_jaccard`
  and their one-pair forms :func:`~rag_dedup.compiled.index.shared_count` /
  :func:`~rag_dedup.compiled.index.jaccard_of` (on writable and read-only arrays, as the store returns
  them) against :func:`~rag_dedup.similarity.jaccard_pairs` (the reference of ``DedupIndex._verify``);
* :func:`~rag_dedup.compiled.index.intersection_matrix` and the small-component loop of
  :func:`~rag_dedup.clusters.cluster_component` (``_cluster_few``) against the numpy reference
  (``compiled.COMPILED = False``);
* :meth:`BandTable.query_row <rag_dedup.storage.memory.BandTable.query_row>` against the array lookup;
* ``add`` one at a time on each kernel path against ``add_many``, with every branch of ``_add_one``
  (a new group alone, a new group with candidates, an exact copy, an empty text, a re-add).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.corpus import chunks
from tests.oracles import batch_path

from rag_dedup import DedupIndex, compiled
from rag_dedup.clusters import _DENSE_MAX, _cluster_few, _Dense, cluster_component
from rag_dedup.compiled.index import intersection_matrix, jaccard_of, pack, pair_intersections, pair_jaccard, shared_count
from rag_dedup.policy import Member, longest_then_authority
from rag_dedup.similarity import jaccard_many, jaccard_pairs
from rag_dedup.storage.memory import BandTable

# Sets drawn from a small universe (so that they overlap), empty ones included.
_SETS = st.lists(
    st.lists(st.integers(0, 60), max_size=50).map(lambda xs: np.unique(np.array(xs, dtype=np.uint32))),
    min_size=1,
    max_size=10,
)


@settings(max_examples=200, deadline=None)
@given(_SETS, st.data())
def test_pair_kernels_equal_the_numpy_reference(sets: list[np.ndarray], data: st.DataObject) -> None:
    n = len(sets)
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30))
    left, right = [a for a, _ in pairs], [b for _, b in pairs]
    got = pair_jaccard(sets, left, right)
    assert got == jaccard_pairs(sets, np.array(left, dtype=np.int64), np.array(right, dtype=np.int64)).tolist()
    flat, bounds, sizes = pack(sets)
    assert sizes == [len(s) for s in sets]
    shared = pair_intersections(flat, bounds, np.array(left, dtype=np.int64), np.array(right, dtype=np.int64)).tolist()
    assert shared == [len(np.intersect1d(sets[a], sets[b])) for a, b in pairs]
    stored = [np.frombuffer(s.tobytes(), dtype=np.uint32) for s in sets]  # read-only, as the store's
    assert [shared_count(sets[a], stored[b]) for a, b in pairs] == shared
    assert [jaccard_of(sets[a], stored[b]) for a, b in pairs] == got
    assert [jaccard_of(stored[a], stored[b]) for a, b in pairs] == got
    matrix = intersection_matrix(flat, bounds)
    assert matrix.tolist() == [[len(np.intersect1d(a, b)) for b in sets] for a in sets]
    for i, a in enumerate(sets):  # J(a, b) from the matrix: jaccard_many's floats
        row = [matrix[i, j] / (len(a) + len(b) - matrix[i, j]) if len(a) and len(b) else 0.0 for j, b in enumerate(sets)]
        assert row == jaccard_many(a, sets).tolist()


def _policy_by_source(members: list[Member]) -> Member:
    """A policy other than the default (the loop then finds every eligible member)."""
    return min(members, key=lambda m: (m.source or "", m.key))


@settings(max_examples=300, deadline=None)
@given(
    _SETS,
    st.lists(st.tuples(st.integers(0, 9), st.integers(1, 40), st.sampled_from(["a", "b", None])), min_size=1, max_size=14),
    st.sampled_from([0.3, 0.5, 0.7, 0.9]),
    st.booleans(),
)
def test_small_components_cluster_as_the_numpy_reference(
    sets: list[np.ndarray], raw: list[tuple[int, int, str | None]], floor: float, default_policy: bool
) -> None:
    """``cluster_component`` of at most ``_DENSE_MAX`` groups: the kernel's matrix and the list loop
    (compiled) give the reference's clusters, similarities and order, for either kind of policy."""
    shingles = {g: s for g, s in enumerate(sets)}
    members = [(Member(f"k{i}", length, source, 0.0, None), g % len(sets)) for i, (g, length, source) in enumerate(raw)]
    assert len({g for _, g in members}) <= _DENSE_MAX
    policy = longest_then_authority if default_policy else _policy_by_source
    assert compiled.COMPILED
    fast = cluster_component(members, shingles, floor, policy)
    compiled.COMPILED = False
    try:
        reference = cluster_component(members, shingles, floor, policy)
    finally:
        compiled.COMPILED = True
    assert fast == reference
    assert all(type(sim) is float for _, placed in fast for _, sim in placed)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.integers(0, 30), max_size=40),
    st.lists(st.integers(0, 30), max_size=40),
    st.lists(st.tuples(st.booleans(), st.integers(1, 5), st.sampled_from(["a", "b", None])), min_size=2, max_size=8),
    st.sampled_from([0.0, 0.3, 0.5, 0.8, 0.9, 1.0]),
    st.booleans(),
)
def test_two_group_components_cluster_as_the_general_rule(
    a: list[int], b: list[int], raw: list[tuple[bool, int, str | None]], floor: float, default_policy: bool
) -> None:
    """``cluster_component`` of two groups (the closed form ``_cluster_two``) gives the clusters,
    similarities and order of the general loop on the numpy reference path, and of the list loop
    (``_cluster_few``): near (one cluster) and far (two), empty and equal sets, ties in length, several
    members a group, either kind of policy."""
    sets = [np.unique(np.array(x, dtype=np.uint32)) for x in (a, b)]
    shingles = {3: sets[0], 7: sets[1]}  # group ids that are not 0, 1
    raw = [(True, *raw[0][1:]), (False, *raw[1][1:]), *raw[2:]]  # both groups present
    members = [(Member(f"k{(i * 7) % 11}-{i}", length, source, 0.0, None), 7 if second else 3) for i, (second, length, source) in enumerate(raw)]
    policy = longest_then_authority if default_policy else _policy_by_source
    fast = cluster_component(members, shingles, floor, policy)
    compiled.COMPILED = False
    try:
        reference = cluster_component(members, shingles, floor, policy)
    finally:
        compiled.COMPILED = True
    assert fast == reference
    items: dict[int, list[Member]] = {}  # the list loop's input, as cluster_component builds it
    for m, g in sorted(members, key=lambda mg: mg[0].key):
        items.setdefault(g, []).append(m)
    group_of = {m.key: g for m, g in members}
    assert fast == _cluster_few(items, group_of, [3, 7], _Dense([3, 7], shingles), floor, policy)
    assert all(type(sim) is float for _, placed in fast for _, sim in placed)


def test_one_row_lookup_equals_the_array_lookup() -> None:
    """``query_row`` (one add) answers as ``query_pairs`` for rows with hits in the main and young
    levels, in the write buffer, in no bucket, and with a deleted group."""
    rng = np.random.default_rng(9)
    table = BandTable()
    table._BUFFER_LIMIT = 4096  # the buffer is merged into the runs within the inserts below
    keys = rng.integers(0, 1 << 63, size=(6000, 7), dtype=np.uint64) * np.uint64(2)
    keys[1::5, :4] = keys[0::5, :4][: len(keys[1::5])]  # rows sharing buckets
    table.insert(list(range(5000)), keys[:5000])  # straight into the runs
    for g in range(5000, 6000):
        table.insert([g], keys[g : g + 1])  # buffered, some flushed into the young levels
    table.delete(10)
    table.delete(5990)
    assert table._buffered and any(len(r.young_keys) for r in table._runs)
    probes = np.concatenate((keys[::37], rng.integers(0, 1 << 63, size=(20, 7), dtype=np.uint64)))
    found = 0
    for row in probes:
        rows, gids = table.query_pairs(row[None, :])
        got = table.query_row(row)
        assert got == set(gids.tolist())
        assert table.query(row[None, :]) == [got]
        found += len(got)
    assert found > len(probes)
    # The compiled lookup (band_lookup) against the Python reference, one row and a few rows at a time.
    blocks = [probes[i : i + 9] for i in range(0, len(probes), 9)]
    fast = [table.query_row(row) for row in probes], [table.query_pairs(b) for b in blocks]
    compiled.COMPILED = False
    try:
        reference = [table.query_row(row) for row in probes], [table.query_pairs(b) for b in blocks]
    finally:
        compiled.COMPILED = True
    assert fast[0] == reference[0]
    for (rows, gids), (ref_rows, ref_gids) in zip(fast[1], reference[1]):
        assert rows.dtype == gids.dtype == np.int64
        assert rows.tolist() == ref_rows.tolist() and gids.tolist() == ref_gids.tolist()
    extra = rng.integers(0, 1 << 63, size=(700, 7), dtype=np.uint64)
    extra[0] = probes[0]
    table.insert(list(range(6000, 6700)), extra)  # straight into the runs: the kernel's levels are rebuilt
    assert table.query_row(probes[0]) == reference[0][0] | {6000}


def _items() -> list[tuple[str, str]]:
    items = list(chunks()[:400])
    text = dict(items)
    extra = [("copy-0", text[items[3][0]]), ("copy-1", text[items[3][0]].upper()), ("empty", "  \n "), ("copy-2", text[items[9][0]])]
    return random.Random(7).sample(items + extra, len(items) + len(extra))


@pytest.mark.parametrize("path", ["compiled", "reference"])
def test_add_one_at_a_time_equals_add_many_on_each_kernel_path(path: str, request: pytest.FixtureRequest) -> None:
    if path == "reference":
        request.getfixturevalue("reference_kernels")
    items = _items()
    batch = DedupIndex(threshold=0.8)
    expected = batch.add_many(items)
    single = DedupIndex(threshold=0.8)
    got = [single.add(key, text) for key, text in items]
    keys = [k for k, _ in items]
    assert single.matches(keys) == batch.matches(keys)
    assert sorted(single.clusters()) == sorted(batch.clusters())
    assert got[-1] == expected[-1]  # the last add returns what the batch returns for it
    assert {m.kind for m in got} == {"unique", "exact", "near"}
    again = single.add(*items[0])  # a retried add: a no-op
    assert again == single.match(items[0][0]) and len(single) == len(items)
    with pytest.raises(ValueError, match="already in the index with another text"):
        single.add(items[0][0], items[1][1])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 11), st.integers(0, 3)), min_size=1, max_size=25), st.randoms(use_true_random=False))
def test_add_returns_what_matches_says_after_it(picks: list[tuple[int, int]], rng: random.Random) -> None:
    """Every Match ``add`` returns (also the one returned at once for a new group alone) is the
    Match of ``matches`` right after it, ``displaced`` aside, whose rule is the batch's."""
    base = [t for _, t in chunks()[:12]]
    index = DedupIndex(threshold=0.8)
    reference = DedupIndex(threshold=0.8)
    for i, (which, edit) in enumerate(picks):
        words = base[which].split()
        for _ in range(edit):
            words[rng.randrange(len(words))] = "edited"
        key, text = f"k{i}", " ".join(words)
        got = index.add(key, text)
        with batch_path():
            (expected,) = reference.add_many([(key, text)])
        assert got == expected
        assert got._replace(displaced=None) == index.match(key)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, 2, 2**63]), max_size=7), st.integers(0, 2)),
        min_size=1,
        max_size=20,
    )
)
def test_buffer_kernel_equals_the_python_reference(calls: list[tuple[list[int], int]]) -> None:
    """``buffer_file`` (the band table's write buffer: probe, find, file) leaves the same slots and order
    and finds the same entries as ``BandTable._buffer_file_reference`` on the same state, call by call:
    rows filed under one group, rows of several groups, lookups that file nothing, repeated keys
    (in a row and across rows), small keys alike in their low bits, a small table (long probes)."""
    fast, slow = BandTable(), BandTable()
    for table in (fast, slow):
        table._BUFFER_LIMIT, table._DIRECT_LIMIT = 40, 8  # type: ignore[misc]  (64 slots)
    gid = 0
    for keys, kind in calls:
        if fast._buffered + len(keys) > 40:
            break
        flat = np.array(keys, dtype=np.uint64)
        if kind == 0:  # a lookup
            gids, width, find = np.empty(0, dtype=np.int64), 1, True
        elif kind == 1:  # one new group's row, looked up and filed (add()'s call)
            gids, width, find = np.array([gid], dtype=np.int64), max(len(keys), 1), True
        else:  # each key its own group, filed only (a few rows of add_many)
            gids, width, find = np.arange(gid, gid + len(keys), dtype=np.int64), 1, False
        gid += len(keys) + 1
        got = fast._buffer_file(flat, gids, width, find)
        compiled.COMPILED = False
        try:
            want = slow._buffer_file(flat, gids, width, find)
        finally:
            compiled.COMPILED = True
        assert [a.tolist() for a in got] == [a.tolist() for a in want]
        assert got[0].dtype == got[1].dtype == np.int64
        assert fast._buffered == slow._buffered
        if fast._slots is not None:
            assert np.array_equal(fast._slots, slow._slots) and np.array_equal(fast._order, slow._order)  # type: ignore[arg-type]
