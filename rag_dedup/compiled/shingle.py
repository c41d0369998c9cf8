"""Compiled loops of the shingling in :mod:`rag_dedup.shingles`: words, word hashes, n-gram hashes with
each text's sort and unique, the canonical bytes the exact digest is taken of, and the byte tests of the
decoration rule.

The rules live in :mod:`rag_dedup.shingles` and :mod:`rag_dedup.normalize` (their numpy and Python code is
the reference; the test suite holds these kernels equal to it value for value). What is not a loop over
bytes or words stays there: Unicode folding, the split scripts, the regex of line-leading numbers
(:data:`~rag_dedup.normalize.NUMBERING`), the ``is_decoration`` test of non-ASCII tokens, and the
short-text regime. The formulas, as in the module docstring of :mod:`rag_dedup.shingles`:

* a word is a maximal run of bytes outside the whitespace 9-13 and 28-32 (``str.split()``'s set);
* word hash ``w = Σ_k byte_k · P^k mod 2^64``, computed eight bytes a block (``Σ_c P^(8c) · Σ_k
  byte_{8c+k} · P^k``) where the reference takes differences of prefix sums times ``P^-start``: the
  same value modulo 2^64;
* shingle hash ``fmix64(Σ_k w_{i+k} · C_k mod 2^64) >> 32``, sorted and made unique per text.

Every integer in the arithmetic is a ``uint64`` (numba turns ``uint64`` mixed with a plain ``int`` into a
float), so the constants are typed. The kernels write into arrays the caller allocates and return a count:
an array returned from a kernel costs a few microseconds to box, which is most of a call on one text.
"""

from __future__ import annotations

import numpy as np

from rag_dedup.compiled import inline_kernel, kernel
from rag_dedup.compiled.signature import band_row, fmix64, signature_row

__all__ = [
    "ONE_INFO", "canonical_bytes", "decoration_status", "kept_shingles", "kept_word_hashes", "leading_candidates", "ngram_sets",
    "shingle_one",
    "sorted_unique",
    "word_hashes", "words",
]

_ZERO = np.uint64(0)
_S32 = np.uint64(32)
# The polynomial base of the word hash (the 64-bit FNV prime; rag_dedup.shingles._P).
_P = np.uint64(0x100000001B3)
# Whitespace bytes (9-13 and 28-32, str.split()'s set), as a table: numba keeps a global array as a constant.
_SPACE = np.zeros(256, dtype=np.bool_)
_SPACE[9:14] = True
_SPACE[28:33] = True


@kernel
def words(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> int:
    """Write the words of the UTF-8 bytes ``buf`` (as ``shingles._words``) to ``starts`` and ``ends``
    (int64, ``len(buf) // 2 + 1`` entries at least); return how many there are."""
    n = buf.shape[0]
    # Every change between whitespace and word is an edge: start, end, start, end, ... (written
    # without a branch: the position is stored always, the count advances at a change).
    edges = np.empty(n + 2, dtype=np.int64)
    count = 0
    before = True  # a space before the buffer
    for i in range(n):
        space = _SPACE[buf[i]]
        edges[count] = i
        count += space != before
        before = space
    if not before:
        edges[count] = n
        count += 1
    for k in range(count // 2):
        starts[k] = edges[2 * k]
        ends[k] = edges[2 * k + 1]
    return count // 2


# P^0 .. P^8 modulo 2^64: the powers of the bytes of an 8-byte block, and the step between blocks.
_P_POWERS = np.ones(9, dtype=np.uint64)
for _k in range(1, 9):
    _P_POWERS[_k] = np.uint64((int(_P_POWERS[_k - 1]) * int(_P)) % (1 << 64))
_P8 = _P_POWERS[8]


@inline_kernel
def _word_hash(buf: np.ndarray, a: int, e: int) -> np.uint64:
    """The uint64 polynomial hash ``Σ_k buf[a + k] · P^k`` of the word ``buf[a:e]`` (``e > a``), eight
    bytes a block: a block's eight products are independent (no chain of multiplies a byte, and no
    branch on the word's length inside the block: a byte past the word is multiplied by zero), and the
    blocks are summed as ``Σ_c block_c · P^(8c)``. Bytes past the end of ``buf`` are not read (the
    index is clamped to the last byte, whose product is zero there too)."""
    last = buf.shape[0] - 1
    h = _ZERO
    step = np.uint64(1)
    j = a
    while True:
        left = e - j
        block = _ZERO
        for k in range(8):
            block += np.uint64(buf[min(j + k, last)]) * (_P_POWERS[k] if k < left else _ZERO)
        h += block * step
        j += 8
        if j >= e:
            break
        step *= _P8
    return h


@kernel
def word_hashes(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, out: np.ndarray) -> None:
    """Write the uint64 polynomial hash of each word ``buf[starts[i]:ends[i]]`` to ``out[i]``."""
    for i in range(starts.shape[0]):
        out[i] = _word_hash(buf, starts[i], ends[i])


@kernel
def kept_word_hashes(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, keep: np.ndarray, first_word: np.ndarray, words_per_text: np.ndarray,
    out: np.ndarray,
) -> int:
    """Each text's words with ``keep`` (all of them when none is kept: a text of decoration only is
    compared as written), moved to the front of ``starts`` and ``ends`` in place, with their hashes
    (:func:`word_hashes`) in ``out``; ``first_word`` and ``words_per_text`` are rewritten to match.

    Text ``t`` has words ``first_word[t] .. first_word[t] + words_per_text[t] - 1`` (consecutive, in
    text order); returns how many words are kept in all.
    """
    pos = 0
    for t in range(first_word.shape[0]):
        f, n = first_word[t], words_per_text[t]
        kept = 0
        for i in range(f, f + n):
            kept += keep[i]
        every = kept == 0
        first_word[t] = pos
        for i in range(f, f + n):  # (pos <= i: nothing is overwritten before it is read)
            if every or keep[i]:
                a, e = starts[i], ends[i]
                starts[pos] = a
                ends[pos] = e
                out[pos] = _word_hash(buf, a, e)
                pos += 1
        words_per_text[t] = n if every else kept
    return pos


@kernel
def sorted_unique(seg: np.ndarray, tmp: np.ndarray, hist: np.ndarray) -> int:
    """Sort ``seg`` in place and move its distinct values to the front; return how many there are.

    A bucket sort on the top bits (at least as many buckets as values, so about one value a bucket:
    shingle hashes are uniform), then an insertion sort that only moves values inside their bucket;
    when a bucket holds more than 32 values (many equal values, or values made to collide), the
    whole segment is sorted by comparisons instead. ``seg`` holds unsigned integers of any width (the
    32-bit shingle hashes here, the 64-bit set values of :mod:`rag_dedup.compiled.collapse`); ``tmp``
    (of ``seg``'s dtype) and ``hist`` are work space of at least ``len(seg)`` and ``2 * len(seg) + 1``
    entries.
    """
    m = seg.shape[0]
    if m < 2:
        return m
    bits = 1
    while (1 << bits) < m:
        bits += 1
    buckets = 1 << bits
    shift = np.uint64(seg.itemsize * 8 - bits)
    hist[: buckets + 1] = 0
    for i in range(m):
        hist[np.int64(seg[i] >> shift) + 1] += 1
    widest = 0
    for d in range(buckets):
        widest = max(widest, hist[d + 1])
        hist[d + 1] += hist[d]
    if widest > 32:
        seg.sort()
        tmp[:m] = seg
    else:
        for i in range(m):
            d = np.int64(seg[i] >> shift)
            tmp[hist[d]] = seg[i]
            hist[d] += 1
        for i in range(1, m):
            v = tmp[i]
            j = i
            while j > 0 and tmp[j - 1] > v:
                tmp[j] = tmp[j - 1]
                j -= 1
            tmp[j] = v
    seg[0] = tmp[0]
    u = 1
    for i in range(1, m):
        if tmp[i] != tmp[i - 1]:
            seg[u] = tmp[i]
            u += 1
    return u


@kernel
def _windows(hashes: np.ndarray, ngram: int, c: np.ndarray) -> np.ndarray:
    """``fmix64(Σ_k hashes[j + k] · c[k]) >> 32`` for every window j of ``ngram`` consecutive words (uint64)."""
    m = hashes.shape[0] - ngram + 1
    if m <= 0:
        return np.empty(0, dtype=np.uint64)
    combined = hashes[:m] * c[0]
    for k in range(1, ngram):
        ck = c[k]
        for j in range(m):
            combined[j] += hashes[j + k] * ck
    for j in range(m):
        combined[j] = fmix64(combined[j]) >> _S32
    return combined


@kernel
def ngram_sets(
    hashes: np.ndarray,
    first_word: np.ndarray,
    words_per_text: np.ndarray,
    skip: np.ndarray,
    ngram: int,
    c: np.ndarray,
    flat: np.ndarray,
    counts: np.ndarray,
) -> int:
    """Each text's sorted unique uint32 shingle hashes of ``ngram`` consecutive words, one after another.

    Text ``t`` has words ``first_word[t] .. first_word[t] + words_per_text[t] - 1`` of ``hashes``; texts
    with ``skip[t]`` or fewer than ``ngram`` words get none. Text t's set is written to the ``counts[t]``
    entries of ``flat`` (``max(len(hashes) - ngram + 1, 0)`` entries at least) after those of the texts
    before it; returns how many entries of ``flat`` are written.
    """
    texts = first_word.shape[0]
    widest = 0
    for t in range(texts):
        if not skip[t] and words_per_text[t] >= ngram:
            widest = max(widest, words_per_text[t] - ngram + 1)
    combined = _windows(hashes, ngram, c)
    tmp = np.empty(widest, dtype=np.uint32)
    hist = np.empty(2 * widest + 1, dtype=np.int64)
    pos = 0
    for t in range(texts):
        counts[t] = 0
        m = words_per_text[t] - ngram + 1
        if skip[t] or m <= 0:
            continue
        f = first_word[t]
        for j in range(m):
            flat[pos + j] = np.uint32(combined[f + j])
        u = sorted_unique(flat[pos : pos + m], tmp, hist)
        counts[t] = u
        pos += u
    return pos


@kernel
def kept_shingles(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, keep: np.ndarray, ngram: int, short_lo: int, short_hi: int,
    c: np.ndarray, out: np.ndarray,
) -> int:
    """Write the sorted unique uint32 shingle hashes of one text's words ``buf[starts[i]:ends[i]]`` with
    ``keep[i]`` (all of them when none is kept: a text of decoration only is compared as written) to
    ``out`` (``len(starts)`` entries at least); return how many there are, or -1 when the kept words are
    fewer than ``ngram`` or from ``short_lo`` to ``short_hi`` (the short-text regime: the bulk path
    takes such a text)."""
    n = starts.shape[0]
    kept = 0
    for i in range(n):
        kept += keep[i]
    every = kept == 0
    if every:
        kept = n
    if kept < ngram or short_lo <= kept <= short_hi:
        return -1
    hashes = np.empty(kept, dtype=np.uint64)
    j = 0
    for i in range(n):
        if every or keep[i]:
            hashes[j] = _word_hash(buf, starts[i], ends[i])
            j += 1
    combined = _windows(hashes, ngram, c)
    m = combined.shape[0]
    for j in range(m):
        out[j] = np.uint32(combined[j])
    return sorted_unique(out[:m], np.empty(m, dtype=np.uint32), np.empty(2 * m + 1, dtype=np.int64))


@kernel
def canonical_bytes(
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    first_word: np.ndarray,
    words_per_text: np.ndarray,
    out: np.ndarray,
    spans: np.ndarray,
    inside: np.ndarray,
) -> None:
    """Where each text's :func:`~rag_dedup.normalize.canonical` bytes are (as ``shingles._digests``).

    A text's canonical bytes are its words joined by ``" "``, ``"\n"`` or ``"\n\n"`` as the
    whitespace between two of them holds no, one, or two or more line breaks (LF, or CR not followed by
    LF). Where every gap is one space they are ``buf[lo:hi]`` from its first word to its last; the
    others are rebuilt into ``out`` (``len(buf) + 1`` bytes at least). Writes, per text,
    ``spans[t] = (lo, hi)`` in ``buf`` (``inside[t]`` False) or in ``out`` (True); (0, 0) for no words.
    """
    texts = first_word.shape[0]
    n = buf.shape[0]
    pos = 0
    for t in range(texts):
        spans[t, 0] = 0
        spans[t, 1] = 0
        inside[t] = False
        words = words_per_text[t]
        if words == 0:
            continue
        f = first_word[t]
        lo, hi = starts[f], ends[f + words - 1]
        regular = True
        for w in range(f + 1, f + words):
            if starts[w] - ends[w - 1] != 1 or buf[ends[w - 1]] != 32:
                regular = False
                break
        if regular:
            spans[t, 0], spans[t, 1] = lo, hi
            continue
        inside[t] = True
        spans[t, 0] = pos
        # One pass from the first word to the end of the last: word bytes are copied, and a run of
        # whitespace becomes its separator where the next word begins.
        breaks = 0
        gap = False
        for g in range(lo, hi):
            c = buf[g]
            if _SPACE[c]:
                gap = True
                if c == 10 or (c == 13 and (g + 1 >= n or buf[g + 1] != 10)):
                    breaks += 1
                continue
            if gap:
                if breaks == 0:
                    out[pos] = 32
                    pos += 1
                else:
                    out[pos] = 10
                    pos += 1
                    if breaks > 1:
                        out[pos] = 10
                        pos += 1
                breaks = 0
                gap = False
            out[pos] = c
            pos += 1
        spans[t, 1] = pos


@kernel
def _loose(c: np.uint8) -> bool:
    """Not solid: neither an ASCII letter or digit, nor a byte below 33, nor 127 (``shingles._LOOSE``)."""
    if c < 33 or c == 127:
        return False
    if 48 <= c <= 57:
        return False
    low = c | 0x20
    return not (97 <= low <= 122)


@kernel
def decoration_status(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, keep: np.ndarray, undecided: np.ndarray) -> int:
    """The decoration rule by bytes (``shingles._settle_edged``), written to ``keep`` (bool, a word
    each): a word with a solid byte is kept, a word of ASCII punctuation and symbols only is not; the
    words of non-ASCII bytes and no solid byte are *undecided* (``is_decoration`` decides them): their
    indices go to ``undecided``, ascending, with ``keep`` True for now. Returns how many.
    """
    count = 0
    for i in range(starts.shape[0]):
        keep[i] = True
        a, e = starts[i], ends[i]
        if not (_loose(buf[a]) and _loose(buf[e - 1])):
            continue
        solid = False
        wide = False
        for g in range(a, e):
            c = buf[g]
            if not _loose(c):
                solid = True
                break
            if c >= 128:
                wide = True
        if solid:
            continue
        if wide:
            undecided[count] = i
            count += 1
        else:
            keep[i] = False
    return count


@kernel
def _number_shaped(buf: np.ndarray, a: int, e: int) -> bool:
    """Whether ``buf[a:e]`` may be a NUMBERING token: at most 9 bytes, ending in "." or ")", two bytes
    long or beginning with one of "(ivx0123456789" (``shingles._leading_numbers``' prefilter)."""
    size = e - a
    if size > 9:
        return False
    last = buf[e - 1]
    if last != 46 and last != 41:
        return False
    first = buf[a]
    return size == 2 or first == 40 or first == 105 or first == 118 or first == 120 or (48 <= first <= 57)


@kernel
def leading_candidates(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, keep: np.ndarray, out: np.ndarray) -> int:
    """The words that lead their line once the dropped words before them on it are skipped, where they
    may be numbers (:func:`_number_shaped`): at most one per line, ascending. A line begins at word 0 and
    after every LF or CR; ``keep`` is False for the words dropped so far. They are written to ``out``;
    returns how many."""
    n = starts.shape[0]
    count = 0
    first = True  # the next kept word leads its line
    for i in range(n):
        if i > 0:
            for g in range(ends[i - 1], starts[i]):
                if buf[g] == 10 or buf[g] == 13:
                    first = True
                    break
        if not first or not keep[i]:
            continue
        first = False
        if _number_shaped(buf, starts[i], ends[i]):
            out[count] = i
            count += 1
    return count


#: Entries of the ``ints`` work array of :func:`shingle_one` before its starts, ends and found.
ONE_INFO = 8


@kernel
def shingle_one(
    buf: np.ndarray,
    decorate: bool,
    ngram: int,
    short_lo: int,
    short_hi: int,
    c: np.ndarray,
    ints: np.ndarray,
    keep: np.ndarray,
    rebuilt: np.ndarray,
    out: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    multipliers: np.ndarray,
    bands: int,
    rows: int,
    keys: np.ndarray,
) -> None:
    """One text in one call (``DedupIndex.add``): :func:`words`, :func:`canonical_bytes`, with ``decorate``
    :func:`decoration_status` and (when no word is undecided) :func:`leading_candidates`, and, when the
    bytes settled the decoration rule, :func:`kept_shingles` into ``out``; then, with ``bands`` > 0 and a
    set written, its ``bands`` LSH band keys into ``keys[0]`` (``signature_band_keys`` of the set: its
    signature under the permutations ``a``, ``b``, cut into bands of ``rows`` rows, ``multipliers`` the
    :func:`rag_dedup.lsh.band_keys` constants).

    ``ints`` (int64, ``ONE_INFO + 3 * (len(buf) // 2 + 1)``) receives the number of words, the canonical
    span (lo, hi, and 1 if it is in ``rebuilt``), the numbers of undecided words, of line-leading
    candidates (0 when a word is undecided) and of the words dropped, and the count of
    :func:`kept_shingles` (-2 when Python must settle undecided words or candidates first); then the
    words' starts, ends, and the undecided words or the candidates (``found``), each ``len(buf) // 2 + 1``
    entries. ``keep`` (bool) has ``len(buf) // 2 + 1`` entries, ``rebuilt`` ``len(buf) + 1``, ``out``
    ``len(buf) // 2 + 1``.
    """
    size = buf.shape[0] // 2 + 1
    starts = ints[ONE_INFO : ONE_INFO + size]
    ends = ints[ONE_INFO + size : ONE_INFO + 2 * size]
    found = ints[ONE_INFO + 2 * size : ONE_INFO + 3 * size]
    n = words(buf, starts, ends)
    s, e = starts[:n], ends[:n]
    spans = np.empty((1, 2), dtype=np.int64)
    inside = np.empty(1, dtype=np.bool_)
    canonical_bytes(buf, s, e, np.zeros(1, dtype=np.int64), np.full(1, n, dtype=np.int64), rebuilt, spans, inside)
    ints[0] = n
    ints[1] = spans[0, 0]
    ints[2] = spans[0, 1]
    ints[3] = 1 if inside[0] else 0
    ints[4] = 0
    ints[5] = 0
    ints[6] = 0
    kept = keep[:n]
    if decorate and n > 0:
        undecided = decoration_status(buf, s, e, kept, found)
        ints[4] = undecided
        if undecided == 0:
            ints[5] = leading_candidates(buf, s, e, kept, found)
        dropped = 0
        for i in range(n):
            dropped += not kept[i]
        ints[6] = dropped
        if ints[4] or ints[5]:
            ints[7] = -2
            return
    else:
        kept[:] = True
    count = kept_shingles(buf, s, e, kept, ngram, short_lo, short_hi, c, out)
    ints[7] = count
    if bands > 0 and count >= 0:
        best = np.empty(a.shape[0], dtype=np.uint32)
        signature_row(out[:count], a, b, best)
        band_row(best, multipliers, bands, rows, keys[0])
