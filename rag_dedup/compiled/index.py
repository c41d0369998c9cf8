"""Compiled kernels of the index's one-item path: shared shingles of a few pairs of sets, a few band keys looked up.

:meth:`DedupIndex._verify <rag_dedup.index.DedupIndex._verify>` checks the candidates of one ``add``
(or of a small ``add_many``) with their exact Jaccard, and
:func:`~rag_dedup.clusters.cluster_component` reclusters a small component from the Jaccard of its
groups; both need ``|A ∩ B|`` for a handful of pairs of sorted unique shingle arrays, where the numpy
reference (:func:`~rag_dedup.similarity.jaccard_pairs`, :func:`~rag_dedup.similarity.jaccard_many`,
:func:`~rag_dedup.clusters.pooled_jaccard`) pays a fixed cost of a dozen or more numpy calls. The
kernel merges the two arrays of each pair instead, in one call for all of them. The Jaccard values
and the pooled sums built from its counts are the reference's integers, so the same floats.
:func:`band_lookup` finds the bucket entries of a few band keys (one ``add``'s row, a small
``add_many``'s) in a :class:`~rag_dedup.storage.memory.BandTable`'s runs, where the reference binary-
searches them from Python. ``tests/test_compiled_index.py`` holds every kernel equal to its
reference, value for value.

Example:
    >>> import numpy as np
    >>> flat = np.array([1, 2, 3, 2, 3, 4, 9], dtype=np.uint32)
    >>> bounds = np.array([0, 3, 6, 7], dtype=np.int64)
    >>> pair_intersections(flat, bounds, np.array([0, 0, 1]), np.array([1, 2, 2])).tolist()
    [2, 0, 0]
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import numpy as np

from rag_dedup.compiled import kernel

try:
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic
except ImportError:  # no numba: the kernels are plain Python (rag_dedup.compiled.kernel), which never call _view

    def intrinsic(function):  # type: ignore[no-untyped-def]
        return function

__all__ = [
    "band_lookup", "buffer_file", "intersection_matrix", "jaccard_of", "pack", "pair_intersections", "pair_jaccard", "row_lookup_file",
    "shared_count",
]  # fmt: skip


@kernel
def _merge_count(a: np.ndarray, i: int, end_i: int, b: np.ndarray, j: int, end_j: int) -> int:
    """How many values the sorted unique runs ``a[i:end_i]`` and ``b[j:end_j]`` share (a merge)."""
    shared = 0
    while i < end_i and j < end_j:
        x = a[i]
        y = b[j]
        if x == y:
            shared += 1
            i += 1
            j += 1
        elif x < y:
            i += 1
        else:
            j += 1
    return shared


@kernel
def _shared(flat: np.ndarray, i: int, end_i: int, j: int, end_j: int) -> int:
    """How many values the sorted unique runs ``flat[i:end_i]`` and ``flat[j:end_j]`` share."""
    return _merge_count(flat, i, end_i, flat, j, end_j)


@kernel
def pair_intersections(flat: np.ndarray, bounds: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``|S_i ∩ S_j|`` for each pair ``(i, j) = (left[k], right[k])``, set ``S_i`` being
    ``flat[bounds[i]:bounds[i + 1]]`` (sorted unique values; ``bounds`` int64, one more than the sets).

    Returns an int64 array, one count per pair (a merge of the two sorted runs).
    """
    out = np.zeros(len(left), dtype=np.int64)
    for k in range(len(left)):
        out[k] = _shared(flat, bounds[left[k]], bounds[left[k] + 1], bounds[right[k]], bounds[right[k] + 1])
    return out


@kernel
def shared_count(a: np.ndarray, b: np.ndarray) -> int:
    """``|A ∩ B|`` of two sorted unique arrays: :func:`pair_intersections` of one pair, without packing
    the two into one array first."""
    return _merge_count(a, 0, len(a), b, 0, len(b))


@kernel
def intersection_matrix(flat: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """``|S_i ∩ S_j|`` for every pair of the sets of ``(flat, bounds)`` (as :func:`pair_intersections`):
    an ``(n, n)`` int64 array, symmetric, with the sizes on the diagonal."""
    n = len(bounds) - 1
    out = np.zeros((n, n), dtype=np.int64)
    for a in range(n):
        out[a, a] = bounds[a + 1] - bounds[a]
        for b in range(a + 1, n):
            out[a, b] = out[b, a] = _shared(flat, bounds[a], bounds[a + 1], bounds[b], bounds[b + 1])
    return out


@intrinsic
def _view(typingctx, address, length, like):  # type: ignore[no-untyped-def]
    """The 1-D C-contiguous array of ``length`` items of ``like``'s dtype that starts at ``address`` (an
    int64 data pointer), owning nothing: a view of an array the caller keeps alive (nopython only)."""
    array = types.Array(like.dtype, 1, "C")

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        at, n, _ = args
        data = builder.inttoptr(at, context.get_value_type(types.CPointer(like.dtype)))
        view = context.make_array(array)(context, builder)
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(like.dtype)))
        context.populate_array(
            view,
            data=data,
            shape=cgutils.pack_array(builder, [n]),
            strides=cgutils.pack_array(builder, [itemsize]),
            itemsize=itemsize,
            meminfo=None,
        )
        return view._getvalue()

    return array(address, length, like), codegen


@kernel
def _filtered_out(bits: np.ndarray, mask: np.uint64, key: np.uint64) -> bool:
    """True when ``key``'s bit in a :class:`~rag_dedup.storage.memory.BandTable`'s bit filter is clear:
    the key is in none of its runs (the filter has no false negatives)."""
    slot = key & mask
    return (bits[slot >> np.uint64(3)] >> (slot & np.uint64(7))) & np.uint64(1) == 0


@kernel
def _run_range(levels: np.ndarray, column: int, key: np.uint64, like_keys: np.ndarray) -> tuple[int, int]:
    """``(lo, hi)``: the entries of the run level ``column`` of ``levels`` (see :func:`band_lookup`)
    whose key is ``key``, as positions in its sorted keys (``lo == hi``: none)."""
    size = levels[2, column]
    if size == 0:
        return 0, 0
    found = _view(levels[0, column], size, like_keys)
    lo = np.searchsorted(found, key)
    hi = lo
    while hi < size and found[hi] == key:
        hi += 1
    return lo, hi


@kernel
def band_lookup(keys: np.ndarray, bits: np.ndarray, mask: np.uint64, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The entries of a :class:`~rag_dedup.storage.memory.BandTable`'s runs under each of ``keys``.

    ``levels`` is a ``(3, 32)`` int64 array: column ``2 r`` describes run ``r``'s main level and
    ``2 r + 1`` its young level (run ``r`` holds the keys whose top four bits are ``r``), as the data
    address of its sorted uint64 keys, the data address of its int32 group ids, and its length
    (:meth:`BandTable._levels <rag_dedup.storage.memory.BandTable._levels>` builds it and keeps the
    arrays alive while it is in use). Addresses rather than the 64 arrays themselves: one array
    argument is unboxed in well under a microsecond, 64 arrays in tuples cost ten (most of one
    ``add()``'s lookup). ``bits`` and ``mask`` are the table's bit filter. A key whose filter bit is
    clear is in no run and is not searched. Returns ``(index into keys, group id)`` of every entry
    found, int64, key by key, main level first, each level in its order (what the reference loop of
    ``BandTable._query_small`` finds).
    """
    n = len(keys)
    lows = np.zeros(2 * n, dtype=np.int64)
    highs = np.zeros(2 * n, dtype=np.int64)
    like_keys = np.zeros(0, dtype=np.uint64)
    like_gids = np.zeros(0, dtype=np.int32)
    count = 0
    for i in range(n):
        key = keys[i]
        if _filtered_out(bits, mask, key):
            continue
        shard = np.int64(key >> np.uint64(60))
        for level in range(2):
            lo, hi = _run_range(levels, 2 * shard + level, key, like_keys)
            lows[2 * i + level] = lo
            highs[2 * i + level] = hi
            count += hi - lo
    rows = np.empty(count, dtype=np.int64)
    gids = np.empty(count, dtype=np.int64)
    at = 0
    for i in range(n):
        shard = np.int64(keys[i] >> np.uint64(60))
        for level in range(2):
            lo, hi = lows[2 * i + level], highs[2 * i + level]
            if hi > lo:
                column = 2 * shard + level
                owners = _view(levels[1, column], levels[2, column], like_gids)
                for j in range(lo, hi):
                    rows[at] = i
                    gids[at] = owners[j]
                    at += 1
    return rows, gids


#: The multiplier of the write buffer's hash (Fibonacci hashing: the top bits of ``key * _GOLDEN mod 2^64``
#: pick the slot, so keys alike in their low bits, such as small integers, still spread).
_GOLDEN = 0x9E3779B97F4A7C15


@kernel
def buffer_file(
    keys: np.ndarray, slots: np.ndarray, order: np.ndarray, count: int, gids: np.ndarray, width: int, find: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Look ``keys`` up in, and file them into, a :class:`~rag_dedup.storage.memory.BandTable`'s write buffer.

    The buffer is an open-addressing multimap: ``slots`` an ``(S, 2)`` uint64 array (``S`` a power of
    two, at most half full), row ``s`` a key and its group id + 1 (0: an empty slot); a key's entries
    lie on its probe sequence (from the slot the top bits of ``key * _GOLDEN`` name, one slot on at a
    time, to the first empty one) in the order they were filed. ``order`` (``(C, 2)`` uint64) holds the
    entries in the order filed, ``count`` of them so far. With ``find``, every entry under each key is
    returned, as ``(index into keys, group id)`` (int64), key by key; an entry of a group being filed
    by this call is not (a key twice in one row). With ``gids`` (not empty), key ``i`` is then filed
    under ``gids[i // width]``, at the end of its probe sequence and at ``order[count + i]``.
    The reference is ``BandTable._buffer_file_reference``, in Python over the same arrays.
    """
    n = len(keys)
    size = len(slots)
    shift = 64
    while (1 << (64 - shift)) < size:
        shift -= 1
    size_mask = np.uint64(size - 1)
    filing = len(gids) > 0
    cap = 16
    rows = np.empty(cap, dtype=np.int64)
    found = np.empty(cap, dtype=np.int64)
    at = 0
    for i in range(n):
        key = keys[i]
        own = np.uint64(gids[i // width] + 1) if filing else np.uint64(0)
        s = (key * np.uint64(_GOLDEN)) >> np.uint64(shift) if shift < 64 else np.uint64(0)
        while slots[s, 1] != 0:
            if find and slots[s, 0] == key and slots[s, 1] != own:
                if at == cap:
                    cap *= 2
                    rows = np.concatenate((rows, np.empty(cap - at, dtype=np.int64)))
                    found = np.concatenate((found, np.empty(cap - at, dtype=np.int64)))
                rows[at] = i
                found[at] = np.int64(slots[s, 1]) - 1
                at += 1
            s = (s + np.uint64(1)) & size_mask
        if filing:
            slots[s, 0] = key
            slots[s, 1] = own
            order[count + i, 0] = key
            order[count + i, 1] = own - np.uint64(1)
    return rows[:at], found[:at]


@kernel
def row_lookup_file(
    keys: np.ndarray, bits: np.ndarray, mask: np.uint64, levels: np.ndarray, slots: np.ndarray, order: np.ndarray, count: int, gid: int
) -> np.ndarray:
    """One new group's row in one call (``BandTable.query_then_file_row``): :func:`band_lookup` of ``keys``
    in the runs, then :func:`buffer_file` of them in the buffer, filed under ``gid``. Returns the group
    ids found, the runs' first (int64, one array: each array a kernel returns costs its boxing)."""
    in_runs = band_lookup(keys, bits, mask, levels)[1]
    gids = np.empty(1, dtype=np.int64)
    gids[0] = gid
    in_buffer = buffer_file(keys, slots, order, count, gids, len(keys), True)[1]
    return np.concatenate((in_runs, in_buffer))


def pack(sets: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The sets as :func:`pair_intersections` takes them: ``(flat, bounds, sizes)``: their values end to
    end (shingle sets are uint32), the int64 bounds of each, and their sizes as ints."""
    sizes = [len(s) for s in sets]
    bounds = np.array([0, *accumulate(sizes)], dtype=np.int64)
    if not sets:
        return np.zeros(0, dtype=np.uint32), bounds, sizes
    return np.concatenate(sets), bounds, sizes


def jaccard_of(a: np.ndarray, b: np.ndarray) -> float:
    """The exact Jaccard of two sorted unique shingle arrays of one dtype, with :func:`shared_count`: the
    float :func:`pair_jaccard` gives the pair (the same integers divided), in one kernel call for a
    few pairs (one ``add``'s candidates), where packing them costs several numpy calls."""
    size_a, size_b = len(a), len(b)
    if not size_a or not size_b:
        return 0.0
    n = shared_count(a, b)
    return n / (size_a + size_b - n)  # type: ignore[no-any-return]


def pair_jaccard(sets: Sequence[np.ndarray], left: Sequence[int], right: Sequence[int]) -> list[float]:
    """The exact Jaccard of each pair ``(sets[left[k]], sets[right[k]])``, with :func:`pair_intersections`:
    ``|A ∩ B| / (|A| + |B| - |A ∩ B|)``, 0.0 where either set is empty, the same floats as
    :func:`~rag_dedup.similarity.jaccard_pairs` (both divide the same integers, below 2^53)."""
    flat, bounds, sizes = pack(sets)
    shared = pair_intersections(flat, bounds, np.array(left, dtype=np.int64), np.array(right, dtype=np.int64)).tolist()
    return [n / (sizes[a] + sizes[b] - n) if sizes[a] and sizes[b] else 0.0 for a, b, n in zip(left, right, shared)]
