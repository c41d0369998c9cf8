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
from rag_dedup.compiled.shingle import sorted_unique
from rag_dedup.compiled.signature import fmix64

__all__ = ["REASONS", "SCRATCH_VALUES", "collapse_rows", "collapse_stream", "gathered", "new_scratch", "pair_counts", "pair_counts_at", "similarity_rows", "stream_sets"]

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
    return pair_counts_at(values, _end_to_end(counts), np.zeros(0, dtype=np.int64))  # no scratch


#: Values a query's sets may hold in all for :func:`new_scratch`'s tables to serve it (at a load of at
#: most one half: 4 x 16384 slots, 512 KB); a larger query allocates its own tables.
SCRATCH_VALUES = 8192


def new_scratch() -> np.ndarray:
    """Memory for :func:`pair_counts_at`'s hash tables, all zeros, for one thread's calls (never two
    calls at once: the tables are in use during a call)."""
    return np.zeros(8 * SCRATCH_VALUES, dtype=np.int64)


@kernel
def _end_to_end(counts: np.ndarray) -> np.ndarray:
    """The :func:`pair_counts_at` spans of sets laid end to end, ``counts[i]`` values for set ``i``."""
    spans = np.empty(counts.shape[0], dtype=np.int64)
    at = 0
    for i in range(counts.shape[0]):
        spans[i] = (at << 32) | counts[i]
        at += counts[i]
    return spans


@kernel
def gathered(values: np.ndarray, spans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``similarity._gathered``: the sets at ``spans`` in ``values`` (as :func:`pair_counts_at` reads
    them) laid end to end, and their counts."""
    n = spans.shape[0]
    counts = np.empty(n, dtype=np.int64)
    total = 0
    for i in range(n):
        counts[i] = spans[i] & 0xFFFFFFFF
        total += counts[i]
    out = np.empty(total, dtype=np.uint64)
    at = 0
    for i in range(n):
        start = spans[i] >> 32
        out[at : at + counts[i]] = values[start : start + counts[i]]
        at += counts[i]
    return out, counts


@kernel
def pair_counts_at(values: np.ndarray, spans: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """:func:`pair_counts` of the ``n <= 64`` sets found anywhere in ``values``: set ``i`` is
    ``values[spans[i] >> 32 : (spans[i] >> 32) + (spans[i] & 0xFFFFFFFF)]`` (the shingle cache's arena,
    :meth:`~rag_dedup.similarity.TextSimilarity.remembered_sets`), so a warm query copies no set.

    ``scratch``: the two hash tables' memory (:func:`new_scratch`: the value table, each slot's key and
    mask side by side, in its first half, then the group keys, then the group counts), reused by the
    caller's next call: the key slots must be all zeros and are left all zeros again on return (only the
    slots used are cleared), the others are written before they are read; so a query does not clear
    tables larger than its work. Too small (or empty): the tables are allocated for the call. (A key and
    its mask share a cache line, and only the groups made are visited: a query's tables touch little
    memory, which the Python around the call would otherwise find evicted.)"""
    n = spans.shape[0]
    total = 0
    for s in range(n):
        total += spans[s] & 0xFFFFFFFF
    inter = np.zeros((n, n), dtype=np.int64)
    for i in range(n):
        inter[i, i] = spans[i] & 0xFFFFFFFF
    if n < 2 or total == 0:
        return inter
    bits = _table_bits(total)
    size = 1 << bits
    shift = np.uint64(64 - bits)
    mask_of = size - 1
    region = scratch.shape[0] // 4
    reuse = size <= region  # then the group table (at most as many slots) fits too
    if reuse:
        table = scratch[: 2 * size].view(np.uint64)  # slot i: key at 2i, mask at 2i + 1 (written before read)
    else:
        table = np.zeros(2 * size, dtype=np.uint64)
    used = np.empty(total, dtype=np.int32)
    n_used = 0
    one = np.uint64(1)
    for s in range(n):
        bit = one << np.uint64(s)
        start = spans[s] >> 32
        for at in range(start, start + (spans[s] & 0xFFFFFFFF)):
            key = values[at] | one  # never 0, the empty slot (the low bits are clear)
            slot = np.int64(key >> shift)
            while True:
                k = table[2 * slot]
                if k == key:
                    table[2 * slot + 1] |= bit
                    break
                if k == 0:
                    table[2 * slot] = key
                    table[2 * slot + 1] = bit
                    used[n_used] = slot
                    n_used += 1
                    break
                slot = (slot + 1) & mask_of
    # The shared values, grouped by the mask of the sets holding them.
    group_bits = _table_bits(n_used)
    group_size = 1 << group_bits
    group_shift = np.uint64(64 - group_bits)
    group_mask = group_size - 1
    if reuse:
        group_keys = scratch[2 * region : 2 * region + group_size].view(np.uint64)
        group_counts = scratch[3 * region : 3 * region + group_size]  # written before it is read
    else:
        group_keys = np.zeros(group_size, dtype=np.uint64)
        group_counts = np.zeros(group_size, dtype=np.int64)
    groups = np.empty(n_used, dtype=np.int32)  # the group slots made, in the order made
    n_groups = 0
    golden = np.uint64(0x9E3779B97F4A7C15)  # masks are not uniform: mixed by a multiply first
    for u in range(n_used):
        at = 2 * np.int64(used[u])
        m = table[at + 1]
        table[at] = 0  # the scratch clear again
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
                groups[n_groups] = slot
                n_groups += 1
                break
            slot = (slot + 1) & group_mask
    members = np.empty(64, dtype=np.int64)
    for q in range(n_groups):
        g = groups[q]
        m = group_keys[g]
        group_keys[g] = 0  # the scratch clear again
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
    """The index of the single set bit of ``low`` (a binary search over the halves: 6 steps)."""
    index = 0
    width = 32
    while width:
        if low >> np.uint64(width):
            index += width
            low >>= np.uint64(width)
        width >>= 1
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
    spans: np.ndarray,
    scratch: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The greedy pass of :class:`~rag_dedup.collapse.Collapser` over ``n <= 64`` passages with text.

    Args:
        values, counts: The passages' shingle sets (see :func:`pair_counts`); read only if ``compare``.
        order: The passages (rows) in the order the pass reads them.
        clusters: Each row's cluster as a small int (equal ints: one cluster), -1 for none; each below ``n``.
        trust: ``trust_clusters``.
        compare: Whether texts are compared at all (the reference's ``sim is not None``).
        threshold, floor: The collapse's levels.
        spans: Empty: the sets lie end to end in ``values``, ``counts[i]`` for row ``i``; else row ``i``'s
            set is where ``spans[i]`` says (:func:`pair_counts_at`; ``counts`` is not read): the shingle
            cache's arena, for a query whose texts are all remembered.
        scratch: Hash-table memory reused between calls (:func:`pair_counts_at`; empty: none).

    Returns:
        ``(kept, folds, similarity)``, compact, so that the caller's Python reads each decision once: the
        kept rows in reading order; the folds as a ``(3, F)`` int64 array of columns ``(row, target row,
        index of its reason in`` :data:`REASONS` ``)``, grouped by target (the targets in the order first
        folded into), each group in reading order; and each fold's exact Jaccard similarity to its
        target (NaN where not computed).
    """
    n = order.shape[0]
    target = np.full(n, -1, dtype=np.int64)
    similarity = np.full(n, np.nan, dtype=np.float64)
    reason = np.full(n, -1, dtype=np.int8)
    if not compare:
        inter = np.zeros((1, 1), dtype=np.int64)
    else:
        inter = pair_counts_at(values, _end_to_end(counts) if spans.shape[0] == 0 else spans, scratch)
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
    # Compact: the kept rows in reading order; the folds grouped by target (targets in the order first
    # folded into), each group in reading order.
    kept = np.empty(n, dtype=np.int64)
    n_kept = 0
    group_of = np.full(n, -1, dtype=np.int64)  # target row -> its group
    group_size = np.zeros(n + 1, dtype=np.int64)
    groups = 0
    for o in range(n):
        a = order[o]
        t = target[a]
        if t < 0:
            kept[n_kept] = a
            n_kept += 1
        else:
            if group_of[t] < 0:
                group_of[t] = groups
                groups += 1
            group_size[group_of[t] + 1] += 1
    for g in range(groups):
        group_size[g + 1] += group_size[g]  # now each group's first slot
    n_folds = n - n_kept
    folds = np.empty((3, n_folds), dtype=np.int64)
    fold_similarity = np.empty(n_folds, dtype=np.float64)
    for o in range(n):
        a = order[o]
        t = target[a]
        if t >= 0:
            g = group_of[t]
            at = group_size[g]
            group_size[g] += 1
            folds[0, at] = a
            folds[1, at] = t
            folds[2, at] = reason[a]
            fold_similarity[at] = similarity[a]
    return kept[:n_kept], folds, fold_similarity


# --- query-time shingling: shingles.shingle_stream's values, from the joined buffer ----------------------

@kernel
def _space(b: np.uint8) -> bool:
    """ASCII whitespace as ``str.split()`` has it: 9-13 and 28-32."""
    return (9 <= b <= 13) or (28 <= b <= 32)


@kernel
def _solid(b: np.uint8) -> bool:
    """A byte that settles that its word is not decoration: an ASCII letter or digit, a byte below 33, 127."""
    lower = b | 0x20
    return (97 <= lower <= 122) or (48 <= b <= 57) or b < 33 or b == 127


@kernel
def _decoration_kind(buf: np.ndarray, a: int, e: int) -> int:
    """The decoration class of the word ``buf[a:e]``: 0 a word (it holds a :func:`_solid` byte), 1 ASCII
    punctuation only (decoration), 2 punctuation with non-ASCII bytes (undecided here: Python settles it
    by the characters, ``shingles._decoration_bytes``). A one-byte word is ASCII (UTF-8)."""
    if _solid(buf[a]) or _solid(buf[e - 1]):
        return 0
    if e - a == 1:
        return 1
    wide = False
    for j in range(a, e):
        if _solid(buf[j]):
            return 0
        if buf[j] >= 128:
            wide = True
    return 2 if wide else 1


@kernel
def stream_words(buf: np.ndarray, decoration: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The words of a joined buffer and their decoration class, as ``shingles._stream_piece`` finds them.

    Returns ``(starts, ends, kind, line_first)``: each word's bytes ``buf[starts[i]:ends[i]]``; ``kind``
    0 for a word that is not decoration, 1 for decoration (ASCII punctuation and symbols only), 2 for a
    word of non-ASCII bytes without a solid byte, which the caller settles with
    ``shingles._decoration_bytes`` (all 0 without ``decoration``); ``line_first`` whether a line break
    (LF or CR) precedes the word since the word before it, or it is the first.
    """
    size = buf.shape[0]
    starts = np.empty(size // 2 + 1, dtype=np.int64)
    ends = np.empty(size // 2 + 1, dtype=np.int64)
    line_first = np.empty(size // 2 + 1, dtype=np.bool_)
    n = 0
    broke = True
    i = 0
    while i < size:
        b = buf[i]
        if _space(b):
            if b == 10 or b == 13:
                broke = True
            i += 1
            continue
        starts[n] = i
        while i < size and not _space(buf[i]):
            i += 1
        ends[n] = i
        line_first[n] = broke
        broke = False
        n += 1
    kind = np.zeros(n, dtype=np.int8)
    if decoration:
        for w in range(n):
            kind[w] = _decoration_kind(buf, starts[w], ends[w])
    return starts[:n], ends[:n], kind, line_first[:n]


@kernel
def _is_number(buf: np.ndarray, a: int, e: int) -> bool:
    """Whether ``buf[a:e]`` is a list or section number (``normalize.NUMBERING``, fully matched):
    ``\\(?(?:[0-9]{1,3}|[a-z]|x{0,3}(?:ix|iv|v?i{0,3}))[.)]``, after the shape test of the reference
    (at most 9 bytes, ending in "." or ")", two bytes long or beginning with one of "(ivx0123456789")."""
    size = e - a
    if size < 1 or size > 9:
        return False
    last = buf[e - 1]
    if last != 46 and last != 41:  # "." ")"
        return False
    first = buf[a]
    if size != 2 and not (first == 40 or first == 105 or first == 118 or first == 120 or 48 <= first <= 57):
        return False
    i = a + 1 if first == 40 else a  # "("
    stop = e - 1
    length = stop - i
    digits = 1 <= length <= 3
    for j in range(i, stop):
        if not 48 <= buf[j] <= 57:
            digits = False
    if digits:
        return True
    if length == 1 and 97 <= buf[i] <= 122:
        return True
    j = i
    while j < stop and buf[j] == 120 and j - i < 3:  # x{0,3}
        j += 1
    rest = stop - j
    if rest == 2 and buf[j] == 105 and (buf[j + 1] == 120 or buf[j + 1] == 118):  # ix, iv
        return True
    if rest > 0 and buf[j] == 118:  # v?
        j += 1
    count = 0
    while j < stop and buf[j] == 105 and count < 3:  # i{0,3}
        j += 1
        count += 1
    return j == stop


@kernel
def _word_hash(loads: np.ndarray, buf: np.ndarray, a: int, e: int, short_mark: np.uint64) -> np.uint64:
    """``shingles._stream_piece``'s hash of the word ``buf[a:e]`` (see there); ``loads[i]`` is the
    little-endian 8-byte load at byte ``i`` (the buffer ends in 16 spaces, so every load is inside)."""
    size = e - a
    lo = loads[a]
    if size < 8:
        lo &= (np.uint64(1) << np.uint64(8 * size)) - np.uint64(1)
    hi = np.uint64(0)
    if size > 8:
        hi = loads[a + 8]
        if size < 16:
            hi &= (np.uint64(1) << np.uint64(8 * (size - 8))) - np.uint64(1)
    if buf[e - 1] == 0:
        lo += np.uint64(size) * short_mark
    h = fmix64(fmix64(lo) ^ hi)
    if size <= 16:
        return h
    # A longer word: the hash of its first 16 bytes, then each further 8 bytes, then its size.
    for off in range(a + 16, e, 8):
        block = loads[off]
        if e - off < 8:
            block &= (np.uint64(1) << np.uint64(8 * (e - off))) - np.uint64(1)
        h = fmix64(h ^ block)
    return fmix64(h ^ np.uint64(size))


@kernel
def stream_shingles(
    buf: np.ndarray,
    loads: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    dropped: np.ndarray,
    line_first: np.ndarray,
    text_starts: np.ndarray,
    ngram: int,
    decoration: bool,
    short_tokens: int,
    short_min: int,
    short_set: int,
    c_table: np.ndarray,
    short_mark: np.uint64,
    set_mark: np.uint64,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``shingles._stream_piece``'s ``(hashes, counts)`` from :func:`stream_words`' words, ``dropped``
    (``loads``: the buffer's 8-byte loads at every byte, a view of stride 1)
    (the decoration words, settled), for the texts beginning at bytes ``text_starts``.

    The leading numbers of each line are dropped, a text left without words keeps them all, and the
    kept words are hashed and combined by the rules of ``shingles.shingle_stream``. A text in the
    character-gram regime gets no hashes here: its count is 0 and it is listed in the third array,
    for the caller (the reference computes its grams); the kept words are returned as
    ``(kept word indices, first kept word of each text)`` for that.
    """
    n_words = starts.shape[0]
    n = text_starts.shape[0]
    drop = dropped.copy()
    if decoration:
        for w in range(n_words):
            if not line_first[w]:
                continue
            v = w
            while v < n_words and (v == w or not line_first[v]):
                if drop[v]:
                    v += 1
                elif _is_number(buf, starts[v], ends[v]):
                    drop[v] = True
                    v += 1
                else:
                    break
    # The words of each text, and its kept words (all of them if none is kept).
    first_word = np.empty(n + 1, dtype=np.int64)
    w = 0
    for t in range(n):
        while w < n_words and starts[w] < text_starts[t]:
            w += 1
        first_word[t] = w
    first_word[n] = n_words
    kept = np.empty(n_words, dtype=np.int64)
    first_kept = np.empty(n + 1, dtype=np.int64)
    m = 0
    for t in range(n):
        first_kept[t] = m
        for v in range(first_word[t], first_word[t + 1]):
            if not drop[v]:
                kept[m] = v
                m += 1
        if m == first_kept[t]:
            for v in range(first_word[t], first_word[t + 1]):
                kept[m] = v
                m += 1
    first_kept[n] = m
    words = np.empty(m, dtype=np.uint64)
    for j in range(m):
        words[j] = _word_hash(loads, buf, starts[kept[j]], ends[kept[j]], short_mark)
    counts = np.zeros(n, dtype=np.int64)
    grams = np.zeros(n, dtype=np.bool_)
    total = 0
    for t in range(n):
        tokens = first_kept[t + 1] - first_kept[t]
        if short_tokens != 0 and short_min <= tokens <= short_tokens:
            if tokens < short_set:
                grams[t] = True
            else:
                counts[t] = tokens
        elif tokens >= ngram:
            counts[t] = tokens - ngram + 1
        elif tokens > 0:
            counts[t] = 1
        total += counts[t]
    out = np.empty(total, dtype=np.uint64)
    c1 = c_table[1]
    at = 0
    for t in range(n):
        lo = first_kept[t]
        tokens = first_kept[t + 1] - lo
        if grams[t] or tokens == 0:
            continue
        if short_tokens != 0 and short_min <= tokens <= short_tokens:
            for j in range(tokens):  # a token set: each token's hash, marked
                out[at] = words[lo + j] + set_mark
                at += 1
        elif tokens >= ngram:
            for j in range(tokens - ngram + 1):  # Horner: sum of words[j + k] * C_1 ** (ngram - 1 - k)
                combined = words[lo + j]
                for k in range(1, ngram):
                    combined = combined * c1 + words[lo + j + k]
                out[at] = combined
                at += 1
        else:  # fewer tokens than ngram: one shingle of them all
            value = np.uint64(tokens) * short_mark
            for k in range(tokens):
                value += words[lo + k] * c_table[k]
            out[at] = value
            at += 1
    return out, counts, np.flatnonzero(grams), kept[:m], first_kept


@kernel
def set_values(hashes: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``similarity._set_values``: each set's hashes (``counts[i]`` for set ``i``, end to end, repeats
    allowed) as its sorted unique values with the low 6 bits clear, end to end, and the new counts."""
    n = counts.shape[0]
    out = np.empty(hashes.shape[0], dtype=np.uint64)
    sizes = np.zeros(n, dtype=np.int64)
    clear = ~np.uint64(63)
    at = 0
    put = 0
    for i in range(n):
        c = counts[i]
        part = np.sort(hashes[at : at + c] & clear)
        at += c
        for j in range(c):
            if j == 0 or part[j] != part[j - 1]:
                out[put] = part[j]
                put += 1
                sizes[i] += 1
    return out[:put], sizes


# --- the cold path of TextSimilarity.sets in one pass: bytes to each text's set ---------------------------

# Byte classes of the joined buffer of :func:`stream_sets`: 0 a word byte, 1 whitespace (``_space``),
# 2 a line break (LF, CR), 3 the end of a text (0xFF, never in UTF-8).
_BYTE_CLASS = np.zeros(256, dtype=np.uint8)
_BYTE_CLASS[[*range(9, 14), *range(28, 33)]] = 1
_BYTE_CLASS[10] = _BYTE_CLASS[13] = 2
_BYTE_CLASS[255] = 3
_LOW_BITS = np.uint64(63)
# "https://" as a little-endian 8-byte load: shingle_form reads it as "http://" (the decoration rule).
_HTTPS = np.uint64(int.from_bytes(b"https://", "little"))
# stream_sets' flag bits of a word: first on its line, dropped, holding "https://", a non-ASCII word
# without a solid byte (settled by the caller).
_LINE_FIRST = np.uint8(1)
_DROP = np.uint8(2)
_HTTPS_IN = np.uint8(4)
_ODD = np.uint8(8)


@kernel
def _short_word_hash(first: np.uint64, second: np.uint64, size: int, last: np.uint8, short_mark: np.uint64) -> np.uint64:
    """:func:`_word_hash` of a word of 1 to 16 bytes from its two 8-byte loads ``first`` (at its start) and
    ``second`` (8 bytes on) and its last byte: the loads masked by the size, the NUL rule as a product,
    no branch on the size. Scalars only: called from a kernel with the arrays passed instead, as
    :func:`_word_hash` is, it was measured ~3x slower per word (21 against 7 us for 2,700 words)."""
    one = np.uint64(1)
    low = np.uint64(min(size, 8) * 4)
    high = np.uint64(max(size - 8, 0) * 4)
    # A mask of 8 * k bits as two shifts of 4 * k (a shift by 64 is undefined).
    lo = first & (((one << low) << low) - one)
    hi = second & (((one << high) << high) - one)
    lo += np.uint64(size) * short_mark * np.uint64(last == 0)
    return fmix64(fmix64(lo) ^ hi)


@kernel
def _bytes_word_hash(word: np.ndarray, short_mark: np.uint64) -> np.uint64:
    """:func:`_word_hash` of the word ``word`` (a copy, not in the buffer), its loads assembled byte by
    byte: for the rare word rewritten before it is hashed (``https://`` to ``http://``)."""
    size = word.shape[0]
    lo = np.uint64(0)
    hi = np.uint64(0)
    for k in range(min(size, 8)):
        lo |= np.uint64(word[k]) << np.uint64(8 * k)
    for k in range(8, min(size, 16)):
        hi |= np.uint64(word[k]) << np.uint64(8 * (k - 8))
    if word[size - 1] == 0:
        lo += np.uint64(size) * short_mark
    h = fmix64(fmix64(lo) ^ hi)
    if size <= 16:
        return h
    for off in range(16, size, 8):
        block = np.uint64(0)
        for k in range(off, min(off + 8, size)):
            block |= np.uint64(word[k]) << np.uint64(8 * (k - off))
        h = fmix64(h ^ block)
    return fmix64(h ^ np.uint64(size))


@kernel
def _without_https(buf: np.ndarray, loads: np.ndarray, a: int, e: int) -> np.ndarray:
    """The word ``buf[a:e]`` with every ``https://`` replaced by ``http://`` (left to right, as
    ``str.replace``)."""
    out = np.empty(e - a, dtype=np.uint8)
    k = 0
    j = a
    while j < e:
        if j + 8 <= e and loads[j] == _HTTPS:
            for c in range(7):
                out[k + c] = buf[j + c + 1] if c >= 4 else buf[j + c]
            k += 7
            j += 8
        else:
            out[k] = buf[j]
            k += 1
            j += 1
    return out[:k]


@kernel
def stream_sets(
    buf: np.ndarray,
    loads: np.ndarray,
    n: int,
    which: np.ndarray,
    settled: np.ndarray,
    ngram: int,
    decoration: bool,
    short_tokens: int,
    short_min: int,
    short_set: int,
    c_table: np.ndarray,
    short_mark: np.uint64,
    set_mark: np.uint64,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``set_values(*shingles.shingle_stream(texts))`` of ``n`` texts in one pass over their bytes.

    ``buf`` holds the texts' shingle forms (UTF-8, ASCII lower-cased) each followed by 0xFF, then 16
    spaces (every 8-byte load at a word start and 8 bytes on stays inside), ``loads``
    its 8-byte little-endian loads at every byte (a view of stride 1). The words, the decoration and
    leading-number rules, the word hashes and the shingles are :func:`stream_words`' and
    :func:`stream_shingles`' (the tests hold this equal to the two and :func:`set_values`); each
    text's shingles are then cleared of their low 6 bits, sorted and made unique in place. With ``which``
    not empty, the sets returned are those of texts ``which[0], which[1], ...`` (a text's repeats are
    shingled once).

    Returns ``(values, counts, pending)``. Two cases leave the caller work to do, with ``values`` empty:
    a word of non-ASCII bytes without a solid byte beyond the ``settled`` ones (``settled[j]``: whether
    the j-th such word is decoration) makes ``pending`` the ``(start, end)`` byte pairs of all of them,
    to settle with ``shingles._decoration_bytes`` and call again; a text in the character-gram regime
    makes ``counts[i]`` -1 for it (the reference computes grams). Otherwise ``pending`` is empty.
    """
    size = buf.shape[0]
    cap = size // 2 + 2
    # Few and small scratch arrays (int32 offsets, one flag byte per word): at a query's size, freshly
    # touched memory costs more than the arithmetic.
    starts = np.empty(cap, dtype=np.int32)
    ends = np.empty(cap, dtype=np.int32)
    flags = np.empty(cap, dtype=np.uint8)  # per word: _LINE_FIRST, _DROP, _HTTPS_IN, _ODD bits (each written)
    hashes = np.empty(cap, dtype=np.uint64)
    first_word = np.empty(n + 1, dtype=np.int64)
    n_odd = 0
    w = 0
    t = 0
    first_word[0] = 0
    broke = True
    i = 0
    while i < size:
        c = _BYTE_CLASS[buf[i]]
        if c != 0:
            if c == 3:
                t += 1
                first_word[t] = w
                broke = True
            elif c == 2:
                broke = True
            i += 1
            continue
        a = i
        i += 1
        while _BYTE_CLASS[buf[i]] == 0:  # (no bound test: the buffer ends in spaces)
            i += 1
        starts[w] = a
        ends[w] = i
        f = _LINE_FIRST if broke else np.uint8(0)
        broke = False
        if decoration:
            if i - a >= 8:
                for j in range(a, i - 7):
                    if buf[j + 5] == 58 and loads[j] == _HTTPS:  # (58: the ":" of "https://", a byte test first)
                        f |= _HTTPS_IN
                        break
            kind = _decoration_kind(buf, a, i)
            if kind == 1:
                f |= _DROP
            elif kind == 2:
                if n_odd < settled.shape[0] and settled[n_odd]:
                    f |= _DROP
                f |= _ODD
                n_odd += 1
        flags[w] = f
        # The word's hash now, while its bytes are at hand (a later pass over the words costs more).
        if f & _HTTPS_IN:
            hashes[w] = _bytes_word_hash(_without_https(buf, loads, a, i), short_mark)
        elif i - a <= 16:
            hashes[w] = _short_word_hash(loads[a], loads[a + 8], i - a, buf[i - 1], short_mark)
        else:
            hashes[w] = _word_hash(loads, buf, a, i, short_mark)
        w += 1
    n_words = w
    for u in range(t + 1, n + 1):
        first_word[u] = n_words
    if n_odd > settled.shape[0]:  # the caller settles them all, and calls again
        odd = np.empty(2 * n_odd, dtype=np.int64)
        k = 0
        for v in range(n_words):
            if flags[v] & _ODD:
                odd[k] = starts[v]
                odd[k + 1] = ends[v]
                k += 2
        return np.empty(0, dtype=np.uint64), np.zeros(n, dtype=np.int64), odd
    if decoration:  # the leading numbers of each line (after its dropped words) are dropped too
        for x in range(n_words):
            if not flags[x] & _LINE_FIRST:
                continue
            v = x
            while v < n_words and (v == x or not flags[v] & _LINE_FIRST):
                if flags[v] & _DROP:
                    v += 1
                elif _is_number(buf, starts[v], ends[v]):
                    flags[v] |= _DROP
                    v += 1
                else:
                    break
    widest = 1
    for u in range(n):
        widest = max(widest, first_word[u + 1] - first_word[u])
    out = np.empty(n_words + n, dtype=np.uint64)
    counts = np.zeros(n, dtype=np.int64)
    words = np.empty(widest, dtype=np.uint64)
    scratch = np.empty(widest, dtype=np.uint64)
    buckets = np.empty(2 * widest + 1, dtype=np.int64)
    c1 = c_table[1]
    top = np.uint64(1)  # C_1 ** (ngram - 1), to take the leaving word out of the rolling sum
    for _ in range(ngram - 1):
        top *= c1
    clear = ~_LOW_BITS
    put = 0
    grams = False
    for t in range(n):
        m = 0
        for v in range(first_word[t], first_word[t + 1]):  # the kept words' hashes
            words[m] = hashes[v]
            m += not flags[v] & _DROP
        if m == 0:  # a text of dropped words only keeps them all
            for v in range(first_word[t], first_word[t + 1]):
                words[m] = hashes[v]
                m += 1
        if m == 0:
            continue
        at = put
        if short_tokens != 0 and short_min <= m <= short_tokens:
            if m < short_set:
                counts[t] = -1
                grams = True
                continue
            for j in range(m):  # a token set: each token's hash, marked
                out[put] = (words[j] + set_mark) & clear
                put += 1
        elif m >= ngram:
            # Horner's sum of words[j + k] * C_1 ** (ngram - 1 - k), rolled from window to window.
            combined = words[0]
            for k in range(1, ngram):
                combined = combined * c1 + words[k]
            out[put] = combined & clear
            put += 1
            for j in range(1, m - ngram + 1):
                combined = (combined - words[j - 1] * top) * c1 + words[j + ngram - 1]
                out[put] = combined & clear
                put += 1
        else:  # fewer tokens than ngram: one shingle of them all
            value = np.uint64(m) * short_mark
            for k in range(m):
                value += words[k] * c_table[k]
            out[put] = value & clear
            put += 1
        counts[t] = sorted_unique(out[at:put], scratch, buckets)
        put = at + counts[t]
    settle = np.empty(0, dtype=np.int64)
    if grams:
        return out[:0], counts, settle
    if which.shape[0] == 0:
        return out[:put], counts, settle
    first = np.empty(n + 1, dtype=np.int64)
    first[0] = 0
    for t in range(n):
        first[t + 1] = first[t] + counts[t]
    total = 0
    for t in which:
        total += counts[t]
    laid = np.empty(total, dtype=np.uint64)
    laid_counts = np.empty(which.shape[0], dtype=np.int64)
    at = 0
    for j in range(which.shape[0]):
        t = which[j]
        laid[at : at + counts[t]] = out[first[t] : first[t + 1]]
        at += counts[t]
        laid_counts[j] = counts[t]
    return laid, laid_counts, settle


@kernel
def collapse_stream(
    buf: np.ndarray,
    loads: np.ndarray,
    n: int,
    settled: np.ndarray,
    ngram: int,
    decoration: bool,
    short_tokens: int,
    short_min: int,
    short_set: int,
    c_table: np.ndarray,
    short_mark: np.uint64,
    set_mark: np.uint64,
    row_text: np.ndarray,
    arena: np.ndarray,
    places: np.ndarray,
    clusters: np.ndarray,
    trust: bool,
    threshold: float,
    floor: float,
    scratch: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`stream_sets` of ``n`` distinct texts, then :func:`collapse_rows` of the rows, in one call: the
    query-time collapse of texts not remembered, from their bytes to the decision.

    ``buf``, ``loads``, ``n``, ``settled`` and the rules (``ngram`` to ``set_mark``) are :func:`stream_sets`'
    (its ``which`` empty: the sets of the ``n`` texts in order). Row ``r`` (of ``row_text.shape[0] <= 64``)
    has the streamed text ``row_text[r]``, or, where that is -1, the remembered set at ``places[r]`` in
    ``arena`` (:func:`pair_counts_at`'s span); the rows are read in order (no NaN score), compared (texts
    are compared), with ``clusters``, ``trust``, ``threshold``, ``floor`` and ``scratch`` as
    :func:`collapse_rows` takes them.

    Returns ``(values, spans, pending, kept, folds, similarity)``: the streamed texts' sets end to end
    (:func:`stream_sets`' ``values``) and where each lies in them (``start << 32 | count``, for the shingle
    cache; :func:`stream_sets`' ``counts`` where nothing is decided), then
    :func:`collapse_rows`' decision. Where :func:`stream_sets` leaves the caller work (``pending`` not
    empty, or a count of -1: a text in the character-gram regime), or a streamed text has no shingle (a
    blank text, which the collapse passes through), nothing is decided: ``kept`` is empty.
    """
    values, counts, pending = stream_sets(
        buf, loads, n, np.zeros(0, dtype=np.int64), settled, ngram, decoration, short_tokens, short_min, short_set,
        c_table, short_mark, set_mark,
    )
    rows = row_text.shape[0]
    no_kept = np.zeros(0, dtype=np.int64)
    undecided = pending.shape[0] > 0
    for t in range(n):
        if counts[t] <= 0:
            undecided = True
    if undecided:
        return values, counts, pending, no_kept, np.zeros((3, 0), dtype=np.int64), np.zeros(0, dtype=np.float64)
    new = values.shape[0]
    remembered = 0
    for r in range(rows):
        if row_text[r] < 0:
            remembered += places[r] & 0xFFFFFFFF
    if remembered:  # the remembered sets copied after the new ones: one array for the pass
        laid = np.empty(new + remembered, dtype=np.uint64)
        laid[:new] = values
    else:
        laid = values
    first = np.empty(n, dtype=np.int64)
    at = 0
    for t in range(n):
        first[t] = at
        at += counts[t]
    spans = np.empty(rows, dtype=np.int64)
    for r in range(rows):
        t = row_text[r]
        if t >= 0:
            spans[r] = (first[t] << 32) | counts[t]
        else:
            start = places[r] >> 32
            size = places[r] & 0xFFFFFFFF
            laid[at : at + size] = arena[start : start + size]
            spans[r] = (at << 32) | size
            at += size
    kept, folds, similarity = collapse_rows(
        laid, counts, np.arange(rows), clusters, trust, True, threshold, floor, spans, scratch
    )
    for t in range(n):  # the new texts' spans in values, for the shingle cache
        counts[t] |= first[t] << 32
    return values, counts, pending, kept, folds, similarity
