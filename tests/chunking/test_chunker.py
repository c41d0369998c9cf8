"""The framework-free chunking core (rag_dedup.chunking): its API, as other adapters will use it.

The algorithm's behaviour on real text is tested through SentenceChunker in
tests/llama_index/test_chunking.py; here: the core imports no framework, gives the same spans as the
LlamaIndex wrapper with the same tokenizer, reports each chunk's overlap, validates its settings,
pickles, and bounds its memos; and the cut plan's rules on hand-made units.
"""

from __future__ import annotations

import doctest
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from llama_index.core.utils import get_tokenizer

import rag_dedup.chunking.chunker
import rag_dedup.chunking.memo
from rag_dedup.chunking import CONTINUES, STARTS_BLOCK, STARTS_HEADING, Chunk, Chunker, TokenCounts, Units, plan_chunks
from rag_dedup.chunking.memo import BoundedMemo
from rag_dedup.llama_index.chunking import SentenceChunker

CORPUS = Path(__file__).parents[1] / "data" / "corpus"
TOKENIZER = get_tokenizer()


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted(CORPUS.rglob("*.txt"))[:12]]


def test_the_core_imports_no_framework() -> None:
    code = (
        "import sys, rag_dedup.chunking as c\n"
        "c.Chunker(str.split).chunk_spans('One. Two.')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'llama_index', 'langchain_core', 'haystack', 'pydantic'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_the_core_gives_the_wrappers_spans_and_says_where_each_overlap_ends(texts: list[str]) -> None:
    core = Chunker(TOKENIZER, chunk_size=128, chunk_overlap=32)
    wrapper = SentenceChunker(chunk_size=128, chunk_overlap=32)
    overlaps = 0
    for text in texts:
        chunks = core.chunks(text)
        assert [(c.start, c.end) for c in chunks] == wrapper.chunk_spans(text) == core.chunk_spans(text)
        previous: Chunk | None = None
        for chunk in chunks:
            assert chunk.start <= chunk.body_start < chunk.end
            assert len(TOKENIZER(text[chunk.start : chunk.end])) <= 128 or chunk.body_start == chunk.start
            if previous is not None:
                assert chunk.body_start == previous.end or text[previous.end : chunk.body_start].isspace()
                assert previous.start < chunk.start  # the overlap is the end of the previous chunk, never all of it
                overlaps += chunk.start < chunk.body_start
            previous = chunk
    assert overlaps > 50


def test_any_tokenizer_callable_works_and_counts_drive_the_budget(texts: list[str]) -> None:
    words = Chunker(str.split, chunk_size=40, chunk_overlap=10)
    for text in texts[:4]:
        for s, e in words.chunk_spans(text):
            piece = text[s:e]
            assert len(piece.split()) <= 40 or len(words.sentence_spans(piece)) == 1


def test_reserved_tokens_shrink_the_budget_like_sentence_splitter(texts: list[str]) -> None:
    chunker = Chunker(TOKENIZER, chunk_size=128, chunk_overlap=32)
    for s, e in chunker.chunk_spans(texts[0], reserved_tokens=60):
        assert len(TOKENIZER(texts[0][s:e])) <= 68
    with pytest.raises(ValueError, match=r"Metadata length \(128\) is longer than chunk size \(128\)"):
        chunker.chunk_spans(texts[0], reserved_tokens=128)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        pytest.param({"chunk_size": 4}, ValueError, r"chunk_size \(4\) must be at least 8", id="size-small"),
        pytest.param({"chunk_overlap": 256}, ValueError, r"chunk_overlap \(256\) .* smaller than chunk_size \(256\)", id="overlap"),
        pytest.param({"chunk_size": 12.5}, TypeError, r"chunk_size must be an int, got float", id="size-type"),
        pytest.param({"chunk_target": 0}, ValueError, r"chunk_target \(0\) must be between 1 and chunk_size \(256\)", id="target"),
        pytest.param({"language": "../etc"}, ValueError, r"language \('../etc'\)", id="language"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        Chunker(TOKENIZER, **kwargs)


def test_bad_input_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="tokenizer must be callable"):
        Chunker(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="text must be str, got bytes"):
        Chunker(str.split).chunks(b"bytes")  # type: ignore[arg-type]


def test_pickles_as_its_settings_and_tokenizer(texts: list[str]) -> None:
    chunker = Chunker(str.split, chunk_size=64, chunk_overlap=16, chunk_target=20)
    clone = pickle.loads(pickle.dumps(chunker))
    assert repr(clone) == repr(chunker)
    assert clone.chunks(texts[1]) == chunker.chunks(texts[1])


def test_a_shared_token_counter_gives_the_same_chunks(texts: list[str]) -> None:
    counts = TokenCounts(TOKENIZER)
    a = Chunker(counts, chunk_size=96, chunk_overlap=16)
    b = Chunker(counts, chunk_size=200, chunk_overlap=40)
    assert a.counts is b.counts
    assert a.chunks(texts[2]) == Chunker(TOKENIZER, chunk_size=96, chunk_overlap=16).chunks(texts[2])
    assert b.chunks(texts[2]) == Chunker(TOKENIZER, chunk_size=200, chunk_overlap=40).chunks(texts[2])


def test_the_memo_stays_bounded_and_skips_long_keys() -> None:
    memo: BoundedMemo[str, int] = BoundedMemo(limit=100, max_key=8)
    for i in range(1000):
        memo.put(f"k{i}", i, len(f"k{i}"))
        assert len(memo) <= 100
    memo.put("x" * 9, 1, 9)
    assert "x" * 9 not in memo
    with pytest.raises(ValueError, match="limit >= 1"):
        BoundedMemo(limit=0)


def test_the_docstring_examples_run() -> None:
    for module in (rag_dedup.chunking.chunker, rag_dedup.chunking.memo):
        result = doctest.testmod(module)
        assert result.attempted >= 1 and result.failed == 0


# ---------------------------------------------------------------------------- the cut plan on hand-made units


def _units(kinds: list[int], tokens: int = 10) -> Units:
    """Units of ``tokens`` tokens each, no gaps, score 0 (every unit allowed a cut says yes)."""
    units = Units()
    for i, kind in enumerate(kinds):
        units.append(i, i + 1, tokens, 0, 0.0, kind)
    units.total_blocks()
    return units


def test_the_overlap_is_the_end_of_the_previous_chunk_and_a_prefix_chunk_joins_the_next() -> None:
    """Ten units of 10 tokens in one paragraph, a content-defined cut after each that leaves half a
    mean body (5 tokens) of the paragraph after it: the bodies are the units; each chunk repeats the
    last 20 tokens (chunk_overlap) before its body, two bodies, reaching past the previous body into
    the previous chunk but never to its start; the first chunks, prefixes of the next, join it."""
    plan = plan_chunks(_units([STARTS_BLOCK] + [CONTINUES] * 9), 64, 20, mean_body=10.0, min_block=10)
    assert plan == [(0, 0, 3)] + [(i - 2, i, i + 1) for i in range(3, 10)]


def test_the_overlap_never_starts_where_the_previous_chunk_starts() -> None:
    """Room for three units of overlap, but the previous chunk starts one unit before the body: the
    overlap stops after the previous chunk's first unit (so the chunks are not one the prefix of the
    other) or, when it would reach it, the two chunks are one."""
    plan = plan_chunks(_units([STARTS_BLOCK] + [CONTINUES] * 5), 100, 30, mean_body=10.0, min_block=10)
    firsts = [first for first, _, _ in plan]
    assert firsts == sorted(set(firsts))
    assert all(first < body or first == 0 for first, body, _ in plan)
    assert plan[0] == (0, 0, 4) and plan[1:] == [(1, 4, 5), (2, 5, 6)]


def test_no_content_defined_cut_leaves_less_than_half_a_mean_body_of_its_paragraph() -> None:
    """The same paragraph with a mean body of 40: half of it is 20 tokens, so no cut after unit 8
    (10 tokens follow) and the last body is units 8 and 9, after 20 tokens of overlap."""
    plan = plan_chunks(_units([STARTS_BLOCK] + [CONTINUES] * 9), 64, 20, mean_body=40.0, min_block=10)
    assert [(body, end) for _, body, end in plan][-2:] == [(7, 8), (8, 10)]
    assert plan[-1] == (6, 8, 10)


def test_a_run_of_short_blocks_is_one_body_up_to_the_body_budget() -> None:
    """Twenty blocks of 10 tokens, each under min_block: no content-defined cut between or inside
    them, bodies of at most chunk_size - chunk_overlap = 160 tokens, the forced cut at least half way,
    without overlap (each body starts a block)."""
    plan = plan_chunks(_units([STARTS_BLOCK] * 20), 200, 40, mean_body=15.0, min_block=20)
    assert all(first == body for first, body, _ in plan)
    sizes = [10 * (end - body) for _, body, end in plan]
    assert sum(sizes) == 200 and all(80 <= size <= 160 for size in sizes)
    assert len(plan) == 2


def test_a_paragraph_of_five_sentences_gets_chunks_of_its_own_however_short() -> None:
    """Short blocks of one unit around a block of five units of 2 tokens (10 tokens, under
    min_block): the five-unit block is a body of its own, the short blocks beside it are grouped."""
    kinds = [STARTS_BLOCK, STARTS_BLOCK] + [STARTS_BLOCK] + [CONTINUES] * 4 + [STARTS_BLOCK, STARTS_BLOCK]
    plan = plan_chunks(_units(kinds, tokens=2), 200, 40, mean_body=100.0, min_block=20)
    assert [(body, end) for _, body, end in plan] == [(0, 2), (2, 7), (7, 9)]
    four = [STARTS_BLOCK, STARTS_BLOCK] + [STARTS_BLOCK] + [CONTINUES] * 3 + [STARTS_BLOCK, STARTS_BLOCK]
    assert [(body, end) for _, body, end in plan_chunks(_units(four, tokens=2), 200, 40, 100.0, 20)] == [(0, 8)]


def test_consecutive_headings_are_one_body_and_a_heading_after_text_starts_one() -> None:
    """Three headings in a row, then a short block, then a heading: the headings and the short block
    after them are one body (short blocks are grouped), the last heading starts a body."""
    kinds = [STARTS_HEADING, STARTS_HEADING, STARTS_HEADING, STARTS_BLOCK, STARTS_HEADING]
    plan = plan_chunks(_units(kinds, tokens=3), 200, 40, mean_body=100.0, min_block=20)
    assert [(body, end) for _, body, end in plan] == [(0, 4), (4, 5)]


def test_a_short_copied_paragraph_of_six_sentences_gets_the_same_chunk_between_short_blocks() -> None:
    """The benchmark's one copied paragraph that the rule of d3968e5 missed: 61 tokens (under a third
    of the body budget) but six sentences, put between different short blocks of two documents. It is
    a paragraph of its own in both, so one chunk of each is exactly the paragraph."""
    para = (
        "• Boyer RS, Moore JS. A fast string searching algorithm. _CACM_.\n"
        "     1977;20(10):762–72. <https://doi.org/10.1145/359842.359859>. This\n"
        "     introduces the Boyer–Moore algorithm."
    )
    chunker = Chunker(TOKENIZER)
    assert chunker.count_tokens(para) < (256 - 64) // 3 and len(chunker.sentence_spans(para)) >= 5
    hosts = (
        ("Files: *\nCopyright: 2001 A. Author\nLicense: MIT\n\n", "\n\nFiles: debian/*\nLicense: GPL-2+\n"),
        ("Upstream-Name: grep\nSource: https://example.org/grep\n\n", "\n\n * Short item.\n\n * Another item.\n"),
    )
    for before, after in hosts:
        text = before + para + after
        assert para in [text[s:e] for s, e in chunker.chunk_spans(text)]
        short = Chunker(TOKENIZER)  # and the blocks around it are still grouped: not a chunk each
        assert len(short.chunk_spans(before + after)) == 1


def _comment_form(text: str) -> str:
    """``text`` as a C comment, as licence headers hold it: each paragraph refilled to 72 columns, every
    line behind ``" * "``, a bare ``" *"`` line between paragraphs."""
    import re
    import textwrap

    paragraphs = [textwrap.wrap(re.sub(r"\s+", " ", p).strip(), 72) for p in text.split("\n\n") if p.strip()]
    return "/*\n" + "\n *\n".join("\n".join(" * " + line for line in p) for p in paragraphs) + "\n */\n"


@pytest.mark.parametrize("licence", ["BSD.txt", "Apache-2.0.txt"])
def test_a_licence_in_a_c_comment_is_cut_alike_whatever_precedes_it(licence: str) -> None:
    """Its " * " lines are comment prose, not list items: read as items, each line was a short block
    grouped with what came before, so a prefix moved the cuts (a Debian copyright stanza in this form
    lost its warranty chunk behind a one-paragraph prefix). Every chunk but the first of the comment alone
    is still a chunk behind each prefix."""
    comment = _comment_form((CORPUS / "licenses" / licence).read_text(encoding="utf-8"))
    chunker = Chunker(TOKENIZER)
    alone = [comment[s:e] for s, e in chunker.chunk_spans(comment)]
    assert len(alone) >= 3
    prefixes = (
        "Files: openbsd-reallocarray.c\nCopyright: (c) 2008 Otto Moerbeek <otto@drijf.net>\nLicense: ISC\n",
        "This document was retrieved from the archive on the first of May. It is reproduced here unchanged.\n\n",
        "#include <stdio.h>\n/* A helper. */\n\n",
    )
    for prefix in prefixes:
        text = prefix + comment
        got = {text[s:e] for s, e in chunker.chunk_spans(text)}
        assert [c for c in alone[1:] if c not in got] == [], prefix


def test_a_list_of_short_star_items_stays_a_list() -> None:
    """The comment rule joins only wrapped lines (or lines after a bare "*"): short items, and items that
    end a sentence, are blocks of their own as before."""
    from rag_dedup.chunking.blocks import blocks

    text = "* install the package\n* run the tests\n* Read the guide. It is long enough to wrap, surely.\n* done"
    assert [text[s:e] for s, e, _ in blocks(text)] == text.split("\n")
    comment = " * Permission to use, copy, modify, and distribute this software for any\n * purpose.\n *\n * Next."
    assert [comment[s:e] for s, e, _ in blocks(comment)] == [comment[1:comment.index(" *\n") + 2], "* Next."]
