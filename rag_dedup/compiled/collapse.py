"""Compiled kernels of the query-time collapse: every pair's shared shingles, and the greedy fold.

The rules are :mod:`rag_dedup.collapse`'s and :mod:`rag_dedup.similarity`'s (the numpy reference, which
``tests/test_compiled_collapse.py`` holds these kernels equal to, value for value and decision for
decision); this module computes the same values for the few tens of passages one query returns, where
the reference's cost is its fixed number of numpy calls and Python steps, not the work.

:func:`collapse_rows` takes the shingle sets of the ``k`` passages with text (2 to 64 of them) as
:class:`~rag_dedup.similarity.TextSimilarity` keeps them (each set's unique 64-bit values with the low 6
bits clear, laid end to end, ``counts[i]`` for set ``i``) and returns, for each passage, the kept passage
it folds into (or -1), the exact Jaccard similarity to it and the reason, by the greedy pass of
:class:`~rag_dedup.collapse.Collapser`.

How the shared shingles are counted: every value goes into an open-addressing hash table (linear
probing, indexed by the value's top bits, which are uniform) that ORs the bit of its set into the
value's mask; a value held by two sets or more is shared. The shared values are then grouped by mask
(a second table: a query's copies of one licence share hundreds of shingles among the same few sets,
so there are few distinct masks), and each distinct mask with its count ``c`` adds ``c`` to
``|A ∩ B|`` of every pair of its sets. ``|A| = counts[i]`` (the sets are unique), so
``J = |A ∩ B| / (|A| + |B| - |A ∩ B|)`` exactly as the reference divides it (float64 of exact integers);
an empty set has similarity 0 with everything.
"""

from __future__ import annotations

import numpy as np

from rag_dedup.compiled import kernel

__all__ = ["REASONS", "collapse_rows", "pair_counts", "similarity_rows"]

#: The fold reasons by the codes :func:`collapse_rows` returns (-1: kept).
REASONS = ("cluster", "exact", "near")


@kernel
def _table_bits(items: int) -> int:
    """log2 of the least power of two >= 2 * items (at least 64): a load factor of at most one half."""
    bits = 6
    while (1 << bits) < 2 * items:
        bits += 1
    return bits


@kernel
def pair_counts(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``|A ∩ B|`` of every pair of the ``n <= 64`` sets laid end to end in ``values`` (``counts[i]``
    values for set ``i``, unique within a set, low bit clear), as an ``(n, n)`` int64 array whose
    diagonal holds the sizes."""
    n = counts.shape[0]
    total = values.shape[0]
    inter = np.zeros((n, n), dtype=np.int64)
    for i in range(n):
        inter[i, i] = counts[i]
    if n < 2 or total == 0:
        return inter
    bits = _table_bits(total)
    size = 1 << bits
    shift = np.uint64(64 - bits)
    mask_of = size - 1
    keys = np.zeros(size, dtype=np.uint64)
    masks = np.zeros(size, dtype=np.uint64)
    used = np.empty(total, dtype=np.int64)
    n_used = 0
    at = 0
    one = np.uint64(1)
    for s in range(n):
        bit = one << np.uint64(s)
        for _ in range(counts[s]):
            key = values[at] | one  # never 0, the empty slot (the low bits are clear)
            at += 1
            slot = np.int64(key >> shift)
            while True:
                k = keys[slot]
                if k == key:
                    masks[slot] |= bit
                    break
                if k == 0:
                    keys[slot] = key
                    masks[slot] = bit
                    used[n_used] = slot
                    n_used += 1
                    break
                slot = (slot + 1) & mask_of
    # The shared values, grouped by the mask of the sets holding them.
    group_bits = _table_bits(n_used)
    group_size = 1 << group_bits
    group_shift = np.uint64(64 - group_bits)
    group_mask = group_size - 1
    group_keys = np.zeros(group_size, dtype=np.uint64)
    group_counts = np.zeros(group_size, dtype=np.int64)
    golden = np.uint64(0x9E3779B97F4A7C15)  # masks are not uniform: mixed by a multiply first
    for u in range(n_used):
        m = masks[used[u]]
        if m & (m - one) == 0:
            continue  # one set only
        slot = np.int64((m * golden) >> group_shift)
        while True:
            k = group_keys[slot]
            if k == m:
                group_counts[slot] += 1
                break
            if k == 0:
                group_keys[slot] = m
                group_counts[slot] = 1
                break
            slot = (slot + 1) & group_mask
    members = np.empty(64, dtype=np.int64)
    for g in range(group_size):
        m = group_keys[g]
        if m == 0:
            continue
        c = group_counts[g]
        held = 0
        while m:
            low = m & (~m + one)
            members[held] = _bit_index(low)
            held += 1
            m ^= low
        for x in range(held):
            a = members[x]
            for y in range(x + 1, held):
                b = members[y]
                inter[a, b] += c
                inter[b, a] += c
    return inter


@kernel
def _bit_index(low: np.uint64) -> int:
    """The index of the single set bit of ``low``."""
    index = 0
    if low >> np.uint64(32):
        index += 32
        low >>= np.uint64(32)
    if low >> np.uint64(16):
        index += 16
        low >>= np.uint64(16)
    if low >> np.uint64(8):
        index += 8
        low >>= np.uint64(8)
    if low >> np.uint64(4):
        index += 4
        low >>= np.uint64(4)
    if low >> np.uint64(2):
        index += 2
        low >>= np.uint64(2)
    if low >> np.uint64(1):
        index += 1
    return index


@kernel
def _similarity(inter: np.ndarray, a: int, b: int) -> float:
    """Exact Jaccard of sets ``a`` and ``b`` from :func:`pair_counts` (0.0 when either is empty)."""
    shared = inter[a, b]
    union = inter[a, a] + inter[b, b] - shared
    if inter[a, a] == 0 or inter[b, b] == 0:
        return 0.0
    return shared / union


@kernel
def similarity_rows(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The ``(n, n)`` exact Jaccard matrix of :func:`pair_counts`' sets (the diagonal 1.0, or 0.0 for an
    empty set), equal to :meth:`~rag_dedup.similarity.TextSimilarity.matrix` value for value."""
    inter = pair_counts(values, counts)
    n = counts.shape[0]
    out = np.empty((n, n), dtype=np.float64)
    for a in range(n):
        for b in range(n):
            out[a, b] = _similarity(inter, a, b)
    return out


@kernel
def collapse_rows(
    values: np.ndarray,
    counts: np.ndarray,
    order: np.ndarray,
    clusters: np.ndarray,
    trust: bool,
    compare: bool,
    threshold: float,
    floor: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The greedy pass of :class:`~rag_dedup.collapse.Collapser` over ``n <= 64`` passages with text.

    Args:
        values, counts: The passages' shingle sets (see :func:`pair_counts`); read only if ``compare``.
        order: The passages (rows) in the order the pass reads them.
        clusters: Each row's cluster as a small int (equal ints: one cluster), -1 for none; at most ``n``
            distinct.
        trust: ``trust_clusters``.
        compare: Whether texts are compared at all (the reference's ``sim is not None``).
        threshold, floor: The collapse's levels.

    Returns:
        ``(target, similarity, reason)`` per row: the row it folds into (-1: kept), the exact Jaccard
        similarity to it (NaN where not computed), and the index of its reason in :data:`REASONS`
        (-1: kept).
    """
    n = order.shape[0]
    target = np.full(n, -1, dtype=np.int64)
    similarity = np.full(n, np.nan, dtype=np.float64)
    reason = np.full(n, -1, dtype=np.int8)
    inter = pair_counts(values, counts) if compare else np.zeros((1, 1), dtype=np.int64)
    first_kept = np.full(n, -1, dtype=np.int64)  # trusted: the first kept row of each cluster
    cluster_rows = np.zeros(n, dtype=np.uint64)  # checked: the kept rows of each cluster, as bits
    kept_rows = np.uint64(0)
    kept_free = np.uint64(0)  # the kept rows without a cluster
    one = np.uint64(1)
    for o in range(n):
        a = order[o]
        c = clusters[a]
        t = -1
        if trust and c >= 0 and first_kept[c] >= 0:
            t = first_kept[c]
            reason[a] = 0
        elif compare:
            # Trusted: two clustered passages of different clusters were compared at ingest.
            near = kept_free if trust and c >= 0 else kept_rows
            close = cluster_rows[c] if c >= 0 else np.uint64(0)
            candidates = near | close
            while candidates:
                low = candidates & (~candidates + one)
                b = _bit_index(low)
                s = _similarity(inter, a, b)
                if (near & low and s >= threshold) or (close & low and s >= floor):
                    t = b
                    similarity[a] = s
                    if c >= 0 and clusters[b] == c:
                        reason[a] = 0
                    elif s >= 1.0:
                        reason[a] = 1
                    else:
                        reason[a] = 2
                    break
                candidates ^= low
        if t < 0:
            if c >= 0 and first_kept[c] < 0:
                first_kept[c] = a
            if compare:
                bit = one << np.uint64(a)
                kept_rows |= bit
                if c < 0:
                    kept_free |= bit
                elif not trust:
                    cluster_rows[c] |= bit
        else:
            target[a] = t
    return target, similarity, reason
