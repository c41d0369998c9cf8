"""The Storage contract: the same behaviour tests against every backend.

Each test runs against three backends (the ``backend`` fixture):

* ``memory``: a :class:`MemoryStorage`;
* ``directory``: a :class:`MemoryStorage` that is saved to a directory and loaded back at every
  :meth:`Backend.reopen` (group ids come back compacted, so tests find groups by digest);
* ``redis``: a :class:`RedisStorage` on a real ``redis-server`` (``tests/conftest.py``), reopened as a
  new connection, as another worker would see it.

A test writes, calls ``reopen()``, and checks what the reopened store answers: a write that a backend
kept only in a cache, or lost in its file, fails here. Lists whose order the contract leaves to the
backend are compared sorted.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rag_dedup.errors import CorruptIndexError

from rag_dedup.storage.base import EMPTY_GROUP, ItemRecord, Storage
from rag_dedup.storage.directory import load_directory, save_directory
from rag_dedup.storage.memory import MemoryStorage

BANDS = 3
META = {"b": BANDS, "r": 2, "threshold": 0.8}


class Backend:
    """One storage under test, and how to reopen it."""

    def __init__(self, kind: str, tmp_path: Path, url: str | None) -> None:
        self.kind, self.tmp_path, self.url = kind, tmp_path, url
        self.namespace = f"contract-{uuid.uuid4().hex[:8]}"
        self.storage: Storage = self._open()
        self.storage.save_meta(META)

    def _open(self) -> Storage:
        if self.kind == "redis":
            from rag_dedup.storage.redis import RedisStorage

            return RedisStorage(self.url, namespace=self.namespace)  # type: ignore[arg-type]
        return MemoryStorage()

    def reopen(self) -> Storage:
        """The store as the next reader sees it: the same object, loaded from a save, or a new connection."""
        if self.kind == "directory":
            assert isinstance(self.storage, MemoryStorage)
            path = self.tmp_path / f"save-{uuid.uuid4().hex[:6]}"
            save_directory(path, self.storage.load_meta() or META, self.storage)
            meta, self.storage = load_directory(path)
            assert meta == META
        elif self.kind == "redis":
            self.storage = self._open()
        return self.storage


@pytest.fixture(params=["memory", "directory", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    b = Backend(request.param, tmp_path, url)
    yield b
    b.storage.drop()


RNG = np.random.default_rng(11)


def shingles(n: int) -> np.ndarray:
    return np.unique(RNG.integers(0, 2**32, size=n, dtype=np.uint32))


def digest(i: int) -> bytes:
    return bytes([i]) * 16


def band_rows(n: int) -> np.ndarray:
    return RNG.integers(0, 2**63, size=(n, BANDS), dtype=np.uint64) * np.uint64(2)


def new_groups(s: Storage, count: int, band_keys: np.ndarray | None = None) -> tuple[list[int], list[np.ndarray], np.ndarray]:
    """Create ``count`` groups (digests 0..count-1); return their ids, shingles and band keys."""
    sets = [shingles(5 + 7 * i) for i in range(count)]
    keys = band_rows(count) if band_keys is None else band_keys
    return s.create_groups([digest(i) for i in range(count)], sets, keys), sets, keys


def gids_of(s: Storage, count: int) -> list[int]:
    found = s.find_groups([digest(i) for i in range(count)])
    assert None not in found
    return found  # type: ignore[return-value]


# --- metadata ------------------------------------------------------------------------------------


def test_parameters_round_trip(backend: Backend) -> None:
    assert backend.reopen().load_meta() == META


def test_drop_forgets_everything_and_the_store_stays_usable(backend: Backend) -> None:
    s = backend.storage
    gids, _, keys = new_groups(s, 2)
    s.put_items({"a": ItemRecord(gids[0], 3, "src", 0.0, None), "b": ItemRecord(gids[1], 4, None, 0.0, None)})
    s.set_clusters(["a", "b"], [("a", [("a", 1.0), ("b", 0.9)])])
    s.drop()
    assert (s.load_meta(), s.item_count(), list(s.iter_keys())) == (None, 0, [])
    assert s.find_groups([digest(0), digest(1)]) == [None, None]
    assert s.query_bands(keys) == [set(), set()]
    assert (list(s.iter_clusters()), s.get_clusters(["a"]), s.keys_of_source("src")) == ([], [None], [])
    s.save_meta(META)
    (gid,), _, _ = new_groups(s, 1)
    s.put_items({"a": ItemRecord(gid, 3, "src", 0.0, None)})
    s = backend.reopen()
    assert (s.item_count(), s.keys_of_source("src"), s.find_groups([digest(1)])) == (1, ["a"], [None])


# --- items -----------------------------------------------------------------------------------------


def test_items_are_filed_under_their_group_and_source(backend: Backend) -> None:
    s = backend.storage
    gids, _, _ = new_groups(s, 2)
    records = {
        "k1": ItemRecord(gids[0], 10, "s1", 0.5, None),
        "k2": ItemRecord(gids[0], 12, "s1", 0.0, 3.25),
        "k3": ItemRecord(gids[1], 7, None, 1.0, 1.0e9),
        "k\u00e9\U0001f600": ItemRecord(EMPTY_GROUP, 0, "s\u00e9", -2.5, 0.1),
    }
    s.put_items(records)
    s = backend.reopen()
    g0, g1 = gids_of(s, 2)
    assert s.get_items(["k2", "unknown", "k\u00e9\U0001f600"]) == [
        records["k2"]._replace(gid=g0),
        None,
        records["k\u00e9\U0001f600"],
    ]
    assert s.item_count() == 4
    assert sorted(s.iter_keys()) == sorted(records)
    assert sorted(s.keys_of_source("s1")) == ["k1", "k2"]
    assert s.keys_of_source("s\u00e9") == ["k\u00e9\U0001f600"]
    assert s.keys_of_source("never") == []
    assert [sorted(ks) for ks in s.group_items([g0, g1])] == [["k1", "k2"], ["k3"]]


def test_deleted_items_leave_their_group_and_source(backend: Backend) -> None:
    s = backend.storage
    gids, _, _ = new_groups(s, 1)
    records = {k: ItemRecord(gids[0], 5, "s", 0.0, None) for k in ("a", "b", "c")}
    records["d"] = ItemRecord(EMPTY_GROUP, 0, "t", 0.0, None)
    s.put_items(records)
    s.delete_items({"a": records["a"], "d": records["d"]})
    s = backend.reopen()
    (g,) = gids_of(s, 1)
    assert s.get_items(["a", "b", "d"]) == [None, records["b"]._replace(gid=g), None]
    assert s.item_count() == 2
    assert sorted(s.keys_of_source("s")) == ["b", "c"]
    assert s.keys_of_source("t") == []
    assert sorted(s.group_items([g])[0]) == ["b", "c"]


# --- groups and buckets ------------------------------------------------------------------------------


def test_groups_keep_their_digest_and_shingles(backend: Backend) -> None:
    s = backend.storage
    assert s.find_groups([digest(0)]) == [None]
    assert s.create_groups([], [], np.zeros((0, BANDS), dtype=np.uint64)) == []
    gids, sets, _ = new_groups(s, 3)
    assert len(set(gids)) == 3
    s.put_items({f"k{i}": ItemRecord(g, 1, None, 0.0, None) for i, g in enumerate(gids)})
    s = backend.reopen()
    found = gids_of(s, 3)
    assert [sh.tolist() for sh in s.group_shingles(found)] == [sh.tolist() for sh in sets]
    assert all(sh.dtype == np.uint32 for sh in s.group_shingles(found))


def test_groups_sharing_a_bucket_find_each_other(backend: Backend) -> None:
    s = backend.storage
    keys = band_rows(4)
    keys[1, 2] = keys[0, 2]  # groups 0 and 1 share their last bucket; row 3 is never filed
    gids, _, _ = new_groups(s, 3, keys[:3])
    s.put_items({f"k{i}": ItemRecord(g, 1, None, 0.0, None) for i, g in enumerate(gids)})
    s = backend.reopen()
    g0, g1, g2 = gids_of(s, 3)
    assert s.query_bands(keys) == [{g0, g1}, {g0, g1}, {g2}, set()]
    rows, found = s.query_band_pairs(keys)
    assert (rows.tolist(), found.tolist()) == ([0, 0, 1, 1, 2], sorted([g0, g1]) * 2 + [g2])
    assert rows.dtype == found.dtype == np.int64


def test_a_deleted_group_is_gone_from_digests_buckets_and_components(backend: Backend) -> None:
    s = backend.storage
    keys = band_rows(2)
    keys[1, 0] = keys[0, 0]
    gids, _, _ = new_groups(s, 2, keys)
    s.put_items({"a": ItemRecord(gids[0], 1, None, 0.0, None), "b": ItemRecord(gids[1], 1, None, 0.0, None)})
    s.set_components([set(gids)])
    s.delete_items({"b": ItemRecord(gids[1], 1, None, 0.0, None)})
    s.delete_group(gids[1], keys[1:])
    s.set_components([[gids[0]]])
    with pytest.raises(CorruptIndexError, match=f"group {gids[1]} is named but not stored"):
        s.group_shingles([gids[1]])
    s = backend.reopen()
    assert s.find_groups([digest(0), digest(1)])[1] is None
    (g0,) = gids_of(s, 1)
    assert s.query_bands(keys) == [{g0}, {g0}]
    assert s.component_members([g0]) == [frozenset({g0})]


# --- components --------------------------------------------------------------------------------------


def test_components_merge_split_and_leave(backend: Backend) -> None:
    s = backend.storage
    gids, _, _ = new_groups(s, 4)
    s.put_items({f"k{i}": ItemRecord(g, 1, None, 0.0, None) for i, g in enumerate(gids)})
    assert s.component_members(gids) == [frozenset({g}) for g in gids]
    a, b, c, d = gids
    s.set_components([{a, b}, {c, d}])
    s.set_components([{a, b, c, d}])
    s.set_components([{a}, {b, c}, [d]])  # a split: a and d alone, b and c together
    s = backend.reopen()
    a, b, c, d = gids_of(s, 4)
    assert s.component_members([a, b, c, d]) == [frozenset({a}), frozenset({b, c}), frozenset({b, c}), frozenset({d})]


# --- clusters ----------------------------------------------------------------------------------------


def _clustered(s: Storage, keys: list[str]) -> None:
    gids, _, _ = new_groups(s, 1)
    s.put_items({k: ItemRecord(gids[0], 1, None, 0.0, None) for k in keys})


def test_clusters_are_kept_for_each_member(backend: Backend) -> None:
    s = backend.storage
    _clustered(s, ["k1", "k2", "k3", "k4"])
    s.set_clusters(["k1", "k2", "k3"], [("k2", [("k2", 1.0), ("k1", 1.0), ("k3", 0.8125)]), ("k4", [("k4", 1.0)])])
    s = backend.reopen()
    assert s.get_clusters(["k1", "k2", "k3", "k4"]) == [("k2", 1.0), ("k2", 1.0), ("k2", 0.8125), None]
    assert sorted(s.cluster_members(["k2"])[0]) == [("k1", 1.0), ("k2", 1.0), ("k3", 0.8125)]
    assert s.cluster_members(["k1", "k4"]) == [[], []]  # not a representative; a singleton is not stored
    assert [(rep, sorted(m)) for rep, m in s.iter_clusters()] == [("k2", [("k1", 1.0), ("k2", 1.0), ("k3", 0.8125)])]


def test_replacing_clusters_drops_the_old_entries_and_lists(backend: Backend) -> None:
    s = backend.storage
    _clustered(s, ["k1", "k2", "k3"])
    s.set_clusters(["k1", "k2", "k3"], [("k2", [("k2", 1.0), ("k1", 1.0), ("k3", 0.8125)])])
    s.set_clusters(["k1", "k2", "k3"], [("k3", [("k3", 1.0), ("k2", 0.8125)]), ("k1", [("k1", 1.0)])])
    s = backend.reopen()
    assert s.get_clusters(["k1", "k2", "k3"]) == [None, ("k3", 0.8125), ("k3", 1.0)]
    assert s.cluster_members(["k2", "k3"]) == [[], [("k3", 1.0), ("k2", 0.8125)]]
    assert [rep for rep, _ in s.iter_clusters()] == ["k3"]
    s.set_clusters(["k2", "k3"], [])
    s = backend.reopen()
    assert (s.get_clusters(["k2", "k3"]), list(s.iter_clusters())) == ([None, None], [])


# --- batches -----------------------------------------------------------------------------------------


def test_writes_inside_the_lock_are_read_back_inside_it_and_kept(backend: Backend) -> None:
    s = backend.storage
    with s.lock():
        gids, _, keys = new_groups(s, 2)
        s.put_items({"a": ItemRecord(gids[0], 1, "x", 0.0, None), "b": ItemRecord(gids[1], 1, "x", 0.0, None)})
        with s.lock():  # re-entrant
            s.set_components([set(gids)])
        assert s.find_groups([digest(0), digest(1)]) == gids
        assert s.query_bands(keys) == [{gids[0]}, {gids[1]}]
        assert s.component_members(gids[:1]) == [frozenset(gids)]
        assert sorted(s.keys_of_source("x")) == ["a", "b"]
        assert s.item_count() == 2
    s = backend.reopen()
    g = gids_of(s, 2)
    assert (s.component_members(g[:1]), s.item_count()) == ([frozenset(g)], 2)

