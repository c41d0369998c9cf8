"""The chunking core's doors to third-party internals: each fails loudly when an upgrade removes what it
relies on.

nltk punkt's private names (rag_dedup.chunking._punkt_internals) and tiktoken's ``_core_bpe``
(rag_dedup.chunking._tiktoken_internals); LlamaIndex's door (rag_dedup.llama_index._nodes) is tested in
tests/llama_index/test_nodes.py. Each test fails on an installation where the door no longer opens.
"""

from __future__ import annotations

import importlib

import pytest
from llama_index.core.utils import get_tokenizer
from nltk.tokenize import punkt

from rag_dedup.chunking import _punkt_internals, _tiktoken_internals
from rag_dedup.chunking.sentences import Punkt, punkt_params


def test_the_punkt_door_opens_on_the_installed_nltk() -> None:
    tokenizer = _punkt_internals.tokenizer_with_params(punkt_params("english"))
    assert tokenizer.span_tokenize("It works. Mr. Smith agrees.")
    text = "It works. Mr. Smith agrees. See p. 4 (notes). \"Quoted.\" Next one!"
    assert Punkt(punkt_params("english")).spans(text, 0, len(text)) == list(tokenizer.span_tokenize(text))


def test_the_punkt_door_names_what_an_nltk_upgrade_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(punkt, "_ORTHO_LC")
    try:
        with pytest.raises(ImportError, match=r"nltk \S+ has no nltk.tokenize.punkt._ORTHO_LC"):
            importlib.reload(_punkt_internals)
    finally:
        monkeypatch.undo()
        importlib.reload(_punkt_internals)


def test_tiktoken_still_offers_the_fast_path() -> None:
    """Fails when tiktoken renames ``_core_bpe``: counts stay right (the public method is used), but
    the chunker gets slower; update rag_dedup.chunking._tiktoken_internals."""
    encoding = get_tokenizer().func.__self__
    fast = _tiktoken_internals.core_encode_ordinary(encoding)
    assert fast == encoding._core_bpe.encode_ordinary
    text = "Redistribution and use in source and binary forms, with or without modification."
    assert list(fast(text)) == encoding.encode_ordinary(text)


def test_tiktoken_door_falls_back_to_the_public_method() -> None:
    class Renamed:
        def encode_ordinary(self, text: str) -> list[int]:
            return [len(text)]

    assert _tiktoken_internals.core_encode_ordinary(Renamed())("abc") == [3]
