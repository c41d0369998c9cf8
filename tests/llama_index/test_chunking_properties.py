"""Property tests (hypothesis) for SentenceChunker on generated documents built from real words.

Documents mix the test corpus's words with other scripts, emoji, abbreviations, CRLF, headings and
list items; the properties are the chunker's guarantees: exact offsets, coverage, the token and
overlap budgets, punkt equivalence of the fast sentence splitter, the planner's invariants, and
identical chunks for a paragraph copied into two documents.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from llama_index.core import Document
from llama_index.core.utils import get_tokenizer
from nltk.tokenize.punkt import PunktSentenceTokenizer

from rag_dedup.chunking import blocks as _blocks
from rag_dedup.chunking import sentences as _sentences
from rag_dedup.chunking import CONTINUES, STARTS_BLOCK, STARTS_HEADING, Units, plan_chunks
from rag_dedup.llama_index.chunking import SentenceChunker

CORPUS = Path(__file__).parents[1] / "data" / "corpus"
TOKENIZER = get_tokenizer()
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_CORPUS_WORDS = sorted({w.strip('.,;:!?"()[]') for w in (CORPUS / "licenses" / "GPL-3.txt").read_text().split()} - {""})
WORDS = st.sampled_from(
    _CORPUS_WORDS[:400]
    + ["Dr.", "e.g.", "Inc.", "U.S.", "etc.", "No.", "J.", "(see", "notes)", '"quoted"', "3.14", "1995", "v2.0"]
    + ["naïve", "Straße", "ΚΑΛΗΜΕΡΑ", "Русский", "漢字", "שלום", "مرحبا", "😀", "👩\u200d👩\u200d👧", "e\u0301"]
)
ENDS = st.sampled_from([".", ".", ".", "?", "!", "", "。", '."', ").", "..."])
GAPS = st.sampled_from([" ", " ", " ", "  ", "\n", "\r\n", "\t"])
BREAKS = st.sampled_from(["\n\n", "\n\n", "\r\n\r\n", "\n \n", "\n"])
PREFIXES = st.sampled_from(["", "", "", "# ", "- ", "1. ", "(a) "])


@st.composite
def sentences(draw: st.DrawFn, min_words: int = 1, max_words: int = 25) -> str:
    words = draw(st.lists(WORDS, min_size=min_words, max_size=max_words))
    text = " ".join(words)
    return (text[:1].upper() + text[1:]) + draw(ENDS)


@st.composite
def paragraphs(draw: st.DrawFn, min_sentences: int = 1, max_sentences: int = 8) -> str:
    parts = draw(st.lists(sentences(), min_size=min_sentences, max_size=max_sentences))
    out = parts[0]
    for part in parts[1:]:
        out += draw(GAPS) + part
    return out


@st.composite
def documents(draw: st.DrawFn) -> str:
    paras = draw(st.lists(paragraphs(), min_size=1, max_size=6))
    out = ""
    for para in paras:
        out += draw(PREFIXES) + para + draw(BREAKS)
    return draw(st.sampled_from(["", "  ", "\n"])) + out


def _covered(text: str, spans: list[tuple[int, int]]) -> bool:
    covered = bytearray(len(text))
    for s, e in spans:
        covered[s:e] = b"\x01" * (e - s)
    return all(covered[i] or text[i].isspace() for i in range(len(text)))


@SETTINGS
@given(text=documents(), chunk_size=st.integers(16, 96), overlap_share=st.floats(0, 0.5))
def test_offsets_coverage_and_whole_sentences(text: str, chunk_size: int, overlap_share: float) -> None:
    chunker = SentenceChunker(chunk_size=chunk_size, chunk_overlap=int(chunk_size * overlap_share))
    nodes = chunker.get_nodes_from_documents([Document(text=text, id_="generated")])
    spans = [(n.start_char_idx, n.end_char_idx) for n in nodes]
    for node, (s, e) in zip(nodes, spans):
        assert text[s:e] == node.text and node.text == node.text.strip() and node.text
    assert [s for s, _ in spans] == sorted({s for s, _ in spans})
    assert _covered(text, spans)
    for s, e in chunker.sentence_spans(text):
        if len(TOKENIZER(text[s:e])) <= chunk_size:
            assert any(cs <= s and e <= ce for cs, ce in spans), text[s:e]


@SETTINGS
@given(text=documents(), chunk_size=st.integers(8, 60), overlap_share=st.floats(0, 0.6))
def test_token_and_overlap_budgets_with_an_additive_tokenizer(text: str, chunk_size: int, overlap_share: float) -> None:
    """With a tokenizer whose counts add up over concatenation (whitespace words), the budgets are exact."""
    overlap = min(chunk_size - 1, int(chunk_size * overlap_share))
    chunker = SentenceChunker(chunk_size=chunk_size, chunk_overlap=overlap, tokenizer=str.split)
    spans = chunker.chunk_spans(text)
    for s, e in spans:
        assert len(text[s:e].split()) <= chunk_size
    for (_, e1), (s2, _) in pairwise(spans):
        if s2 < e1:
            assert len(text[s2:e1].split()) <= overlap
    assert _covered(text, spans)


@SETTINGS
@given(text=documents())
def test_offset_punkt_equals_nltk_punkt(text: str) -> None:
    reference = PunktSentenceTokenizer()
    reference._params = _sentences.punkt_params("english")
    ours = _sentences.Punkt(reference._params)
    assert ours.spans(text, 0, len(text)) == list(reference.span_tokenize(text))


_DECISION_WORDS = st.sampled_from(
    ["", "the", "The", "Dr", "dr", "Inc", "etc", "A", "a", "J", "x", "12", "1995", "No", "vs", "Fig", "naïve", "Über", "x86", "U.S"]
)
_DECISION_NEXT = st.sampled_from(
    ["The", "the", "This", "and", "He", "In", "(Low", "[bug", '"You', "`code", "produce,", "License:", "Work)", "you'", "1995", ".", ",", ";", "!", "?", "(", ")", '"', "*", "über", "Über", "I", "a"]
)


@settings(max_examples=300, deadline=None)
@given(
    word=_DECISION_WORDS,
    closers=st.sampled_from(["", ")", '"', "]", ")\"", "'"]),
    mark=st.sampled_from([".", "?", "!"]),
    gap=st.sampled_from([" ", "\n", "  ", "\n\n"]),
    following=_DECISION_NEXT,
)
def test_fast_decisions_equal_punkts(word: str, closers: str, mark: str, gap: str, following: str) -> None:
    punkt = _sentences.Punkt(_sentences.punkt_params("english"))
    text = f"{word}{closers}{mark}{gap}{following}"
    position = len(word) + len(closers)
    match = next((m for m in punkt._period.finditer(text) if m.start() == position), None)
    assume(match is not None)
    fast = punkt._simple_breaks(word + closers, mark, match.group("next_tok"), match.group("after_tok"))
    if fast is not None:
        context = word + closers + match.group() + match.group("after_tok")
        assert fast == punkt._tokenizer.text_contains_sentbreak(context)


@st.composite
def unit_lists(draw: st.DrawFn) -> Units:
    units = Units()
    n = draw(st.integers(0, 80))
    for i in range(n):
        kind = draw(st.sampled_from([CONTINUES] * 6 + [STARTS_BLOCK] * 2 + [STARTS_HEADING])) if i else STARTS_BLOCK
        units.append(i, i + 1, draw(st.integers(1, 70)), draw(st.integers(0, 3)), draw(st.floats(0, 1, exclude_max=True)), kind)
    units.total_blocks()
    return units


def _cost(units: Units, first: int, end: int) -> int:
    """Tokens of units [first, end) as one chunk: the first without the whitespace before it."""
    return units.tokens[first] + sum(units.tokens[k] + units.gaps[k] for k in range(first + 1, end))


@settings(max_examples=200, deadline=None)
@given(units=unit_lists(), chunk_size=st.integers(8, 120), overlap_share=st.floats(0, 0.6), mean=st.floats(1, 200))
def test_plan_invariants(units: Units, chunk_size: int, overlap_share: float, mean: float) -> None:
    overlap = min(chunk_size - 1, int(chunk_size * overlap_share))
    body_max = chunk_size - overlap
    plan = plan_chunks(units, chunk_size, overlap, mean, min_block=max(1, body_max // 3))
    n = len(units.tokens)
    assert [b for _, b, _ in plan] == [0, *[e for _, _, e in plan]][: len(plan)]  # bodies tile the units
    assert (plan[-1][2] if plan else 0) == n
    firsts = [f for f, _, _ in plan]
    assert firsts == sorted(set(firsts))  # no two chunks start at the same unit
    prev_first = None
    for first, body, end in plan:
        assert _cost(units, first, end) <= chunk_size or end - body == 1  # only a lone oversized unit may exceed
        if first < body:
            assert _cost(units, first, body) + units.gaps[body] <= overlap
        if first < body:  # the overlap repeats the end of the previous chunk (never all of it), in the same block
            assert prev_first is not None and prev_first < first
            assert units.kinds[body] == CONTINUES
            assert all(units.kinds[k] == CONTINUES for k in range(first + 1, body + 1))
        for k in range(body + 1, end):  # headings start bodies, unless right after a heading
            if units.kinds[k] == STARTS_HEADING:
                block = max(j for j in range(k) if units.kinds[j] != CONTINUES or j == 0)
                assert units.kinds[block] == STARTS_HEADING
        prev_first = first


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    passage=st.lists(sentences(min_words=8), min_size=6, max_size=15),
    hosts=st.tuples(documents(), documents()),
    where=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
def test_a_copied_paragraph_is_chunked_identically_in_both_hosts(
    passage: list[str], hosts: tuple[str, str], where: tuple[float, float]
) -> None:
    chunker = SentenceChunker()
    para = " ".join(passage)
    assume(len(TOKENIZER(para)) >= 64)  # a third of the body budget: big enough to be chunked alone
    per_host = []
    for host, fraction in zip(hosts, where):
        blocks = [s for s, _, _ in _blocks.blocks(host)] + [len(host)]
        offset = blocks[int(fraction * (len(blocks) - 1))]
        prefix = host[:offset].rstrip() + "\n\n" if host[:offset].strip() else ""
        text = prefix + para + "\n\n" + host[offset:]
        start, end = len(prefix), len(prefix) + len(para)
        per_host.append([text[s:e] for s, e in chunker.chunk_spans(text) if s < end and e > start])
    assert per_host[0] == per_host[1]
    assert all(chunk in para for chunk in per_host[0])


# Runs without spaces of characters that take marks: Thai consonants with vowel and tone marks (SARA AM
# included, a spacing mark), Latin letters with combining accents, emoji with skin tones and ZWJ joins.
_GRAPHEME_PARTS = st.sampled_from([
    "ก", "ข", "ป", "ว", "ภ", "ษ", "ท", "ไ", "เ", "า", "\u0e34", "\u0e35", "\u0e48", "\u0e49", "\u0e47", "\u0e33",
    "e", "a", "n", "\u0301", "\u0308", "\u0323",
    "\U0001f468", "\U0001f469", "\U0001f467", "\u200d", "\U0001f3fd", "\ufe0f", "\u2764",
])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=st.lists(st.lists(_GRAPHEME_PARTS, min_size=40, max_size=400).map("".join), min_size=1, max_size=4),
       chunk_size=st.integers(min_value=16, max_value=128))
def test_no_chunk_starts_or_ends_inside_a_grapheme(runs: list[str], chunk_size: int) -> None:
    """Text without spaces was cut every 32 code points, so chunks began with an orphaned Thai vowel or
    tone mark, an accent, or inside an emoji ZWJ sequence (31 of 126 chunks of a Thai text; every chunk
    of a run of ZWJ families). Every cut is a grapheme boundary (the regex module's \\X, UAX #29),
    unless a single grapheme is larger than the chunk size."""
    import regex

    from rag_dedup.chunking import Chunker

    text = " ".join("ก" + run for run in runs)  # a run begins with a letter (a mark after a space is its own case)
    boundaries = {0} | {m.end() for m in regex.finditer(r"\X", text)}
    chunker = Chunker(get_tokenizer(), chunk_size=chunk_size, chunk_overlap=chunk_size // 4)
    for start, end in chunker.chunk_spans(text):
        assert start in boundaries and end in boundaries, (start, end, text[max(0, start - 2) : start + 2])
