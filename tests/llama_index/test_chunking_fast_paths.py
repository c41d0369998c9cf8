"""SentenceChunker's fast paths give what the plain paths give.

Each fast path in ``rag_dedup.llama_index.chunking`` replaces a slower, obviously correct computation; these tests
hold them to it on the shipped real corpus and on generated text:

* ``_token_counter``: ``len(tokenizer(text))``, with tiktoken's ordinary encoder for LlamaIndex's
  default tokenizer when no special token can occur;
* ``_blocks``: the line-by-line block rules (the version before the fast skip of plain lines, kept
  here as the reference);
* ``_related_node_info``: ``node.as_related_node_info()``, built without re-validation.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.schema import TextNode
from llama_index.core.utils import get_tokenizer

from rag_dedup.chunking import blocks as _blocks
from rag_dedup.chunking import tokens as _tokens
from rag_dedup.llama_index import _nodes
from rag_dedup.llama_index.chunking import SentenceChunker

CORPUS = Path(__file__).parents[1] / "data" / "corpus"


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted(CORPUS.rglob("*.txt"))]


def _reference_blocks(text: str) -> Iterator[tuple[int, int, bool]]:
    """The block rules applied line by line, with no shortcut (the code before the fast skip), and the
    comment-prose rule (a starred line after a wrapped starred line, or after a bare ``*`` in the same
    comment, continues the block; a bare ``*`` after a starred line ends it)."""
    block_start = block_end = -1
    line_start = 0
    n = len(text)
    star_column, wrapped, comment_column = -1, False, -1
    while line_start <= n:
        m = _blocks.NEWLINE.search(text, line_start)
        line_end = m.start() if m else n
        next_start = m.end() if m else n + 1
        first = _blocks.LEADING_SPACE.match(text, line_start, line_end).end()
        if first < line_end:
            last = line_end
            while text[last - 1].isspace():
                last -= 1
            line, column = text[first:last], first - line_start
            if line == "*" and star_column == column and block_start >= 0:
                yield block_start, last, False
                block_start, comment_column = -1, column
                line_start = next_start
                continue
            heading = _blocks.HEADING.match(text, line_start, line_end) is not None
            starred = False
            if heading or _blocks.RULE.match(text, first, line_end):
                if block_start >= 0:
                    yield block_start, block_end, False
                    block_start = -1
                yield first, last, heading
            else:
                item = _blocks.LIST_ITEM.match(text, first, line_end) is not None
                starred = item and line.startswith("*")
                prose = starred and star_column == column and (comment_column == column or wrapped)
                if block_start >= 0 and item and not prose:
                    yield block_start, block_end, False
                    block_start = -1
                if block_start < 0:
                    block_start = first
                block_end = last
            if starred:
                star_column = column
                wrapped = len(line) >= _blocks.WRAPPED_LINE and not line.rstrip("\"'\u201d\u2019)]").endswith(tuple(".!?:;"))
            else:
                star_column = comment_column = -1
        else:
            star_column = comment_column = -1
            if block_start >= 0:
                yield block_start, block_end, False
                block_start = -1
        line_start = next_start
    if block_start >= 0:
        yield block_start, block_end, False


def test_token_counter_equals_the_default_tokenizer_on_the_corpus_and_on_special_cases(texts: list[str]) -> None:
    """Guards the ordinary-encoder shortcut: a special token or a lone surrogate must not change a count."""
    tokenizer = get_tokenizer()
    count = _tokens.token_counter(tokenizer)
    chunker = SentenceChunker()
    samples = [text[s:e] for text in texts for s, e in chunker.sentence_spans(text)[:40]]
    samples += [
        "",
        "<|endoftext|>",
        "before <|endoftext|> after",
        "<|fim_prefix|>x<|fim_suffix|>",
        "<| not special",
        "lone \ud800 surrogate",
        "\udfff",
        "emoji \U0001f600 and RTL \u05e9\u05dc\u05d5\u05dd",
        "line\r\nbreak",
    ]
    assert len(samples) > 1000
    assert [count(t) for t in samples] == [len(tokenizer(t)) for t in samples]


def test_token_counter_passes_other_tokenizers_through() -> None:
    count = _tokens.token_counter(str.split)
    assert count("<|endoftext|> three words") == 3


@pytest.mark.parametrize("cut", [None, 2000], ids=["whole", "first-2000-chars"])
def test_blocks_equal_the_line_by_line_rules_on_the_corpus(texts: list[str], cut: int | None) -> None:
    for text in texts:
        text = text if cut is None else text[:cut]
        assert list(_blocks.blocks(text)) == list(_reference_blocks(text))


_LINES = st.lists(
    st.sampled_from(
        [
            "Plain words in a line.",
            "   indented text",
            "",
            "  ",
            "- a bullet",
            "* star item",
            " * Permission to use, copy, modify, and distribute this software for any",
            " * purpose with or without fee is hereby granted, provided that the above",
            " * copyright notice and this permission notice appear in all copies.",
            " *",
            "*",
            "  * an item of another column, long enough to wrap if it were prose",
            "1. numbered",
            "2) second",
            "(a) lettered",
            "a) letter",
            "iv) roman",
            "# Heading",
            "### Deeper heading",
            "#notaheading",
            "----",
            "= = =",
            "...",
            "2009-10-11 a date",
            " . dot line",
            "\u2022 unicode bullet",
            "word) close paren",
        ]
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(_LINES, st.sampled_from(["\n", "\r\n", "\r", "\u2028", "\u2029", "\n\n"]))
def test_blocks_equal_the_line_by_line_rules_on_generated_text(lines: list[str], newline: str) -> None:
    text = newline.join(lines)
    assert list(_blocks.blocks(text)) == list(_reference_blocks(text))


def test_related_node_info_equals_as_related_node_info() -> None:
    node = TextNode(text="Some text.", id_="n1", metadata={"file_name": "a.txt", "page": 3})
    fast = _nodes.related_node_info(node)
    slow = node.as_related_node_info()
    assert fast == slow
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.metadata is not node.metadata  # a copy, as validation makes
    assert (fast.__pydantic_extra__, fast.__pydantic_private__) == (slow.__pydantic_extra__, slow.__pydantic_private__)
    again = _nodes.related_node_info(node)  # copies of one template: nothing mutable shared
    again.metadata["page"] = 4
    again.model_fields_set.add("extra")
    assert fast.metadata["page"] == 3 and fast.model_fields_set == slow.model_fields_set


def test_chunker_output_does_not_depend_on_the_memos(texts: list[str]) -> None:
    """A chunker that has seen the corpus (warm memos, scores filled lazily) cuts like a fresh one."""
    warm = SentenceChunker()
    for text in texts:
        warm.chunk_spans(text)
    for text in texts[:20]:
        assert warm.chunk_spans(text) == SentenceChunker().chunk_spans(text)
