"""In-process storage: compact enough for millions of chunks (well under 2 KB each).

Where the bytes go, per indexed chunk of ~180 words: its shingle set as a ``bytes`` object
(4 bytes a shingle, ~740 bytes), its LSH bucket entries in sorted numpy arrays (12 bytes a band,
~250 bytes at 21 bands), and its item record (~200 bytes). Python dicts and sets per bucket, as in
datasketch's in-memory LSH, would cost several kilobytes a chunk instead.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from rag_dedup.storage.base import EMPTY_GROUP, ClusterEntry, ItemRecord, Storage

__all__ = ["BandTable", "MemoryStorage"]


class BandTable:
    """LSH buckets as sorted arrays: band key (uint64) → group id, with a small write buffer.

    Lookups binary-search a large sorted *main* table and a smaller sorted *young* table, and check a
    dict *buffer* that takes single inserts cheaply. The buffer is sorted into *young* when it grows,
    and *young* is merged into *main* when it reaches a quarter of it, so each entry is copied O(1)
    times on average (amortised O(1) inserts, O(log n) lookups). Deleted groups become tombstones that
    lookups filter out and the next merge drops.
    """

    _BUFFER_LIMIT = 4096

    def __init__(self) -> None:
        self.main_keys = np.empty(0, dtype=np.uint64)
        self.main_gids = np.empty(0, dtype=np.int64)
        self.young_keys = np.empty(0, dtype=np.uint64)
        self.young_gids = np.empty(0, dtype=np.int64)
        self._buffer: dict[int, list[int]] = {}
        self._buffered = 0
        self._dead: set[int] = set()

    def __len__(self) -> int:
        return len(self.main_keys) + len(self.young_keys) + self._buffered

    def insert(self, gids: Sequence[int], keys: np.ndarray) -> None:
        """File group ``gids[i]`` under every key of row ``keys[i]``."""
        if len(gids) == 0:
            return
        flat_keys = keys.reshape(-1)
        flat_gids = np.repeat(np.asarray(gids, dtype=np.int64), keys.shape[1])
        if len(flat_keys) >= self._BUFFER_LIMIT:
            self._add_young(flat_keys, flat_gids)
            return
        for k, g in zip(flat_keys.tolist(), flat_gids.tolist()):
            self._buffer.setdefault(k, []).append(g)
        self._buffered += len(flat_keys)
        if self._buffered >= self._BUFFER_LIMIT:
            self._flush_buffer()

    def delete(self, gid: int) -> None:
        """Forget group ``gid`` (a tombstone until the next merge)."""
        self._dead.add(gid)
        for k in [k for k, gs in self._buffer.items() if gid in gs]:
            gs = [g for g in self._buffer[k] if g != gid]
            self._buffered -= len(self._buffer[k]) - len(gs)
            if gs:
                self._buffer[k] = gs
            else:
                del self._buffer[k]

    def query(self, keys: np.ndarray) -> list[set[int]]:
        """For each row of ``keys``, the groups filed under any of its keys."""
        n, b = keys.shape
        out: list[set[int]] = [set() for _ in range(n)]
        flat = keys.reshape(-1)
        # Sorted needles make the binary searches walk the table in order (cache-friendly).
        order = np.argsort(flat)
        needles = flat[order]
        for table_keys, table_gids in ((self.main_keys, self.main_gids), (self.young_keys, self.young_gids)):
            if len(table_keys) == 0:
                continue
            lo = np.searchsorted(table_keys, needles, side="left")
            found = lo < len(table_keys)
            found[found] = table_keys[lo[found]] == needles[found]
            hits = np.flatnonzero(found)
            if len(hits) == 0:
                continue
            hi = np.searchsorted(table_keys, needles[hits], side="right")
            c = hi - lo[hits]
            starts = np.repeat(lo[hits] - np.cumsum(c) + c, c) + np.arange(int(c.sum()))
            rows = np.repeat(order[hits] // b, c)
            for row, gid in zip(rows.tolist(), table_gids[starts].tolist()):
                out[row].add(gid)
        if self._buffer:
            get = self._buffer.get
            for i, k in enumerate(flat.tolist()):
                gs = get(k)
                if gs:
                    out[i // b].update(gs)
        if self._dead:
            for s in out:
                s -= self._dead
        return out

    def _flush_buffer(self) -> None:
        if not self._buffer:
            return
        keys = np.fromiter((k for k, gs in self._buffer.items() for _ in gs), dtype=np.uint64, count=self._buffered)
        gids = np.fromiter((g for gs in self._buffer.values() for g in gs), dtype=np.int64, count=self._buffered)
        self._buffer, self._buffered = {}, 0
        self._add_young(keys, gids)

    def _add_young(self, keys: np.ndarray, gids: np.ndarray) -> None:
        order = np.argsort(keys, kind="stable")
        self.young_keys, self.young_gids = _merge(self.young_keys, self.young_gids, keys[order], gids[order])
        if len(self.young_keys) * 4 >= len(self.main_keys):
            self.main_keys, self.main_gids = _merge(self.main_keys, self.main_gids, self.young_keys, self.young_gids)
            self.young_keys = np.empty(0, dtype=np.uint64)
            self.young_gids = np.empty(0, dtype=np.int64)
            if self._dead:
                dead = np.fromiter(self._dead, dtype=np.int64, count=len(self._dead))
                keep = ~np.isin(self.main_gids, dead)
                self.main_keys, self.main_gids = self.main_keys[keep], self.main_gids[keep]
                self._dead = set()

    def export(self) -> tuple[np.ndarray, np.ndarray]:
        """All live entries as (keys, gids), sorted by key (for saving)."""
        self._flush_buffer()
        keys = np.concatenate((self.main_keys, self.young_keys))
        gids = np.concatenate((self.main_gids, self.young_gids))
        if self._dead:
            keep = ~np.isin(gids, np.fromiter(self._dead, dtype=np.int64, count=len(self._dead)))
            keys, gids = keys[keep], gids[keep]
        order = np.argsort(keys, kind="stable")
        return keys[order], gids[order]

    def restore(self, keys: np.ndarray, gids: np.ndarray) -> None:
        """Load entries sorted by key (from :meth:`export`)."""
        self.__init__()  # type: ignore[misc]
        self.main_keys = np.ascontiguousarray(keys, dtype=np.uint64)
        self.main_gids = np.ascontiguousarray(gids, dtype=np.int64)


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
