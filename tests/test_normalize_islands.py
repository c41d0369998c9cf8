"""The island path of the Unicode folding (normalize._fold_islands) against the whole-text folding,
value for value, and the Unicode properties its cuts rely on, for every code point."""

from __future__ import annotations

import sys
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.corpus import chunks, documents

from rag_dedup import normalize
from rag_dedup.normalize import _fold_islands, _fold_unicode, _fold_unicode_reference, canonical, token_form

_CODE_POINTS = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
# The assigned ones (unassigned and private-use code points have no mappings: NFKC and casefold keep them).
_ASSIGNED = [ch for ch in _CODE_POINTS if unicodedata.category(ch) not in ("Cn", "Co")]


def _nfkd_starts_ascii(s: str) -> bool:
    d = unicodedata.normalize("NFKD", s)
    return bool(d) and d[0].isascii()


def test_no_canonical_composition_has_an_ascii_second_character() -> None:
    """An ASCII character never composes with the character before it (so a cut before one is safe)."""
    for ch in _CODE_POINTS:
        mapping = unicodedata.decomposition(ch)
        if mapping and not mapping.startswith("<"):
            parts = [chr(int(p, 16)) for p in mapping.split()]
            assert not any(p.isascii() for p in parts[1:]), hex(ord(ch))
    assert all(unicodedata.combining(chr(c)) == 0 for c in range(128))


def test_an_ascii_led_character_stays_ascii_led_through_a_round() -> None:
    """A character whose NFKD begins with an ASCII character keeps that after casefold and NFKC, and
    is never a default-ignorable one: the cut before it stays safe for the next step."""
    led = [ch for ch in _CODE_POINTS if _nfkd_starts_ascii(ch)]
    assert len(led) > 1000
    for ch in led:
        assert _nfkd_starts_ascii(ch.casefold()), hex(ord(ch))
        assert _nfkd_starts_ascii(unicodedata.normalize("NFKC", ch)), hex(ord(ch))
        assert not normalize._IGNORABLE.match(ch), hex(ord(ch))
        assert not normalize._IGNORABLE.match(unicodedata.normalize("NFKC", ch).casefold()[:1]), hex(ord(ch))


@pytest.mark.parametrize(
    ("before", "after"),
    [("Pad the text a little: ", " and More Words after it."), ("E", "x"), ("", " z"), ("a ", "\u0301 b")],
    ids=["in-prose", "after-capital", "at-start", "before-accent"],
)
def test_every_code_point_in_ascii_context_folds_as_the_reference(before: str, after: str) -> None:
    pad = "w" * 40  # mostly ASCII, so the island path is taken
    for ch in _ASSIGNED:
        text = before + ch + after + pad
        assert _fold_unicode(text) == _fold_unicode_reference(text), hex(ord(ch))


_TRICKY = list(
    "aZEe \t\n\r\x0b\x1cé\u00a0\u200b\u00ad\ufeff\u034f\u200e\u180e\u2061\u0301\u0323\u0345\u1160ᄀ가ſΣσς\u0130İﬁß"
    "\u2028\u0085\u3000Ｆ①ǅ\u212a\u2126.,-"
)


@settings(max_examples=600, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet=st.sampled_from(_TRICKY), max_size=6),
            st.text(st.characters(blacklist_categories=["Cs"]), max_size=4),
            st.text(alphabet=st.sampled_from(list("abcXYZ .,\n")), min_size=1, max_size=60),
        ),
        max_size=12,
    )
)
def test_island_folding_equals_the_reference(pieces: list[str]) -> None:
    """Random Unicode between runs of ASCII (near and far apart, at the start and the end, tricky
    characters: "ß\u0301", "s\u034f\u0301", ignorables, NBSP, CRLF): the same folding either way."""
    text = "".join(pieces)
    assert _fold_unicode(text) == _fold_unicode_reference(text)
    padded = text + "x" * (8 * len(text.encode("utf-8")))  # mostly ASCII: the island path runs
    assert _fold_unicode(padded) == _fold_unicode_reference(padded)
    found = _fold_islands(padded.encode("utf-8"))
    assert found is None or found[0] == _fold_unicode_reference(padded)


@pytest.mark.parametrize(
    "text",
    ["Straße ß\u0301 here", "Bus s\u034f\u0301 stop", "soft\u00adware and more text", "zero\u200bwidth words here",
     "nul \x00 é byte", "NBSP\u00a0and\r\nCRLF é"],
    ids=["casefold-then-compose", "cgj", "soft-hyphen", "zero-width", "nul", "nbsp-crlf"],
)
def test_texts_that_need_a_second_round_take_the_reference(text: str) -> None:
    padded = text + " filler" * 20
    assert _fold_unicode(padded) == _fold_unicode_reference(padded)
    assert canonical(padded) == canonical(padded.replace(" filler" * 20, "") + " filler" * 20)


def test_island_path_is_taken_for_mostly_ascii_text() -> None:
    """The fast path runs (returns a value) on prose with a few accents; the shares fall back."""
    found = _fold_islands("Caf\u00e9 Cr\u00e8me \u2014 \u201cQuoted\u201d".encode("utf-8"))
    assert found is not None and found[0] == "caf\u00e9 cr\u00e8me \u2014 \u201cquoted\u201d"
    assert set(found[1]) >= {"\u00e9", "\u00e8", "\u2014", "\u201c", "\u201d"}
    found = _fold_islands("Stra\u00dfe".encode("utf-8"))
    assert found is not None and found[0] == "strasse"
    assert _fold_islands("ß\u0301".encode("utf-8")) is None


def test_real_text_folds_as_the_reference() -> None:
    texts = list(documents().values()) + [t for _, t in chunks()]
    assert any(not t.isascii() for t in texts)
    for text in texts:
        assert _fold_unicode(text) == _fold_unicode_reference(text)
        assert token_form(text) == (text.lower() if text.isascii() else _fold_unicode_reference(text))


def test_lone_surrogates_keep_their_behaviour() -> None:
    text = "caf\udce9 and more"
    assert _fold_unicode(text) == _fold_unicode_reference(text)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.lists(st.sampled_from(_TRICKY + ["https://", "HTTPS://", "日本", "ภาษา", "대한민국의수도는서울"]), max_size=6).map("".join),
            st.text(st.characters(blacklist_categories=["Cs"]), max_size=4),
            st.text(alphabet=st.sampled_from(list("abcXYZ .,\n")), min_size=1, max_size=60),
        ),
        max_size=12,
    ),
    st.booleans(),
)
def test_token_and_shingle_form_in_one_pass(pieces: list[str], ignore_decoration: bool) -> None:
    """The shingling's one pass equals token_form then shingle_form, and keeps the same object when the
    shingle form changes nothing (which the shingling reads as 'no other digest needed')."""
    text = "".join(pieces)
    for t in (text, text + "x" * (8 * len(text.encode("utf-8")))):
        form, shaped = normalize._token_and_shingle_form(t, ignore_decoration)
        expected = normalize.shingle_form(token_form(t), ignore_decoration=ignore_decoration)
        assert form == token_form(t)
        assert shaped == expected
        assert (shaped is form) == (expected == token_form(t))
