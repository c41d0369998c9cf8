"""Compiled kernels of the index's batch path: the buckets of a batch's new groups, and merging them into the table.

:meth:`DedupIndex._add_batch <rag_dedup.index.DedupIndex._add_batch>` looks up every band key of a batch's
new groups (a batch of 1,000 texts at 21 bands: 21,000 keys) in the
:class:`~rag_dedup.storage.memory.BandTable` and groups them into the buckets that hold a new group
and another group. The numpy reference (``DedupIndex._lookup_buckets`` and ``index._buckets``) sorts
the keys, binary-searches the table's runs with them, and then builds each bucket's lists in a Python
loop over thousands of buckets, most of them two groups (a near-duplicate and its original share most
of their bands). :func:`batch_buckets` does it in one pass over the sorted keys, reading the runs
through the table's bit filter as :func:`~rag_dedup.compiled.index.band_lookup` does, and returns the
two-group buckets as one pair each (what ``DedupIndex._link`` makes of such a bucket) and the larger
ones as arrays. :func:`merge_entries` merges new entries into a run's sorted level in one pass, and
:func:`mark_filter` sets their filter bits (the references: ``storage.memory._merge`` and
``BandTable._mark``). ``tests/test_compiled_batch.py`` holds each kernel equal to its reference.

Example:
    >>> import numpy as np
    >>> keys, gids = merge_entries(np.array([1, 3], dtype=np.uint64), np.array([7, 8], dtype=np.int32),
    ...                            np.array([2, 3], dtype=np.uint64), np.array([9, 10], dtype=np.int32))
    >>> keys.tolist(), gids.tolist()
    ([1, 2, 3, 3], [7, 9, 8, 10])
"""

from __future__ import annotations

import numpy as np

from rag_dedup.compiled import kernel
from rag_dedup.compiled.index import _view

__all__ = ["batch_buckets", "mark_filter", "merge_entries"]


@kernel
def batch_buckets(
    keys: np.ndarray, width: int, bits: np.ndarray, mask: np.uint64, levels: np.ndarray, dead: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The buckets of a batch's band keys that hold one of its rows and another group, stored or new.

    ``keys`` is the ``(n, width)`` uint64 band-key array of the batch's new groups, flattened (row i
    is new group i); ``bits``, ``mask`` and ``levels`` describe a :class:`~rag_dedup.storage.memory.BandTable`'s
    runs as for :func:`~rag_dedup.compiled.index.band_lookup` (its buffer empty), ``dead`` the sorted
    int64 ids of its deleted groups (their entries are left out).

    A bucket is one distinct key: its stored groups (each once, ascending) and its rows (an entry
    each, so a row filed twice under it counts twice, ascending). Buckets of a single entry are left
    out. Returns, in key order, the buckets of exactly two entries as pairs
    ``(left_row, right, right_is_row)``: the first row, and the stored group or (``right_is_row``
    true) the second row; and the others as ``(old_bounds, old_gids, new_bounds, new_rows)``, bucket
    ``k``'s stored groups ``old_gids[old_bounds[k]:old_bounds[k + 1]]`` and its rows likewise.
    """
    m = len(keys)
    order = np.argsort(keys, kind="mergesort")  # stable: a key's entries in row order
    like_keys = np.zeros(0, dtype=np.uint64)
    like_gids = np.zeros(0, dtype=np.int32)
    starts = np.empty(m + 1, dtype=np.int64)
    found_lo = np.zeros((m, 2), dtype=np.int64)
    found_hi = np.zeros((m, 2), dtype=np.int64)
    total = 0
    n_keys = 0
    i = 0
    while i < m:
        key = keys[order[i]]
        starts[n_keys] = i
        i += 1
        while i < m and keys[order[i]] == key:
            i += 1
        slot = key & mask
        if (bits[slot >> np.uint64(3)] >> (slot & np.uint64(7))) & np.uint64(1):
            shard = np.int64(key >> np.uint64(60))
            for level in range(2):
                column = 2 * shard + level
                size = levels[2, column]
                if size == 0:
                    continue
                run = _view(levels[0, column], size, like_keys)
                lo = np.searchsorted(run, key)
                hi = lo
                while hi < size and run[hi] == key:
                    hi += 1
                found_lo[n_keys, level] = lo
                found_hi[n_keys, level] = hi
                total += hi - lo
        n_keys += 1
    starts[n_keys] = m
    left = np.empty(n_keys, dtype=np.int64)
    right = np.empty(n_keys, dtype=np.int64)
    right_is_row = np.zeros(n_keys, dtype=np.bool_)
    old_bounds = np.zeros(n_keys + 1, dtype=np.int64)
    old_gids = np.empty(total, dtype=np.int64)
    new_bounds = np.zeros(n_keys + 1, dtype=np.int64)
    new_rows = np.empty(m, dtype=np.int64)
    scratch = np.empty(total, dtype=np.int64)
    n_pairs = 0
    n_big = 0
    at_old = 0
    at_new = 0
    for d in range(n_keys):
        key = keys[order[starts[d]]]
        count = 0
        for level in range(2):
            lo, hi = found_lo[d, level], found_hi[d, level]
            if hi > lo:
                column = 2 * np.int64(key >> np.uint64(60)) + level
                owners = _view(levels[1, column], levels[2, column], like_gids)
                for j in range(lo, hi):
                    g = np.int64(owners[j])
                    if len(dead):
                        at = np.searchsorted(dead, g)
                        if at < len(dead) and dead[at] == g:
                            continue
                    scratch[count] = g
                    count += 1
        if count > 1:  # each stored group once, ascending
            ordered = np.sort(scratch[:count])
            kept = 1
            for j in range(1, count):
                if ordered[j] != ordered[kept - 1]:
                    ordered[kept] = ordered[j]
                    kept += 1
            scratch[:kept] = ordered[:kept]
            count = kept
        n_new = starts[d + 1] - starts[d]
        if n_new + count < 2:
            continue
        first = order[starts[d]] // width
        if n_new + count == 2:
            left[n_pairs] = first
            if count:
                right[n_pairs] = scratch[0]
            else:
                right[n_pairs] = order[starts[d] + 1] // width
                right_is_row[n_pairs] = True
            n_pairs += 1
            continue
        old_gids[at_old : at_old + count] = scratch[:count]
        at_old += count
        for j in range(starts[d], starts[d + 1]):
            new_rows[at_new] = order[j] // width
            at_new += 1
        n_big += 1
        old_bounds[n_big] = at_old
        new_bounds[n_big] = at_new
    return (
        left[:n_pairs],
        right[:n_pairs],
        right_is_row[:n_pairs],
        old_bounds[: n_big + 1],
        old_gids[:at_old],
        new_bounds[: n_big + 1],
        new_rows[:at_new],
    )


@kernel
def merge_entries(
    a_keys: np.ndarray, a_gids: np.ndarray, b_keys: np.ndarray, b_gids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Two key-sorted tables of (uint64 key, int32 group id) entries merged into one, in one pass:
    ``b``'s entries after the equal keys of ``a``, each table in its order (``storage.memory._merge``)."""
    n_a, n_b = len(a_keys), len(b_keys)
    keys = np.empty(n_a + n_b, dtype=np.uint64)
    gids = np.empty(n_a + n_b, dtype=np.int32)
    i = j = k = 0
    while i < n_a and j < n_b:
        if b_keys[j] < a_keys[i]:
            keys[k] = b_keys[j]
            gids[k] = b_gids[j]
            j += 1
        else:
            keys[k] = a_keys[i]
            gids[k] = a_gids[i]
            i += 1
        k += 1
    while i < n_a:
        keys[k] = a_keys[i]
        gids[k] = a_gids[i]
        i += 1
        k += 1
    while j < n_b:
        keys[k] = b_keys[j]
        gids[k] = b_gids[j]
        j += 1
        k += 1
    return keys, gids


@kernel
def mark_filter(bits: np.ndarray, mask: np.uint64, keys: np.ndarray) -> None:
    """Set bit ``key & mask`` of the filter ``bits`` (uint8, little-endian bit order in a byte) for each of
    ``keys`` (``BandTable._mark``)."""
    for i in range(len(keys)):
        slot = keys[i] & mask
        bits[slot >> np.uint64(3)] |= np.uint8(1) << np.uint8(slot & np.uint64(7))
