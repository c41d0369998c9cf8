"""Word n-gram shingles of the canonical text, hashed to 32 bits, computed in bulk with numpy.

A text becomes the set of its word ``ngram``-grams (words are runs of non-whitespace in
:func:`~rag_dedup.normalize.canonical` form). Each shingle is hashed to a 32-bit integer, and
the set is returned as a sorted array of unique ``uint32`` values. Near-duplicate detection is
Jaccard similarity of these sets, |A ∩ B| / |A ∪ B|.

The short-text rule (:func:`short_measure`, with the math at :data:`SHORT_SET_TOKENS`): a text of 3 to
11 tokens is the set of its character bigrams, one of 12 to ``short_tokens`` (20) tokens the set of
its tokens, so that near-identical headings, list items and NAME lines reach the threshold; with the
regime off (``short_tokens=0``), and for texts of one or two tokens, a text with fewer words than
``ngram`` (but at least one) is one shingle made of all its words, so two different one-word texts
share nothing (Jaccard 0). A text in the regime is never a near-duplicate of a longer one. An empty or whitespace-only text has no shingles, and
:func:`~rag_dedup.similarity.jaccard` of an empty set with anything is 0: an empty text is no one's duplicate.

How the hashing is vectorised (the bottleneck of signature computation is here, not in MinHash):

* word hash: a polynomial over the word's UTF-8 bytes, ``w = Σ_k byte_k · P^k mod 2^64``. For a
  whole batch at once: prefix sums ``S_i = Σ_{j<i} byte_j · P^j`` (numpy's uint64 ``cumsum`` wraps,
  which *is* the ``mod 2^64``), then ``w = (S_end - S_start) · Q^start`` with ``Q = P^-1 mod 2^64``
  (``P`` is odd, so it is invertible modulo a power of two);
* shingle hash: ``fmix64(Σ_k w_{i+k} · C_k) >> 32`` with fixed odd constants ``C_k`` (the order of
  the words matters) and MurmurHash3's 64-bit finaliser to spread the bits.

:func:`reference_shingle_hashes` computes the same values one word at a time in pure Python; the
test suite holds the two equal, value for value.

With :data:`rag_dedup.compiled.COMPILED` (the default), the loops over bytes and words run as the
compiled kernels of :mod:`rag_dedup.compiled.shingle` (words, word hashes, n-gram hashes with each
text's sort and unique, the canonical bytes of the digests, the decoration rule's byte tests), chosen at
call time; the numpy code here is their reference, and everything that is not such a loop (Unicode
folding, split scripts, the regex of line-leading numbers, the short-text regime) runs here on both paths.

:func:`shingle_stream` is the query-time variant, for comparing the tens of texts one query returns
with each other: the same shingles, a faster 64-bit hash of its own (words read as two 8-byte loads,
no per-byte 64-bit arithmetic), all texts in one pass; its values are comparable only with each other.

Example:
    >>> from rag_dedup.similarity import jaccard
    >>> a = shingle_hashes("the quick brown fox jumps over the lazy dog", short_tokens=0)
    >>> b = shingle_hashes("The  quick brown fox jumps over the lazy cat", short_tokens=0)
    >>> len(a), len(b), round(jaccard(a, b), 3)
    (5, 5, 0.667)
    >>> round(jaccard(shingle_hashes("the quick brown fox jumps over the lazy dog"),
    ...                shingle_hashes("The  quick brown fox jumps over the lazy cat")), 3)
    0.857
    >>> jaccard(shingle_hashes("one word"), shingle_hashes("another word"))
    0.0
"""

from __future__ import annotations

from collections.abc import Sequence
import functools
from itertools import repeat
import re
import threading
import unicodedata
from hashlib import blake2b
from typing import TYPE_CHECKING, Literal

import numpy as np

from rag_dedup import compiled
from rag_dedup.compiled import shingle as _kernels
from rag_dedup.compiled import signature as _signature_kernels
from rag_dedup.normalize import (
    NUMBERING,
    _fold_whitespace,
    _token_and_shingle_form,
    canonical,
    gram_text,
    is_decoration,
    shingle_form,
    shingle_tokens,
    token_form,
)
from rag_dedup import compiled
from rag_dedup.compiled.collapse import stream_sets, stream_shingles, stream_words

if TYPE_CHECKING:
    from rag_dedup.minhash import MinHasher

__all__ = [
    "DEFAULT_NGRAM",
    "GRAM",
    "SHORT_MIN_TOKENS",
    "SHORT_SET_TOKENS",
    "SHORT_TOKENS",
    "canonical_digest",
    "reference_shingle_hashes",
    "shingle_hashes",
    "shingle_hashes_many",
    "shingle_stream",
    "shingles_and_digests",
    "shingles_digest_and_keys",
    "short_measure",
]

#: Five-word shingles: long enough that unrelated prose rarely shares one, short enough that a
#: one-word edit changes only five of them.
DEFAULT_NGRAM = 5
#: The short-text regime: a text of SHORT_MIN_TOKENS to ``short_tokens`` tokens (default
#: SHORT_TOKENS) is compared by another measure than word n-grams (:func:`short_measure`): below
#: SHORT_SET_TOKENS tokens, the set of character GRAM-grams (bigrams) of its tokens joined by single
#: spaces; from SHORT_SET_TOKENS on, the set of its tokens.
#: Why a regime: with word n-grams, one changed word in a text of t tokens leaves (t - n + 1) - n of
#: the t - n + 1 shingles shared, J = (t - 2n + 1) / (t + 1), which stays below 0.8 up to t = 49
#: (J = 0.23 at t = 12). Up to 20 tokens covers headings, list items, FAQ questions and NAME lines,
#: and leaves the 180-word chunks the index is tuned for alone.
SHORT_TOKENS = 20
#: Where the short-text regime switches from character bigrams to token sets. The math: an edit that
#: takes a of the F elements of a set and adds b new ones leaves J = (F - a) / (F + b), which is
#: >= 0.8 exactly when F >= 5a + 4b.
#:
#: * Character g-grams of a c-character text (F <= c - g + 1): a changed letter takes g grams and adds
#:   g, so J >= 0.8 needs c >= 10g - 1: 19 characters (three short words) for bigrams, 29 for
#:   trigrams, which lost half the letter edits of 3-4 word texts in bench_scripts.py. But a replaced
#:   word of w letters takes w + g - 1 grams and its replacement of w' letters adds w' + g - 1, so
#:   J >= 0.8 needs c >= 5(w + 1) + 4(w' + 1) + 1 with bigrams: 82 characters (12 words of 6 letters
#:   and a space) for two 8-letter words, 100 for two 10-letter ones. In the real 12-20 token texts of
#:   bench_scripts.py, only 0.49 to 0.67 of one-word replacements kept J >= 0.8 with trigrams.
#: * Tokens, as a set of u distinct tokens: any one-token edit (a letter, a plural, a trailing full
#:   stop, a whole word) takes 1 and adds 1, whatever the words' lengths: J = (u - 1) / (u + 1),
#:   >= 0.8 from u = 9. 12 tokens leave room for three repeated ones ("the", "of", "a").
#:
#: So bigrams below 12 tokens (a letter edit costs 2 of ~7t grams, where it would cost 1 of u <= 11
#: tokens, too many for u < 9), token sets from 12 on (a one-token edit costs 1 of u >= 9 tokens).
#: The price of token sets: word order no longer counts ("a to b" = "b to a"), and edits in two
#: different words cost 2 of u (J >= 0.8 from u = 18), where bigrams pay 4 of ~7t. A whole word
#: replaced in a text of 3-11 tokens is a near-duplicate under neither measure, and an 11-token text
#: never matches a 12-token one (they are in different spaces, as 20 and 21 tokens are).
SHORT_SET_TOKENS = 12
#: Texts of one or two tokens keep the one-shingle rule below: two different one-word texts
#: ("colour", "color") are not near-duplicates however many letters they share.
SHORT_MIN_TOKENS = 3
#: Characters per gram in the short-text regime (below SHORT_SET_TOKENS tokens).
GRAM = 2

_MASK64 = (1 << 64) - 1
# The polynomial base: the 64-bit FNV prime (odd, hence invertible mod 2^64).
_P = 0x100000001B3
_Q = pow(_P, -1, 1 << 64)
# Per-position word multipliers C_k (odd, from splitmix64 of k) and a marker for the word count of a
# short text, so a short text's single shingle cannot equal a regular n-gram's on purpose.
_SHORT_MARK = 0x9E3779B97F4A7C15


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


_MAX_NGRAM = 64
_C = [_splitmix64(k) | 1 for k in range(_MAX_NGRAM)]
_C_NP = np.array(_C, dtype=np.uint64)

# Bytes that separate words: ASCII whitespace (tab, LF, VT, FF, CR, the four information separators
# and space: 9-13, 28-32), the same set as str.split(). canonical() leaves only spaces and newlines,
# token_form() may leave any of them; no byte of a multi-byte UTF-8 sequence is below 0x80.
# Texts are hashed in pieces of about this many bytes, which bounds the power tables and temporaries
# (4 MiB of prefix sums), and spreads the fixed cost of the few dozen small array operations per piece
# (most of them the decoration rule's): on bench_scripts.py section 4's chunks, shingling took 1.54x,
# 1.21x, 1.09x and 1.09x the time of 2^19-byte pieces with pieces of 2^15 to 2^18 bytes, and text ->
# signature 1.14x with 2^18 and 1.04x with 2^20 (two runs on a loaded machine).
_PIECE_BYTES = 1 << 19


def _fmix64_py(x: int) -> int:
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & _MASK64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & _MASK64
    return x ^ (x >> 33)


_U33 = np.uint64(33)
_STREAM_C = np.uint64(_C[1])
_FMIX_K1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX_K2 = np.uint64(0xC4CEB9FE1A85EC53)


def fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, element-wise on a ``uint64`` array (a bijection); ``x`` is kept."""
    return _fmix64_inplace(x.copy())


def _fmix64_inplace(x: np.ndarray) -> np.ndarray:
    """:func:`fmix64` in place (fewer temporaries); returns ``x``."""
    x ^= x >> _U33  # array arithmetic wraps modulo 2**64 silently (only numpy scalars warn)
    x *= _FMIX_K1
    x ^= x >> _U33
    x *= _FMIX_K2
    x ^= x >> _U33
    return x


class _Powers:
    """Growing tables of P^i and Q^i modulo 2^64 (shared, grown on demand, never shrunk)."""

    def __init__(self) -> None:
        self.p = np.ones(1, dtype=np.uint64)
        self.q = np.ones(1, dtype=np.uint64)

    def ensure(self, n: int) -> None:
        if len(self.p) >= n:
            return
        size = max(n, 2 * len(self.p), 1024)
        one = np.ones(1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            self.p = np.concatenate((one, np.cumprod(np.full(size - 1, _P, dtype=np.uint64))))
            self.q = np.concatenate((one, np.cumprod(np.full(size - 1, _Q, dtype=np.uint64))))


_POWERS = _Powers()


def _check_ngram(ngram: int) -> None:
    if isinstance(ngram, bool) or not isinstance(ngram, int):
        raise TypeError(f"ngram must be int, got {type(ngram).__name__}")
    if not 1 <= ngram <= _MAX_NGRAM:
        raise ValueError(f"ngram ({ngram}) must be between 1 and {_MAX_NGRAM}; 5-word shingles are the usual choice")


def short_measure(tokens: int, short_tokens: int = SHORT_TOKENS) -> Literal["shingles", "chars", "tokens"]:
    """How a text of ``tokens`` tokens is compared under ``short_tokens`` (the short-text rule).

    ``"chars"``: SHORT_MIN_TOKENS to SHORT_SET_TOKENS - 1 tokens (and at most ``short_tokens``),
    the set of character GRAM-grams (bigrams); ``"tokens"``: SHORT_SET_TOKENS to ``short_tokens`` tokens, the
    set of tokens; ``"shingles"``: every other text (word ``ngram``-grams, or for fewer than ``ngram``
    tokens one shingle of them all, so that two different one-word texts share nothing), and every
    text when ``short_tokens`` is 0. See :data:`SHORT_SET_TOKENS` for the math.

    Example:
        >>> [short_measure(t) for t in (2, 3, 11, 12, 20, 21)]
        ['shingles', 'chars', 'chars', 'tokens', 'tokens', 'shingles']
    """
    if short_tokens == 0 or not SHORT_MIN_TOKENS <= tokens <= short_tokens:
        return "shingles"
    return "tokens" if tokens >= SHORT_SET_TOKENS else "chars"


def check_rules(ignore_decoration: bool, short_tokens: int) -> None:
    """Validate the token rule parameters (see :func:`shingle_hashes_many`)."""
    if not isinstance(ignore_decoration, bool):
        raise TypeError(f"ignore_decoration must be bool, got {type(ignore_decoration).__name__}")
    if isinstance(short_tokens, bool) or not isinstance(short_tokens, int):
        raise TypeError(f"short_tokens must be int, got {type(short_tokens).__name__}")
    if short_tokens != 0 and not SHORT_MIN_TOKENS <= short_tokens <= 1000:
        raise ValueError(
            f"short_tokens ({short_tokens}) must be 0 (no short-text regime) or between {SHORT_MIN_TOKENS} and 1000; "
            f"{SHORT_TOKENS} is the default"
        )


# The decoration rule in bytes. A byte is *solid* when it settles that its token is not decoration (an
# ASCII letter, digit or control character); ASCII punctuation and symbols are not, and neither are the
# bytes of non-ASCII characters, which may or may not be punctuation (is_decoration decides those tokens).
_PS_BYTES = b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
_SOLID = np.ones(256, dtype=bool)
_SOLID[list(_PS_BYTES)] = False
_SOLID[128:] = False
_NUMBERING_BYTES = re.compile(NUMBERING.encode("ascii"))
# A token NUMBERING matches is at most 9 bytes ("(xxxviii)"), ends in "." or ")", and is two bytes
# long or begins with one of "(ivx0123456789". Per byte, as boolean tables: not solid (_LOOSE), one of
# that set (_NUMBER_FIRST), "." or ")" (_NUMBER_LAST).
_NUMBERING_MAX = 9
_LOOSE = ~_SOLID
_NUMBER_FIRST = np.zeros(256, dtype=bool)
_NUMBER_FIRST[list(b"(ivx0123456789")] = True
_NUMBER_LAST = np.zeros(256, dtype=bool)
_NUMBER_LAST[list(b".)")] = True


def _loose(x: np.ndarray) -> np.ndarray:
    """``_LOOSE[x]`` for a ``uint8`` array, by comparisons: numpy compares a byte array many times
    faster than it looks bytes up in a table (which first widens the indices). Solid bytes are the
    ASCII letters (``x | 0x20`` is a lower-case letter), the digits, the bytes below 33 and 127; the
    tests hold this equal to the table for every byte."""
    t = x | np.uint8(0x20)
    t -= np.uint8(97)  # (uint8 arithmetic wraps: below "a" becomes large)
    solid = t < 26
    np.subtract(x, np.uint8(48), out=t)
    solid |= t < 10
    solid |= x < 33
    solid |= x == 127
    return np.logical_not(solid, out=solid)


def _restore_bare(keep: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """``keep``, with every word kept of the texts that the decoration rule would leave empty.

    A text made of decoration only ("* * *", "1.") is compared as written: emptied, it would have no
    shingles, match nothing, and share every band with every other such text.
    """
    bare = (np.bincount(owner[keep], minlength=n) == 0) & (np.bincount(owner, minlength=n) > 0)
    return keep | bare[owner] if bare.any() else keep


def _undecorated(data: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which words the decoration rule keeps (a boolean mask; see :func:`_decoration_drops`)."""
    return _decoration_drops(data, buf, starts, ends)[0]


def _decoration_drops(data: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which words the decoration rule keeps (see :func:`~rag_dedup.normalize.shingle_tokens`), in bulk.

    ``starts``/``ends`` are the words of ``buf`` (the bytes of ``data``, texts joined by line breaks).
    Two passes, each over candidates only:

    * punctuation-only words: only words whose first and last bytes are not solid can be decoration.
      One gather over the words (their first bytes) finds the words that may be (those starting with
      punctuation or a non-ASCII character, about a sixth of prose's words), a second gather over
      those alone their last bytes, and :func:`_settle_edged` decides the rest;
    * numbers: a number is dropped only when it *leads* its line (every word before it on the line is
      dropped), so only the first word of each line can begin a run of dropped words, and the run is
      followed from there (:func:`_leading_numbers`), never over all the words.

    Returns ``(keep, dropped)``: the mask of the words kept, and the indices of the others (in no
    particular order), so that callers need no pass over all words to find the few dropped.
    """
    keep = np.ones(len(starts), dtype=bool)
    # (starts and ends may be strided views, which take() would first copy whole: they are indexed)
    head = np.flatnonzero(_loose(buf.take(starts)))
    edged = head[_loose(buf.take(ends[head] - 1))]
    dropped = _settle_edged(data, buf, starts[edged], ends[edged], edged, keep) if len(edged) else edged
    leading = _leading_numbers(data, buf, starts, ends, keep, dropped)
    if len(leading):
        dropped = np.concatenate((dropped, leading))
    return keep, dropped


def _leading_numbers(
    data: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, keep: np.ndarray, dropped: np.ndarray
) -> np.ndarray:
    """Clear ``keep`` of the numbers (:data:`~rag_dedup.normalize.NUMBERING`) that lead their line, and
    return their indices. ``dropped`` (ascending) are the decoration words, already cleared.

    A line's *leading run* is its first word and the words after it while each is dropped. Starting
    at the first word of every line (the word after each LF or CR, and word 0), a step skips a run of
    consecutive decoration words at once (to the word after the run, if that is on the same line:
    no line's first word lies in between), then looks at the one word reached, which leads its line:
    a number is dropped and the run goes on with the next word on the line; any other word ends it.
    So there are as many steps as numbers in the longest leading run (plus one), each on arrays of
    at most one word per line.
    """
    n = len(starts)
    breaks = np.flatnonzero(buf == 10)
    if b"\r" in data:
        breaks = np.union1d(breaks, np.flatnonzero(buf == 13))
    firsts = np.searchsorted(starts, breaks)  # the word after each line break (ascending; n past the last)
    firsts = np.concatenate(([0], firsts[firsts < n]))
    firsts = firsts[np.concatenate(([True], firsts[1:] != firsts[:-1]))]  # several breaks in one gap
    if len(dropped):
        # Runs of consecutive decoration words: run k begins at word run_first[k]; after_run[k] follows it.
        cut = np.flatnonzero(np.diff(dropped) != 1) + 1
        run_first = dropped[np.concatenate(([0], cut))]
        after_run = np.append(dropped[cut - 1], dropped[-1]) + 1
    out: list[int] = []
    at = firsts
    while len(at):
        if len(dropped):
            skip = ~keep.take(at)
            if skip.any():
                # (no number was dropped yet at these words: `at` holds line firsts and words after a number)
                from_ = at[skip]
                to = after_run[np.searchsorted(run_first, from_, side="right") - 1]
                lines_before = np.searchsorted(firsts, from_, side="right")
                same_line = (to < n) & (np.searchsorted(firsts, to, side="right") == lines_before)
                at = np.concatenate((at[~skip], to[same_line]))
        a, e = starts[at], ends[at]
        size = e - a
        shaped = (size <= _NUMBERING_MAX) & _NUMBER_LAST.take(buf.take(e - 1)) & ((size == 2) | _NUMBER_FIRST.take(buf.take(a)))
        spans = zip(at[shaped].tolist(), a[shaped].tolist(), e[shaped].tolist())
        numbers = [i for i, x, y in spans if _NUMBERING_BYTES.fullmatch(data, x, y)]
        if not numbers:
            break
        out.extend(numbers)
        nxt = np.array(numbers, dtype=np.int64) + 1
        keep[nxt - 1] = False
        nxt = nxt[nxt < n]
        at = nxt[firsts[np.minimum(np.searchsorted(firsts, nxt), len(firsts) - 1)] != nxt]  # not a line's first
    return np.array(out, dtype=np.int64)


def _settle_edged(
    data: bytes, buf: np.ndarray, a: np.ndarray, e: np.ndarray, edged: np.ndarray, keep: np.ndarray
) -> np.ndarray:
    """Clear ``keep`` of the decoration among the candidates ``edged`` (words ``a``..``e`` whose first
    and last bytes are not solid), and return their indices (ascending): a word with a solid byte is
    kept, a word of ASCII bytes without one is decoration, and the rest (non-ASCII punctuation or
    letters) go to :func:`_decoration_bytes` one by one.

    A one-byte candidate is decoration without a look (an ASCII punctuation mark or symbol: in UTF-8
    every byte of a longer character is 0x80 or above and comes with others; half the candidates of
    real text: ``*``, ``-``, ``|``). Of the longer ones, byte 1 settles most at once ("(c)",
    "<name@host>"); the bytes of the others are gathered together and their classes or-ed per word
    (``reduceat``: a word has at least one byte, so no segment is empty).
    """
    sizes = e - a
    decoration = sizes == 1
    longer = np.flatnonzero(~decoration)
    if len(longer):
        open_ = longer[_loose(buf.take(a[longer] + 1))]  # byte 1 not solid either
        if len(open_):
            a, e = a[open_], e[open_]
            sizes = e - a
            offsets = np.cumsum(sizes) - sizes
            inside = buf[np.repeat(a - offsets, sizes) + np.arange(int(offsets[-1] + sizes[-1]))]
            # Per byte: bit 0 solid, bit 1 part of a non-ASCII character (which is not solid).
            kind = np.left_shift((inside >= 128).view(np.uint8), 1)
            kind |= np.logical_not(_loose(inside)).view(np.uint8)
            kinds = np.bitwise_or.reduceat(kind, offsets)
            decoration[open_] = kinds == 0  # ASCII punctuation and symbols only
            odd = np.flatnonzero(kinds == 2)  # non-ASCII, no solid byte
            if len(odd):
                decoration[open_[odd]] = [_decoration_bytes(data[x:y]) for x, y in zip(a[odd].tolist(), e[odd].tolist())]
    dropped = edged[decoration]
    keep[dropped] = False
    return dropped


@functools.lru_cache(maxsize=1 << 16)
def _decoration_bytes(token: bytes) -> bool:
    """:func:`~rag_dedup.normalize.is_decoration` of a UTF-8 token (cached: split-script characters recur)."""
    if not token.translate(None, _PS_BYTES):
        return True
    return token.isascii() is False and is_decoration(token.decode("utf-8"))


def _compiled_words(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_words`' starts and ends by :func:`rag_dedup.compiled.shingle.words`."""
    size = len(buf) // 2 + 1
    starts = np.empty(size, dtype=np.int64)
    ends = np.empty(size, dtype=np.int64)
    n = _kernels.words(buf, starts, ends)
    return starts[:n], ends[:n]


def _compiled_keep(data: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """:func:`_decoration_drops`' mask of the words kept, with the byte tests compiled
    (:mod:`rag_dedup.compiled.shingle`); the words of a text of decoration only are not restored here.

    The kernels settle every word by its bytes but the undecided ones (non-ASCII, no solid byte: asked
    of :func:`_decoration_bytes`), and name, per line, the word that leads it once the decoration before
    it is skipped when that word has the shape of a number; :data:`~rag_dedup.normalize.NUMBERING`
    decides those here, and a number dropped lets the next word of its line lead in turn.
    """
    keep = np.empty(len(starts), dtype=bool)
    found = np.empty(len(starts), dtype=np.int64)
    undecided = found[: _kernels.decoration_status(buf, starts, ends, keep, found)]
    if len(undecided):
        _settle_undecided(data, starts, ends, keep, undecided)
    candidates = found[: _kernels.leading_candidates(buf, starts, ends, keep, found)]
    if len(candidates):
        _drop_leading_numbers(data, starts, ends, keep, candidates)
    return keep


def _settle_undecided(data: bytes, starts: np.ndarray, ends: np.ndarray, keep: np.ndarray, undecided: np.ndarray) -> None:
    """Clear ``keep`` of the ``undecided`` words (non-ASCII, no solid byte) that are decoration."""
    a, e = starts[undecided].tolist(), ends[undecided].tolist()
    keep[undecided] = [not _decoration_bytes(data[x:y]) for x, y in zip(a, e)]


def _drop_leading_numbers(data: bytes, starts: np.ndarray, ends: np.ndarray, keep: np.ndarray, candidates: np.ndarray) -> None:
    """Clear ``keep`` of the line-leading numbers, from each line's candidate
    (:func:`rag_dedup.compiled.shingle.leading_candidates`) on: a number dropped lets the next word not
    dropped on its line lead in turn."""
    n = len(starts)
    fullmatch = _NUMBERING_BYTES.fullmatch
    for i in candidates.tolist():
        while fullmatch(data, int(starts[i]), int(ends[i])):
            keep[i] = False
            j = i + 1
            while j < n:
                gap = data[int(ends[j - 1]) : int(starts[j])]
                if b"\n" in gap or b"\r" in gap:
                    j = n
                elif keep[j]:
                    break
                else:
                    j += 1
            if j >= n:
                break
            i = j


def _compiled_canonical(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, first_word: np.ndarray, words_per_text: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`rag_dedup.compiled.shingle.canonical_bytes`: ``(rebuilt bytes, spans, inside)``."""
    rebuilt = np.empty(len(buf) + 1, dtype=np.uint8)
    spans = np.empty((len(first_word), 2), dtype=np.int64)
    inside = np.empty(len(first_word), dtype=bool)
    _kernels.canonical_bytes(buf, starts, ends, first_word, words_per_text, rebuilt, spans, inside)
    return rebuilt, spans, inside


def _compiled_digests(
    joined: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, first_word: np.ndarray, words_per_text: np.ndarray
) -> list[bytes | None]:
    """:func:`_digests` with the canonical bytes found by :func:`rag_dedup.compiled.shingle.canonical_bytes`."""
    rebuilt, spans, inside = _compiled_canonical(buf, starts, ends, first_word, words_per_text)
    views = (memoryview(joined), memoryview(rebuilt))
    return [
        blake2b(views[odd][a:b], digest_size=16).digest() if n else None
        for n, (a, b), odd in zip(words_per_text.tolist(), spans.tolist(), inside.tolist())
    ]


def _compiled_form_digests(forms: Sequence[str]) -> list[bytes | None]:
    """The digests of texts given by their :func:`~rag_dedup.normalize.token_form`, rebuilt from its
    words as :func:`_digests` does (for the texts whose shingle form is not their token form)."""
    encoded = [f.encode("utf-8") for f in forms]
    joined = b"\n".join(encoded)
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    text_starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
    buf = np.frombuffer(joined, dtype=np.uint8)
    starts, ends = _compiled_words(buf)
    first_word = np.searchsorted(starts, text_starts)
    return _compiled_digests(joined, buf, starts, ends, first_word, np.diff(first_word, append=len(starts)))


def _words(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Find every word of a UTF-8 buffer: (is_word mask, starts, ends), ``starts`` and ``ends``
    contiguous (the gathers of the decoration pass and of :func:`_word_hashes` read them)."""
    n = len(buf)
    # Not whitespace: above space, or a control byte outside 9-13 and 28-31 (comparisons beat a table).
    # The mask is written inside one with a False at each end, so that its changes are the word edges.
    padded = np.zeros(n + 2, dtype=bool)
    is_word = padded[1:-1]
    np.greater(buf, 32, out=is_word)
    is_word |= (buf < 28) & ((buf < 9) | (buf > 13))
    edges = np.flatnonzero(padded[1:] != padded[:-1]).reshape(-1, 2)  # start, end, start, end, ...
    return is_word, edges[:, 0].copy(), edges[:, 1].copy()


def _word_hashes(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The 64-bit hash of each word ``buf[starts[i]:ends[i]]`` (the polynomial of the module docstring)."""
    n = len(buf)
    _POWERS.ensure(n + 1)
    # (array arithmetic wraps modulo 2**64 silently, which is the "mod 2^64" of the module docstring)
    prefix = np.empty(n + 1, dtype=np.uint64)
    prefix[0] = 0
    np.multiply(buf, _POWERS.p[:n], out=prefix[1:])
    np.cumsum(prefix[1:], out=prefix[1:])
    words = prefix[ends]
    words -= prefix[starts]
    words *= _POWERS.q[starts]
    return words


def _canonical_bytes(
    buf: np.ndarray, is_word: np.ndarray, starts: np.ndarray, ends: np.ndarray, same_text: np.ndarray, text_starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rebuild :func:`canonical` of token-form texts from their words, in bulk.

    ``canonical(t)`` is the words of ``token_form(t)`` joined by ``" "``, ``"\n"`` or ``"\n\n"``
    as the whitespace between them holds no, one, or two or more line breaks (LF, or CR not followed
    by LF, as CRLF and CR become LF); leading and trailing whitespace is dropped. Returns the
    concatenated canonical bytes and each text's offset into them (one more offset at the end).
    """
    breaks = np.flatnonzero(buf == 10)
    crs = np.flatnonzero(buf == 13)
    if len(crs):
        lone = crs[(crs + 1 >= len(buf)) | (buf[np.minimum(crs + 1, len(buf) - 1)] != 10)]
        breaks = np.union1d(breaks, lone)
    gap_start, gap_end = ends[:-1][same_text], starts[1:][same_text]
    count = np.searchsorted(breaks, gap_end) - np.searchsorted(breaks, gap_start)
    values = buf.copy()
    keep = is_word.copy()
    keep[gap_start] = True
    values[gap_start] = np.where(count > 0, 10, 32)
    double = gap_start[count > 1] + 1
    keep[double] = True
    values[double] = 10
    # Each text's segment [start_i, start_i+1) ends with the unkept separator byte; the appended False
    # gives a last, empty text a segment of its own (reduceat needs every index inside the array).
    sizes = np.add.reduceat(np.append(keep, False), text_starts, dtype=np.int64)
    return values[keep], np.concatenate(([0], np.cumsum(sizes)))


def _digests(
    joined: bytes,
    buf: np.ndarray,
    is_word: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    text_of_word: np.ndarray,
    words_per_text: np.ndarray,
    first_word: np.ndarray,
    text_starts: np.ndarray,
) -> list[bytes | None]:
    """The 16-byte BLAKE2b digest of each text's canonical form (None for a text with no words).

    Where every gap between a text's words is one space, its canonical form is simply the bytes from
    its first word to its last; the other texts go through :func:`_canonical_bytes`.
    """
    same_text = text_of_word[1:] == text_of_word[:-1]
    gap_start, gap_end = ends[:-1][same_text], starts[1:][same_text]
    irregular = (gap_end - gap_start != 1) | (buf[gap_start] != 32)
    has_irregular = np.zeros(len(text_starts), dtype=bool)
    has_irregular[text_of_word[:-1][same_text][irregular]] = True
    rebuilt = None
    if has_irregular.any():
        kept, offsets = _canonical_bytes(buf, is_word, starts, ends, same_text, text_starts)
        rebuilt = (kept, offsets.tolist())
    if len(starts):
        first = starts[np.minimum(first_word, len(starts) - 1)].tolist()
        last = ends[np.clip(first_word + words_per_text - 1, 0, len(ends) - 1)].tolist()
    else:
        first = last = [0] * len(text_starts)
    out: list[bytes | None] = []
    for i, (n, a, b, odd) in enumerate(zip(words_per_text.tolist(), first, last, has_irregular.tolist())):
        if n == 0:
            out.append(None)
        elif odd and rebuilt is not None:
            kept, offsets = rebuilt
            out.append(blake2b(kept[offsets[i] : offsets[i + 1]].tobytes(), digest_size=16).digest())
        else:
            out.append(blake2b(joined[a:b], digest_size=16).digest())
    return out


def _hash_piece(
    texts: Sequence[str],
    ngram: int,
    ignore_decoration: bool,
    short_tokens: int,
    digests: list[bytes | None] | None = None,
    lower: bool = False,
) -> list[np.ndarray]:
    """Shingle hashes of shingle-form texts, joined into one buffer; with ``digests``, also append the
    16-byte BLAKE2b digest of each text's :func:`canonical` form (None for a text with no words).

    With ``lower``, the ASCII letters of the buffer are lower-cased first (``bytes.lower()``), so that an
    ASCII text may be given as it is, for its token form ``text.lower()``: the other texts' forms are
    folded already, so it changes nothing in them."""
    if all(t.isascii() for t in texts):  # (isascii is O(1)): a character is a byte
        joined = "\n".join(texts).encode("ascii")
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    else:
        encoded = [t.encode("utf-8") for t in texts]
        joined = b"\n".join(encoded)
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    if lower:
        joined = joined.lower()
    text_starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
    buf = np.frombuffer(joined, dtype=np.uint8)
    fast = compiled.COMPILED  # the compiled kernels of rag_dedup.compiled.shingle, or the numpy reference
    if fast:
        starts, ends = _compiled_words(buf)
    else:
        is_word, starts, ends = _words(buf)
    # Text i's words are first_word[i] .. first_word[i + 1] - 1 (no word starts at a separator).
    first_word = np.searchsorted(starts, text_starts)
    words_per_text = np.diff(first_word, append=len(starts))
    if digests is not None and fast:
        digests.extend(_compiled_digests(joined, buf, starts, ends, first_word, words_per_text))
    elif digests is not None:
        text_of_word = np.repeat(np.arange(len(texts)), words_per_text)
        digests.extend(_digests(joined, buf, is_word, starts, ends, text_of_word, words_per_text, first_word, text_starts))
    if fast:
        # The decoration rule, then the kept words moved to the front with their hashes, in one kernel call.
        words = np.empty(len(starts), dtype=np.uint64)
        if ignore_decoration and len(starts):
            keep = _compiled_keep(joined, buf, starts, ends)
            kept = _kernels.kept_word_hashes(buf, starts, ends, keep, first_word, words_per_text, words)
            starts, ends, words = starts[:kept], ends[:kept], words[:kept]
        else:
            _kernels.word_hashes(buf, starts, ends, words)
    elif ignore_decoration and len(starts):
        # Before the word hashes, which then are of the words kept alone (and while buf is in cache).
        keep, dropped = _decoration_drops(joined, buf, starts, ends)
        if len(dropped):
            left = words_per_text - np.bincount(np.searchsorted(first_word, dropped, side="right") - 1, minlength=len(texts))
            bare = (left == 0) & (words_per_text > 0)
            if bare.any():  # rare: texts of decoration only
                keep = _restore_bare(keep, np.repeat(np.arange(len(texts)), words_per_text), len(texts))
                left[bare] = words_per_text[bare]
            starts, ends, words_per_text = starts[keep], ends[keep], left
            first_word = np.concatenate(([0], np.cumsum(words_per_text)[:-1]))
    if not fast:
        words = _word_hashes(buf, starts, ends)
    short_texts = _short_regime(words_per_text, short_tokens)
    gram_texts, set_texts = _split_regime(words_per_text, short_texts)

    out: list[np.ndarray] = [np.empty(0, dtype=np.uint32)] * len(texts)
    if fast:
        # Regular shingles, each text's sorted and made unique, in one compiled pass.
        skip = np.zeros(len(texts), dtype=bool)
        skip[short_texts] = True
        flat = np.empty(max(len(words) - ngram + 1, 0), dtype=np.uint32)
        counts = np.empty(len(texts), dtype=np.int64)
        _kernels.ngram_sets(words, first_word, words_per_text, skip, ngram, _C_NP, flat, counts)
        start = 0
        for i, end in enumerate(np.cumsum(counts).tolist()):
            if end > start:
                out[i] = flat[start:end]
                start = end
        if not len(short_texts) and int(words_per_text.min(initial=ngram)) >= ngram:
            return out  # no short text, no regime text: nothing else to do (the usual block of chunks)
    text_of_word = np.repeat(np.arange(len(texts)), words_per_text)
    with np.errstate(over="ignore"):
        # Regular shingles: windows of `ngram` consecutive words inside one text.
        m = len(words) - ngram + 1
        if m > 0 and not fast:
            combined = words[:m] * _C_NP[0]
            term = np.empty_like(combined)
            for k in range(1, ngram):
                combined += np.multiply(words[k : k + m], _C_NP[k], out=term)
            valid = text_of_word[:m] == text_of_word[ngram - 1 :]
            if len(short_texts):
                valid &= ~np.isin(text_of_word[:m], short_texts)
            owner = text_of_word[:m][valid]
            hashed = (_fmix64_inplace(combined[valid]) >> np.uint64(32)).astype(np.uint32)
            _sorted_sets(owner, hashed, out)
        # Short texts (1 <= words < ngram) outside the short-text regime: one shingle of all their words.
        one = (words_per_text > 0) & (words_per_text < ngram)
        one[short_texts] = False
        for i in np.flatnonzero(one):
            w = words[first_word[i] : first_word[i] + words_per_text[i]]
            total = int(len(w)) * _SHORT_MARK + sum(int(x) * _C[k] for k, x in enumerate(w.tolist()))
            out[i] = np.array([_fmix64_py(total & _MASK64) >> 32], dtype=np.uint32)
        if len(set_texts):  # the token sets of the regime's longer texts
            member = np.zeros(len(texts), dtype=bool)
            member[set_texts] = True
            mine = member[text_of_word]
            hashed = (fmix64(words[mine] * _C_NP[0] + _SET_MARK) >> np.uint64(32)).astype(np.uint32)
            _sorted_sets(text_of_word[mine], hashed, out)
    if len(gram_texts):
        strings = _gram_strings(joined, starts, ends, first_word, words_per_text, gram_texts)
        grams, counts = _char_grams(strings)
        short_out: list[np.ndarray] = [np.empty(0, dtype=np.uint32)] * len(strings)
        owner = np.repeat(np.arange(len(strings)), counts)
        _sorted_sets(owner, (grams >> np.uint64(32)).astype(np.uint32), short_out)
        for i, sh in zip(gram_texts.tolist(), short_out):
            out[i] = sh
    return out


def _short_regime(words_per_text: np.ndarray, short_tokens: int) -> np.ndarray:
    """The texts (indices) in the short-text regime: SHORT_MIN_TOKENS <= tokens <= short_tokens."""
    if short_tokens == 0:
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero((words_per_text >= SHORT_MIN_TOKENS) & (words_per_text <= short_tokens))


def _split_regime(words_per_text: np.ndarray, short_texts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The regime's texts split by :func:`short_measure`: (character-gram texts, token-set texts)."""
    if not len(short_texts):
        return short_texts, short_texts
    sets = words_per_text[short_texts] >= SHORT_SET_TOKENS
    return short_texts[~sets], short_texts[sets]


def _gram_strings(
    data: bytes, starts: np.ndarray, ends: np.ndarray, first_word: np.ndarray, words_per_text: np.ndarray, which: np.ndarray
) -> list[str]:
    """The short-text regime's string of each text in ``which`` (:func:`~rag_dedup.normalize.gram_text`)."""
    out = []
    for i in which.tolist():
        a = int(first_word[i])
        b = a + int(words_per_text[i])
        spaced = b" ".join([data[x:y] for x, y in zip(starts[a:b].tolist(), ends[a:b].tolist())]).decode("utf-8")
        out.append(gram_text(spaced))
    return out


# Added to every character-gram sum, so a gram's hash is unrelated to a word shingle's by design; and
# likewise to every token-set element (C_0 · w + mark), so it is not a 1-word shingle's hash.
_GRAM_MARK = _splitmix64(_MAX_NGRAM)
_SET_MARK_INT = _splitmix64(_MAX_NGRAM + 1)
_SET_MARK = np.uint64(_SET_MARK_INT)
_SHORT_MARK_NP = np.uint64(_SHORT_MARK)
_GRAM_C = _C_NP[:GRAM]


def _char_grams(strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The 64-bit hashes of the character GRAM-grams of each string, in order, repeats kept, and counts.

    A gram of code points x_0..x_{g-1} hashes to ``fmix64(Σ_k x_k · C_k + M mod 2^64)``: one array
    expression for all strings at once (joined by LF, which no string holds, and windows across it dropped).
    """
    joined = "\n".join(strings)
    points = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
    counts = np.maximum(lengths - GRAM + 1, 0)
    m = len(points) - GRAM + 1
    if m <= 0:
        return np.empty(0, dtype=np.uint64), counts
    combined = np.full(m, _GRAM_MARK, dtype=np.uint64)
    for k in range(GRAM):
        combined += points[k : k + m] * _GRAM_C[k]
    owner = np.repeat(np.arange(len(strings)), lengths + 1)[: len(points)]  # a separator goes with the string before it
    inside = (owner[:m] == owner[GRAM - 1 :]) & (points[GRAM - 1 :] != 10)
    return _fmix64_inplace(combined[inside]), counts


def _sorted_sets(owner: np.ndarray, values: np.ndarray, out: list[np.ndarray]) -> None:
    """Fill ``out[i]`` with the sorted unique ``values`` whose ``owner`` is i (owners ascending).

    Rows of similar length are sorted as one padded 2-D array (numpy sorts short uint32 rows with SIMD
    sorting networks, much faster than one global sort of owner-tagged 64-bit keys); the global sort
    is the fallback when lengths are too uneven for padding to pay.
    """
    if len(values) == 0:
        return
    # Owners ascend (shingles are made in text order), so each owner's values are one run.
    per_owner = np.bincount(owner)
    owners = np.flatnonzero(per_owner)
    counts = per_owner[owners]
    first = np.cumsum(counts) - counts
    width = int(counts.max())
    if width * len(owners) <= 4 * len(values) + 4096:
        padded = np.full((len(owners), width), 0xFFFFFFFF, dtype=np.uint32)
        # Value j of row r (the r-th owner) goes to flat slot r * width + (j - first[r]).
        slot = np.repeat(np.arange(0, len(owners) * width, width) - first, counts)
        slot += np.arange(len(values))
        padded.ravel()[slot] = values
        padded.sort(axis=1)
        # The first counts[i] sorted entries of row i are its values (a pad sorts last, and a real
        # 0xFFFFFFFF among the pads is equal to them anyway); keep each first of a run of equals.
        keep = np.arange(width) < counts[:, None]
        keep[:, 1:] &= padded[:, 1:] != padded[:, :-1]
        flat = padded[keep]
        sizes = np.count_nonzero(keep, axis=1)
    else:
        tagged = np.sort((owner.astype(np.uint64) << np.uint64(32)) | values.astype(np.uint64))
        keep = np.empty(len(tagged), dtype=bool)
        keep[:1] = True
        np.not_equal(tagged[1:], tagged[:-1], out=keep[1:])
        tagged = tagged[keep]
        flat = (tagged & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        sizes = np.bincount((tagged >> np.uint64(32)).astype(np.int64), minlength=int(owners[-1]) + 1)[owners]
    ends = np.cumsum(sizes).tolist()
    start = 0
    for i, end in zip(owners.tolist(), ends):
        out[i] = flat[start:end]
        start = end


def shingle_hashes_many(
    texts: Sequence[str],
    ngram: int = DEFAULT_NGRAM,
    *,
    canonicalized: bool = False,
    ignore_decoration: bool = True,
    short_tokens: int = SHORT_TOKENS,
) -> list[np.ndarray]:
    """Shingle-hash sets of many texts at once (much faster than one at a time).

    Args:
        texts: The texts.
        ngram: Tokens per shingle.
        canonicalized: The texts are already in :func:`canonical` (or :func:`token_form`) form.
        ignore_decoration: Drop comment and list markers, punctuation-only tokens and line-leading
            numbers, and read ``https://`` as ``http://`` (see :func:`~rag_dedup.normalize.shingle_tokens`).
        short_tokens: Texts of SHORT_MIN_TOKENS to this many tokens are compared in the short-text
            regime (:func:`short_measure`: character GRAM-grams below SHORT_SET_TOKENS tokens, the
            set of tokens from there); 0 turns the regime off.

    Returns:
        One sorted array of unique ``uint32`` shingle hashes per text, equal to
        ``shingle_hashes(text, ngram, ...)`` for each.

    Raises:
        TypeError: A text is not a ``str``, or a parameter has the wrong type.
        ValueError: A parameter is out of range.
    """
    return _run(texts, ngram, canonicalized, ignore_decoration, short_tokens, None)


def shingles_and_digests(
    texts: Sequence[str], ngram: int = DEFAULT_NGRAM, *, ignore_decoration: bool = True, short_tokens: int = SHORT_TOKENS
) -> tuple[list[np.ndarray], list[bytes | None]]:
    """:func:`shingle_hashes_many`, plus each text's exact-duplicate digest, in the same pass.

    The digest is the 16-byte BLAKE2b of the UTF-8 :func:`canonical` form (None for a text with no
    words: an empty text is no one's duplicate), computed without building the canonical strings in
    Python: it is rebuilt from the words and line breaks the shingling already found (for a text whose
    shingle form differs from its token form, from :func:`canonical` itself).
    """
    digests: list[bytes | None] = []
    return _run(texts, ngram, False, ignore_decoration, short_tokens, digests), digests


def canonical_digest(text: str) -> bytes | None:
    """The exact-duplicate digest of one text (see :func:`shingles_and_digests`); None if it is empty."""
    canon = canonical(text)
    return blake2b(canon.encode("utf-8"), digest_size=16).digest() if canon else None


# --- one text (DedupIndex.add): the values of _hash_piece with a dozen numpy calls, not ~100 -------------
# Per byte: "p" for ASCII punctuation and symbols (_PS_BYTES), " " for whitespace (as in _words), "n"
# for the bytes of non-ASCII characters, "w" for the rest (solid bytes: letters, digits, controls).
_WHITESPACE = b"\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f "
_CLASSES = bytes(
    ord("p") if byte in _PS_BYTES else ord(" ") if byte in _WHITESPACE else ord("n") if byte >= 128 else ord("w")
    for byte in range(256)
)
# bytes.split() splits at 9-13 and 32 only: 28-31 become spaces first.
_TO_SPACE = bytes.maketrans(b"\x1c\x1d\x1e\x1f", b"    ")
# In the classes of " " + text + " ": a space and a word without a solid byte, each found (the space
# after it is left for the next one); a decoration candidate (_settle_edged's rule).
_EDGED_WORD = re.compile(rb" [pn]+(?= )")


def _one_text_tokens(data: bytes, ignore_decoration: bool) -> list[bytes]:
    """The tokens (UTF-8) of one shingle form's bytes, by the rule of
    :func:`~rag_dedup.normalize.shingle_tokens` (split scripts are already set apart by spaces).

    The words without a solid byte are found in one scan of the byte classes, and those that are
    decoration are cut out; then each line loses its leading numbers (a number is leading when only
    dropped words precede it on its line, and every decoration word is gone by then).
    """
    data = data.translate(_TO_SPACE)
    if not ignore_decoration:
        return data.split()
    kept = data
    parts = []
    last = 0
    for match in _EDGED_WORD.finditer(b" %s " % data.translate(_CLASSES)):
        start, end = match.span()  # the word is data[start:end - 1]
        if b"n" in match.group() and not _decoration_bytes(data[start : end - 1]):
            continue
        parts.append(data[last:start])
        last = end - 1
    if parts:
        parts.append(data[last:])
        kept = b" ".join(parts)
    numbering = _NUMBERING_BYTES.fullmatch
    lines = (kept.replace(b"\r", b"\n") if b"\r" in kept else kept).split(b"\n")
    tokens: list[bytes] | None = None
    for i, line in enumerate(lines):
        first = line.split(None, 1)
        if first and first[0][-1] in b".)" and len(first[0]) <= _NUMBERING_MAX and numbering(first[0]):
            if tokens is None:
                tokens = b" ".join(lines[:i]).split()
            words = line.split()
            j = 0
            while j < len(words) and len(words[j]) <= _NUMBERING_MAX and numbering(words[j]):
                j += 1
            tokens.extend(words[j:])
        elif tokens is not None:
            tokens.extend(line.split())
    if tokens is None:
        tokens = kept.split()
    return tokens or data.split()  # a text of decoration only is compared as written


def _hash_one(form: str, ngram: int, ignore_decoration: bool, short_tokens: int) -> np.ndarray | None:
    """The shingle hashes of one shingle form (see :func:`_run`) of at least ``ngram`` tokens outside
    the short-text regime, or None for the others (the bulk path takes them). The same tokens, word
    hashes and shingle hashes as :func:`_hash_piece` (the tests hold the two equal), per text."""
    tokens = _one_text_tokens(form.encode("utf-8"), ignore_decoration)
    n = len(tokens)
    if n < ngram or (short_tokens and SHORT_MIN_TOKENS <= n <= short_tokens):
        return None
    # Word hashes as in _words, over the tokens joined by single spaces: token i is bytes
    # starts[i] .. ends[i] - 1 of the joined bytes.
    data = b" ".join(tokens)
    size = len(data)
    _POWERS.ensure(size + 1)
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=n)
    ends = np.cumsum(lengths + 1)
    ends -= 1
    starts = ends - lengths
    prefix = np.empty(size + 1, dtype=np.uint64)
    prefix[0] = 0
    np.multiply(np.frombuffer(data, dtype=np.uint8), _POWERS.p[:size], out=prefix[1:])
    np.cumsum(prefix[1:], out=prefix[1:])
    words = prefix[ends]
    words -= prefix[starts]
    words *= _POWERS.q[starts]
    m = n - ngram + 1
    # Window j is words[j .. j + ngram - 1]: a strided (m, ngram) view, combined with the C_k in one
    # product (uint64 arithmetic wraps modulo 2^64, as the sums of the module docstring).
    windows = np.ndarray((m, ngram), dtype=np.uint64, buffer=words, strides=(8, 8))
    combined = windows @ _C_NP[:ngram]
    hashed = (_fmix64_inplace(combined) >> np.uint64(32)).astype(np.uint32)
    hashed.sort()
    keep = np.empty(m, dtype=bool)
    keep[0] = True
    np.not_equal(hashed[1:], hashed[:-1], out=keep[1:])
    return hashed[keep]


# The band key arguments of shingle_one when no band keys are wanted (bands 0).
_NO_KEYS: tuple[np.ndarray, np.ndarray, np.ndarray, int, int] = (
    np.zeros(0, np.uint32), np.zeros(0, np.uint32), np.zeros(0, np.uint64), 0, 0,
)  # fmt: skip
_NO_KEY_ROW = np.zeros((1, 0), dtype=np.uint64)


class _Scratch(threading.local):
    """The work arrays of :func:`rag_dedup.compiled.shingle.shingle_one`, one set per thread, grown to
    the largest text of at most :data:`_SCRATCH_BYTES` seen so far (a larger text gets its own)."""

    def __init__(self) -> None:
        self.capacity = -1
        self.arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = ()  # type: ignore[assignment]


# Texts of up to this many bytes take the per-thread work arrays of the one-text kernel (about 13 bytes
# of them a byte of text: 200 KB at most a thread), which spares four allocations a text.
_SCRATCH_BYTES = 1 << 14
_SCRATCH = _Scratch()


def _one_text_arrays(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(ints, keep, rebuilt, out)`` of at least the sizes :func:`rag_dedup.compiled.shingle.shingle_one`
    takes for a text of ``n`` bytes: this thread's (their contents are the last call's), or new ones."""
    scratch = _SCRATCH
    if n <= scratch.capacity:
        return scratch.arrays
    if n > _SCRATCH_BYTES:
        size = n // 2 + 1
        return np.empty(_kernels.ONE_INFO + 3 * size, np.int64), np.empty(size, bool), np.empty(n + 1, np.uint8), np.empty(size, np.uint32)
    capacity = min(max(n, 2 * scratch.capacity, 2048), _SCRATCH_BYTES)
    size = capacity // 2 + 1
    scratch.arrays = (
        np.empty(_kernels.ONE_INFO + 3 * size, np.int64), np.empty(size, bool), np.empty(capacity + 1, np.uint8), np.empty(size, np.uint32),
    )  # fmt: skip
    scratch.capacity = capacity
    return scratch.arrays


def _compiled_one(
    form: str,
    ngram: int,
    ignore_decoration: bool,
    short_tokens: int,
    digest: bool,
    keyed: tuple[np.ndarray, np.ndarray, np.ndarray, int, int] = _NO_KEYS,
    keys: np.ndarray = _NO_KEY_ROW,
) -> tuple[np.ndarray, bytes | None] | None:
    """:func:`_hash_one` by the compiled kernels, and with ``digest`` the digest of the canonical form
    rebuilt from ``form``'s words (as :func:`_digests`; valid when ``form`` is the text's token form);
    with ``keyed`` (:meth:`rag_dedup.minhash.MinHasher.band_parameters`), the set's band keys written to
    ``keys`` (``(1, b)`` uint64) when a set is returned.

    The same steps as :func:`_hash_piece` for one text: words, the decoration rule
    (:func:`_compiled_keep`), word and shingle hashes, in one kernel call
    (:func:`rag_dedup.compiled.shingle.shingle_one`) unless words of non-ASCII punctuation or
    line-leading numbers are to be settled here; None for a text the bulk path takes (fewer than
    ``ngram`` tokens, or in the short-text regime).
    """
    return _compiled_bytes(form.encode("utf-8"), ngram, ignore_decoration, short_tokens, digest, keyed, keys)


def _compiled_bytes(
    data: bytes,
    ngram: int,
    ignore_decoration: bool,
    short_tokens: int,
    digest: bool,
    keyed: tuple[np.ndarray, np.ndarray, np.ndarray, int, int] = _NO_KEYS,
    keys: np.ndarray = _NO_KEY_ROW,
) -> tuple[np.ndarray, bytes | None] | None:
    """:func:`_compiled_one` of the form's UTF-8 bytes ``data``."""
    buf = np.frombuffer(data, dtype=np.uint8)
    size = len(data) // 2 + 1
    ints, keep, rebuilt, out = _one_text_arrays(len(data))
    a, b, multipliers, bands, rows = keyed
    _kernels.shingle_one(
        buf, ignore_decoration, ngram, SHORT_MIN_TOKENS, short_tokens, _C_NP, ints, keep, rebuilt, out, a, b, multipliers, bands, rows, keys
    )
    words, lo, hi, inside, undecided, candidates, _, count = ints[: _kernels.ONE_INFO].tolist()
    digest_of: bytes | None = None
    if digest and words:
        digest_of = blake2b(memoryview(rebuilt if inside else data)[lo:hi], digest_size=16).digest()
    if count == -2:  # the decoration rule needs is_decoration or NUMBERING
        at = _kernels.ONE_INFO
        starts, ends, found = ints[at : at + words], ints[at + size : at + size + words], ints[at + 2 * size : at + 3 * size]
        keep = keep[:words]
        if undecided:
            _settle_undecided(data, starts, ends, keep, found[:undecided])
            candidates = _kernels.leading_candidates(buf, starts, ends, keep, found)
        if candidates:
            _drop_leading_numbers(data, starts, ends, keep, found[:candidates])
        count = _kernels.kept_shingles(buf, starts, ends, keep, ngram, SHORT_MIN_TOKENS, short_tokens, _C_NP, out)
        if count >= 0 and bands:
            _signature_kernels.signature_band_keys(out, np.array([0, count], dtype=np.int64), a, b, multipliers, bands, rows, keys)
    if count < 0:
        return None
    return out[:count].copy(), digest_of  # (a copy: ``out`` is the next call's work space)


def _form_digest(form: str) -> bytes | None:
    """The exact-duplicate digest of a text given by its :func:`~rag_dedup.normalize.token_form`: the
    canonical form is the token form with its whitespace folded (see :func:`canonical_digest`)."""
    canon = _fold_whitespace(form.encode("utf-8"))
    return blake2b(canon, digest_size=16).digest() if canon else None


# Batches of up to this many texts take the compiled one-text path text by text: below that, the bulk
# path's fixed cost a call is more than it saves (bench_stream.py's chunks, shingles and digests, CPU
# time a chunk: blocks of 10 22.6 us in bulk, one at a time 17.8 us, blocks of 64 17.6 us, of 1,000 16.2 us).
_FEW = 32


def _run(
    texts: Sequence[str],
    ngram: int,
    canonicalized: bool,
    ignore_decoration: bool,
    short_tokens: int,
    digests: list[bytes | None] | None,
) -> list[np.ndarray]:
    _check_ngram(ngram)
    check_rules(ignore_decoration, short_tokens)
    if compiled.COMPILED and len(texts) <= _FEW and all(type(t) is str for t in texts):
        found = [_compiled_text(t, ngram, canonicalized, ignore_decoration, short_tokens, digests is not None) for t in texts]
        if None not in found:  # (the usual case: no text for the bulk path)
            if digests is not None:
                digests.extend([d for _, d in found])  # type: ignore[misc]
            return [sh for sh, _ in found]  # type: ignore[misc]
        missing = [i for i, f in enumerate(found) if f is None]  # texts the bulk path takes (short ones)
        rest_digests: list[bytes | None] = []
        rest = _bulk([texts[i] for i in missing], ngram, canonicalized, ignore_decoration, short_tokens,
                     rest_digests if digests is not None else None) if missing else []
        done = dict(zip(missing, zip(rest, rest_digests or [None] * len(rest))))
        pairs = [f if f is not None else done[i] for i, f in enumerate(found)]
        if digests is not None:
            digests.extend([d for _, d in pairs])
        return [sh for sh, _ in pairs]
    if len(texts) == 1 and type(texts[0]) is str and not compiled.COMPILED:
        # One text: the bulk path's fixed cost (~100 small numpy calls) would be most of its cost.
        form = texts[0] if canonicalized else token_form(texts[0])
        one = _hash_one(shingle_form(form, ignore_decoration=ignore_decoration), ngram, ignore_decoration, short_tokens)
        if one is not None:
            if digests is not None:
                digests.append(canonical_digest(texts[0]))
            return [one]
    return _bulk(texts, ngram, canonicalized, ignore_decoration, short_tokens, digests)


def _ascii_form(text: str, ignore_decoration: bool) -> bytes | None:
    """The UTF-8 bytes of an ASCII text's token form, when that is its shingle form too (no ``https://``
    to read as ``http://``): ``text.lower()``, lower-cased as bytes (which costs less than ``str.lower``
    and its encoding); None for the other texts."""
    if not text.isascii():
        return None
    data = text.encode("ascii").lower()
    # (":" first: a one-character search is a memchr, "https://" a scan that costs ten times more)
    return None if ignore_decoration and ":" in text and b"https://" in data else data


def _compiled_text(
    text: str, ngram: int, canonicalized: bool, ignore_decoration: bool, short_tokens: int, digest: bool
) -> tuple[np.ndarray, bytes | None] | None:
    """One text's shingle hashes and (with ``digest``) digest by :func:`_compiled_one`, from its token
    and shingle forms; None for a text the bulk path takes."""
    if not canonicalized:
        data = _ascii_form(text, ignore_decoration)
        if data is not None:
            return _compiled_bytes(data, ngram, ignore_decoration, short_tokens, digest)
    if canonicalized:
        form, shaped = text, shingle_form(text, ignore_decoration=ignore_decoration)
    else:
        form, shaped = _token_and_shingle_form(text, ignore_decoration)
    found = _compiled_one(shaped, ngram, ignore_decoration, short_tokens, digest and shaped is form)
    if found is not None and digest and shaped is not form:
        return found[0], _form_digest(form)
    return found


def shingles_digest_and_keys(
    text: str, ngram: int, *, ignore_decoration: bool, short_tokens: int, hasher: MinHasher, b: int, r: int
) -> tuple[np.ndarray, bytes | None, np.ndarray | None]:
    """One text's shingle hashes, exact-duplicate digest and LSH band keys (``DedupIndex.add``):
    ``shingles_and_digests([text], ...)`` and ``hasher.band_keys([shingles], b, r)`` (a ``(1, b)`` uint64
    array; None with the digest when the text has no words), the same values.

    With :data:`rag_dedup.compiled.COMPILED`, a text outside the short-text regime takes one kernel call
    from its bytes to its band keys (:func:`rag_dedup.compiled.shingle.shingle_one`), or two when
    non-ASCII punctuation or line-leading numbers are settled in Python between them.

    Raises:
        TypeError: ``text`` is not a ``str``, or a parameter has the wrong type.
        ValueError: A parameter is out of range.
    """
    if compiled.COMPILED and type(text) is str:
        _check_ngram(ngram)
        check_rules(ignore_decoration, short_tokens)
        keyed = hasher.band_parameters(b, r)
        keys = np.empty((1, b), dtype=np.uint64)
        data = _ascii_form(text, ignore_decoration)
        if data is not None:
            found = _compiled_bytes(data, ngram, ignore_decoration, short_tokens, True, keyed, keys)
            if found is not None:
                return found[0], found[1], keys
        else:
            form, shaped = _token_and_shingle_form(text, ignore_decoration)
            found = _compiled_one(shaped, ngram, ignore_decoration, short_tokens, shaped is form, keyed, keys)
            if found is not None:
                return found[0], (found[1] if shaped is form else _form_digest(form)), keys
    (shingles,), (digest,) = shingles_and_digests([text], ngram, ignore_decoration=ignore_decoration, short_tokens=short_tokens)
    return shingles, digest, (hasher.band_keys([shingles], b, r) if digest is not None else None)


def _bulk(
    texts: Sequence[str],
    ngram: int,
    canonicalized: bool,
    ignore_decoration: bool,
    short_tokens: int,
    digests: list[bytes | None] | None,
) -> list[np.ndarray]:
    """:func:`_run` for a batch: the texts' shingle forms joined into buffers of :data:`_PIECE_BYTES`."""
    forms: list[str] = []
    reshaped: list[int] = []  # texts whose shingle form is not their token form
    token_forms: list[str] = []  # theirs
    lower = not canonicalized  # the ASCII texts are lower-cased in their buffer (_hash_piece)
    for i, text in enumerate(texts):
        if lower and type(text) is str and text.isascii() and (":" not in text or "://" not in text):  # (":": a memchr)
            forms.append(text)  # its token form is text.lower() and that is its shingle form (no https://)
            continue
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be str, got {type(text).__name__}")
        if canonicalized:
            form, shaped = text, shingle_form(text, ignore_decoration=ignore_decoration)
        else:
            form, shaped = _token_and_shingle_form(text, ignore_decoration)
        if shaped is not form:
            reshaped.append(i)
            token_forms.append(form)
        forms.append(shaped)
    out: list[np.ndarray] = []
    piece: list[str] = []
    size = 0
    for text in forms:
        piece.append(text)
        size += len(text) + 1
        if size >= _PIECE_BYTES:
            out.extend(_hash_piece(piece, ngram, ignore_decoration, short_tokens, digests, lower))
            piece, size = [], 0
    if piece:
        out.extend(_hash_piece(piece, ngram, ignore_decoration, short_tokens, digests, lower))
    if digests is not None and reshaped:
        found = _compiled_form_digests(token_forms) if compiled.COMPILED else [canonical_digest(texts[i]) for i in reshaped]
        for i, digest in zip(reshaped, found):
            digests[len(digests) - len(texts) + i] = digest
    return out


def shingle_stream(
    texts: Sequence[str], ngram: int = DEFAULT_NGRAM, *, ignore_decoration: bool = True, short_tokens: int = SHORT_TOKENS
) -> tuple[np.ndarray, np.ndarray]:
    """Every shingle of every text as a 64-bit hash, in one pass: for comparing the few texts of one query.

    Returns ``(hashes, counts)``: ``hashes`` holds text 0's shingles, then text 1's, and so on, in word
    order, repeats kept (``uint64``); ``counts[i]`` is how many are text i's (``int64``). Two shingles
    (same words, same order) always get equal hashes; two different ones get equal hashes with
    probability about 2^-64 per pair (every word is mixed by ``fmix64`` before the words are combined).

    The tokens and shingles are those of :func:`shingle_hashes` with the same parameters (tokens of
    :func:`~rag_dedup.normalize.shingle_tokens`, the one-shingle rule, the short-text regime, whose
    character grams keep their full 64 bits here), but the word hash is another one, made for speed, so
    compare these values only with each other.
    A word is read as whole 8-byte loads at its start instead of byte by byte; texts are joined into one
    buffer, so the cost is a constant number of numpy calls for the batch, with no per-text calls and no
    per-byte 64-bit temporaries (which at this size cost more in page faults than in arithmetic). When
    :data:`rag_dedup.compiled.COMPILED`, the buffer is read by the compiled kernels of
    :mod:`rag_dedup.compiled.collapse` instead (the same values; the numpy code is the reference).

    Raises:
        TypeError: A text is not a ``str``.
        ValueError: ``ngram`` out of range.
    """
    _check_ngram(ngram)
    check_rules(ignore_decoration, short_tokens)
    if not all(map(isinstance, texts, repeat(str))):
        i, text = next((i, t) for i, t in enumerate(texts) if not isinstance(t, str))
        raise TypeError(f"texts[{i}] must be str, got {type(text).__name__}")
    if texts and sum(map(len, texts)) + len(texts) < _PIECE_BYTES:
        return _stream_piece(texts, ngram, ignore_decoration, short_tokens)  # the usual case: one buffer
    hashes: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    start, size = 0, 0
    for stop, text in enumerate(texts, 1):
        size += len(text) + 1
        if size >= _PIECE_BYTES or stop == len(texts):
            h, c = _stream_piece(texts[start:stop], ngram, ignore_decoration, short_tokens)
            hashes.append(h)
            counts.append(c)
            start, size = stop, 0
    if not counts:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    if len(counts) == 1:
        return hashes[0], counts[0]
    return np.concatenate(hashes), np.concatenate(counts)


# For a word of min(size, 16) = k bytes: _LO_MASK[k] keeps its bytes among bytes 0-7 of an 8-byte
# little-endian load at its start, _HI_MASK[k] its bytes among those of a load 8 bytes further on.
_LO_MASK = np.array([(1 << (8 * min(k, 8))) - 1 for k in range(17)], dtype=np.uint64)
_HI_MASK = np.array([(1 << (8 * max(k - 8, 0))) - 1 for k in range(17)], dtype=np.uint64)
_LOAD_PAD = " " * 16  # lets the last word be read with two full 8-byte loads


def _long_word_hash(word: bytes) -> int:
    """The query-time hash of a word longer than 16 bytes: ``fmix64(fmix64(lo) ^ hi)`` of its first 16
    bytes (``lo`` with the NUL rule of :func:`_stream_piece`), then ``h = fmix64(h ^ block)`` for each
    further 8 bytes (little-endian, the last one short), then ``fmix64(h ^ size)``. The compiled kernel
    (:func:`rag_dedup.compiled.collapse.stream_shingles`) computes the same value."""
    lo = int.from_bytes(word[:8], "little")
    if word[-1] == 0:
        lo = (lo + len(word) * _SHORT_MARK) & _MASK64
    h = _fmix64_py(_fmix64_py(lo) ^ int.from_bytes(word[8:16], "little"))
    for off in range(16, len(word), 8):
        h = _fmix64_py(h ^ int.from_bytes(word[off : off + 8], "little"))
    return _fmix64_py(h ^ len(word))


def _stream_compiled(data: bytes, lengths: np.ndarray, ngram: int, ignore_decoration: bool, short_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_stream_piece` after its buffer is built, by the compiled kernels of
    :mod:`rag_dedup.compiled.collapse` (the same values; the tests hold the two equal). The few words of
    non-ASCII punctuation candidates are settled here (:func:`_decoration_bytes`), and the texts of the
    character-gram regime take the reference's grams."""
    buf = np.frombuffer(data, dtype=np.uint8)
    starts, ends, kind, line_first = stream_words(buf, ignore_decoration)
    dropped = kind == 1
    odd = np.flatnonzero(kind == 2)
    if len(odd):
        dropped[odd] = [_decoration_bytes(data[a:e]) for a, e in zip(starts[odd].tolist(), ends[odd].tolist())]
    text_starts = np.cumsum(lengths + 1) - lengths + 1
    loads = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))
    out, counts, gram_texts, kept, first_kept = stream_shingles(
        buf, loads, starts, ends, dropped, line_first, text_starts, ngram, ignore_decoration, short_tokens,
        SHORT_MIN_TOKENS, SHORT_SET_TOKENS, _C_NP, _SHORT_MARK_NP, _SET_MARK,
    )
    if not len(gram_texts):
        return out, counts
    strings = _gram_strings(data, starts[kept], ends[kept], first_kept, np.diff(first_kept), gram_texts)
    grams, gram_counts = _char_grams(strings)
    parts = np.split(out, np.cumsum(counts)[:-1])
    for i, part in zip(gram_texts.tolist(), np.split(grams, np.cumsum(gram_counts)[:-1])):
        parts[i] = part
    counts[gram_texts] = gram_counts
    return np.concatenate(parts), counts


_NO_SETTLED = np.zeros(0, dtype=np.bool_)
_IN_ORDER = np.zeros(0, dtype=np.int64)  # stream_sets' sets in the order of its texts
_END = b"\xff"  # after each text in _stream_sets' buffer: a byte that UTF-8 never holds
_END_PAD = _LOAD_PAD.encode("ascii")
_LOADS = np.dtype("<u8")  # (a dtype object: a string is parsed again at every call)


def _stream_sets(
    texts: Sequence[str], ngram: int = DEFAULT_NGRAM, *, ignore_decoration: bool = True, short_tokens: int = SHORT_TOKENS
) -> tuple[np.ndarray, np.ndarray] | None:
    """Each text's :func:`shingle_stream` shingles as a set, by the compiled kernel
    :func:`rag_dedup.compiled.collapse.stream_sets` in one pass: ``(values, counts)`` as
    :func:`rag_dedup.similarity._set_values` makes them of :func:`shingle_stream`'s values (sorted,
    unique, the low 6 bits clear; the tests hold the two equal), for 1 to 64 texts that fit one buffer;
    None where the caller takes that path instead (more texts, a text in the character-gram regime).

    The buffer is each text's shingle form (``token_form`` and ``shingle_form``, run only on the non-ASCII
    texts; an ASCII text's is its lower-cased bytes, whose ``https://`` the kernel reads as ``http://``)
    followed by the 0xFF byte, encoded text by text (no wide joined string) and lower-cased once; the
    kernel finds each text's end at its 0xFF, so no lengths are counted here. A text repeated in ``texts``
    is shingled once (its set is laid out again at each place).
    """
    _check_ngram(ngram)
    check_rules(ignore_decoration, short_tokens)
    if not all(map(isinstance, texts, repeat(str))):
        i, text = next((i, t) for i, t in enumerate(texts) if not isinstance(t, str))
        raise TypeError(f"texts[{i}] must be str, got {type(text).__name__}")
    k = len(texts)
    if not 0 < k <= 64 or sum(map(len, texts)) + k >= _PIECE_BYTES:
        return None
    first: dict[str, int] = {}  # each distinct text's number, in first-seen order
    which = [first.setdefault(t, len(first)) for t in texts]
    n = len(first)
    order = _IN_ORDER
    if n < k:  # repeats: each distinct text shingled once, the sets laid out in input order by the kernel
        texts = list(first)
        order = np.array(which, dtype=np.int64)
    data, buf, loads = _stream_buffer(texts, ignore_decoration)
    rules = _stream_rules(ngram, ignore_decoration, short_tokens)
    values, counts, pending = stream_sets(buf, loads, n, order, _NO_SETTLED, *rules)
    if len(pending):  # words of non-ASCII punctuation and symbols: settled by the reference's rule
        values, counts, pending = stream_sets(buf, loads, n, order, _stream_settled(data, pending), *rules)
    if not len(values) and (counts < 0).any():  # a text in the character-gram regime
        return None
    return values, counts


def _stream_buffer(texts: Sequence[str], ignore_decoration: bool) -> tuple[bytes, np.ndarray, np.ndarray]:
    """The buffer the stream kernels (:func:`rag_dedup.compiled.collapse.stream_sets`,
    :func:`~rag_dedup.compiled.collapse.collapse_stream`) read, of ``texts`` (``str``, each shingled as one
    text): ``(data, buf, loads)``, each text's shingle form (:func:`_stream_sets`), then 0xFF, then 16
    spaces, lower-cased once; ``buf`` its bytes, ``loads`` its 8-byte little-endian loads at every byte
    (a view of stride 1, no copy). A non-ASCII text whose non-ASCII characters are all
    :func:`_stream_inert` is taken as its UTF-8 bytes, as an ASCII text is: its shingle form is that text
    lower-cased, but for ``https://``, which the kernels read as ``http://``. Raises ``UnicodeEncodeError``
    for a text with a lone surrogate."""
    if all(map(str.isascii, texts)):
        data = _END.join([*map(str.encode, texts), _END_PAD]).lower()
    else:
        parts = []
        for t in texts:
            raw = t.encode()
            if not (t.isascii() or _INERT.issuperset(raw.translate(None, _ASCII_BYTES).decode())):
                wide = set(raw.translate(None, _ASCII_BYTES).decode())
                if not all(map(_stream_inert, wide - _INERT)):
                    raw = shingle_form(token_form(t), ignore_decoration=ignore_decoration).encode()
            parts.append(raw)
        parts.append(_END_PAD)
        data = _END.join(parts).lower()
    return data, np.frombuffer(data, dtype=np.uint8), np.ndarray((len(data) - 7,), dtype=_LOADS, buffer=data, strides=(1,))


_ASCII_BYTES = bytes(range(128))
# The non-ASCII characters found :func:`_stream_inert` so far, and those found not to be (at most
# _INERT_MAX of each remembered: the test is then made again).
_INERT: set[str] = set()
_NOT_INERT: set[str] = set()
_INERT_MAX = 1 << 12
_JAMO_AND_HANGUL = ((0x1100, 0x11FF), (0x3130, 0x318F), (0xA960, 0xA97F), (0xAC00, 0xD7FF))


def _stream_inert(char: str) -> bool:
    """Whether the non-ASCII character ``char`` passes through the shingle form unchanged wherever it
    stands among ASCII characters and other such characters, so that a text of them reads as its bytes
    (:func:`_stream_buffer`): ``token_form`` and ``shingle_form`` leave it as it is, alone and between
    letters, and nothing around it can change it or it them: no decomposition (NFKD is itself), a
    starter (combining class 0) that is no mark, not a jamo or Hangul syllable (which compose, or are set
    apart in runs), not whitespace. (No canonical composition has such a character as its second one:
    the tests check every code point.) The forms themselves decide the rest (``normalize``'s rules)."""
    if char in _INERT:
        return True
    if char in _NOT_INERT:
        return False
    point = ord(char)
    inert = (
        unicodedata.normalize("NFKD", char) == char
        and unicodedata.combining(char) == 0
        and not unicodedata.category(char).startswith(("M", "C", "Z"))
        and not char.isspace()
        and not any(lo <= point <= hi for lo, hi in _JAMO_AND_HANGUL)
        and token_form(char) == char
        and shingle_form(char) == char
        and token_form(f"a{char}a") == f"a{char}a"
        and shingle_form(f"a{char}a") == f"a{char}a"
    )
    memo = _INERT if inert else _NOT_INERT
    if len(memo) < _INERT_MAX:
        memo.add(char)
    return inert


def _stream_rules(ngram: int, ignore_decoration: bool = True, short_tokens: int = SHORT_TOKENS) -> tuple[object, ...]:
    """The rule arguments of the stream kernels, after the buffer, the text count, the order and the
    settled words: ``(ngram, ignore_decoration, short_tokens, SHORT_MIN_TOKENS, SHORT_SET_TOKENS`` and the
    hash constants ``)``, unchecked (the callers check ``ngram`` and the rules)."""
    return (ngram, ignore_decoration, short_tokens, SHORT_MIN_TOKENS, SHORT_SET_TOKENS, _C_NP, _SHORT_MARK_NP, _SET_MARK)


def _stream_settled(data: bytes, pending: np.ndarray) -> np.ndarray:
    """Whether each word a stream kernel left ``pending`` (``(start, end)`` byte pairs in ``data``: words
    of non-ASCII bytes without a solid byte) is decoration, by the reference's rule
    (:func:`_decoration_bytes`), for the kernel's second call."""
    bounds = pending.tolist()
    return np.array([_decoration_bytes(data[a:e]) for a, e in zip(bounds[::2], bounds[1::2])], dtype=np.bool_)


def _stream_piece(texts: Sequence[str], ngram: int, ignore_decoration: bool, short_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`shingle_stream` of texts that fit one buffer."""
    n = len(texts)
    # token_form of ASCII is lower(), which bytes.lower() does to the whole buffer at once (it touches
    # ASCII letters only, so the already folded non-ASCII texts pass through unchanged). Texts are
    # joined by line breaks, whitespace, so no word spans two.
    forms = [  # isascii() is O(1) in CPython
        t if t.isascii() else shingle_form(token_form(t), ignore_decoration=ignore_decoration) for t in texts
    ]
    data = "\n".join([" ", *forms, _LOAD_PAD]).encode("utf-8").lower()
    if ignore_decoration and b"https://" in data:  # the ASCII texts' https, found only once lower-cased
        forms = [shingle_form(t.lower()) if t.isascii() else f for t, f in zip(texts, forms)]
        data = "\n".join([" ", *forms, _LOAD_PAD]).encode("utf-8")
    sizes = list(map(len, forms))
    if len(data) != sum(sizes) + n + 1 + len(_LOAD_PAD):  # not all ASCII: bytes != chars for some
        for j, f in enumerate(forms):
            if not f.isascii():  # O(1) in CPython
                sizes[j] = len(f.encode("utf-8"))
    lengths = np.fromiter(sizes, dtype=np.int64, count=n)
    if compiled.COMPILED:
        return _stream_compiled(data, lengths, ngram, ignore_decoration, short_tokens)
    # Whitespace as in _words (9-13 and 28-32), by unsigned wrap-around: b - 9 < 5 or b - 28 < 5. The
    # buffer starts and ends with a space, so word edges alternate start, end, start, end, ...
    buf = np.frombuffer(data, dtype=np.uint8)
    shifted = np.subtract(buf, 9, dtype=np.uint8)
    space = shifted < 5
    np.subtract(buf, 28, out=shifted)
    space |= shifted < 5
    edges = np.flatnonzero(space[1:] != space[:-1]) + 1
    starts = edges[0::2]
    sizes = edges[1::2] - starts
    if ignore_decoration and len(starts):
        keep = _undecorated(data, buf, starts, starts + sizes)
        if not keep.all():
            owner = np.searchsorted(np.cumsum(lengths + 1) - lengths + 1, starts, side="right") - 1
            keep = _restore_bare(keep, owner, n)
            starts, sizes = starts[keep], sizes[keep]
    # A word is read as two unaligned little-endian 8-byte loads, its bytes 0-7 (lo) and 8-15 (hi),
    # the bytes past its end masked off: for a word of up to 16 bytes the pair is the word itself,
    # unless it ends in NUL bytes ("ab\0" loads as "ab"), so such words (only they: the value depends
    # on the word alone) add their size to lo. The pair hashes to fmix64(fmix64(lo) ^ hi): for
    # different lo, fmix64(lo) ^ fmix64(lo') is pseudo-random and matches hi ^ hi' by chance
    # only (2^-64); for equal lo, fmix64 is a bijection. The rare word longer than 16 bytes takes
    # _long_word_hash (its first 16 bytes as above, then each further 8 bytes and its size mixed in).
    loads = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))
    clipped = np.minimum(sizes, 16)
    lo = loads.take(starts)
    lo &= _LO_MASK.take(clipped)
    hi = loads.take(starts + 8)
    hi &= _HI_MASK.take(clipped)
    if b"\x00" in data:
        ends_in_nul = np.flatnonzero(buf[starts + sizes - 1] == 0)
        lo[ends_in_nul] += sizes[ends_in_nul].astype(np.uint64) * np.uint64(_SHORT_MARK)
    _fmix64_inplace(lo)
    lo ^= hi
    words = _fmix64_inplace(lo)
    longer = np.flatnonzero(sizes > 16)
    if len(longer):
        ends = (starts[longer] + sizes[longer]).tolist()
        words[longer] = np.array([_long_word_hash(data[a:b]) for a, b in zip(starts[longer].tolist(), ends)], dtype=np.uint64)
    # Text i starts after " \n" and the texts and separators before it; its words are
    # first_word[i] .. first_word[i + 1] - 1.
    first_word = np.searchsorted(starts, np.cumsum(lengths + 1) - lengths + 1)
    words_per_text = np.diff(first_word, append=len(starts))
    short_texts = _short_regime(words_per_text, short_tokens)
    gram_texts, set_texts = _split_regime(words_per_text, short_texts)
    windows = words_per_text.copy()
    windows[short_texts] = 0
    counts = np.maximum(windows - (ngram - 1), 0)
    m = len(words) - ngram + 1
    if m > 0:
        # Horner: sum of words[j + k] * C**(ngram - 1 - k), in place (uint64 arrays wrap silently).
        combined = words[:m].copy()
        for k in range(1, ngram):
            combined *= _STREAM_C
            combined += words[k : k + m]
        owner = np.repeat(np.arange(n), words_per_text)
        valid = owner[:m] == owner[ngram - 1 :]  # windows inside one text
        if len(short_texts):
            valid &= windows[owner[:m]] > 0
        hashed = combined[valid]
    else:
        hashed = np.empty(0, dtype=np.uint64)
    one = (windows > 0) & (windows < ngram)
    if not one.any() and not len(short_texts):
        return hashed, counts
    # The other texts have no windows: a short text's one shingle, or a regime text's character grams
    # or tokens, go at their own offsets.
    special: dict[int, np.ndarray] = {}
    for i in np.flatnonzero(one).tolist():
        w = words[first_word[i] : first_word[i] + words_per_text[i]].tolist()
        value = (len(w) * _SHORT_MARK + sum(x * _C[k] for k, x in enumerate(w))) & _MASK64
        special[i] = np.array([value], dtype=np.uint64)
    if len(gram_texts):
        strings = _gram_strings(data, starts, starts + sizes, first_word, words_per_text, gram_texts)
        grams, gram_counts = _char_grams(strings)
        for i, part in zip(gram_texts.tolist(), np.split(grams, np.cumsum(gram_counts)[:-1])):
            special[i] = part
    for i in set_texts.tolist():  # a token's own hash, marked (a token never equals a 1-word shingle)
        special[i] = words[first_word[i] : first_word[i] + words_per_text[i]] + _SET_MARK
    for i, part in special.items():
        counts[i] = len(part)
    out = np.empty(int(counts.sum()), dtype=np.uint64)
    offsets = (np.cumsum(counts) - counts).tolist()
    slots = np.ones(len(out), dtype=bool)
    for i, part in special.items():
        slots[offsets[i] : offsets[i] + len(part)] = False
        out[offsets[i] : offsets[i] + len(part)] = part
    out[slots] = hashed
    return out, counts


def shingle_hashes(
    text: str, ngram: int = DEFAULT_NGRAM, *, ignore_decoration: bool = True, short_tokens: int = SHORT_TOKENS
) -> np.ndarray:
    """The sorted unique ``uint32`` shingle hashes of ``text`` (see the module docstring)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    return shingle_hashes_many([text], ngram, ignore_decoration=ignore_decoration, short_tokens=short_tokens)[0]


def reference_shingle_hashes(
    text: str, ngram: int = DEFAULT_NGRAM, *, ignore_decoration: bool = True, short_tokens: int = SHORT_TOKENS
) -> np.ndarray:
    """The same values as :func:`shingle_hashes`, one token at a time in pure Python (slow; for tests).

    The tokens are :func:`~rag_dedup.normalize.shingle_tokens` (the rule written out character by
    character), hashed with the formulas of the module docstring.
    """
    _check_ngram(ngram)
    check_rules(ignore_decoration, short_tokens)
    tokens = shingle_tokens(text, ignore_decoration=ignore_decoration)
    if not tokens:
        return np.empty(0, dtype=np.uint32)
    words = [sum(byte * pow(_P, k, 1 << 64) for k, byte in enumerate(t.encode("utf-8"))) & _MASK64 for t in tokens]
    measure = short_measure(len(tokens), short_tokens)
    if measure == "tokens":
        return np.array(sorted({_fmix64_py((w * _C[0] + _SET_MARK_INT) & _MASK64) >> 32 for w in words}), dtype=np.uint32)
    if measure == "chars":
        points = [ord(ch) for ch in gram_text(" ".join(tokens))]
        grams = set()
        for i in range(len(points) - GRAM + 1):
            total = (_GRAM_MARK + sum(points[i + k] * _C[k] for k in range(GRAM))) & _MASK64
            grams.add(_fmix64_py(total) >> 32)
        return np.array(sorted(grams), dtype=np.uint32)
    if len(words) < ngram:
        total = len(words) * _SHORT_MARK + sum(w * _C[k] for k, w in enumerate(words))
        return np.array([_fmix64_py(total & _MASK64) >> 32], dtype=np.uint32)
    values = set()
    for i in range(len(words) - ngram + 1):
        total = sum(words[i + k] * _C[k] for k in range(ngram)) & _MASK64
        values.add(_fmix64_py(total) >> 32)
    return np.array(sorted(values), dtype=np.uint32)
