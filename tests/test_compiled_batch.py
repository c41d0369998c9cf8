"""The batch path's kernels (:mod:`rag_dedup.compiled.batch`) against the numpy reference they replace, value for value.

* :meth:`BandTable.batch_buckets <rag_dedup.storage.memory.BandTable.batch_buckets>` (through
  ``index._kernel_buckets``) against ``DedupIndex._lookup_buckets`` and ``index._buckets``, split as
  ``DedupIndex._link`` splits them (two-group buckets as pairs), with hits in the main and young
  levels, the write buffer, deleted groups, and keys shared among the new rows;
* ``index._split_buckets`` (the shared store's lookup) against ``index._buckets``, split the same way;
* :func:`~rag_dedup.compiled.batch.merge_entries` and :func:`~rag_dedup.compiled.batch.mark_filter`
  against ``storage.memory._merge`` and ``BandTable._mark`` on the reference path;
* ``add_many`` batches on both kernel paths, after ``add`` calls (buffered entries) and removals.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.corpus import chunks
from tests.kernels import numpy_reference

from rag_dedup import DedupIndex, compiled
from rag_dedup.compiled.batch import _lower_bound, _sort_unique, batch_buckets, key_order, mark_filter, merge_entries
from rag_dedup.clusters import cluster_component, cluster_components
from rag_dedup.index import _buckets, _kernel_buckets, _split_buckets
from rag_dedup.policy import Member, longest_then_authority
from rag_dedup.storage.memory import BandTable, _merge


def _reference_split(
    table: BandTable, keys: np.ndarray, gids: list[int]
) -> tuple[list[tuple[int, int]], list[tuple[list[int], list[int]]]]:
    """The reference lookup (np.unique, query_pairs, _buckets), split as _link splits it, pairs each once."""
    distinct, slot = np.unique(keys.reshape(-1), return_inverse=True)
    rows, found = table.query_pairs(distinct[:, None])
    buckets = _buckets(slot.reshape(-1), keys.shape[1], gids, rows, found)
    pairs = [(new[0], old[0] if old else new[1]) for old, new in buckets if len(old) + len(new) == 2]
    return list(dict.fromkeys(pairs)), [(old, new) for old, new in buckets if len(old) + len(new) > 2]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(1, 6), st.booleans())
def test_batch_buckets_equal_the_numpy_reference(seed: int, n_new: int, width: int, delete: bool) -> None:
    rng = np.random.default_rng(seed)
    table = BandTable()
    table._BUFFER_LIMIT = 64  # some buffered entries are merged into the young levels
    universe = rng.integers(0, 1 << 63, size=60, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    stored = universe[rng.integers(0, len(universe), size=(120, width))]  # keys shared by many groups
    table.insert(list(range(80)), stored[:80])  # straight into the runs when large enough
    for g in range(80, 120):
        table.insert([g], stored[g : g + 1])  # buffered
    if delete:
        for g in rng.choice(120, size=5, replace=False).tolist():
            table.delete(g)
    fresh = rng.integers(0, 1 << 63, size=(n_new, width), dtype=np.uint64)
    shared = rng.random((n_new, width)) < 0.5
    fresh[shared] = universe[rng.integers(0, len(universe), size=int(shared.sum()))]  # in buckets, some shared by new rows
    if n_new > 1:
        fresh[1, 0] = fresh[0, 0]
    gids = list(range(1000, 1000 + n_new))
    expected = _reference_split(table, fresh, gids)
    assert _kernel_buckets(table.batch_buckets(fresh), gids) == expected
    assert not table._buffered  # merged into the runs first: the answers stay the same
    assert _reference_split(table, fresh, gids) == expected


def test_batch_buckets_raw_answer() -> None:
    """The kernel's own arrays on a hand-made table: a two-group bucket with a stored group, one of two
    new rows, a larger bucket (a row filed twice under a key counts twice), a deleted group left out."""
    table = BandTable()
    table.insert([5, 6, 7], np.array([[10], [20], [20]], dtype=np.uint64))
    table._flush_buffer()
    table.delete(7)
    keys = np.array([[10, 30], [30, 20], [20, 20]], dtype=np.uint64)
    left, right, right_is_row, old_bounds, old_gids, new_bounds, new_rows = table.batch_buckets(keys)
    assert (left.tolist(), right.tolist(), right_is_row.tolist()) == ([0, 0], [5, 1], [False, True])
    assert (old_bounds.tolist(), old_gids.tolist()) == ([0, 1], [6])
    assert (new_bounds.tolist(), new_rows.tolist()) == ([0, 3], [1, 2, 2])
    empty = batch_buckets(np.zeros(0, dtype=np.uint64), 1, table._filter, table._filter_mask, table._levels(), np.zeros(0, dtype=np.int64))
    assert [len(a) for a in empty] == [0, 0, 0, 1, 0, 1, 0]


_TABLES = st.lists(st.tuples(st.integers(0, 50), st.integers(0, 2**31 - 1)), max_size=40).map(
    lambda entries: (
        np.array([k for k, _ in sorted(entries, key=lambda e: e[0])], dtype=np.uint64),
        np.array([g for _, g in sorted(entries, key=lambda e: e[0])], dtype=np.int32),
    )
)


@settings(max_examples=200, deadline=None)
@given(_TABLES, _TABLES)
def test_merge_and_filter_kernels_equal_the_numpy_reference(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> None:
    keys, gids = merge_entries(*a, *b)
    with numpy_reference():
        ref_keys, ref_gids = _merge(*a, *b)
        reference = BandTable()
        reference._mark(keys)
    assert keys.dtype == ref_keys.dtype and gids.dtype == ref_gids.dtype
    assert keys.tolist() == ref_keys.tolist() and gids.tolist() == ref_gids.tolist()
    fast = BandTable()
    mark_filter(fast._filter, fast._filter_mask, keys)
    assert fast._filter.tolist() == reference._filter.tolist()


def _build(kernels: str) -> DedupIndex:
    """An index grown by add() (buffered bucket entries), removals (deleted groups) and add_many batches."""
    was = compiled.COMPILED
    compiled.COMPILED = kernels == "compiled"
    try:
        items = list(chunks()[:300])
        text = dict(items)
        rng = random.Random(3)
        near = [(f"near-{k}", text[k] + " and a few more words here") for k, _ in rng.sample(items, 60)]
        copies = [(f"copy-{k}", text[k].upper()) for k, _ in rng.sample(items, 20)]
        index = DedupIndex(threshold=0.8)
        for key, value in items[:40]:
            index.add(key, value)
        for key, _ in items[:40:7]:
            index.remove(key)
        rest = rng.sample(items[40:] + near + copies, len(items) - 40 + len(near) + len(copies))
        for lo in range(0, len(rest), 150):
            index.add_many(rest[lo : lo + 150])
        return index
    finally:
        compiled.COMPILED = was


def test_add_many_batches_equal_on_both_kernel_paths() -> None:
    fast, reference = _build("compiled"), _build("reference")
    keys = [k for _, members in reference.clusters() for k in members]
    assert fast.matches(keys) == reference.matches(keys)
    assert sorted(fast.clusters()) == sorted(reference.clusters())
    assert any(len(members) > 2 for _, members in reference.clusters(include_singletons=False))


@pytest.mark.parametrize("rows", [pytest.param(0, id="no rows"), pytest.param(1, id="one row")])
def test_batch_buckets_of_few_rows(rows: int) -> None:
    table = BandTable()
    keys = np.arange(rows * 3, dtype=np.uint64).reshape(rows, 3)
    assert _kernel_buckets(table.batch_buckets(keys), list(range(rows))) == ([], [])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=300), st.integers(0, 6))
def test_sort_helpers_equal_numpy(values: list[int], repeat: int) -> None:
    """The batch kernel's own sort, unique and binary search (small code instead of numba's) against numpy,
    on keys with many repeats and on keys crowded in the top bits (the slots of the counting pass)."""
    keys = np.array(values * (1 + repeat % 3), dtype=np.uint64)
    crowded = keys >> np.uint64(repeat * 8)  # small keys: one slot holds many
    for a in (keys, crowded):
        assert key_order(a).tolist() == np.argsort(a, kind="stable").tolist()
        signed = (a >> np.uint64(2)).astype(np.int64)
        scratch = signed.copy()
        kept = _sort_unique(scratch, len(scratch))
        assert scratch[:kept].tolist() == np.unique(signed).tolist()
        ordered = np.sort(a)
        for probe in a[:20].tolist() + [0, 2**64 - 1]:
            assert _lower_bound(ordered, np.uint64(probe)) == int(np.searchsorted(ordered, np.uint64(probe)))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(50, 60)), min_size=1, max_size=6),
        min_size=1,
        max_size=6,
    ),
    st.floats(0.3, 0.9),
)
def test_cluster_components_equal_one_at_a_time(shapes: list[list[tuple[int, int, int]]], floor: float) -> None:
    """``cluster_components`` (two-group components' Jaccard in one kernel call) gives, component by
    component, what ``cluster_component`` gives, on both kernel paths; members of one group share a set."""
    shingles: dict[int, np.ndarray] = {}
    components = []
    for c, shape in enumerate(shapes):
        members = []
        for i, (group, length, width) in enumerate(shape):
            gid = 100 * c + group
            shingles.setdefault(gid, np.arange(3 * group, 3 * group + width, dtype=np.uint32))
            members.append((Member(f"k{c}-{i}", 100 + length, None, 0.0, None), gid))
        components.append(members)
    expected = [cluster_component(members, shingles, floor, longest_then_authority) for members in components]
    assert cluster_components(components, shingles, floor, longest_then_authority) == expected
    with numpy_reference():
        assert cluster_components(components, shingles, floor, longest_then_authority) == expected


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 40), st.integers(1, 6), st.integers(0, 30))
def test_split_buckets_are_the_buckets_split_as_link_takes_them(seed: int, n_new: int, width: int, n_old: int) -> None:
    """_split_buckets (the Redis path's lookup) lists what _buckets lists, the two-group buckets as pairs."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 12, size=(n_new, width)).astype(np.uint64)  # few distinct keys: shared buckets
    distinct, slot = np.unique(keys.reshape(-1), return_inverse=True)
    slot = slot.reshape(-1)
    gids = sorted(rng.choice(10**6, size=n_new, replace=False).tolist())
    pairs_found = {(int(rng.integers(0, max(1, len(distinct)))), int(rng.integers(10**6, 2 * 10**6))) for _ in range(n_old)}
    ordered = sorted(pairs_found) if len(distinct) else []
    rows = np.array([r for r, _ in ordered], dtype=np.int64)
    found = np.array([g for _, g in ordered], dtype=np.int64)
    buckets = _buckets(slot, width, gids, rows, found)
    pairs = [(new[0], old[0] if old else new[1]) for old, new in buckets if len(old) + len(new) == 2]
    rest = [(old, new) for old, new in buckets if len(old) + len(new) > 2]
    assert _split_buckets(slot, width, gids, rows, found) == (pairs, rest)
