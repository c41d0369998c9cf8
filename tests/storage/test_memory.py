"""The in-memory backend: its band table against the obvious dict-of-sets reference, its one-item
writes against the general rule of :class:`~rag_dedup.storage.bookkeeping.Bookkeeping`."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_dedup.storage.base import ItemRecord
from rag_dedup.storage.bookkeeping import Bookkeeping
from rag_dedup.storage.memory import BandTable, MemoryStorage


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["insert", "bulk", "delete"]), st.integers(0, 40), st.integers(0, 2**64 - 1)),
        max_size=30,
    ),
    st.booleans(),
)
def test_band_table_behaves_like_a_dict_of_sets(ops, on_kernels) -> None:
    """The sorted, sharded, buffered table answers like the obvious dict-of-sets reference, on both
    kernel paths (the write buffer's hash multimap probed and filled by the kernel or in Python)."""
    from rag_dedup import compiled

    was, compiled.COMPILED = compiled.COMPILED, on_kernels and compiled.COMPILED
    try:
        got, expected = _dict_of_sets_ops(ops)
    finally:
        compiled.COMPILED = was
    assert got == expected


def _dict_of_sets_ops(ops) -> tuple[list[set[int]], list[set[int]]]:
    """``ops`` run on a BandTable and on a dict of sets; the table's answers to a probe, and the dict's."""
    table, ref = BandTable(), {}
    rng = np.random.default_rng(0)
    next_gid, dead = 0, set()
    for op, size, seed in ops:
        if op == "delete" and next_gid:
            gid = seed % next_gid
            table.delete(gid)
            dead.add(gid)
            for gs in ref.values():
                gs.discard(gid)
            continue
        n = 1 if op == "insert" else size * 20  # bulk inserts bypass the buffer
        keys = np.random.default_rng(seed).integers(0, 2**64 - 1, size=(n, 3), dtype=np.uint64)
        keys[: n // 2, 0] = keys[n // 2 :, 0][: n // 2]  # shared buckets
        gids = list(range(next_gid, next_gid + n))
        next_gid += n
        table.insert(gids, keys)
        for g, row in zip(gids, keys.tolist()):
            for k in row:
                ref.setdefault(k, set()).add(g)
    probe = np.array(list(ref)[:50] + [int(x) for x in rng.integers(0, 2**63, 5)], dtype=np.uint64)
    if len(probe) == 0:
        return [], []
    return table.query(probe.reshape(-1, 1)), [ref.get(int(k), set()) - dead for k in probe]


def test_the_filter_never_hides_a_stored_key_as_the_table_grows_and_is_restored() -> None:
    """The small lookup searches only the keys the bit filter lets through: every key in the runs must
    pass it, through the filter's rebuilds as the table grows, after a restore, and beside deletes."""
    rng = np.random.default_rng(3)
    table = BandTable()
    ref: dict[int, set[int]] = {}
    gid = 0
    for size in (10, 300, 2000, 50, 9000, 1):  # bulk inserts (straight into the runs) and buffered ones
        keys = rng.integers(0, 2**64 - 1, size=(size, 7), dtype=np.uint64)
        keys[: size // 3, 2] = keys[size - size // 3 :, 2]  # shared buckets
        table.insert(list(range(gid, gid + size)), keys)
        for g, row in zip(range(gid, gid + size), keys.tolist()):
            for k in row:
                ref.setdefault(k, set()).add(g)
        gid += size
    table.delete(5)
    for gs in ref.values():
        gs.discard(5)
    assert len(table._filter) * 8 > BandTable._FILTER_MIN_BITS  # the filter was rebuilt larger
    restored = BandTable()
    restored.restore(*table.export())
    stored = np.fromiter(ref, dtype=np.uint64, count=len(ref))
    absent = rng.integers(0, 2**64 - 1, size=40, dtype=np.uint64)
    for t in (table, restored):
        in_runs = np.concatenate([level for r in t._runs for level in (r.main_keys, r.young_keys)])
        assert (t._might_hold(in_runs) != 0).all()
        assert (t._might_hold(absent) == 0).any()  # a filter, not a constant "maybe"
        for lo in range(0, len(stored), 997):
            probe = np.concatenate((stored[lo : lo + 30], absent[:5])).reshape(-1, 1)
            assert probe.size <= BandTable._SMALL_QUERY
            assert t.query(probe) == [ref.get(int(k), set()) for k in probe.reshape(-1).tolist()]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from([None, "a", "b"]), st.integers(1, 3)), min_size=1, max_size=25))
def test_one_group_and_one_item_writes_equal_the_general_rule(ops) -> None:
    """``MemoryStorage.create_groups`` of one group and ``put_items`` of one item (``add()``'s path)
    leave the store the general :class:`Bookkeeping` rule leaves (the same export, the same answers):
    new and known digests, items with and without a source, several items a group, in batches too."""
    fast, general = MemoryStorage(), MemoryStorage()
    rng = np.random.default_rng(1)
    for i, (text, source, count) in enumerate(ops):
        digest = bytes([text]) * 4
        shingles = [np.unique(rng.integers(0, 2**32, size=8, dtype=np.uint64).astype(np.uint32)) for _ in range(count)]
        keys = rng.integers(0, 2**64 - 1, size=(count, 4), dtype=np.uint64)
        digests = [digest + bytes([i, j]) for j in range(count)]
        if count == 1:
            digests = [digest] if fast.find_groups([digest]) == [None] else []
        if digests:
            gids = fast.create_groups(digests, shingles[: len(digests)], keys[: len(digests)])
            assert Bookkeeping.create_groups(general, digests, shingles[: len(digests)], keys[: len(digests)]) == gids
        (gid,) = fast.find_groups([digests[0] if digests else digest])
        records = {f"k{i}-{j}": ItemRecord(gid, 10 + j, source, 0.0, None) for j in range(count)}  # type: ignore[arg-type]
        for key, rec in records.items():
            fast.put_items({key: rec})
        Bookkeeping.put_items(general, records)
    a, b = fast.export(), general.export()
    assert a.items == b.items and a.digests == b.digests and a.components == b.components
    assert [s.tolist() for s in a.shingles] == [s.tolist() for s in b.shingles]
    assert np.array_equal(a.band_keys, b.band_keys) and np.array_equal(a.band_gids, b.band_gids)
    for source in (None, "a", "b"):
        assert sorted(fast.keys_of_source(source)) == sorted(general.keys_of_source(source))  # type: ignore[arg-type]
    gids = list(range(len(a.digests)))
    assert fast.group_items(gids) == general.group_items(gids)
    for store in (fast, general):  # the direct reads equal the general rule's
        store.set_components([gids[:2], gids[2:3]])
        store.set_clusters([], [(next(iter(records)), [(next(iter(records)), 1.0), ("other", 0.9)])])
        keys = [*records, "other", "unknown"]
        assert store.get_items(keys) == Bookkeeping.get_items(store, keys)
        assert store.find_groups([*a.digests, b"?"]) == Bookkeeping.find_groups(store, [*a.digests, b"?"])
        assert store.component_members(gids) == Bookkeeping.component_members(store, gids)
        assert store.get_clusters(keys) == Bookkeeping.get_clusters(store, keys)
    probe = np.stack([a.band_keys[:4]]) if len(a.band_keys) >= 4 else None
    if probe is not None:
        assert fast.query_bands(probe) == general.query_bands(probe)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 6), st.booleans()), min_size=1, max_size=40),
    st.booleans(),
)
def test_one_row_query_then_file_equals_query_then_insert(rows, on_kernels) -> None:
    """``BandTable.query_then_file_row`` (one pass over the buffer: ``add()``'s path) answers what
    ``query_row`` answers and leaves the table ``insert`` leaves, on both kernel paths: new keys, keys
    already buffered once or several times, keys already in the runs, a key twice in one row, a table
    with a deleted group, and across the buffer's flush into the runs (a small limit)."""
    from rag_dedup import compiled

    fused, plain = BandTable(), BandTable()
    for table in (fused, plain):
        table._BUFFER_LIMIT = 50  # type: ignore[misc]  (flushes within the example)
    seen: list[int] = []
    was, compiled.COMPILED = compiled.COMPILED, on_kernels and compiled.COMPILED
    try:
        for gid, (seed, reuse, twice) in enumerate(rows):
            keys = np.random.default_rng(seed).integers(0, 2**64 - 1, size=7, dtype=np.uint64)
            for i in range(min(reuse, len(seen) // 3)):  # keys already filed (buffered, or in the runs since a flush)
                keys[i] = seen[-1 - i * 3]
            if twice:
                keys[-1] = keys[0]
            if gid == 5:
                for table in (fused, plain):
                    table.delete(2)
            assert fused.query_then_file_row(keys, gid) == plain.query_row(keys)
            plain.insert((gid,), keys.reshape(1, -1))
            seen.extend(keys.tolist())
            n = fused._buffered
            assert n == plain._buffered and np.array_equal(fused._slots, plain._slots)  # type: ignore[arg-type]
            assert n == 0 or np.array_equal(fused._order[:n], plain._order[:n])  # type: ignore[index]
        probe = np.array(seen[-60:], dtype=np.uint64).reshape(-1, 1)
        assert fused.query(probe) == plain.query(probe)
        for a, b in zip(fused.export(), plain.export()):
            assert np.array_equal(a, b)
    finally:
        compiled.COMPILED = was


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 8), st.sampled_from([None, "a"])), min_size=1, max_size=30))
def test_one_new_item_equals_the_calls_it_stands_for(ops) -> None:
    """``MemoryStorage.add_new_item`` (``add()``'s one storage call for a new key with a new text) returns
    and leaves what the base class's default does with the general calls (find_groups, get_items,
    query_bands, create_groups, put_items): None and nothing written for a stored key or a known
    digest, else the stored record and the candidates asked before the new group was filed."""
    from rag_dedup.storage.base import Storage

    fast, general = MemoryStorage(), MemoryStorage()
    rng = np.random.default_rng(2)
    for i, (text, key, source) in enumerate(ops):
        digest = bytes([text]) * 4
        shingles = np.unique(rng.integers(0, 2**32, size=8, dtype=np.uint64).astype(np.uint32))
        band_keys = rng.integers(0, 2**64 - 1, size=(1, 5), dtype=np.uint64)
        band_keys[0, 0] = 7 + i % 3  # shared buckets
        record = ItemRecord(-1, 10 + i, source, float(i), None)
        got = fast.add_new_item(f"k{key}", record, digest, shingles, band_keys)
        assert got == Storage.add_new_item(general, f"k{key}", record, digest, shingles, band_keys)
        if got is not None:
            assert got[0] == record._replace(gid=got[0].gid) and got[0].gid >= 0
    a, b = fast.export(), general.export()
    assert a.items == b.items and a.digests == b.digests
    assert [s.tolist() for s in a.shingles] == [s.tolist() for s in b.shingles]
    assert np.array_equal(a.band_keys, b.band_keys) and np.array_equal(a.band_gids, b.band_gids)
    gids = list(range(len(a.digests)))
    assert fast.group_items(gids) == general.group_items(gids)
    assert fast.keys_of_source("a") == general.keys_of_source("a")


_KEY = st.sampled_from(["a", "b", "c", "d", "e", "f"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(_KEY, max_size=4),
            st.lists(st.tuples(_KEY, st.lists(st.tuples(_KEY, st.floats(0, 1)), max_size=4)), max_size=3),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_set_clusters_equals_the_general_rule(calls) -> None:
    """``MemoryStorage.set_clusters`` (straight over its dicts) leaves what the :class:`Bookkeeping` rule
    leaves, in the same insertion order (what ``iter_clusters`` and a saved index list): old entries
    and lists dropped, clusters of one not stored, a key in two clusters, keys given twice."""
    fast, general = MemoryStorage(), MemoryStorage()
    for keys, clusters in calls:
        fast.set_clusters(keys, clusters)
        Bookkeeping.set_clusters(general, keys, clusters)
        assert list(fast._cluster_of.items()) == list(general._cluster_of.items())
        assert list(fast._clusters.items()) == list(general._clusters.items())


def test_a_row_never_finds_a_removed_group_when_its_filing_flushes_the_last_tombstones() -> None:
    """Regression: ``query_then_file_row`` dropped the removed groups from its answer after the buffer's
    flush, whose merge can compact the runs' last tombstones away and forget the removed groups, so a
    row whose filing triggered that flush was answered with a removed group it found in the runs."""
    table = BandTable()
    table._BUFFER_LIMIT = 50  # type: ignore[misc]
    row = lambda seed: np.random.default_rng(seed).integers(0, 2**64 - 1, size=7, dtype=np.uint64)  # noqa: E731
    for gid, seed in enumerate([0] * 11 + [1]):  # groups 0-10 share one row of keys; a flush puts them in the runs
        table.query_then_file_row(row(seed), gid)
    table.delete(1)
    answers = [table.query_then_file_row(row(seed), gid) for gid, seed in enumerate([453, 5404425, 7, 0], start=12)]
    assert table._buffered == 0 and not table._dead  # the last filing flushed and compacted the tombstone away
    assert answers[-1] == {0, *range(2, 11)}

