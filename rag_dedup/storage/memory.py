"""In-process storage: compact enough for millions of chunks (well under 2 KB each).

Where the bytes go, per indexed chunk of ~180 words: its shingle set as a ``bytes`` object
(4 bytes a shingle, ~740 bytes), its LSH bucket entries in sorted numpy arrays (12 bytes a band,
~250 bytes at 21 bands), and its item record and exact-text digest (~350 bytes). Python dicts and
sets per bucket, as in datasketch's in-memory LSH, cost several kilobytes a chunk instead.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from rag_dedup.storage.base import EMPTY_GROUP, ClusterEntry, ItemRecord, Storage

__all__ = ["BandTable", "MemoryStorage"]


class _Run:
    """Two sorted levels of (band key, group id) entries for one key range."""

    __slots__ = ("main_gids", "main_keys", "young_gids", "young_keys")

    def __init__(self) -> None:
        self.main_keys = np.empty(0, dtype=np.uint64)
        self.main_gids = np.empty(0, dtype=np.int32)
        self.young_keys = np.empty(0, dtype=np.uint64)
        self.young_gids = np.empty(0, dtype=np.int32)

    def __len__(self) -> int:
        return len(self.main_keys) + len(self.young_keys)

    def add(self, keys: np.ndarray, gids: np.ndarray, dead: set[int]) -> bool:
        """Merge key-sorted entries in; True when the tombstones were compacted away."""
        self.young_keys, self.young_gids = _merge(self.young_keys, self.young_gids, keys, gids)
        if len(self.young_keys) * 4 < len(self.main_keys):
            return False
        self.main_keys, self.main_gids = _merge(self.main_keys, self.main_gids, self.young_keys, self.young_gids)
        self.young_keys = np.empty(0, dtype=np.uint64)
        self.young_gids = np.empty(0, dtype=np.int32)
        if dead:
            keep = ~np.isin(self.main_gids, np.fromiter(dead, dtype=np.int32, count=len(dead)))
            self.main_keys, self.main_gids = self.main_keys[keep], self.main_gids[keep]
        return True

    def lookup(self, needles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(index into ``needles``, group id) for every entry whose key equals a sorted needle."""
        idx_parts, gid_parts = [], []
        for keys, gids in ((self.main_keys, self.main_gids), (self.young_keys, self.young_gids)):
            if len(keys) == 0:
                continue
            lo = keys.searchsorted(needles, side="left")
            found = lo < len(keys)
            found[found] = keys[lo[found]] == needles[found]
            hits = np.flatnonzero(found)
            if len(hits) == 0:
                continue
            hi = keys.searchsorted(needles[hits], side="right")
            c = hi - lo[hits]
            starts = np.repeat(lo[hits] - np.cumsum(c) + c, c) + np.arange(int(c.sum()))
            idx_parts.append(np.repeat(hits, c))
            gid_parts.append(gids[starts])
        if not idx_parts:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
        return np.concatenate(idx_parts), np.concatenate(gid_parts)


class BandTable:
    """LSH buckets as sorted arrays: band key (uint64) → group id, with a small write buffer.

    Band keys are uniform 64-bit hashes, so the table is split by the top four key bits into 16 runs.
    Each run has a large sorted *main* level and a smaller sorted *young* level; new entries are merged
    into *young*, and *young* into *main* once it reaches a quarter of it, so each entry is copied O(1)
    times on average and a merge briefly doubles one run, never the whole table (which bounds peak
    memory). Single inserts go to a dict *buffer* first. Lookups sort their needles and binary-search
    each run in order. Deleted groups are tombstones until every run has compacted them away.
    Each entry costs 12 bytes (uint64 key, int32 group id).
    """

    _BUFFER_LIMIT = 4096
    # Queries of at most this many keys (one add, or an add_many of about ten texts: below ~20 rows of
    # 21 bands the small path is the faster, measured on a table of 15k groups) take _query_small.
    _SMALL_QUERY = 256
    _SHARD_SHIFT = np.uint64(60)

    def __init__(self) -> None:
        self._runs = [_Run() for _ in range(16)]
        self._buffer: dict[int, list[int]] = {}
        self._buffered = 0
        self._dead: set[int] = set()
        self._compacted: set[int] = set()

    def __len__(self) -> int:
        return sum(len(r) for r in self._runs) + self._buffered

    def insert(self, gids: Sequence[int], keys: np.ndarray) -> None:
        """File group ``gids[i]`` under every key of row ``keys[i]``."""
        if len(gids) == 0:
            return
        flat_keys = keys.reshape(-1)
        flat_gids = np.repeat(np.asarray(gids, dtype=np.int32), keys.shape[1])
        if len(flat_keys) >= self._BUFFER_LIMIT:
            self._add(flat_keys, flat_gids)
            return
        for k, g in zip(flat_keys.tolist(), flat_gids.tolist()):
            self._buffer.setdefault(k, []).append(g)
        self._buffered += len(flat_keys)
        if self._buffered >= self._BUFFER_LIMIT:
            self._flush_buffer()

    def delete(self, gid: int) -> None:
        """Forget group ``gid`` (a tombstone until every run has been compacted)."""
        self._dead.add(gid)
        self._compacted = set()
        for k in [k for k, gs in self._buffer.items() if gid in gs]:
            gs = [g for g in self._buffer[k] if g != gid]
            self._buffered -= len(self._buffer[k]) - len(gs)
            if gs:
                self._buffer[k] = gs
            else:
                del self._buffer[k]

    def query(self, keys: np.ndarray) -> list[set[int]]:
        """For each row of ``keys``, the groups filed under any of its keys."""
        out: list[set[int]] = [set() for _ in range(keys.shape[0])]
        rows, gids = self.query_pairs(keys)
        for row, gid in zip(rows.tolist(), gids.tolist()):
            out[row].add(gid)
        return out

    def query_pairs(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`query` as arrays ``(rows, gids)``: each distinct (row, group) pair once, sorted (int64)."""
        if keys.size <= self._SMALL_QUERY:
            return self._query_small(keys)
        b = keys.shape[1]
        flat = keys.reshape(-1)
        order = np.argsort(flat)
        needles = flat[order]
        bounds = np.searchsorted(needles >> self._SHARD_SHIFT, np.arange(17, dtype=np.uint64)).tolist()
        row_parts, gid_parts = [], []
        for shard, run in enumerate(self._runs):
            lo, hi = bounds[shard], bounds[shard + 1]
            if lo == hi or not len(run):
                continue
            idx, gids = run.lookup(needles[lo:hi])
            row_parts.append(order[idx + lo] // b)
            gid_parts.append(gids)
        if self._buffer:
            get = self._buffer.get
            hits = [(i // b, g) for i, k in enumerate(flat.tolist()) for g in get(k, ())]
            row_parts.append(np.fromiter((r for r, _ in hits), dtype=np.int64, count=len(hits)))
            gid_parts.append(np.fromiter((g for _, g in hits), dtype=np.int64, count=len(hits)))
        if not row_parts:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        rows = np.concatenate(row_parts).astype(np.int64, copy=False)
        gids = np.concatenate(gid_parts).astype(np.int64, copy=False)
        if self._dead:
            live = ~np.isin(gids, np.fromiter(self._dead, dtype=np.int64, count=len(self._dead)))
            rows, gids = rows[live], gids[live]
        # Group ids are non-negative int32: (row, gid) packs into one int64 that sorts the same way.
        pairs = np.unique((rows << 32) | gids)
        return pairs >> 32, pairs & 0xFFFFFFFF

    def _query_small(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`query_pairs` of a few rows (one ``add``): a binary search per level of each run hit,
        and the few matches read one by one, instead of the bulk path's dozen array operations a level."""
        b = keys.shape[1]
        flat = keys.reshape(-1)
        values = flat.tolist()
        by_shard: dict[int, list[int]] = {}
        for i, shard in enumerate((flat >> self._SHARD_SHIFT).tolist()):
            by_shard.setdefault(shard, []).append(i)
        found: set[tuple[int, int]] = set()
        for shard, where in by_shard.items():
            run = self._runs[shard]
            if not len(run):
                continue
            needles = flat[where]
            for level_keys, level_gids in ((run.main_keys, run.main_gids), (run.young_keys, run.young_gids)):
                size = len(level_keys)
                if not size:
                    continue
                for i, lo in zip(where, level_keys.searchsorted(needles).tolist()):
                    value = values[i]
                    while lo < size and level_keys[lo] == value:
                        found.add((i // b, int(level_gids[lo])))
                        lo += 1
        if self._buffer:
            get = self._buffer.get
            found.update((i // b, g) for i, k in enumerate(values) for g in get(k, ()))
        if self._dead:
            found = {pair for pair in found if pair[1] not in self._dead}
        pairs = sorted(found)
        rows = np.fromiter((r for r, _ in pairs), dtype=np.int64, count=len(pairs))
        return rows, np.fromiter((g for _, g in pairs), dtype=np.int64, count=len(pairs))

    def _flush_buffer(self) -> None:
        if not self._buffer:
            return
        keys = np.fromiter((k for k, gs in self._buffer.items() for _ in gs), dtype=np.uint64, count=self._buffered)
        gids = np.fromiter((g for gs in self._buffer.values() for g in gs), dtype=np.int32, count=self._buffered)
        self._buffer, self._buffered = {}, 0
        self._add(keys, gids)

    def _add(self, keys: np.ndarray, gids: np.ndarray) -> None:
        order = np.argsort(keys, kind="stable")
        keys, gids = keys[order], gids[order]
        bounds = np.searchsorted(keys >> self._SHARD_SHIFT, np.arange(17, dtype=np.uint64)).tolist()
        for shard, run in enumerate(self._runs):
            lo, hi = bounds[shard], bounds[shard + 1]
            if lo < hi and run.add(keys[lo:hi], gids[lo:hi], self._dead):
                self._compacted.add(shard)
        if self._dead and len(self._compacted) == len(self._runs):
            self._dead, self._compacted = set(), set()

    def export(self) -> tuple[np.ndarray, np.ndarray]:
        """All live entries as (keys, gids), sorted by key (for saving)."""
        self._flush_buffer()
        keys = np.concatenate([a for r in self._runs for a in (r.main_keys, r.young_keys)])
        gids = np.concatenate([a for r in self._runs for a in (r.main_gids, r.young_gids)])
        if self._dead:
            keep = ~np.isin(gids, np.fromiter(self._dead, dtype=np.int32, count=len(self._dead)))
            keys, gids = keys[keep], gids[keep]
        order = np.argsort(keys, kind="stable")
        return keys[order], gids[order]

    def restore(self, keys: np.ndarray, gids: np.ndarray) -> None:
        """Load entries sorted by key (from :meth:`export`)."""
        self.__init__()  # type: ignore[misc]
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        gids = np.ascontiguousarray(gids, dtype=np.int32)
        bounds = np.searchsorted(keys >> self._SHARD_SHIFT, np.arange(17, dtype=np.uint64)).tolist()
        for shard, run in enumerate(self._runs):
            run.main_keys = keys[bounds[shard] : bounds[shard + 1]].copy()
            run.main_gids = gids[bounds[shard] : bounds[shard + 1]].copy()


def _merge(ak: np.ndarray, ag: np.ndarray, bk: np.ndarray, bg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge two key-sorted tables into one (O(len(a) + len(b)) with one new array each)."""
    if len(ak) == 0:
        return bk, bg
    pos = np.searchsorted(ak, bk, side="right")
    return np.insert(ak, pos, bk), np.insert(ag, pos, bg)


class MemoryStorage(Storage):
    """The default storage: everything in this process. Persist it with ``DedupIndex.save``."""

    shared = False

    def __init__(self) -> None:
        self.meta: dict[str, Any] | None = None
        self.items: dict[str, ItemRecord] = {}
        self.sources: dict[str, list[str]] = {}
        self.digest_to_gid: dict[bytes, int] = {}
        self.digests: list[bytes | None] = []
        self.shingles: list[bytes | None] = []
        # The keys of each group: a str for a group of one (saves a list), else a list.
        self.members: list[str | list[str] | None] = []
        self.bands = BandTable()
        self.component_of: dict[int, frozenset[int]] = {}
        self.cluster_of: dict[str, tuple[str, float]] = {}
        self.clusters: dict[str, list[tuple[str, float]]] = {}

    def drop(self) -> None:
        self.__init__()  # type: ignore[misc]

    # --- metadata
    def load_meta(self) -> dict[str, Any] | None:
        return self.meta

    def save_meta(self, meta: Mapping[str, Any]) -> None:
        self.meta = dict(meta)

    # --- items
    def get_items(self, keys: Sequence[str]) -> list[ItemRecord | None]:
        get = self.items.get
        return [get(k) for k in keys]

    def put_items(self, items: Mapping[str, ItemRecord]) -> None:
        self.items.update(items)
        for key, rec in items.items():
            if rec.source is not None:
                self.sources.setdefault(rec.source, []).append(key)
            if rec.gid != EMPTY_GROUP:
                current = self.members[rec.gid]
                if current is None:
                    self.members[rec.gid] = key
                elif isinstance(current, str):
                    self.members[rec.gid] = [current, key]
                else:
                    current.append(key)

    def delete_items(self, items: Mapping[str, ItemRecord]) -> None:
        for key, rec in items.items():
            del self.items[key]
            if rec.source is not None:
                keys = self.sources[rec.source]
                keys.remove(key)
                if not keys:
                    del self.sources[rec.source]
            if rec.gid != EMPTY_GROUP:
                current = self.members[rec.gid]
                if isinstance(current, str):
                    self.members[rec.gid] = None
                elif current is not None:
                    current.remove(key)
                    if len(current) == 1:
                        self.members[rec.gid] = current[0]

    def item_count(self) -> int:
        return len(self.items)

    def iter_keys(self) -> Iterator[str]:
        return iter(list(self.items))

    def keys_of_source(self, source: str) -> list[str]:
        return list(self.sources.get(source, ()))

    # --- groups and bands
    def find_groups(self, digests: Sequence[bytes]) -> list[int | None]:
        get = self.digest_to_gid.get
        return [get(d) for d in digests]

    def create_groups(self, digests: Sequence[bytes], shingles: Sequence[np.ndarray], band_keys: np.ndarray) -> list[int]:
        first = len(self.shingles)
        gids = list(range(first, first + len(digests)))
        for gid, digest, sh in zip(gids, digests, shingles):
            self.digest_to_gid[digest] = gid
            self.digests.append(digest)
            self.shingles.append(sh.astype(np.uint32, copy=False).tobytes())
            self.members.append(None)
        self.bands.insert(gids, band_keys)
        return gids

    def delete_group(self, gid: int, band_keys: np.ndarray) -> None:
        digest = self.digests[gid]
        if digest is not None:
            del self.digest_to_gid[digest]
        self.digests[gid] = None
        self.shingles[gid] = None
        self.members[gid] = None
        self.bands.delete(gid)
        self.component_of.pop(gid, None)

    def group_items(self, gids: Sequence[int]) -> list[list[str]]:
        out = []
        for gid in gids:
            current = self.members[gid]
            out.append([] if current is None else [current] if isinstance(current, str) else list(current))
        return out

    def group_shingles(self, gids: Sequence[int]) -> list[np.ndarray]:
        out = []
        for gid in gids:
            data = self.shingles[gid]
            if data is None:
                raise KeyError(f"group {gid} does not exist")
            out.append(np.frombuffer(data, dtype=np.uint32))
        return out

    def query_bands(self, band_keys: np.ndarray) -> list[set[int]]:
        return self.bands.query(band_keys)

    def query_band_pairs(self, band_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.bands.query_pairs(band_keys)

    # --- components
    def component_members(self, gids: Sequence[int]) -> list[frozenset[int]]:
        get = self.component_of.get
        return [get(g) or frozenset((g,)) for g in gids]

    def set_components(self, components: Sequence[Collection[int]]) -> None:
        for comp in components:
            if len(comp) < 2:
                for g in comp:
                    self.component_of.pop(g, None)
                continue
            shared = frozenset(comp)
            for g in shared:
                self.component_of[g] = shared

    # --- clusters
    def get_clusters(self, keys: Sequence[str]) -> list[tuple[str, float] | None]:
        get = self.cluster_of.get
        return [get(k) for k in keys]

    def cluster_members(self, representatives: Sequence[str]) -> list[list[tuple[str, float]]]:
        return [list(self.clusters.get(r, ())) for r in representatives]

    def set_clusters(self, keys: Collection[str], clusters: Sequence[ClusterEntry]) -> None:
        for key in keys:
            old = self.cluster_of.pop(key, None)
            if old is not None:
                self.clusters.pop(old[0], None)
        for rep, members in clusters:
            if len(members) < 2:
                continue
            self.clusters[rep] = list(members)
            for key, sim in members:
                self.cluster_of[key] = (rep, sim)

    def iter_clusters(self) -> Iterator[ClusterEntry]:
        return iter([(rep, list(m)) for rep, m in self.clusters.items()])
