"""Units: the sentences of a text with their token counts, as :func:`~rag_dedup.chunking.cuts.plan_chunks` needs them.

Each sentence is tokenized once, on its own; what the whitespace before it adds inside a chunk is
counted on that whitespace and the sentence's first word (:class:`~rag_dedup.chunking.tokens.TokenCounts`).
A sentence longer than the budget is split at its line breaks, and a line still too long at word
boundaries, into word groups whose ends are chosen by the words' hashes.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator

import regex

from rag_dedup.chunking.blocks import CONTINUES, LEADING_SPACE, NEWLINE
from rag_dedup.chunking.tokens import FIRST_WORD, TokenCounts

__all__ = ["Units", "build_units"]

# A sentence longer than the chunk size is split into words (whitespace kept in front of each, as
# tiktoken does; runs of 32+ non-space characters are split every 32 graphemes, Unicode's extended
# grapheme clusters, UAX #29, as the regex module's \X matches them), and the words into groups that
# end after a word whose hash is 0 mod 8, or after 16 words: about 8 words per group.
_WORD = re.compile(r"\s*\S{1,32}")
_WORD_GRAPHEMES = regex.compile(r"\s*(?:(?!\s)\X){1,32}")
_GRAPHEME = regex.compile(r"\X")
_GROUP_MOD = 8
_GROUP_MAX = 16

ScoreOf = Callable[[str], float]


class Units:
    """The units of one text as parallel lists: what :func:`plan_chunks` needs, and their spans.

    ``tokens[i]`` counts the unit's own text, ``gaps[i]`` what the whitespace before it adds (see
    :meth:`TokenCounts.gap`): inside a chunk a unit costs both, at the start of a chunk only
    the first (the chunk starts after the whitespace).
    ``kinds[i]`` is :data:`CONTINUES`, :data:`STARTS_BLOCK` or :data:`STARTS_HEADING`;
    ``block_tokens[i]`` is the size of the block that unit ``i`` starts, counted as a chunk of it
    would be (0 if it starts none).
    ``scores[i]`` is the unit's cut score (:func:`~rag_dedup.chunking.cuts.unit_hash` of its text), or None until
    :meth:`score` computes it with ``score_of(text[starts[i]:ends[i]])``: a unit before a hard cut
    or past the size limit needs none, so :func:`build_units` leaves them to be computed.
    """

    __slots__ = ("_score_of", "_text", "block_tokens", "ends", "gaps", "kinds", "scores", "starts", "tokens")

    def __init__(self, text: str = "", score_of: Callable[[str], float] | None = None) -> None:
        self._text = text
        self._score_of = score_of
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.tokens: list[int] = []
        self.gaps: list[int] = []
        self.scores: list[float | None] = []
        self.kinds: list[int] = []
        self.block_tokens: list[int] = []

    def score(self, i: int) -> float:
        """The cut score of unit ``i``: ``scores[i]``, computed and stored on first use if None.

        Raises:
            ValueError: ``scores[i]`` is None and the units were built without ``score_of``.
        """
        score = self.scores[i]
        if score is None:
            if self._score_of is None:
                raise ValueError(f"unit {i} has no score and Units() was given no score_of to compute it")
            score = self.scores[i] = self._score_of(self._text[self.starts[i] : self.ends[i]])
        return score

    def append(self, start: int, end: int, tokens: int, gap: int, score: float | None, kind: int) -> None:
        self.starts.append(start)
        self.ends.append(end)
        self.tokens.append(tokens)
        self.gaps.append(gap)
        self.scores.append(score)
        self.kinds.append(kind)
        self.block_tokens.append(0)

    def total_blocks(self) -> None:
        """Fill ``block_tokens`` from the other lists."""
        block = 0
        for i, kind in enumerate(self.kinds):
            if kind != CONTINUES or i == 0:
                block = i
                self.block_tokens[i] = self.tokens[i]
            else:
                self.block_tokens[block] += self.tokens[i] + self.gaps[i]


def build_units(
    text: str, sentences: Iterator[tuple[int, int, int]], budget: int, counts: TokenCounts, score_of: ScoreOf
) -> Units:
    """The sentences of ``text`` as units with token counts (scores computed when first asked for);
    a sentence of more than ``budget`` tokens becomes several units (its lines, or word groups)."""
    units = Units(text, score_of)
    starts, ends, tokens, gaps, scores, kinds, blocks = (
        units.starts,
        units.ends,
        units.tokens,
        units.gaps,
        units.scores,
        units.kinds,
        units.block_tokens,
    )
    memo, sentence_tokens, gap = counts.sentences, counts.tokens, counts.gap
    cached_gap, first_word = counts.cached_gap, FIRST_WORD.match
    prev_end = 0
    for s, e, kind in sentences:
        sentence = text[s:e]
        count = memo.get(sentence)
        if count is None:
            count = sentence_tokens(sentence)
        if count <= budget:
            starts.append(s)
            ends.append(e)
            tokens.append(count)
            if prev_end == s:
                gaps.append(0)
            else:
                delta = cached_gap(text[prev_end : first_word(text, s).end()])
                gaps.append(gap(text, prev_end, s) if delta is None else delta)
            scores.append(None)
            kinds.append(kind)
            blocks.append(0)
        else:
            _add_long_sentence(units, text, prev_end, e, budget, kind, counts, score_of)
        prev_end = e
    units.total_blocks()
    return units


def _add_long_sentence(
    units: Units, text: str, start: int, end: int, budget: int, kind: int, counts: TokenCounts, score_of: ScoreOf
) -> None:
    """Units for ``text[start:end]``, a sentence (after whitespace from ``start``) of more than
    ``budget`` tokens: its lines, and a line still too long in word groups. (Such "sentences" are
    mostly blocks without sentence punctuation: lists, changelogs, code.)"""
    line_start = start
    for m in NEWLINE.finditer(text, start, end):
        kind = _add_line(units, text, line_start, m.start(), budget, kind, counts, score_of)
        line_start = m.start()
    _add_line(units, text, line_start, end, budget, kind, counts, score_of)


def _add_line(
    units: Units, text: str, start: int, end: int, budget: int, kind: int, counts: TokenCounts, score_of: ScoreOf
) -> int:
    first = LEADING_SPACE.match(text, start, end).end()
    if first >= end:
        return kind
    piece = text[first:end]
    tokens, score = counts.tokens(piece), score_of(piece)
    if tokens <= budget:
        units.append(first, end, tokens, counts.gap(text, start, first), score, kind)
    else:
        _add_word_groups(units, text, start, end, budget, kind, counts, score_of)
    return CONTINUES


def _add_word_groups(
    units: Units, text: str, start: int, end: int, budget: int, kind: int, counts: TokenCounts, score_of: ScoreOf
) -> None:
    """Split ``text[start:end]`` into units of at most ``budget`` tokens at word boundaries; a group
    of words ends after a word whose hash says so, or after ``_GROUP_MAX`` words."""
    group_start = start
    n_words = 0
    for word_start, word_end in _words(text, start, end):
        n_words += 1
        if word_end == end or n_words >= _GROUP_MAX or _word_ends_group(text[word_start:word_end]):
            for s, e, tokens, gap, score in _fit(text, group_start, word_end, budget, counts, score_of):
                units.append(s, e, tokens, gap, score, kind)
                kind = CONTINUES
            group_start = word_end
            n_words = 0


def _fit(
    text: str, start: int, end: int, budget: int, counts: TokenCounts, score_of: ScoreOf
) -> Iterator[tuple[int, int, int, int, float]]:
    """``text[start:end]`` as pieces of at most ``budget`` tokens: whole if it fits, else word by
    word, else halved (a word longer than the budget). Yields trimmed ``(start, end, tokens, gap,
    score)``; a single character over the budget is yielded as it is."""
    first = LEADING_SPACE.match(text, start, end).end()
    if first >= end:
        return
    piece = text[first:end]
    tokens, score = counts.tokens(piece), score_of(piece)
    if tokens <= budget or end - first <= 1:
        yield first, end, tokens, counts.gap(text, start, first), score
        return
    words = list(_words(text, start, end))
    if len(words) > 1:
        for w_start, w_end in words:
            yield from _fit(text, w_start, w_end, budget, counts, score_of)
        return
    middle = _grapheme_end(text, first, first + (end - first) // 2, end)
    if middle >= end:  # one grapheme (a character and its marks) over the budget: as it is
        yield first, end, tokens, counts.gap(text, start, first), score
        return
    yield from _fit(text, start, middle, budget, counts, score_of)
    yield from _fit(text, middle, end, budget, counts, score_of)


def _words(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The spans of the words of ``text[start:end]`` (:data:`_WORD`: whitespace, then up to 32
    non-space characters); a longer run is cut after 32 graphemes (:data:`_WORD_GRAPHEMES`), not
    inside one: a Thai vowel or tone mark, an accent, an emoji ZWJ sequence stays with its character."""
    pos = start
    match = _WORD.match
    while pos < end:
        m = match(text, pos, end)
        if m is None:  # nothing but whitespace left
            return
        word_end = m.end()
        if word_end < end and not text[word_end].isspace():  # a run cut at 32 characters
            word_end = _WORD_GRAPHEMES.match(text, pos, end).end()
        yield m.start(), word_end
        pos = word_end


def _grapheme_end(text: str, start: int, i: int, end: int) -> int:
    """The first grapheme boundary at or after ``i`` in ``text[start:end]`` (``start`` is one)."""
    for g in _GRAPHEME.finditer(text, start, end):
        if g.end() >= i:
            return g.end()
    return end


def _word_ends_group(word: str) -> bool:
    """Content-defined end of a word group: the CRC-32 of the word (without the whitespace before
    it) is 0 mod 8. CRC-32 is a fixed function, the same everywhere, and cheap per word."""
    return zlib.crc32(word.lstrip().encode("utf-8", "surrogatepass")) % _GROUP_MOD == 0
