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
ones as arrays. :func:`key_order` is the stable order of band keys (a counting pass on the top bits,
then insertion sorts: band keys are uniform hashes), :func:`merge_entries` merges new entries into a
run's sorted level in one pass, and :func:`mark_filter` sets their filter bits (the references:
``np.argsort(kind="stable")``, ``storage.memory._merge`` and ``BandTable._mark``). ``tests/test_compiled_batch.py`` holds each kernel equal to its reference.

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
from rag_dedup.compiled.index import _filtered_out, _run_range, _view

__all__ = ["batch_buckets", "key_order", "mark_filter", "merge_entries"]


@kernel
def _grown(values: np.ndarray, used: int, need: int) -> np.ndarray:
    """``values`` (of which the first ``used`` are set) with room for at least ``need`` (doubled: O(1) a value)."""
    if need <= len(values):
        return values
    out = np.empty(max(need, 2 * len(values)), dtype=values.dtype)
    out[:used] = values[:used]
    return out


@kernel
def key_order(keys: np.ndarray) -> np.ndarray:
    """The stable ascending order of ``keys`` (uniform 64-bit hashes), as ``np.argsort(keys, kind="stable")``.

    A counting pass on the top bits (about four keys a slot) places the keys in slot order, keeping
    their order within a slot; an insertion sort of each slot, which moves a key only past greater
    keys, finishes it (equal keys, a bucket's entries, stay in their order). Plain loops rather than
    numba's sort, whose compiled code would add megabytes to every process that loads this kernel.
    """
    m = len(keys)
    bits = 0
    while bits < 40 and (1 << bits) * 4 < m:
        bits += 1
    slots = 1 << bits
    shift = np.uint64(64 - bits) if bits else np.uint64(0)
    starts = np.zeros(slots + 1, dtype=np.int64)
    for i in range(m):
        starts[(np.int64(keys[i] >> shift) if bits else 0) + 1] += 1
    for k in range(slots):
        starts[k + 1] += starts[k]
    order = np.empty(m, dtype=np.int64)
    at = starts[:slots].copy()
    for i in range(m):
        k = np.int64(keys[i] >> shift) if bits else 0
        order[at[k]] = i
        at[k] += 1
    for k in range(slots):
        for j in range(starts[k] + 1, starts[k + 1]):
            moving = order[j]
            key = keys[moving]
            t = j
            while t > starts[k] and keys[order[t - 1]] > key:
                order[t] = order[t - 1]
                t -= 1
            order[t] = moving
    return order


@kernel
def _lower_bound(values: np.ndarray, value: np.uint64) -> int:
    """The first index of sorted ``values`` whose value is not below ``value`` (``np.searchsorted``)."""
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


@kernel
def _sort_unique(values: np.ndarray, n: int) -> int:
    """Sort ``values[:n]`` in place (a heapsort: small code, O(n log n)), drop repeats; the count left."""
    for start in range(n // 2 - 1, -1, -1):
        _sift(values, start, n)
    for end in range(n - 1, 0, -1):
        values[0], values[end] = values[end], values[0]
        _sift(values, 0, end)
    kept = 1 if n else 0
    for j in range(1, n):
        if values[j] != values[kept - 1]:
            values[kept] = values[j]
            kept += 1
    return kept


@kernel
def _sift(values: np.ndarray, root: int, end: int) -> None:
    while True:
        child = 2 * root + 1
        if child >= end:
            return
        if child + 1 < end and values[child + 1] > values[child]:
            child += 1
        if values[root] >= values[child]:
            return
        values[root], values[child] = values[child], values[root]
        root = child


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
    One pass over the sorted keys; the answers grow as found (the only temporary of the batch's
    size is the sort order: the peak memory of a batch stays that of the numpy reference).
    """
    m = len(keys)
    order = key_order(keys)  # stable: a key's entries in row order
    like_keys = np.zeros(0, dtype=np.uint64)
    like_gids = np.zeros(0, dtype=np.int32)
    left = np.empty(256, dtype=np.int64)
    right = np.empty(256, dtype=np.int64)
    right_is_row = np.zeros(256, dtype=np.bool_)
    old_bounds = np.zeros(64, dtype=np.int64)
    old_gids = np.empty(256, dtype=np.int64)
    new_bounds = np.zeros(64, dtype=np.int64)
    new_rows = np.empty(256, dtype=np.int64)
    scratch = np.empty(64, dtype=np.int64)
    n_pairs = 0
    n_big = 0
    at_old = 0
    at_new = 0
    i = 0
    while i < m:
        start = i
        key = keys[order[i]]
        i += 1
        while i < m and keys[order[i]] == key:
            i += 1
        n_new = i - start
        count = 0  # the stored groups under key, in scratch
        if not _filtered_out(bits, mask, key):
            shard = np.int64(key >> np.uint64(60))
            for level in range(2):
                column = 2 * shard + level
                lo, hi = _run_range(levels, column, key, like_keys)
                if hi == lo:
                    continue
                owners = _view(levels[1, column], levels[2, column], like_gids)
                scratch = _grown(scratch, count, count + hi - lo)
                for j in range(lo, hi):
                    g = np.int64(owners[j])
                    if len(dead):
                        at = _lower_bound(dead, g)
                        if at < len(dead) and dead[at] == g:
                            continue
                    scratch[count] = g
                    count += 1
        if n_new + count < 2:
            continue
        if count > 1:  # each stored group once, ascending
            count = _sort_unique(scratch, count)
            if n_new + count < 2:
                continue
        first = order[start] // width
        if n_new + count == 2:
            if n_pairs == len(left):
                left = _grown(left, n_pairs, n_pairs + 1)
                right = _grown(right, n_pairs, n_pairs + 1)
                right_is_row = _grown(right_is_row, n_pairs, n_pairs + 1)
            left[n_pairs] = first
            if count:
                right[n_pairs] = scratch[0]
                right_is_row[n_pairs] = False
            else:
                right[n_pairs] = order[start + 1] // width
                right_is_row[n_pairs] = True
            n_pairs += 1
            continue
        old_gids = _grown(old_gids, at_old, at_old + count)
        old_gids[at_old : at_old + count] = scratch[:count]
        at_old += count
        new_rows = _grown(new_rows, at_new, at_new + n_new)
        for j in range(start, i):
            new_rows[at_new] = order[j] // width
            at_new += 1
        n_big += 1
        old_bounds = _grown(old_bounds, n_big, n_big + 1)
        new_bounds = _grown(new_bounds, n_big, n_big + 1)
        old_bounds[n_big] = at_old
        new_bounds[n_big] = at_new
    return (
        left[:n_pairs].copy(),
        right[:n_pairs].copy(),
        right_is_row[:n_pairs].copy(),
        old_bounds[: n_big + 1].copy(),
        old_gids[:at_old].copy(),
        new_bounds[: n_big + 1].copy(),
        new_rows[:at_new].copy(),
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
