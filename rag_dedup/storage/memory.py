"""In-process storage, compact enough for millions of chunks (the budget: under 2 KB a chunk; the
README's Performance table has the measured bytes).

Where the bytes go, per indexed chunk: its shingle set as a ``bytes`` object (4 bytes a shingle),
its LSH bucket entries in sorted numpy arrays (12 bytes a band: 252 bytes at 21 bands) and their bit
filter (1 to 2 bytes a band), and its item record and exact-text digest. Python dicts and sets per bucket, as in datasketch's in-memory LSH,
cost several times that.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_left
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rag_dedup import compiled
from rag_dedup.compiled.batch import batch_buckets, key_order, mark_filter, merge_entries
from rag_dedup.compiled.index import _GOLDEN, band_lookup, buffer_file, row_lookup_file
from rag_dedup.storage.base import EMPTY_GROUP, ClusterEntry, ItemRecord
from rag_dedup.storage.bookkeeping import Bookkeeping, Table

__all__ = ["BandTable", "MemoryStorage", "Snapshot"]


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


def _kernel_array(values: np.ndarray, dtype: type[np.generic]) -> np.ndarray:
    """``values`` as :func:`~rag_dedup.compiled.index.band_lookup` reads it: C-contiguous, of ``dtype`` (no
    copy when it already is; the kernel reads through its address, so a read-only array is not copied)."""
    if values.dtype == dtype and values.flags.c_contiguous:
        return values
    return np.array(values, dtype=dtype, order="C")


class BandTable:
    """LSH buckets as sorted arrays: band key (uint64) → group id, with a small write buffer.

    Band keys are uniform 64-bit hashes, so the table is split by the top four key bits into 16 runs.
    Each run has a large sorted *main* level and a smaller sorted *young* level; new entries are merged
    into *young*, and *young* into *main* once it reaches a quarter of it, so each entry is copied O(1)
    times on average and a merge briefly doubles one run, never the whole table (which bounds peak
    memory). Single inserts go to a write *buffer* first: an open-addressing hash multimap in one numpy
    array (key, group id + 1 a slot; at most half full), which the compiled
    :func:`~rag_dedup.compiled.index.buffer_file` probes and fills a row of keys at a time (a dict of
    Python ints cost a few cache misses a key more, and a list conversion at each merge), with the
    entries again in the order filed (what a merge into the runs writes). Lookups sort their needles
    and binary-search each run in order. Deleted groups are tombstones until every run has compacted them away.
    Each entry costs 12 bytes (uint64 key, int32 group id).

    A bit *filter* over the keys in the runs (bit ``key mod 2^m`` set for every such key, at least
    8 bits an entry, under 2 bytes, and at most ~12% false positives) lets a small lookup (:meth:`_query_small`)
    binary-search only the needles whose bit is set: most needles of a new text are in no bucket, and
    a binary search in a run far larger than the CPU caches costs a dozen cache misses. The filter
    may say yes for a key that is not there (then the search finds nothing), never no for one that is.
    """

    # Entries the buffer holds before they are merged into the runs (a merge of the buffer costs a fixed
    # part for each of the 16 runs and a copy of their young levels: fewer, larger merges cost less an
    # entry, 8 against 10 us an add() at 20k chunks; the buffer holds ~840 KB, ~50 bytes an entry);
    # and the size from which an insert goes straight to the runs (an add_many batch of ~200 texts or more).
    _BUFFER_LIMIT = 16384
    _DIRECT_LIMIT = 4096
    # Queries of at most this many keys (one add, or an add_many of about a dozen texts at 21 bands,
    # where the small path is the faster) take _query_small.
    _SMALL_QUERY = 256
    _SHARD_SHIFT = np.uint64(60)

    # Filter bits per entry in the runs (at least; the size is a power of two), and the smallest filter.
    _FILTER_BITS_PER_ENTRY = 8
    _FILTER_MIN_BITS = 1 << 16

    def __init__(self) -> None:
        self._runs = [_Run() for _ in range(16)]
        # The write buffer (see the class docstring; allocated when first filed): its hash slots, an
        # (S, 2) uint64 array of (key, group id + 1), 0 for empty; the entries again in the order filed,
        # a (capacity, 2) uint64 array of (key, group id); and how many there are.
        self._slots: np.ndarray | None = None
        self._order: np.ndarray | None = None
        self._buffered = 0
        self._dead: set[int] = set()
        self._compacted: set[int] = set()
        self._filter = np.zeros(self._FILTER_MIN_BITS // 8, dtype=np.uint8)
        self._filter_mask = np.uint64(self._FILTER_MIN_BITS - 1)
        # The runs' levels as band_lookup takes them, and the arrays that array points into (built when
        # first asked, dropped when the runs change; the runs' own arrays where they fit, not copies).
        self._typed: tuple[np.ndarray, tuple[np.ndarray, ...]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_typed"] = None  # rebuilt when first asked, not copied or pickled
        return state

    def _levels(self) -> np.ndarray:
        """The runs' levels as :func:`~rag_dedup.compiled.index.band_lookup` takes them: a ``(3, 32)``
        int64 array of the data addresses of every run's main and young keys and group ids (run r at
        columns 2r and 2r + 1) and their lengths.

        Built when first asked and dropped when the runs change (:meth:`_add`, :meth:`restore`); the
        arrays it points into (the runs' own, or C-contiguous copies of the right dtype) are kept in
        ``_typed`` beside it, so they live as long as it does. One array argument for the kernel: its
        one signature is compiled once and cached on disk, and unboxed in well under a microsecond.
        """
        if self._typed is None:
            kept: list[np.ndarray] = []
            levels = np.zeros((3, 32), dtype=np.int64)
            for run in self._runs:
                for level_keys, level_gids in ((run.main_keys, run.main_gids), (run.young_keys, run.young_gids)):
                    column = len(kept) // 2
                    keys, gids = _kernel_array(level_keys, np.uint64), _kernel_array(level_gids, np.int32)
                    kept += (keys, gids)
                    levels[:, column] = (keys.ctypes.data, gids.ctypes.data, len(keys))
            self._typed = (levels, tuple(kept))
        return self._typed[0]

    def __len__(self) -> int:
        return sum(len(r) for r in self._runs) + self._buffered

    def insert(self, gids: Sequence[int], keys: np.ndarray) -> None:
        """File group ``gids[i]`` under every key of row ``keys[i]``."""
        if len(gids) == 0:
            return
        width = keys.shape[1]
        if keys.size >= self._DIRECT_LIMIT:
            self._add(keys.reshape(-1), np.repeat(np.asarray(gids, dtype=np.int32), width))
            return
        self._buffer_file(np.ascontiguousarray(keys, dtype=np.uint64).reshape(-1), np.asarray(gids, dtype=np.int64), width, False)
        if self._buffered >= self._BUFFER_LIMIT:
            self._flush_buffer()

    def _buffer_file(self, keys: np.ndarray, gids: np.ndarray, width: int, find: bool) -> tuple[np.ndarray, np.ndarray]:
        """:func:`~rag_dedup.compiled.index.buffer_file` over this table's buffer (allocated here when it has
        none), or its reference below; ``_buffered`` counts the entries filed. Returns what it found."""
        if len(gids) and self._slots is None:
            self._allocate_buffer()
        if self._slots is None:  # nothing buffered, nothing filed
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        if compiled.COMPILED:
            found = buffer_file(keys, self._slots, self._order, self._buffered, gids, max(width, 1), find)
        else:
            found = self._buffer_file_reference(keys.tolist(), gids.tolist(), max(width, 1), find)
        if len(gids):
            self._buffered += len(keys)
        return found  # type: ignore[no-any-return]

    def _allocate_buffer(self) -> None:
        """The buffer's arrays, empty: at most half full at its capacity (a flush comes before more)."""
        capacity = self._BUFFER_LIMIT + self._DIRECT_LIMIT
        size = 1
        while size < 2 * capacity:
            size *= 2
        self._slots = np.zeros((size, 2), dtype=np.uint64)
        self._order = np.zeros((capacity, 2), dtype=np.uint64)

    def _buffer_file_reference(self, keys: list[int], gids: list[int], width: int, find: bool) -> tuple[np.ndarray, np.ndarray]:
        """The reference of :func:`~rag_dedup.compiled.index.buffer_file`, in Python over the same arrays
        (through a flat ``memoryview``, which reads and writes Python ints)."""
        slots = memoryview(self._slots).cast("B").cast("Q")  # type: ignore[arg-type]
        order = memoryview(self._order).cast("B").cast("Q")  # type: ignore[arg-type]
        size = len(slots) // 2
        shift = 64 - (size.bit_length() - 1)
        rows: list[int] = []
        found: list[int] = []
        count = self._buffered
        for i, key in enumerate(keys):
            own = gids[i // width] + 1 if gids else 0
            s = ((key * _GOLDEN) & 0xFFFFFFFFFFFFFFFF) >> shift if shift < 64 else 0
            while slots[2 * s + 1]:
                if find and slots[2 * s] == key and slots[2 * s + 1] != own:
                    rows.append(i)
                    found.append(slots[2 * s + 1] - 1)
                s = (s + 1) & (size - 1)
            if gids:
                slots[2 * s], slots[2 * s + 1] = key, own
                order[2 * (count + i)], order[2 * (count + i) + 1] = key, own - 1
        return np.array(rows, dtype=np.int64), np.array(found, dtype=np.int64)

    def delete(self, gid: int) -> None:
        """Forget group ``gid`` (a tombstone until every run has been compacted)."""
        self._dead.add(gid)
        self._compacted = set()
        if self._order is not None and (self._order[: self._buffered, 1] == gid).any():  # filed again without it
            entries = self._order[: self._buffered]
            kept = entries[entries[:, 1] != gid]
            self._slots.fill(0)  # type: ignore[union-attr]
            self._buffered = 0
            if len(kept):
                self._buffer_file(np.ascontiguousarray(kept[:, 0]), kept[:, 1].astype(np.int64), 1, False)

    def query(self, keys: np.ndarray) -> list[set[int]]:
        """For each row of ``keys``, the groups filed under any of its keys."""
        if keys.shape[0] == 1:
            return [self.query_row(keys.reshape(-1))]
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
        if self._buffered:
            at, found = self._buffer_file(np.ascontiguousarray(flat, dtype=np.uint64), _NO_GIDS, 1, True)
            row_parts.append(at // b)
            gid_parts.append(found)
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
        """:meth:`query_pairs` of a few rows (one ``add``, an ``add_many`` of a few texts): only the needles
        the filter lets through are binary-searched (grouped by run); the buffer is asked key by key."""
        b = keys.shape[1]
        flat = keys.reshape(-1)
        values = flat.tolist()
        found: set[tuple[int, int]] = set()
        if compiled.COMPILED:
            rows, gids = band_lookup(np.ascontiguousarray(flat, dtype=np.uint64), self._filter, self._filter_mask, self._levels())
            found.update(zip((rows // b).tolist(), gids.tolist()))
        else:
            self._search_runs(flat, values, b, found)
        if self._buffered:
            at, gids = self._buffer_file(np.ascontiguousarray(flat, dtype=np.uint64), _NO_GIDS, 1, True)
            found.update(zip((at // b).tolist(), gids.tolist()))
        if self._dead:
            found = {pair for pair in found if pair[1] not in self._dead}
        pairs = sorted(found)
        rows = np.fromiter((r for r, _ in pairs), dtype=np.int64, count=len(pairs))
        return rows, np.fromiter((g for _, g in pairs), dtype=np.int64, count=len(pairs))

    def _search_runs(self, flat: np.ndarray, values: list[int], b: int, found: set[tuple[int, int]]) -> None:
        """Add to ``found`` the (row, group) of every entry of the runs under a key of ``flat`` (``values``
        as ints, ``b`` keys a row): the reference of :func:`~rag_dedup.compiled.index.band_lookup`."""
        maybe = np.flatnonzero(self._might_hold(flat))
        if len(maybe) > 1:
            maybe = maybe[flat[maybe].argsort()]
        needles = flat[maybe]  # sorted
        at = maybe.tolist()
        bounds = [0] * 17 if not len(at) else (needles >> self._SHARD_SHIFT).searchsorted(_SHARDS).tolist()
        for shard in range(16) if at else ():
            first, last = bounds[shard], bounds[shard + 1]
            if first == last:
                continue
            run = self._runs[shard]
            part = needles[first:last]
            for level_keys, level_gids in ((run.main_keys, run.main_gids), (run.young_keys, run.young_gids)):
                size = len(level_keys)
                if not size:
                    continue
                view = memoryview(level_keys)  # reads Python ints (a numpy scalar compares slowly)
                for i, lo in zip(at[first:last], level_keys.searchsorted(part).tolist()):
                    value = values[i]
                    hi = lo
                    while hi < size and view[hi] == value:
                        hi += 1
                    if hi > lo:
                        row = i // b
                        found.update((row, g) for g in memoryview(level_gids)[lo:hi].tolist())

    def batch_buckets(self, keys: np.ndarray) -> tuple[np.ndarray, ...]:
        """The buckets of a batch's ``(n, b)`` band keys, as :func:`~rag_dedup.compiled.batch.batch_buckets`
        returns them (the compiled path of ``DedupIndex._add_batch``; the buffer is merged into the runs
        first, which changes no answer)."""
        self._flush_buffer()
        dead = np.array(sorted(self._dead), dtype=np.int64)
        flat = np.ascontiguousarray(keys, dtype=np.uint64).reshape(-1)
        return batch_buckets(flat, int(keys.shape[1]), self._filter, self._filter_mask, self._levels(), dead)  # type: ignore[no-any-return]

    def query_row(self, keys: np.ndarray) -> set[int]:
        """The groups filed under any of ``keys`` (the band keys of one ``add``: a 1-D uint64 array).

        :meth:`query` of one row: the runs are searched by the compiled kernel
        (:func:`~rag_dedup.compiled.index.band_lookup`, one call), or on the reference path in plain
        Python (a numpy call costs a microsecond or more, where a filter bit read through a
        ``memoryview`` and a :func:`bisect.bisect_left` over a run level's keys cost a fraction of
        that); the buffer is asked key by key.
        """
        values = keys.tolist()
        if compiled.COMPILED:
            found = set(band_lookup(np.ascontiguousarray(keys, dtype=np.uint64), self._filter, self._filter_mask, self._levels())[1].tolist())
        else:
            found = self._search_row(values)
        if self._buffered:
            found.update(self._buffer_file(np.ascontiguousarray(keys, dtype=np.uint64), _NO_GIDS, 1, True)[1].tolist())
        if self._dead:
            found -= self._dead
        return found

    def query_then_file_row(self, keys: np.ndarray, gid: int) -> set[int]:
        """:meth:`query_row` of ``keys`` (one new group's band keys: a 1-D uint64 array), then :meth:`insert`
        of group ``gid`` (new: never filed before) under every key, the buffer's part in one pass.

        The same answer and the same table after as the two calls (held by a test): each key is
        probed in the buffer once, and filed at the end of the probe sequence just walked (still in
        the CPU cache); on the compiled path the runs and the buffer in one kernel call
        (:func:`~rag_dedup.compiled.index.row_lookup_file`). Returns the groups filed under any of
        ``keys`` before ``gid``.
        """
        if keys.size >= self._DIRECT_LIMIT:  # a row too wide for the buffer: straight into the runs
            found = self.query_row(keys)
            self.insert((gid,), keys.reshape(1, -1))
            return found
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        if self._slots is None:
            self._allocate_buffer()
        if compiled.COMPILED:
            found = set(
                row_lookup_file(keys, self._filter, self._filter_mask, self._levels(), self._slots, self._order, self._buffered, gid).tolist()
            )
            self._buffered += len(keys)
        else:
            found = self._search_row(keys.tolist())
            found.update(self._buffer_file(keys, np.array((gid,), dtype=np.int64), len(keys), True)[1].tolist())
        if self._dead:  # before the flush, whose merge may compact the last tombstones away and forget them
            found -= self._dead
        if self._buffered >= self._BUFFER_LIMIT:
            self._flush_buffer()
        return found

    def _search_row(self, values: list[int]) -> set[int]:
        """The groups of the runs' entries under any of ``values`` (Python ints), in plain Python: the
        reference of :func:`~rag_dedup.compiled.index.band_lookup` for one row."""
        found: set[int] = set()
        bits = memoryview(self._filter)
        mask = int(self._filter_mask)
        runs = self._runs
        for value in values:
            slot = value & mask
            if not bits[slot >> 3] >> (slot & 7) & 1:
                continue
            run = runs[value >> 60]
            for level_keys, level_gids in ((run.main_keys, run.main_gids), (run.young_keys, run.young_gids)):
                size = len(level_keys)
                if not size:
                    continue
                keys = memoryview(level_keys)
                lo = hi = bisect_left(keys, value)
                while hi < size and keys[hi] == value:
                    hi += 1
                if hi > lo:
                    found.update(memoryview(level_gids)[lo:hi].tolist())
        return found

    def _might_hold(self, keys: np.ndarray) -> np.ndarray:
        """For each key, nonzero where the runs may hold it, zero where they do not (uint8; see the filter above)."""
        slots = keys & self._filter_mask
        return self._filter[slots >> np.uint64(3)] & _BITS[slots & np.uint64(7)]

    def _set_filter(self, keys: np.ndarray) -> None:
        """Set the filter bits of ``keys`` (entries just merged into the runs); when the runs outgrow the
        filter, rebuild it (a power of two of at least 8 bits an entry) from every key in them."""
        entries = sum(len(r) for r in self._runs)
        if entries * self._FILTER_BITS_PER_ENTRY <= len(self._filter) * 8:
            self._mark(keys)
            return
        bits = self._FILTER_MIN_BITS
        while bits < entries * self._FILTER_BITS_PER_ENTRY:
            bits *= 2
        self._filter = np.zeros(bits // 8, dtype=np.uint8)
        self._filter_mask = np.uint64(bits - 1)
        for run in self._runs:
            for level_keys in (run.main_keys, run.young_keys):
                if len(level_keys):
                    self._mark(level_keys)

    def _mark(self, keys: np.ndarray) -> None:
        """Set the filter bit of every key (one bit position at a time: a repeated byte index then
        writes the same value, which a fancy assignment may; ``np.bitwise_or.at`` is slower)."""
        if compiled.COMPILED:
            mark_filter(self._filter, self._filter_mask, np.ascontiguousarray(keys, dtype=np.uint64))
            return
        slots = keys & self._filter_mask
        byte = slots >> np.uint64(3)
        bit = (slots & np.uint64(7)).astype(np.uint8)
        for k in range(8):
            at = byte[bit == k]
            if len(at):
                self._filter[at] |= _BITS[k]

    def _flush_buffer(self) -> None:
        if not self._buffered:
            return
        entries = self._order[: self._buffered]  # type: ignore[index]
        keys, gids = entries[:, 0].copy(), entries[:, 1].astype(np.int32)
        self._slots.fill(0)  # type: ignore[union-attr]
        self._buffered = 0
        self._add(keys, gids)

    def _add(self, keys: np.ndarray, gids: np.ndarray) -> None:
        self._typed = None
        order = key_order(np.ascontiguousarray(keys, dtype=np.uint64)) if compiled.COMPILED else np.argsort(keys, kind="stable")
        keys, gids = keys[order], gids[order]
        bounds = np.searchsorted(keys >> self._SHARD_SHIFT, np.arange(17, dtype=np.uint64)).tolist()
        for shard, run in enumerate(self._runs):
            lo, hi = bounds[shard], bounds[shard + 1]
            if lo < hi and run.add(keys[lo:hi], gids[lo:hi], self._dead):
                self._compacted.add(shard)
        self._set_filter(keys)
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
        self.__init__()  # type: ignore[misc]  (no typed levels until asked)
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        gids = np.ascontiguousarray(gids, dtype=np.int32)
        bounds = np.searchsorted(keys >> self._SHARD_SHIFT, np.arange(17, dtype=np.uint64)).tolist()
        for shard, run in enumerate(self._runs):
            run.main_keys = keys[bounds[shard] : bounds[shard + 1]].copy()
            run.main_gids = gids[bounds[shard] : bounds[shard + 1]].copy()
        self._set_filter(keys)


# No group ids: a lookup of the write buffer that files nothing (BandTable._buffer_file).
_NO_GIDS = np.empty(0, dtype=np.int64)


# The shard numbers 0..16 (the bounds of the runs' key ranges, in the top four key bits).
_SHARDS = np.arange(17, dtype=np.uint64)
# The bit of each slot number mod 8 in a filter byte.
_BITS = np.array([1 << i for i in range(8)], dtype=np.uint8)


def _merge(ak: np.ndarray, ag: np.ndarray, bk: np.ndarray, bg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge two key-sorted tables into one (O(len(a) + len(b)) with one new array each)."""
    if len(ak) == 0:
        return bk, bg
    if compiled.COMPILED:  # one pass (rag_dedup.compiled.batch); below, the numpy reference
        return merge_entries(ak, ag, bk, bg)  # type: ignore[no-any-return]
    # b's entries land after the equal keys of a, in their order: entry i of b at position pos_i + i.
    at = np.searchsorted(ak, bk, side="right")
    at += np.arange(len(bk))
    from_a = np.ones(len(ak) + len(bk), dtype=bool)
    from_a[at] = False
    keys = np.empty(len(from_a), dtype=ak.dtype)
    gids = np.empty(len(from_a), dtype=ag.dtype)
    keys[at], gids[at] = bk, bg
    keys[from_a], gids[from_a] = ak, ag
    return keys, gids


@dataclass
class Snapshot:
    """Everything a :class:`MemoryStorage` holds, with group ids compacted to ``0 .. n-1`` (in their order).

    What :meth:`MemoryStorage.export` returns and :meth:`MemoryStorage.restore` takes: plain values a
    file format can write and read back (``rag_dedup.storage.directory`` does), no storage internals.

    Attributes:
        meta: The index parameters (None for a store that has none).
        items: Every item's record, in insertion order (group ids compacted).
        digests: The canonical-text digest of each group ``0 .. n-1``.
        shingles: The sorted uint32 shingle array of each group.
        band_keys, band_gids: Every LSH bucket entry (uint64 band key, int32 group id), sorted by key.
        components: Each component of two or more groups, as sorted group ids, in sorted order.
        clusters: Each cluster of two or more items, in insertion order.
    """

    meta: dict[str, Any] | None
    items: dict[str, ItemRecord]
    digests: list[bytes]
    shingles: list[np.ndarray]
    band_keys: np.ndarray
    band_gids: np.ndarray
    components: list[list[int]]
    clusters: list[ClusterEntry] = field(default_factory=list)


_NO_LOCK = contextlib.nullcontext()
# The tables the primitives test for, as module names: an Enum member read off its class costs ~0.3 us
# (the class attribute lookup of an EnumType), a module global a fraction of that.
_GROUPS, _SOURCES, _GROUP_ITEMS = Table.GROUPS, Table.SOURCES, Table.GROUP_ITEMS


class MemoryStorage(Bookkeeping):
    """The default storage: everything in this process. Persist it with ``DedupIndex.save``.

    Keeps the tables of :mod:`rag_dedup.storage.bookkeeping` compactly: groups in lists indexed by
    group id (a deleted group leaves a None), a group's shingles as ``bytes``, the keys of a group of
    one item as a bare ``str``, buckets in a :class:`BandTable`.
    """

    def __repr__(self) -> str:  # named in messages about damaged data (no address: the same in every run)
        return "MemoryStorage()"

    shared = False

    def __init__(self) -> None:
        self._meta: dict[str, Any] | None = None
        self._items: dict[str, ItemRecord] = {}
        self._sources: dict[str, list[str]] = {}
        self._digest_to_gid: dict[bytes, int] = {}
        self._digests: list[bytes | None] = []
        self._shingles: list[bytes | None] = []
        # The keys of each group: a str for a group of one (saves a list), else a list.
        self._group_items: list[str | list[str] | None] = []
        self._bands = BandTable()
        self._component_of: dict[int, frozenset[int]] = {}
        self._cluster_of: dict[str, tuple[str, float]] = {}
        self._clusters: dict[str, list[tuple[str, float]]] = {}
        self._maps: dict[Table, dict[Any, Any]] = {
            Table.ITEMS: self._items,
            Table.DIGESTS: self._digest_to_gid,
            Table.COMPONENTS: self._component_of,
            Table.CLUSTER_OF: self._cluster_of,
            Table.CLUSTERS: self._clusters,
        }

    @property
    def bands(self) -> BandTable:
        """The LSH bucket table (read by tests that check it against the generic bucket path)."""
        return self._bands

    def drop(self) -> None:
        self.__init__()  # type: ignore[misc]

    def lock(self) -> contextlib.AbstractContextManager[Any]:
        """A no-op (a private store): one shared ``nullcontext``, not a new one a call (a dozen an ``add()``)."""
        return _NO_LOCK

    # --- the hot domain calls of add()'s path (one item, one group, a few reads): the Bookkeeping rule
    # over this backend's own dicts and lists, without the table dispatch of the primitives
    def put_items(self, items: Mapping[str, ItemRecord]) -> None:
        if len(items) != 1:
            self._put_many_items(items)
            return
        ((key, rec),) = items.items()
        self._items[key] = rec
        if rec.source is not None:
            self._add(_SOURCES, ((rec.source, key),))
        if rec.gid != EMPTY_GROUP:
            self._add(_GROUP_ITEMS, ((rec.gid, key),))

    def get_items(self, keys: Sequence[str]) -> list[ItemRecord | None]:
        get = self._items.get
        return [get(k) for k in keys]

    def find_groups(self, digests: Sequence[bytes]) -> list[int | None]:
        get = self._digest_to_gid.get
        return [get(d) for d in digests]

    def component_members(self, gids: Sequence[int]) -> list[frozenset[int]]:
        get = self._component_of.get
        return [get(g) or frozenset((g,)) for g in gids]

    def get_clusters(self, keys: Sequence[str]) -> list[tuple[str, float] | None]:
        get = self._cluster_of.get
        return [get(k) for k in keys]

    def set_clusters(self, keys: Collection[str], clusters: Sequence[ClusterEntry]) -> None:
        """The :class:`Bookkeeping` rule (old entries of ``keys`` and their representatives' lists dropped,
        then the new lists and entries written, in that order) straight over this store's two dicts."""
        cluster_of, lists = self._cluster_of, self._clusters
        pop = cluster_of.pop
        for old in [pop(k, None) for k in keys]:
            if old is not None:
                lists.pop(old[0], None)
        for rep, members in clusters:
            if len(members) < 2:
                continue
            lists[rep] = list(members)
            for key, sim in members:
                cluster_of[key] = (rep, sim)

    def create_groups(self, digests: Sequence[bytes], shingles: Sequence[np.ndarray], band_keys: np.ndarray) -> list[int]:
        if len(digests) != 1 or len(shingles) != 1 or len(band_keys) != 1:
            return self._create_many_groups(digests, shingles, band_keys)
        gid = len(self._shingles)  # _new_group_ids(1), then the group's columns and digest written
        digest = bytes(digests[0])
        self._digests.append(digest)
        self._shingles.append(np.asarray(shingles[0]).astype(np.uint32, copy=False).tobytes())
        self._group_items.append(None)
        self._digest_to_gid[digest] = gid
        self._bands.insert((gid,), np.asarray(band_keys, dtype=np.uint64).reshape(1, -1))
        return [gid]

    def add_new_item(
        self, key: str, record: ItemRecord, digest: bytes, shingles: np.ndarray, band_keys: np.ndarray
    ) -> tuple[ItemRecord, set[int]] | None:
        """:meth:`Storage.add_new_item <rag_dedup.storage.base.Storage.add_new_item>` in one pass: two
        dict probes, then the band lookup and the filing of the new group's entries in one pass over the
        band table's buffer (:meth:`BandTable.query_then_file_row`), the group's columns and the item."""
        if key in self._items or digest in self._digest_to_gid:
            return None
        gid = len(self._shingles)
        digest = bytes(digest)
        candidates = self._bands.query_then_file_row(band_keys.reshape(-1), gid)
        self._digests.append(digest)
        self._shingles.append(np.asarray(shingles).astype(np.uint32, copy=False).tobytes())
        self._group_items.append(key)  # a group of one item: its key, bare
        self._digest_to_gid[digest] = gid
        stored: ItemRecord = tuple.__new__(ItemRecord, (gid, record[1], record[2], record[3], record[4]))
        self._items[key] = stored
        if stored.source is not None:
            self._add(_SOURCES, ((stored.source, key),))
        return stored, candidates
    # --- the same domain calls for many items or groups (add_many's batches): the Bookkeeping rule over
    # this backend's dicts and lists at once, without a primitive's dispatch and dict per table
    def _put_many_items(self, items: Mapping[str, ItemRecord]) -> None:
        """:meth:`Bookkeeping.put_items <rag_dedup.storage.bookkeeping.Bookkeeping.put_items>` of many items."""
        self._items.update(items)
        sourced = [(rec.source, key) for key, rec in items.items() if rec.source is not None]
        if sourced:
            self._add(_SOURCES, sourced)
        self._add(_GROUP_ITEMS, [(rec.gid, key) for key, rec in items.items() if rec.gid != EMPTY_GROUP])

    def _create_many_groups(self, digests: Sequence[bytes], shingles: Sequence[np.ndarray], band_keys: np.ndarray) -> list[int]:
        """:meth:`Bookkeeping.create_groups <rag_dedup.storage.bookkeeping.Bookkeeping.create_groups>` of
        any number of groups: ids, digests, shingles as ``bytes``, empty member sets, bucket entries."""
        n = len(digests)
        if n != len(shingles) or n != len(band_keys):
            raise ValueError(f"create_groups: {n} digests, {len(shingles)} shingle arrays, {len(band_keys)} band-key rows")
        if n == 0:
            return []
        first = len(self._shingles)
        gids = list(range(first, first + n))
        kept = [bytes(d) for d in digests]
        self._digests.extend(kept)
        self._shingles.extend(np.asarray(sh).astype(np.uint32, copy=False).tobytes() for sh in shingles)
        self._group_items.extend([None] * n)
        self._digest_to_gid.update(zip(kept, gids))
        self._bands.insert(gids, np.asarray(band_keys, dtype=np.uint64).reshape(n, -1))
        return gids

    # --- metadata
    def load_meta(self) -> dict[str, Any] | None:
        return self._meta

    def save_meta(self, meta: Mapping[str, Any]) -> None:
        self._meta = dict(meta)

    def item_count(self) -> int:
        return len(self._items)

    def iter_keys(self) -> Iterator[str]:
        return iter(list(self._items))

    # --- primitives: values
    def _get(self, table: Table, keys: Sequence[Any]) -> list[Any]:
        if table is _GROUPS:
            digests, shingles = self._digests, self._shingles
            return [
                None if shingles[g] is None else (digests[g], np.frombuffer(shingles[g], dtype=np.uint32))  # type: ignore[arg-type]
                for g in keys
            ]
        get = self._maps[table].get
        return [get(k) for k in keys]

    def _put(self, table: Table, values: Mapping[Any, Any]) -> None:
        if table is _GROUPS:
            for gid, group in values.items():
                if group is None:
                    self._digests[gid] = self._shingles[gid] = None
                else:
                    self._digests[gid] = bytes(group[0])
                    self._shingles[gid] = np.asarray(group[1]).astype(np.uint32, copy=False).tobytes()
            return
        store = self._maps[table]
        for key, value in values.items():
            if value is None:
                store.pop(key, None)
            else:
                store[key] = value

    def _scan(self, table: Table) -> list[tuple[Any, Any]]:
        return list(self._maps[table].items())

    # --- primitives: sets
    def _add(self, table: Table, pairs: Iterable[tuple[Any, str]]) -> None:
        if table is _SOURCES:
            sources = self._sources
            for source, key in pairs:
                keys = sources.get(source)
                if keys is None:
                    sources[source] = [key]
                else:
                    keys.append(key)
            return
        members = self._group_items
        for gid, key in pairs:
            current = members[gid]
            if current is None:
                members[gid] = key
            elif isinstance(current, str):
                members[gid] = [current, key]
            else:
                current.append(key)

    def _discard(self, table: Table, pairs: Iterable[tuple[Any, str]]) -> None:
        if table is _SOURCES:
            for source, key in pairs:
                keys = self._sources[source]
                keys.remove(key)
                if not keys:
                    del self._sources[source]
            return
        members = self._group_items
        for gid, key in pairs:
            current = members[gid]
            if isinstance(current, str):
                members[gid] = None
            elif current is not None:
                current.remove(key)
                if len(current) == 1:
                    members[gid] = current[0]

    def _clear(self, table: Table, owners: Sequence[Any]) -> None:
        if table is _SOURCES:
            for source in owners:
                self._sources.pop(source, None)
            return
        for gid in owners:
            self._group_items[gid] = None

    def _members(self, table: Table, owners: Sequence[Any]) -> list[list[str]]:
        if table is _SOURCES:
            return [list(self._sources.get(s, ())) for s in owners]
        out = []
        for gid in owners:
            current = self._group_items[gid]
            out.append([] if current is None else [current] if isinstance(current, str) else list(current))
        return out

    # --- primitives: groups and buckets
    def _new_group_ids(self, n: int) -> list[int]:
        first = len(self._shingles)
        for column in (self._digests, self._shingles, self._group_items):
            column.extend([None] * n)
        return list(range(first, first + n))

    def _file(self, gids: Sequence[int], band_keys: np.ndarray) -> None:
        self._bands.insert(gids, band_keys)

    def _unfile(self, gid: int, band_keys: np.ndarray) -> None:
        self._bands.delete(gid)  # a tombstone: the table finds the group's entries itself

    def query_bands(self, band_keys: np.ndarray) -> list[set[int]]:
        return self._bands.query(band_keys)

    def query_band_pairs(self, band_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._bands.query_pairs(band_keys)

    # --- the whole store as plain values
    def export(self) -> Snapshot:
        """Everything stored, group ids compacted to ``0 .. n-1`` in their order (see :class:`Snapshot`)."""
        live = [g for g, d in enumerate(self._digests) if d is not None]
        compact = np.full(len(self._digests) + 1, EMPTY_GROUP, dtype=np.int64)  # index -1 stays -1
        compact[live] = np.arange(len(live))
        recs = list(self._items.values())
        gids = compact[[r.gid for r in recs]].tolist() if recs else []
        items = {k: r._replace(gid=g) if r.gid != g else r for (k, r), g in zip(self._items.items(), gids)}
        band_keys, band_gids = self._bands.export()
        return Snapshot(
            meta=None if self._meta is None else dict(self._meta),
            items=items,
            digests=[self._digests[g] for g in live],  # type: ignore[misc]
            shingles=[np.frombuffer(self._shingles[g] or b"", dtype=np.uint32) for g in live],
            band_keys=band_keys,
            band_gids=compact[band_gids].astype(np.int32),
            components=sorted({tuple(sorted(compact[list(c)].tolist())) for c in self._component_of.values()}),  # type: ignore[arg-type]
            clusters=[(rep, list(members)) for rep, members in self._clusters.items()],
        )

    @classmethod
    def restore(cls, snapshot: Snapshot) -> MemoryStorage:
        """A storage holding ``snapshot`` (from :meth:`export`, or read from a file and checked).

        The snapshot must be consistent (what :func:`~rag_dedup.storage.directory.load_directory`
        checks): every item's group among ``0 .. n-1``, every group filed in every band, components
        and clusters over known groups and keys.
        """
        storage = cls()
        if snapshot.meta is not None:
            storage.save_meta(snapshot.meta)
        n = len(snapshot.digests)
        storage._new_group_ids(n)
        storage._digests[:] = [bytes(d) for d in snapshot.digests]
        storage._digest_to_gid.update((d, g) for g, d in enumerate(storage._digests))  # type: ignore[misc]
        storage._shingles[:] = [np.asarray(s, dtype=np.uint32).tobytes() for s in snapshot.shingles]
        storage._bands.restore(snapshot.band_keys, snapshot.band_gids)
        storage.put_items(snapshot.items)
        storage.set_components(snapshot.components)
        storage.set_clusters((), snapshot.clusters)
        return storage
