"""The lone-surrogate rule: refused with the item and argument named, before anything is written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rag_dedup import DedupIndex, InvalidTextError, escape_surrogates
from rag_dedup.surrogates import check_unicode

TEXT = "Permission is hereby granted, free of charge, to any person obtaining a copy of this software"


def test_a_non_utf8_file_name_is_refused_as_a_source_and_can_be_escaped(tmp_path: Path) -> None:
    """Guards issue 17 item 1: a Latin-1 file name reached save() and failed there with a bare UnicodeEncodeError."""
    (tmp_path / os.fsdecode(b"caf\xe9.txt")).write_text(TEXT)
    (name,) = os.listdir(tmp_path)
    assert name == "caf\udce9.txt"
    index = DedupIndex()
    with pytest.raises(InvalidTextError, match=r"^source \(key 'k'\) holds a lone surrogate \('\\udce9' at position 3"):
        index.add("k", TEXT, source=name)
    assert len(index) == 0
    index.add("k", TEXT, source=escape_surrogates(name))
    index.save(tmp_path / "saved")
    assert DedupIndex.load(tmp_path / "saved").keys_of_source("caf\\xe9.txt") == ["k"]


@pytest.mark.parametrize(
    ("item", "message"),
    [
        pytest.param(("caf\udce9", TEXT), r"items\[2\]: key holds a lone surrogate", id="key"),
        pytest.param(("k2", TEXT + "\ud800"), r"items\[2\]: text \(key 'k2'\) holds a lone surrogate \('\\ud800' at position 93", id="text"),
        pytest.param({"key": "k2", "text": TEXT, "source": "\udfff"}, r"items\[2\]: source \(key 'k2'\) holds", id="source"),
    ],
)
def test_add_many_names_the_item_and_the_argument_and_adds_nothing(item: object, message: str) -> None:
    index = DedupIndex()
    with pytest.raises(InvalidTextError, match=message):
        index.add_many([("a", TEXT), ("b", TEXT.upper()), item])
    assert len(index) == 0


def test_lookups_with_a_surrogate_key_are_refused_like_adds() -> None:
    index = DedupIndex()
    index.add("a", TEXT)
    for call in (index.match, index.remove, index.members):
        with pytest.raises(InvalidTextError, match="holds a lone surrogate"):
            call("a\udce9")
    with pytest.raises(InvalidTextError, match="^text holds a lone surrogate"):
        index.query(TEXT + "\udce9")


def test_invalid_text_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="chunk 7"):
        check_unicode("x\udc80", "chunk 7")


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        pytest.param("caf\udce9.txt", "caf\\xe9.txt", id="escaped-byte"),
        pytest.param("\ud83d\ude00", "\\ud83d\\ude00", id="split-pair"),
        pytest.param("plain café", "plain café", id="valid-unchanged"),
    ],
)
def test_escape_surrogates_gives_valid_unicode(raw: str, shown: str) -> None:
    assert escape_surrogates(raw) == shown
    check_unicode(escape_surrogates(raw), "escaped")
    assert escape_surrogates(raw).encode("utf-8")
