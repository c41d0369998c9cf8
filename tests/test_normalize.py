"""The canonical form: the fast paths against the normalisation as documented, value for value."""

from __future__ import annotations

import re
import sys
import unicodedata

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.corpus import documents

from rag_dedup import InvalidTextError, canonical, exact_key

# Unicode's own Default_Ignorable_Code_Point property (the third-party regex module, which nltk brings),
# not the table that normalize.py keeps.
DEFAULT_IGNORABLE = regex.compile(r"\p{Default_Ignorable_Code_Point}")


def spec_canonical(text: str) -> str:
    """The normalisation exactly as documented, step by step, with no fast paths."""
    while True:
        folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
        folded = DEFAULT_IGNORABLE.sub("", folded)
        if folded == text:
            break
        text = folded
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub(r"[^\S\n]+", " ", text)
    text = re.sub(r" ?\n ?", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("ﬁle Ｆｕｌｌ", "file full", id="nfkc-ligature-fullwidth"),
        pytest.param("zero\u200bwidth\u200d join\u2060er", "zerowidth joiner", id="zero-width"),
        pytest.param("\ufeffBOM first", "bom first", id="bom"),
        pytest.param("soft\u00adware", "software", id="soft-hyphen"),
        pytest.param("a\u00a0\u00a0b\u3000c", "a b c", id="nbsp-ideographic-space"),
        pytest.param("line\r\nline\rline", "line\nline\nline", id="crlf-cr"),
        pytest.param("a \t  b", "a b", id="spaces-tabs"),
        pytest.param("para\n\n\n\n\nnext", "para\n\nnext", id="blank-lines"),
        pytest.param("end \n start", "end\nstart", id="space-at-newline"),
        pytest.param("  \n padded \n ", "padded", id="strip"),
        pytest.param("Straße ΣΊΣΥΦΟΣ", "strasse σίσυφοσ", id="casefold"),
        pytest.param("next\u0085line\u2028sep", "next line sep", id="unicode-line-separators"),
        pytest.param(" \t\r\n\u00a0", "", id="whitespace-only"),
        pytest.param("a\u200eb\u200fc\u034fd\u2061e\u2064f\u180eg\ufe0fh", "abcdefgh", id="lrm-rlm-cgj-invisible-ops"),
        pytest.param("\u202aembedded\u202c \u2066isolate\u2069", "embedded isolate", id="bidi-controls"),
        pytest.param("ß\u0301", "s\u015b", id="casefold-then-compose"),
        pytest.param("s\u034f\u0301", "\u015b", id="compose-after-removing-cgj"),
    ],
)
def test_canonical_examples(text: str, expected: str) -> None:
    assert canonical(text) == expected
    assert spec_canonical(text) == expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("aZé ß\t\n\r\u00a0\u200b\u00ad\ufeff\x0b\x1c\u2028\u3000ﬁ.,-Σ")), max_size=60))
def test_canonical_fast_paths_equal_the_specification(text: str) -> None:
    """Guards the ASCII and byte-level fast paths against drifting from the stated normalisation."""
    assert canonical(text) == spec_canonical(text)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list(" \n\r\ta")), max_size=40))
def test_whitespace_folding_equals_the_specification(text: str) -> None:
    """Runs of spaces and newlines in every arrangement: the byte-level folding (replace, not regex)
    against the regex statement of the rule."""
    assert canonical(text) == spec_canonical(text)
    assert canonical(text + "é") == spec_canonical(text + "é")  # the non-ASCII path folds the same way


_TRICKY = list("aZé ß\t\n\r\u00a0\u200b\u00ad\ufeff\u034f\u200e\u180e\u2061\u0301\u0345\u1160ᄀ가ſΣ\u0130ﬁ.")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(alphabet=st.sampled_from(_TRICKY), max_size=40), st.text(st.characters(blacklist_categories=["Cs"]))))
def test_canonical_is_idempotent(text: str) -> None:
    """Guards issue 17 item 9: canonical("ß\u0301") was "ss\u0301", whose own canonical form is "s\u015b"."""
    once = canonical(text)
    assert canonical(once) == once
    assert not DEFAULT_IGNORABLE.search(once)
    assert once == spec_canonical(text)


def test_every_default_ignorable_code_point_is_removed() -> None:
    ignorable = "".join(chr(c) for c in range(sys.maxunicode + 1) if DEFAULT_IGNORABLE.match(chr(c)))
    assert len(ignorable) > 4000
    assert canonical(f"a{ignorable}b") == "ab"


def test_default_ignorable_code_points_are_removed_from_long_texts_too() -> None:
    """Long texts are screened by a lookup table rather than the regex; both must find every one."""
    ignorable = [chr(c) for c in range(0x10000) if DEFAULT_IGNORABLE.match(chr(c))]
    body = "Grüße " * 100
    for ch in ignorable:
        assert canonical(body + ch + "Ende") == canonical(body + "Ende"), hex(ord(ch))


@pytest.mark.parametrize("text", ["caf\udce9", "\ud800", "ok then \udfff"], ids=["escaped-byte", "high", "low"])
def test_canonical_refuses_lone_surrogates_naming_them(text: str) -> None:
    with pytest.raises(InvalidTextError, match=r"text holds a lone surrogate \('\\ud[0-9a-f]{3}' at position \d+"):
        canonical(text)


def test_canonical_matches_specification_on_real_text() -> None:
    for text in documents().values():
        assert canonical(text) == spec_canonical(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("aZé ß\t\n\r\u00a0\u200b\u00ad\ufeff\x0b\x1c\u2028\u3000ﬁ.,-Σ")), max_size=60))
def test_token_form_has_the_words_of_the_canonical_form(text: str) -> None:
    """Shingles are computed from token_form(); it must never differ from canonical() in its words."""
    from rag_dedup.normalize import token_form

    assert token_form(text).split() == canonical(text).split()


def test_exact_key_is_sha256_of_canonical_form() -> None:
    import hashlib

    assert exact_key("Hello\u00a0 World\r\n") == hashlib.sha256(b"hello world").hexdigest()
    assert exact_key("The  GPL") == exact_key("the gpl") != exact_key("the lgpl")


@pytest.mark.parametrize("bad", [None, b"bytes", 3, ["a"]], ids=["none", "bytes", "int", "list"])
def test_canonical_rejects_non_str(bad: object) -> None:
    with pytest.raises(TypeError, match="text must be str"):
        canonical(bad)  # type: ignore[arg-type]
