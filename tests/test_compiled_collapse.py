"""The compiled collapse kernels (rag_dedup.compiled.collapse) against the numpy reference, value for value.

The reference is TextSimilarity.matrix (rag_dedup.similarity) and Collapser's greedy pass written in
Python (Collapser._greedy, the path taken when ``compiled.COMPILED`` is False); the kernels must give the
same similarities, bit for bit, and the same Kept and Fold decisions, on real text of the shipped corpus
and on generated input (random unicode, empty and long texts, NaN scores, blank texts, stamps).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_dedup import compiled
from rag_dedup.collapse import Collapser, Passage
from rag_dedup.compiled.collapse import collapse_rows, pair_counts, similarity_rows
from rag_dedup.similarity import TextSimilarity
from tests.kernels import numpy_reference
from tests.test_collapse import _top30s, edited

pytestmark = pytest.mark.skipif(not compiled.COMPILED, reason="numba is not in use (RAG_DEDUP_KERNELS=reference)")


def _reference_matrix(texts: list[str]) -> np.ndarray:
    return TextSimilarity().matrix(texts, 5, 0)


def _kernel_matrix(texts: list[str]) -> np.ndarray:
    values, counts = TextSimilarity().sets(texts, 5, 0)
    return similarity_rows(values, counts)


def _both_paths(monkeypatch: pytest.MonkeyPatch, run) -> tuple[object, object]:
    """``run()`` on the compiled path, then on the reference path (fresh collapsers: no shared cache)."""
    fast = run()
    with monkeypatch.context() as m:
        m.setattr(compiled, "COMPILED", False)
        slow = run()
    return fast, slow


@pytest.fixture(scope="module")
def tops() -> list[list[Passage]]:
    return _top30s()


def test_the_kernel_matrix_equals_the_reference_on_real_top_30s(tops):
    for passages in tops:
        texts = [p.text for p in passages]
        assert np.array_equal(_kernel_matrix(texts), _reference_matrix(texts))  # type: ignore[arg-type]


@pytest.mark.parametrize("trust", [pytest.param(False, id="checked"), pytest.param(True, id="trusted")])
def test_the_kernel_decides_as_the_reference_on_real_top_30s(tops, monkeypatch, trust):
    """Real BM25-like top 30s full of licence copies, stamped by a DedupIndex: the same Kept and Fold."""
    fast, slow = _both_paths(monkeypatch, lambda: [Collapser(trust_clusters=trust).collapse(p, 10) for p in tops])
    assert fast == slow
    assert sum(len(k.folded) for kept in fast for k in kept) > 10  # type: ignore[union-attr]


def test_the_kernel_decides_as_the_reference_with_blank_texts_images_nan_scores_and_mixed_stamps(tops, monkeypatch):
    """Every branch of the greedy pass on real text: unstamped passages among stamped ones (trusted and
    checked), a stamp shared by a near-copy and an edited family, NaN and None scores, texts missing."""
    nan = float("nan")
    cases = []
    for j, passages in enumerate(tops):
        rows = list(passages)
        rows[3] = rows[3]._replace(cluster=None)
        rows[5] = rows[5]._replace(score=nan)
        rows[7] = rows[7]._replace(text="   ")
        rows[9] = rows[9]._replace(text=None)
        rows[11] = rows[11]._replace(score=None)
        base = rows[0].text or ""
        rows += [Passage(f"e{j}-{k}", edited(base, k), 0.1, rows[0].cluster) for k in (3, 6, 12, 40)]
        rows.append(Passage(f"up{j}", base.upper(), nan, "elsewhere"))
        cases.append(rows)
    for trust in (False, True):
        for floor in (None, 0.8):
            fast, slow = _both_paths(
                monkeypatch, lambda: [Collapser(trust_clusters=trust, floor=floor).collapse(p) for p in cases]
            )
            assert fast == slow


_texts = st.lists(
    st.one_of(
        st.text(max_size=60),
        st.text(alphabet=st.sampled_from("ab cd\n* 1. x"), max_size=200),
        st.just(""),
        st.just("one two three four five six seven " * 40),  # long
    ),
    min_size=1,
    max_size=64,
)


@settings(max_examples=150, deadline=None)
@given(texts=_texts)
def test_the_kernel_matrix_equals_the_reference_on_random_unicode(texts):
    assert np.array_equal(_kernel_matrix(texts), _reference_matrix(texts))


@settings(max_examples=150, deadline=None)
@given(
    texts=_texts,
    data=st.data(),
    trust=st.booleans(),
    threshold=st.sampled_from([0.5, 0.8, 1.0]),
)
def test_the_kernel_decides_as_the_reference_on_random_passages(texts, data, trust, threshold):
    n = len(texts)
    clusters = data.draw(st.lists(st.sampled_from([None, "a", "b", "c"]), min_size=n, max_size=n))
    scores = data.draw(st.lists(st.sampled_from([None, 1.0, 2.0, math.nan]), min_size=n, max_size=n))
    passages = [Passage(f"k{i}", t, s, c) for i, (t, s, c) in enumerate(zip(texts, scores, clusters))]
    fast = Collapser(threshold, trust_clusters=trust).collapse(passages)
    with numpy_reference():
        slow = Collapser(threshold, trust_clusters=trust).collapse(passages)
    assert fast == slow


def test_pair_counts_counts_shared_values_of_many_sets_and_keeps_the_sizes_on_the_diagonal():
    """Sets sharing values in many overlapping groups (the mask grouping), and empty sets."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(1, 65))
        pool = (rng.integers(1, 2**57, int(rng.integers(1, 40)), dtype=np.int64).astype(np.uint64)) << np.uint64(6)
        sets = [np.unique(rng.choice(pool, int(rng.integers(0, len(pool) + 1)), replace=False)) for _ in range(n)]
        inter = pair_counts(np.concatenate(sets), np.array([len(s) for s in sets], dtype=np.int64))
        expected = np.array([[len(np.intersect1d(a, b)) for b in sets] for a in sets], dtype=np.int64)
        assert np.array_equal(inter, expected)


def test_collapse_rows_without_comparing_folds_by_trusted_stamps_only():
    order = np.arange(4, dtype=np.int64)
    clusters = np.array([0, 0, -1, 1], dtype=np.int64)
    kept, folds, similarity = collapse_rows(
        np.empty(0, dtype=np.uint64), np.zeros(4, dtype=np.int64), order, clusters, True, False, 0.8, 0.7,
        np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64),
    )
    assert kept.tolist() == [0, 2, 3]
    assert folds.tolist() == [[1], [0], [0]] and math.isnan(similarity[0])  # row 1 into row 0, "cluster"


# --- query-time shingling: shingle_stream on the kernels == shingle_stream on numpy ----------------------


def _stream_both(texts: list[str], **rules: object) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    from rag_dedup.shingles import shingle_stream

    fast = shingle_stream(texts, **rules)  # type: ignore[arg-type]
    with numpy_reference():
        slow = shingle_stream(texts, **rules)  # type: ignore[arg-type]
    return fast, slow


_RULES = [
    pytest.param({}, id="default"),
    pytest.param({"ignore_decoration": False}, id="decoration-kept"),
    pytest.param({"short_tokens": 0}, id="no-short-regime"),
    pytest.param({"ngram": 1}, id="ngram-1"),
    pytest.param({"ngram": 30}, id="ngram-30"),
]


@pytest.mark.parametrize("rules", _RULES)
def test_the_stream_kernel_equals_the_reference_on_real_text(tops, rules):
    """The shipped corpus' top 30s, its CJK man pages, a C header with comment markers, NAME lines."""
    from tests.test_shingles import SCRIPTS, cjk_paragraphs

    batches = [[p.text for p in passages] for passages in tops]  # type: ignore[misc]
    batches.append(cjk_paragraphs()[:40])
    batches.append([(SCRIPTS / "bignum-header.h").read_text(), *(SCRIPTS / "name-lines.txt").read_text().splitlines()])
    for texts in batches:
        (h1, c1), (h2, c2) = _stream_both(texts, **rules)
        assert np.array_equal(c1, c2) and np.array_equal(h1, h2)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(" * 1. Redistributions of source code\n * (a) must retain (iv) the notice\n -- ok", id="markers"),
        pytest.param("xiv. xxxix) viii. (ix) iiii. xxxx) 123. 1234. (a) ab. v. vi) ()\n(. ) x", id="numbering"),
        pytest.param("© 2020 — « quoted » • bullet ‣ and … more words here to shingle well", id="non-ascii-punctuation"),
        pytest.param("a" * 17 + " " + "b" * 40 + " " + "c" * 16 + " word\x00 \x00\x00 x\x00y end", id="long-words-and-nul"),
        pytest.param("see https://example.org/a and http://example.org/a\r\n1. next line\r2) other", id="https-and-cr"),
        pytest.param("one two", id="one-shingle"),
        pytest.param("one two three four", id="char-grams"),
        pytest.param(" ".join(f"w{i}" for i in range(15)), id="token-set"),
        pytest.param("* * *\n1.\n- -", id="decoration-only"),
        pytest.param("", id="empty"),
    ],
)
def test_the_stream_kernel_equals_the_reference_on_every_rule(text):
    texts = [text, text.upper(), "plain words between the special ones, long enough to have shingles", text]
    for rules in ({}, {"ignore_decoration": False}, {"short_tokens": 0}, {"ngram": 2}):
        (h1, c1), (h2, c2) = _stream_both(texts, **rules)
        assert np.array_equal(c1, c2) and np.array_equal(h1, h2), rules


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(
        st.one_of(
            st.text(max_size=80),
            st.text(alphabet=st.sampled_from(list("ab xi v.)(1*-\n\r\t\x00©—é中")), max_size=120),
            st.just("word " * 300),  # long
        ),
        max_size=12,
    ),
    ngram=st.integers(1, 8),
    decoration=st.booleans(),
    short_tokens=st.sampled_from([0, 3, 20]),
)
def test_the_stream_kernel_equals_the_reference_on_random_unicode(texts, ngram, decoration, short_tokens):
    (h1, c1), (h2, c2) = _stream_both(texts, ngram=ngram, ignore_decoration=decoration, short_tokens=short_tokens)
    assert np.array_equal(c1, c2) and np.array_equal(h1, h2)


def test_set_values_kernel_equals_the_reference_with_repeats_and_empty_sets():
    from rag_dedup.compiled.collapse import set_values
    from rag_dedup.similarity import _set_values

    rng = np.random.default_rng(3)
    for n in (1, 2, 30, 64, 65, 150):
        counts = rng.integers(0, 9, n).astype(np.int64)
        hashes = rng.integers(0, 2**63, int(counts.sum()), dtype=np.int64).astype(np.uint64) * np.uint64(3)
        hashes[1::3] = hashes[::3][: len(hashes[1::3])]  # repeats, within and across sets
        hashes[::5] |= np.uint64(63)  # values equal once their low 6 bits are cleared
        got, expected = set_values(hashes, counts), _set_values(hashes, counts)
        assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])


def test_pair_counts_at_reads_sets_in_place_as_pair_counts_reads_them_end_to_end():
    """pair_counts_at (the warm path: sets where the shingle cache's arena keeps them, in any order, with
    gaps between them) gives pair_counts' counts of the same sets laid end to end, with or without reused
    scratch tables (their key tables left all zeros for the next call); collapse_rows on places decides as collapse_rows
    on the sets end to end."""
    from rag_dedup.compiled.collapse import new_scratch, pair_counts_at

    rng = np.random.default_rng(11)
    scratch = new_scratch()
    for _ in range(200):
        n = int(rng.integers(1, 65))
        pool = (rng.integers(1, 2**57, int(rng.integers(1, 40)), dtype=np.int64).astype(np.uint64)) << np.uint64(6)
        sets = [np.unique(rng.choice(pool, int(rng.integers(1, len(pool) + 1)), replace=False)) for _ in range(n)]
        arena, places = [np.zeros(int(rng.integers(0, 5)), dtype=np.uint64)], []
        at = len(arena[0])
        for i in rng.permutation(n).tolist():
            gap = np.zeros(int(rng.integers(0, 5)), dtype=np.uint64)
            arena += [sets[i], gap]
            places.append((i, at << 32 | len(sets[i])))
            at += len(sets[i]) + len(gap)
        spans = np.array([p for _, p in sorted(places)], dtype=np.int64)
        values, counts = np.concatenate(sets), np.array([len(s) for s in sets], dtype=np.int64)
        assert np.array_equal(pair_counts_at(np.concatenate(arena), spans, spans[:0]), pair_counts(values, counts))
        assert np.array_equal(pair_counts_at(np.concatenate(arena), spans, scratch), pair_counts(values, counts))
        region = len(scratch) // 4
        # the key slots left clear: the value table's (each key beside its mask) and the group table's
        assert not scratch[: 2 * region : 2].any() and not scratch[2 * region : 3 * region].any()
        order = rng.permutation(n).astype(np.int64)
        clusters = rng.integers(-1, n, n).astype(np.int64)
        trust = bool(rng.integers(2))
        placed = collapse_rows(np.concatenate(arena), counts[:0], order, clusters, trust, True, 0.5, 0.3, spans, scratch)
        laid = collapse_rows(values, counts, order, clusters, trust, True, 0.5, 0.3, spans[:0], spans[:0])
        assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(placed, laid))


@settings(max_examples=100, deadline=None)
@given(
    texts=_texts,
    data=st.data(),
    trust=st.booleans(),
    threshold=st.sampled_from([0.5, 0.8, 1.0]),
    top_n=st.sampled_from([None, 1, 3]),
)
def test_a_warm_collapse_decides_as_the_reference_on_random_passages(texts, data, trust, threshold, top_n):
    """The warm path (Collapser._decide_compiled: every text remembered, read in the cache's arena)
    against the reference, on the second call of one collapser (its first call remembers the texts)."""
    n = len(texts)
    clusters = data.draw(st.lists(st.sampled_from([None, "a", "b", "c"]), min_size=n, max_size=n))
    scores = data.draw(st.lists(st.sampled_from([None, 1.0, 2.0, math.nan]), min_size=n, max_size=n))
    passages = [Passage(f"k{i}", t, s, c) for i, (t, s, c) in enumerate(zip(texts, scores, clusters))]
    warm = Collapser(threshold, trust_clusters=trust)
    first = warm.collapse(passages, top_n)
    second = warm.collapse(passages, top_n)
    keys, texts_, scores_, stamps = zip(*[(p.key, p.text, p.score, p.cluster) for p in passages]) if passages else ((),) * 4
    columns = warm.decide_columns(list(keys), list(texts_), list(scores_), list(stamps), top_n) if passages else None
    with numpy_reference():
        slow = Collapser(threshold, trust_clusters=trust).collapse(passages, top_n)
        slow_columns = (
            Collapser(threshold, trust_clusters=trust).decide_columns(list(keys), list(texts_), list(scores_), list(stamps), top_n)
            if passages
            else None
        )
    assert first == second == slow and columns == slow_columns


@pytest.mark.parametrize("trust", [pytest.param(False, id="checked"), pytest.param(True, id="trusted")])
def test_a_warm_collapse_decides_as_the_reference_on_real_top_30s(tops, trust):
    """One collapser over the real top 30s, twice (the second round warm: every text remembered, the
    stamps of a DedupIndex), against the reference on fresh collapsers: the same Kept and Fold."""
    collapser = Collapser(trust_clusters=trust)
    for passages in tops:
        collapser.collapse(passages, 10)
    remembered = [collapser.similarity.remembered_sets([p.text for p in ps], 5) is not None for ps in tops]
    assert all(remembered) if not trust else remembered.count(True) < len(tops)  # trusted: stamps only, mostly
    warm = [collapser.collapse(p, 10) for p in tops]
    with numpy_reference():
        slow = [Collapser(trust_clusters=trust).collapse(p, 10) for p in tops]
    assert warm == slow


def test_gathered_lays_the_sets_at_their_places_end_to_end_as_the_reference():
    from rag_dedup.compiled.collapse import gathered
    from rag_dedup.similarity import _gathered

    rng = np.random.default_rng(3)
    arena = rng.integers(0, 2**63, 500, dtype=np.int64).astype(np.uint64)
    for _ in range(100):
        k = int(rng.integers(1, 40))
        starts, counts = rng.integers(0, 400, k), rng.integers(0, 100, k)
        places = [int(a) << 32 | int(c) for a, c in zip(starts, counts)]
        fast, slow = gathered(arena, np.array(places, dtype=np.int64)), _gathered(arena, places)
        assert np.array_equal(fast[0], slow[0]) and np.array_equal(fast[1], slow[1]) and fast[0].dtype == slow[0].dtype


def test_a_warm_collapse_with_an_index_decides_as_the_reference_on_real_top_30s(tops):
    """The warm path asking a DedupIndex for the current clusters (the passages unstamped: only the index
    knows them), twice over the real top 30s, against the reference: the same Kept (clusters included)."""
    from rag_dedup.index import DedupIndex
    from tests.corpus import chunks

    index = DedupIndex()
    index.add_many(chunks(words=120, stride=60))
    unstamped = [[p._replace(cluster=None) for p in ps] for ps in tops]
    collapser = Collapser(index=index)
    for passages in unstamped:
        collapser.collapse(passages, 10)
    warm = [collapser.collapse(p, 10) for p in unstamped]
    with numpy_reference():
        slow = [Collapser(index=index).collapse(p, 10) for p in unstamped]
    assert warm == slow and any(f.reason == "cluster" for kept in warm for k in kept for f in k.folded)


# --- the cold path of TextSimilarity.sets: shingles._stream_sets == _set_values(*shingle_stream) on numpy -


def _sets_both(texts: list[str], **rules: object) -> tuple[tuple[np.ndarray, np.ndarray] | None, tuple[np.ndarray, np.ndarray]]:
    from rag_dedup.shingles import _stream_sets, shingle_stream
    from rag_dedup.similarity import _set_values

    fast = _stream_sets(texts, **rules)  # type: ignore[arg-type]
    with numpy_reference():
        slow = _set_values(*shingle_stream(texts, **rules))  # type: ignore[arg-type]
    return fast, slow


def _assert_same_sets(texts: list[str], **rules: object) -> None:
    fast, slow = _sets_both(texts, **rules)
    if fast is None:  # declined: only for a text in the character-gram regime, no text or more than 64
        from rag_dedup.normalize import shingle_tokens
        from rag_dedup.shingles import short_measure

        short = rules.get("short_tokens", 20)
        decoration = rules.get("ignore_decoration", True)
        assert not 0 < len(texts) <= 64 or any(
            short_measure(len(shingle_tokens(t, ignore_decoration=decoration)), short) == "chars"  # type: ignore[arg-type]
            for t in texts
        )
        return
    assert np.array_equal(fast[1], slow[1]) and np.array_equal(fast[0], slow[0]), rules


@pytest.mark.parametrize("rules", _RULES)
def test_the_sets_kernel_equals_the_reference_on_real_text(tops, rules):
    """The real top 30s (repeats, licence URLs with https, © and curly quotes), CJK man pages, markers."""
    from tests.test_shingles import SCRIPTS, cjk_paragraphs

    batches = [[p.text for p in passages] for passages in tops]  # type: ignore[misc]
    batches += [cjk_paragraphs()[:40], [(SCRIPTS / "bignum-header.h").read_text()]]
    taken = 0
    for texts in batches:
        fast, _ = _sets_both(texts, **rules)
        taken += fast is not None
        _assert_same_sets(texts, **rules)
    assert taken >= len(tops)  # the kernel, not the fallback, decided the real top 30s


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(" * 1. Redistributions of source code\n * (a) must retain (iv) the notice\n -- ok", id="markers"),
        pytest.param("xiv. xxxix) viii. (ix) iiii. xxxx) 123. 1234. (a) ab. v. vi) ()\n(. ) x", id="numbering"),
        pytest.param("© 2020 — « quoted » • bullet ‣ and … more words here to shingle well", id="non-ascii-punctuation"),
        pytest.param("a" * 17 + " " + "b" * 40 + " " + "c" * 16 + " word\x00 \x00\x00 x\x00y end", id="long-words-and-nul"),
        pytest.param(
            "see https://example.org/a and HTTPS://x.org xhttps://y https://https://zzzzzzzzzzzzzzzzzzzz.org/\r\n"
            "1. next line\r2) other https:/ https:// https://é",
            id="https-and-cr",
        ),
        pytest.param("one two", id="one-shingle"),
        pytest.param(" ".join(f"w{i}" for i in range(15)), id="token-set"),
        pytest.param("* * *\n1.\n- -", id="decoration-only"),
        pytest.param("", id="empty"),
        pytest.param("   \n\t ", id="blank"),
    ],
)
def test_the_sets_kernel_equals_the_reference_on_every_rule(text):
    texts = [text, text.upper(), "plain words between the special ones, long enough to have shingles", text]
    for rules in ({}, {"ignore_decoration": False}, {"short_tokens": 0}, {"ngram": 2}, {"ngram": 1}):
        _assert_same_sets(texts, **rules)


def test_the_sets_kernel_declines_character_gram_texts_and_large_batches():
    from rag_dedup.shingles import _stream_sets

    assert _stream_sets(["one two three four", "plain words long enough to have shingles of their own"]) is None
    assert _stream_sets(["a text of words"] * 65) is None
    assert _stream_sets([]) is None
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        _stream_sets(["fine", b"bytes"])  # type: ignore[list-item]


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(
        st.one_of(
            st.text(max_size=80),
            st.lists(st.sampled_from([*"ab xi v.)(1*-\n\r\t\x00©—é中한", "https://", "HTTPS://"]), max_size=60).map("".join),
            st.lists(st.sampled_from(["ab", "xi", "1.", "©", "中文", "한국어", "https://a.b", "—", "\n", "\x00"]), max_size=60).map(" ".join),
            st.just("word " * 300),  # long
            st.just(""),
        ),
        max_size=12,
    ),
    ngram=st.integers(1, 8),
    decoration=st.booleans(),
    short_tokens=st.sampled_from([0, 3, 20]),
)
def test_the_sets_kernel_equals_the_reference_on_random_unicode(texts, ngram, decoration, short_tokens):
    _assert_same_sets(texts, ngram=ngram, ignore_decoration=decoration, short_tokens=short_tokens)


def test_cold_sets_with_repeats_equal_the_reference_and_remember_each_text_once():
    """The cold path shingles repeats again in one pass: the same sets, in input order, and the cache
    holds each distinct text with shingles once, in first-seen order (what eviction reads; a blank text is
    not remembered)."""
    texts = [
        "alpha beta gamma delta epsilon zeta eta",
        "one two three four five six seven",
        "alpha beta gamma delta epsilon zeta eta",
        "",
        "red orange yellow green blue indigo violet",
    ]
    sim = TextSimilarity()
    values, counts = sim.sets(texts, 5, 4096)
    with numpy_reference():
        ref_values, ref_counts = TextSimilarity().sets(texts, 5, 4096)
    assert np.array_equal(values, ref_values) and np.array_equal(counts, ref_counts)
    remembered = [t for t in dict.fromkeys(texts) if t]
    assert list(sim._cache.by_ngram[5]) == remembered
    small = TextSimilarity()
    small.sets(texts, 5, 2)  # capacity 2: the oldest distinct text is evicted, as on the reference path
    assert list(small._cache.by_ngram[5]) == remembered[-2:]


def test_sets_of_remembered_and_new_texts_equal_the_reference(tops):
    """A warm query with new texts among remembered ones (the kernel takes the new ones, repeats among
    them included): the same sets as the reference path, in input order."""
    texts = [p.text for p in tops[0]]  # type: ignore[misc]
    later = [*texts[10:20], *[p.text for p in tops[1]][:12], texts[12], "a new text of six words here", texts[0]]
    sim = TextSimilarity()
    sim.sets(texts[:15], 5, 4096)
    got = sim.sets(later, 5, 4096)
    with numpy_reference():
        expected = TextSimilarity().sets(later, 5, 0)
    assert np.array_equal(got[1], expected[1]) and np.array_equal(got[0], expected[0])


# --- the cold path: Collapser._decide_compiled by collapse_stream, and the inert characters --------------

_INERT_SAMPLES = "“”‘’©—–«»•§¶°±×÷‰€£¥†‡′"


def test_no_canonical_composition_has_an_inert_second_character():
    """What _stream_inert leans on: a character it accepts never composes with the one before it (it is
    the second character of no canonical two-character decomposition, over every code point)."""
    import unicodedata

    from rag_dedup.shingles import _stream_inert

    seconds = set()
    for point in range(0x80, 0x110000):
        if 0xD800 <= point <= 0xDFFF:
            continue
        parts = unicodedata.decomposition(chr(point)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            seconds.add(chr(int(parts[1], 16)))
    assert seconds and not any(_stream_inert(c) for c in seconds if ord(c) >= 0x80)
    assert all(_stream_inert(c) for c in _INERT_SAMPLES)
    assert not any(_stream_inert(c) for c in "éﬁ\u0301中한\u00a0\u200bµßİ…™″")


def test_an_inert_character_keeps_its_place_in_the_shingle_form_of_every_bmp_text_around_it():
    """Every BMP character _stream_inert accepts, between ASCII and other inert characters, at a line's
    start and end: token_form and shingle_form give the text lower-cased (so _stream_buffer may take its bytes)."""
    from rag_dedup.normalize import shingle_form, token_form
    from rag_dedup.shingles import _stream_inert

    inert = [chr(p) for p in range(0x80, 0x10000) if not 0xD800 <= p <= 0xDFFF and _stream_inert(chr(p))]
    assert len(inert) > 1000
    for at in range(0, len(inert), 64):
        run = "".join(inert[at : at + 64])
        text = f"{run[0]}A{run}b {run[::-1]} 1.\n{run[-1]}Xy é"[:-2]
        assert shingle_form(token_form(text)) == text.translate({c: c + 32 for c in range(65, 91)})


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(
        st.lists(
            st.sampled_from([*_INERT_SAMPLES, "ab", "Word", "xi", "1.", "(a)", " ", "\n", "https://", "HTTPS://", "é", "中", "\u0301", "ﬁ"]),
            max_size=40,
        ).map("".join),
        min_size=1,
        max_size=8,
    ),
    decoration=st.booleans(),
)
def test_the_sets_kernel_reads_texts_of_inert_characters_as_their_shingle_forms(texts, decoration):
    """Texts of ASCII and inert characters (taken as their bytes), some with characters that are not
    (taken through the forms): the kernel's sets equal the reference's."""
    _assert_same_sets(texts, ignore_decoration=decoration)


@settings(max_examples=100, deadline=None)
@given(
    first=_texts,
    second=_texts,
    data=st.data(),
    trust=st.booleans(),
    threshold=st.sampled_from([0.5, 0.8, 1.0]),
)
def test_a_collapse_of_new_and_remembered_texts_decides_as_the_reference(first, second, data, trust, threshold):
    """One collapser, two queries sharing texts (the second's new texts streamed beside its remembered
    ones, collapse_stream): each decision is the reference's on a fresh collapser."""
    later = [*second, *data.draw(st.lists(st.sampled_from(first), max_size=10))][:64]
    clusters = data.draw(st.lists(st.sampled_from([None, "a", "b"]), min_size=len(later), max_size=len(later)))
    rows = [[Passage(f"k{i}", t, 1.0, None) for i, t in enumerate(first)],
            [Passage(f"k{i}", t, 2.0 - i / 100, c) for i, (t, c) in enumerate(zip(later, clusters))]]
    collapser = Collapser(threshold, trust_clusters=trust)
    fast = [collapser.collapse(r, 5) for r in rows]
    with numpy_reference():
        slow = [Collapser(threshold, trust_clusters=trust).collapse(r, 5) for r in rows]
    assert fast == slow


def test_a_cold_collapse_remembers_each_new_text_once_with_the_reference_sets(tops):
    """The cold route (collapse_stream) decides, then puts each distinct new text's set in the cache, in
    first-seen order: a later sets() reads them from the arena equal to the reference's; a second query
    with some of them remembered is decided on the kernel too and remembers only its new texts."""
    collapser = Collapser()
    texts = [p.text for p in tops[0]]  # repeats among them
    collapser.collapse(tops[0])
    sim = collapser.similarity
    assert list(sim._cache.by_ngram[5]) == list(dict.fromkeys(texts))
    assert sim.remembered_sets(texts, 5) is not None
    got = sim.sets(texts, 5, 4096)
    with numpy_reference():
        expected = TextSimilarity().sets(texts, 5, 0)
    assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
    mixed = [*tops[1][:10], *tops[0][:10]]
    collapser.collapse(mixed)
    assert list(sim._cache.by_ngram[5]) == list(dict.fromkeys([*texts, *(p.text for p in tops[1][:10])]))
    assert sim._cache.live == sum(p & 0xFFFFFFFF for p in sim._cache.by_ngram[5].values())


def test_a_cold_collapse_falls_back_for_blank_texts_character_grams_and_nan_scores_and_refuses_surrogates():
    """The cases collapse_stream leaves to Collapser._decide: the reference's decisions and errors."""
    from rag_dedup.errors import InvalidTextError

    long = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau"
    cases = [
        [Passage("a", long, 1.0), Passage("b", "   ", 0.5), Passage("c", long + " upsilon", 0.2)],
        [Passage("a", long, 1.0), Passage("b", "one two three four", 0.5), Passage("c", long, 0.2)],
        [Passage("a", long, float("nan")), Passage("b", long, 0.5)],
        [Passage("a", "“" + long + "” ©", 1.0), Passage("b", long + " ©", 0.5)],
    ]
    for rows in cases:
        fast = Collapser().collapse(rows)
        with numpy_reference():
            slow = Collapser().collapse(rows)
        assert fast == slow
    bad = [Passage("a", long, 1.0), Passage("b", long + " \ud800", 0.5)]
    with pytest.raises(InvalidTextError, match="the text of passage 'b'"):
        Collapser().collapse(bad)
