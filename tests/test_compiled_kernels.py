"""The compiled kernels (``rag_dedup.compiled.shingle``, ``.signature``) against the numpy reference,
value for value: shingle hashes, exact digests, signatures and band keys on both paths."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.corpus import chunks, documents
from tests.oracles import reference_signature

from rag_dedup import DedupIndex, compiled, lsh, shingles
from rag_dedup.compiled import shingle as shingle_kernels
from rag_dedup.minhash import EMPTY_VALUE, MinHasher
from rag_dedup.shingles import shingle_hashes, shingle_hashes_many, shingles_and_digests

pytestmark = pytest.mark.skipif(not compiled.COMPILED, reason="numba is not in use (RAG_DEDUP_KERNELS=reference)")

_T = TypeVar("_T")


@contextmanager
def _path(fast: bool) -> Iterator[None]:
    before = compiled.COMPILED
    compiled.COMPILED = fast
    try:
        yield
    finally:
        compiled.COMPILED = before


def both(call: Callable[[], _T]) -> tuple[_T, _T]:
    """``call()`` on the compiled path and on the numpy reference path."""
    with _path(True):
        fast = call()
    with _path(False):
        slow = call()
    return fast, slow


def assert_same_sets(fast: Sequence[np.ndarray], slow: Sequence[np.ndarray]) -> None:
    assert len(fast) == len(slow)
    for i, (a, b) in enumerate(zip(fast, slow)):
        assert a.dtype == b.dtype == np.uint32, i
        assert a.tolist() == b.tolist(), i


# Characters that exercise every branch of the token rule: split scripts (CJK, Thai, Hangul runs),
# markers and numbers that lead lines, non-ASCII punctuation (undecided bytes), every kind of
# whitespace the bytes scan knows (LF, CR, CRLF, tab, VT, FF, the information separators 28-31),
# invisible and compatibility characters that the folding removes or expands, NUL, https.
ALPHABET = [
    *"ab Zé1.()*-#>/\n\r\t\x0b\x0c\x1c\x1f\x00日本語のテキ한국어대민ภาษา。「」—•:ßΣﬁ\u00a0\u200b\u00ad🙂",
    "https://", "iv) ", "(a) ", "12. ", "//", "\r\n", "* ", "1) ", "\n- ", "x.", "ix)",
    "대한민국의수도는서울", "the ", "quick ", "brown ", "fox ", "jumps ",
]  # fmt: skip
TEXTS = st.lists(st.sampled_from(ALPHABET), max_size=60).map("".join)
RULES = st.fixed_dictionaries({"ignore_decoration": st.booleans(), "short_tokens": st.sampled_from([0, 3, 20])})


@pytest.mark.parametrize("few", [0, shingles._FEW], ids=["bulk", "text-by-text"])
@settings(max_examples=400, deadline=None)
@given(texts=st.lists(TEXTS, max_size=7), ngram=st.integers(1, 6), rules=RULES)
def test_compiled_shingles_and_digests_equal_the_reference_in_batches(texts: list[str], ngram: int, rules: dict, few: int) -> None:
    """Batches go through _hash_piece (words, digests, decoration, word hashes, n-gram sets) or, when
    small, text by text through the one-text kernels with the bulk path for the short texts."""
    before = shingles._FEW
    shingles._FEW = few
    try:
        (fast_sets, fast_digests), (slow_sets, slow_digests) = both(lambda: shingles_and_digests(texts, ngram, **rules))
    finally:
        shingles._FEW = before
    assert_same_sets(fast_sets, slow_sets)
    assert fast_digests == slow_digests


@settings(max_examples=400, deadline=None)
@given(TEXTS, st.integers(1, 6), RULES)
def test_compiled_one_text_equals_the_reference(text: str, ngram: int, rules: dict) -> None:
    """One text takes the compiled one-text path (DedupIndex.add); it equals the reference path, and its
    digest the reference's."""
    (fast_sets, fast_digests), (slow_sets, slow_digests) = both(lambda: shingles_and_digests([text], ngram, **rules))
    assert_same_sets(fast_sets, slow_sets)
    assert fast_digests == slow_digests


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=80), max_size=5), st.integers(1, 6))
def test_compiled_shingles_equal_the_reference_on_random_unicode(texts: list[str], ngram: int) -> None:
    texts = [t for t in texts if not any(0xD800 <= ord(ch) <= 0xDFFF for ch in t)]  # (lone surrogates are refused)
    fast, slow = both(lambda: shingle_hashes_many(texts, ngram))
    assert_same_sets(fast, slow)
    for text in texts[:1]:
        one_fast, one_slow = both(lambda: shingle_hashes(text, ngram))
        assert one_fast.tolist() == one_slow.tolist()


@pytest.mark.parametrize(
    "texts",
    [
        pytest.param([""], id="empty"),
        pytest.param(["   \n\t  "], id="whitespace-only"),
        pytest.param(["", "a b c d e f", "  "], id="empty-among-others"),
        pytest.param(["* * *", "1.", "- - - - - -"], id="decoration-only"),
        pytest.param(["1. 2. 3) (iv) first item of the list here", "(a) (b)\n(c) x. y z w v u"], id="leading-numbers"),
        pytest.param(["word " * 3000], id="one-word-repeated"),
        pytest.param(["a" * 200 + " " + "b" * 70 + " c d e f g"], id="words-longer-than-the-power-table"),
        pytest.param(["第一章 日本語のテキストです。" * 30], id="cjk"),
    ],
)
def test_compiled_shingles_equal_the_reference_on_edge_texts(texts: list[str]) -> None:
    for ngram in (1, 5):
        (fast_sets, fast_digests), (slow_sets, slow_digests) = both(lambda: shingles_and_digests(texts, ngram))
        assert_same_sets(fast_sets, slow_sets)
        assert fast_digests == slow_digests
        for text in texts:
            one_fast, one_slow = both(lambda: shingles_and_digests([text], ngram))
            assert_same_sets(one_fast[0], one_slow[0])
            assert one_fast[1] == one_slow[1]


def test_compiled_shingles_equal_the_reference_on_real_documents_and_chunks() -> None:
    texts = list(documents().values()) + [t for _, t in chunks()[:400]]
    fast, slow = both(lambda: shingles_and_digests(texts))
    assert_same_sets(fast[0], slow[0])
    assert fast[1] == slow[1]


def test_golden_values_hold_on_both_paths() -> None:
    """The values pinned in test_shingles.py and test_minhash.py, on each path."""
    for fast in (True, False):
        with _path(fast):
            assert shingle_hashes("a b c d e", short_tokens=0).tolist() == [2259987849]
            assert shingle_hashes("the quick brown fox jumps over the lazy dog", short_tokens=0).tolist() == [
                898830120, 1394216044, 1477653804, 1714844832, 2211343614
            ]
            assert shingle_hashes_many(["x", "the quick brown fox jumps over the lazy dog"], short_tokens=0)[1].tolist() == [
                898830120, 1394216044, 1477653804, 1714844832, 2211343614
            ]
            sig = MinHasher(128, seed=1).signatures([shingle_hashes("a b c d e", short_tokens=0)])[0]
            assert sig[:4].tolist() == [3635530393, 1156213570, 3709106776, 3031962105]


def test_sorted_unique_kernel_on_crowded_buckets() -> None:
    """Many equal values and values sharing their top bits take the comparison sort: still sorted unique."""
    rng = np.random.default_rng(3)
    for values in (
        np.full(500, 7, dtype=np.uint32),
        rng.integers(0, 1 << 20, size=3000, dtype=np.uint64).astype(np.uint32),  # all in the lowest buckets
        rng.integers(0, 1 << 32, size=3000, dtype=np.uint64).astype(np.uint32),
        np.array([5], dtype=np.uint32),
        np.empty(0, dtype=np.uint32),
    ):
        seg = values.copy()
        m = len(seg)
        u = shingle_kernels.sorted_unique(seg, np.empty(m, np.uint32), np.empty(2 * m + 1, np.int64))
        assert seg[:u].tolist() == np.unique(values).tolist()


# --- signatures and band keys ----------------------------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, (1 << 32) - 1), max_size=300), max_size=8),
    st.sampled_from([(2, 1), (16, 3), (128, 1), (256, 9)]),
)
def test_compiled_signatures_equal_the_reference(sets: list[list[int]], perm_seed: tuple[int, int]) -> None:
    num_perm, seed = perm_seed
    hasher = MinHasher(num_perm, seed=seed)
    arrays = [np.array(s, dtype=np.uint32) for s in sets]
    fast, slow = both(lambda: hasher.signatures(arrays))
    assert fast.dtype == slow.dtype == np.uint32
    assert fast.shape == slow.shape == (len(sets), num_perm)
    assert fast.tolist() == slow.tolist()
    for one in arrays[:2]:
        one_fast, one_slow = both(lambda: hasher.signatures([one]))
        assert one_fast.tolist() == one_slow.tolist()


@pytest.mark.parametrize("size", range(10))
def test_compiled_signatures_of_every_remainder_of_four(size: int) -> None:
    """The kernel takes four shingles a pass and the rest one by one: sets of 0 to 9 shingles, with
    the minimum at the first, the last and a middle position."""
    hasher = MinHasher(128, seed=1)
    rng = np.random.default_rng(size)
    arrays = [rng.integers(0, 1 << 32, size=size, dtype=np.uint64).astype(np.uint32) for _ in range(20)]
    fast, slow = both(lambda: hasher.signatures(arrays))
    assert fast.tolist() == slow.tolist()
    for one in arrays[:3]:
        one_fast, one_slow = both(lambda: hasher.signatures([one]))
        assert one_fast.tolist() == one_slow.tolist()


def test_compiled_signatures_equal_datasketch_on_real_chunks() -> None:
    sets = shingle_hashes_many([t for _, t in chunks()[:100]]) + [np.empty(0, np.uint32)]
    with _path(True):
        sigs = MinHasher(128, seed=1).signatures(sets)
    for sh, sig in zip(sets[:-1], sigs):
        assert sig.tolist() == reference_signature(sh, 128, seed=1).tolist()
    assert (sigs[-1] == EMPTY_VALUE).all()


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 6), st.sampled_from([(21, 6), (16, 8), (1, 1), (3, 5)]), st.integers(0, 2**32 - 1))
def test_compiled_band_keys_equal_the_reference(n: int, bands: tuple[int, int], seed: int) -> None:
    b, r = bands
    width = b * r + seed % 3  # positions past b * r are ignored
    sigs = np.random.default_rng(seed).integers(0, 1 << 32, size=(n, width), dtype=np.uint64).astype(np.uint32)
    fast, slow = both(lambda: lsh.band_keys(sigs, b, r))
    assert fast.dtype == slow.dtype == np.uint64
    assert fast.tolist() == slow.tolist()
    strided = sigs[::2]  # not contiguous
    fast, slow = both(lambda: lsh.band_keys(strided, b, r))
    assert fast.tolist() == slow.tolist()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, (1 << 32) - 1), max_size=300), max_size=8),
    st.sampled_from([(128, 1, 21, 6), (16, 3, 4, 4), (2, 1, 1, 1), (256, 9, 16, 15)]),
)
def test_compiled_band_keys_of_sets_equal_the_reference(sets: list[list[int]], params: tuple[int, int, int, int]) -> None:
    """MinHasher.band_keys (the signatures and band keys in one pass) equals lsh.band_keys of the
    reference signatures, value for value."""
    num_perm, seed, b, r = params
    hasher = MinHasher(num_perm, seed=seed)
    arrays = [np.array(s, dtype=np.uint32) for s in sets]
    with _path(False):
        expected = lsh.band_keys(hasher.signatures(arrays), b, r)
    fast, slow = both(lambda: hasher.band_keys(arrays, b, r))
    assert fast.dtype == slow.dtype == np.uint64
    assert fast.shape == slow.shape == (len(sets), b)
    assert fast.tolist() == slow.tolist() == expected.tolist()
    for one in arrays[:2]:
        one_fast, one_slow = both(lambda: hasher.band_keys([one], b, r))
        assert one_fast.tolist() == one_slow.tolist() == lsh.band_keys(hasher.signatures([one]), b, r).tolist()


@pytest.mark.parametrize("bands", [(22, 6), (129, 1), (1, 129)])
def test_band_keys_of_sets_refuse_bands_past_the_signature(bands: tuple[int, int]) -> None:
    hasher = MinHasher(128, seed=1)
    for fast in (True, False):
        with _path(fast), pytest.raises(ValueError):
            hasher.band_keys([np.arange(10, dtype=np.uint32)], *bands)


def _reference_text_keys(text: str, ngram: int, rules: dict, hasher: MinHasher, b: int, r: int) -> tuple[list[int], bytes | None, list[int] | None]:
    with _path(False):
        (sh,), (digest,) = shingles_and_digests([text], ngram, **rules)
        keys = lsh.band_keys(hasher.signatures([sh]), b, r) if digest is not None else None
    return sh.tolist(), digest, None if keys is None else keys.tolist()


@settings(max_examples=400, deadline=None)
@given(TEXTS, st.integers(1, 6), RULES, st.sampled_from([(128, 1, 21, 6), (64, 7, 8, 8)]))
def test_shingles_digest_and_keys_equal_the_reference(text: str, ngram: int, rules: dict, params: tuple[int, int, int, int]) -> None:
    """One text from its bytes to its band keys (DedupIndex.add, one kernel call, or two when Python
    settles the decoration rule, or the bulk path for short texts) equals the reference: its shingle
    set and digest by shingles_and_digests, its band keys by lsh.band_keys of its signature."""
    num_perm, seed, b, r = params
    hasher = MinHasher(num_perm, seed=seed)
    expected = _reference_text_keys(text, ngram, rules, hasher, b, r)
    fast, slow = both(lambda: shingles.shingles_digest_and_keys(text, ngram, hasher=hasher, b=b, r=r, **rules))
    for sh, digest, keys in (fast, slow):
        assert sh.dtype == np.uint32
        assert (sh.tolist(), digest, None if keys is None else keys.tolist()) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param(" \n\t ", id="whitespace-only"),
        pytest.param("one two", id="fewer-words-than-ngram"),
        pytest.param("a b c d e f g h i j k l m n", id="short-text-regime"),
        pytest.param("1. 2. 3) (iv) first item of the list here and then some more words to be long " * 3, id="leading-numbers"),
        pytest.param("word — • « » " * 40, id="non-ascii-punctuation"),
        pytest.param("Straße  Ünïcödé\r\n\r\n\r\nwords here " * 20, id="folded-and-rebuilt"),
        pytest.param("第一章 日本語のテキストです。" * 30, id="cjk"),
        pytest.param("https://example.com/a/b " * 30, id="https"),
    ],
)
def test_shingles_digest_and_keys_on_edge_texts(text: str) -> None:
    hasher = MinHasher(128, seed=1)
    expected = _reference_text_keys(text, 5, {}, hasher, 21, 6)
    with _path(True):
        sh, digest, keys = shingles.shingles_digest_and_keys(text, 5, ignore_decoration=True, short_tokens=20, hasher=hasher, b=21, r=6)
    assert (sh.tolist(), digest, None if keys is None else keys.tolist()) == expected


def test_one_text_work_arrays_are_reused_per_thread_and_grown() -> None:
    """The one-text kernel's work arrays are this thread's, reused and grown (a larger text after a
    smaller one, a smaller after it, one past _SCRATCH_BYTES with arrays of its own), and each thread
    has its own: every result equals the reference."""
    import threading

    hasher = MinHasher(128, seed=1)
    base = [t for _, t in chunks()[:40]]
    texts = [base[0][:300], *base[:8], " ".join(base)[: shingles._SCRATCH_BYTES + 500], base[1][:200], " \n ".join(base[:3])]
    expected = [_reference_text_keys(t, 5, {}, hasher, 21, 6) for t in texts]

    def run() -> list[tuple[list[int], bytes | None, list[int] | None]]:
        got = []
        for t in texts:
            sh, digest, keys = shingles.shingles_digest_and_keys(t, 5, ignore_decoration=True, short_tokens=20, hasher=hasher, b=21, r=6)
            got.append((sh.tolist(), digest, None if keys is None else keys.tolist()))
        return got

    with _path(True):
        assert run() == expected
        results: list[object] = []
        threads = [threading.Thread(target=lambda: results.extend(run() for _ in range(5))) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(results) == 20
    assert all(r == expected for r in results)


# --- end to end, once on each path -----------------------------------------------------------------
def test_index_partition_is_the_same_on_both_paths() -> None:
    """add() one at a time and add_many end in the same clusters on the compiled and the reference path."""
    items = [(f"k{i}", t) for i, (_, t) in enumerate(chunks()[:300])]
    items += [(f"dup{i}", t.replace(" the ", " a ", 1)) for i, (_, t) in enumerate(chunks()[:60])]

    def build(one_at_a_time: bool) -> list[tuple[str, str]]:
        index = DedupIndex(threshold=0.8)
        if one_at_a_time:
            for key, text in items:
                index.add(key, text)
        else:
            index.add_many(items)
        return sorted((m.key, m.representative) for m in index.matches([k for k, _ in items]))

    fast_one, slow_one = both(lambda: build(True))
    fast_many, slow_many = both(lambda: build(False))
    assert fast_one == slow_one == fast_many == slow_many
    assert any(key != rep for key, rep in fast_one)  # the planted copies were found


def test_an_index_saved_on_one_path_is_extended_on_the_other(tmp_path, reference_kernels: None) -> None:
    """The persisted shingles and band keys are the same on both paths: an index built by the compiled
    kernels, saved, and extended on the reference path (this test runs there) ends where one built on
    the reference path alone does."""
    items = [(f"k{i}", t) for i, (_, t) in enumerate(chunks()[:200])]
    items += [(f"dup{i}", t.replace(" the ", " this ", 1)) for i, (_, t) in enumerate(chunks()[:40])]
    first, rest = items[::2], items[1::2]
    with _path(True):
        index = DedupIndex(threshold=0.8)
        index.add_many(first)
        index.save(tmp_path / "index")
    assert compiled.COMPILED is False
    extended = DedupIndex.load(tmp_path / "index")
    for key, text in rest:
        extended.add(key, text)
    alone = DedupIndex(threshold=0.8)
    alone.add_many(items)
    keys = [k for k, _ in items]
    assert [(m.key, m.representative, m.kind) for m in extended.matches(keys)] == [
        (m.key, m.representative, m.kind) for m in alone.matches(keys)
    ]
    assert any(m.kind == "near" for m in alone.matches(keys))
