"""``SentenceChunker``: sentence-aware chunking whose boundaries depend on content, not position.

Passage-level dedup needs a copied passage to be cut the same way wherever it appears. A splitter
that fills chunks up to a size cuts a passage wherever the running size runs out, which depends on
everything before the passage, so two copies are cut at different sentences and their chunks share
few shingles. Here every boundary is decided by the text next to it (content-defined chunking, as
rsync and backup tools do over bytes, here over sentences and paragraphs), so a shared passage is
cut the same way in every document that contains it.

The steps, per document:

1. **Blocks.** Blank lines, Markdown headings (``# ...``), rules (``----``) and list items
   (``-``, ``*``, ``1.``, ``a)``, ...) separate blocks; no sentence spans two blocks.
2. **Sentences.** nltk's punkt (the ``punkt_tab`` model llama-index-core ships; never downloaded)
   splits each block. Every sentence is a ``(start, end)`` span into the original text, so offsets
   are exact for CRLF, emoji, right-to-left and mixed scripts alike.
3. **Units.** Each sentence is tokenized once, on its own; what the whitespace before it adds
   inside a chunk is counted on that whitespace and the sentence's first word (memoised: such
   pairs recur). A chunk costs its first sentence's tokens plus every later sentence's tokens and
   gap, which is its own token count (up to merges at sentence ends, which only lower it) and does
   not depend on what precedes the chunk. A sentence longer than the chunk size is split at its
   line breaks, and a line still too long at word boundaries, into word groups whose ends are
   chosen by the words' hashes.
4. **Paragraph cuts.** A heading starts a chunk; so does any block of at least ``min_block`` tokens
   and any block after one: a paragraph of that size is never glued to its neighbours, so a copied
   paragraph is chunked alike wherever it lands. Smaller blocks (list items, short lines) share
   chunks.
5. **Sentence cuts.** With ``u = blake2b(words of canonical(sentence), one space apart) / 2**64``
   (the same for every copy however it is wrapped or spaced), uniform on [0, 1), a body
   (a chunk without its overlap) of at least ``m / 2`` tokens ends after a sentence of ``t`` tokens
   when ``u < 1 - exp(-t / m)``: a cut every ``m`` tokens or so, each decided by one sentence. A
   body never exceeds ``chunk_size - chunk_overlap`` tokens; when no sentence in range says "cut",
   the cut goes after the sentence with the smallest ``u`` in the second half of the range, so two
   copies that entered the range at different points still tend to agree.
6. **Overlap.** A chunk that continues a paragraph first repeats the whole trailing sentences of the
   previous body, in that paragraph, that fit in ``chunk_overlap`` tokens: a function of those
   sentences alone. A chunk that starts a block repeats nothing.

Example:
    >>> from llama_index.core import Document
    >>> chunker = SentenceChunker(chunk_size=64, chunk_overlap=16)
    >>> doc = Document(text="First sentence here. Second one follows.\\n\\nA new paragraph.", id_="d")
    >>> nodes = chunker.get_nodes_from_documents([doc])
    >>> all(doc.text[n.start_char_idx:n.end_char_idx] == n.text for n in nodes)
    True
    >>> [n.node_id for n in nodes] == [n.node_id for n in chunker.get_nodes_from_documents([doc])]
    True
"""

from __future__ import annotations

import copy
import functools
import hashlib
import math
import os
import re
import uuid
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from typing import Any

import nltk
import regex as _regex
from llama_index.core.bridge.pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
)
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.node_parser.interface import MetadataAwareTextSplitter
from llama_index.core.node_parser.node_utils import (
    build_nodes_from_splits,
    default_id_func,
)
from llama_index.core.schema import (
    BaseNode,
    Document,
    ImageDocument,
    MetadataMode,
    NodeRelationship,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.utils import get_tokenizer, get_tqdm_iterable
from nltk.tokenize.punkt import (
    _ORTHO_BEG_LC,
    _ORTHO_LC,
    _ORTHO_MID_UC,
    _ORTHO_UC,
    PunktParameters,
    PunktSentenceTokenizer,
    load_punkt_params,
)

from rag_dedup.normalize import token_form

__all__ = ["SentenceChunker", "Span", "Units", "plan_chunks"]

#: A ``(start, end)`` character span into a document's text.
Span = tuple[int, int]

DEFAULT_CHUNK_SIZE = 256
DEFAULT_CHUNK_OVERLAP = 64

# The derived sizes. With the body budget B = chunk_size - chunk_overlap (192 tokens by default):
# the mean distance m between sentence cuts is B/2 unless mean_body_size is given, the smallest body
# a sentence cut may end is m/2, and a paragraph of B/3 tokens or more gets chunks of its own.
# Measured on real text (benchmarks/bench_chunking.py): a copied paragraph of 6-15 sentences is then
# chunked alike in every host, and chunks are about half the size of SentenceSplitter's; a smaller
# mean finds more passages spliced into running text, at the price of more chunks.
_MEAN_BODY_FRACTION = 1 / 2
_MIN_BODY_OF_MEAN = 1 / 2
_MIN_BLOCK_FRACTION = 1 / 3

# Node ids are uuid5(namespace, "<document id>\x1f<start>\x1f<end>"): the same document chunked twice
# gets the same ids, and a chunk's id names exactly which text it is.
_ID_NAMESPACE = uuid.UUID("0c5f3e8e-6a0b-5d2e-9c53-2f1f7d1b9a41")

# blake2b with an 8-byte digest read as an unsigned integer, divided by 2**64: a uniform number in
# [0, 1) that is the same on every machine and every run (Python's hash() is salted per process).
_BLAKE2B = hashlib.blake2b(digest_size=8, person=b"rag-dedup-cdc1")
_TWO_64 = float(2**64)

# Memos (token counts and scores per sentence, punkt decisions per context) are cleared when they
# hold this many entries, and keys longer than _MEMO_MAX_KEY characters are not kept, so memory
# stays bounded on any corpus.
_MEMO_LIMIT = 1 << 16
_MEMO_MAX_KEY = 2048

# Line structure. Lines end at \n, \r\n, \r and the Unicode line and paragraph separators.
_NEWLINE = re.compile(r"\r\n|[\n\r\u2028\u2029]")
_LEADING_SPACE = re.compile(r"\s*")
_FIRST_WORD = re.compile(r"\S*")
_HEADING = re.compile(r"[ \t]{0,3}#{1,6}(?:[ \t]|$)")  # Markdown: 4+ spaces of indent is code
_RULE = re.compile(r"[ \t]*([-=*_~#+.])[ \t]*(?:\1[ \t]*){2,}$")
_LIST_ITEM = re.compile(
    r"[ \t]*(?:[-*+\u2022\u2023\u25e6\u2043\u2219]|\d{1,9}[.)]|\(\d{1,9}\)|\(?(?:[a-zA-Z]|[ivxlcdm]{1,6})\))"
    r"[ \t]+\S"
)
# The line break before the next line that may not simply continue the current block: a line that
# is blank, or starts with anything but an ASCII letter, or with a letter and a ")" within its first
# eight characters (maybe "a) item"). Lines skipped over by one search are plain text: not blank,
# not a heading, rule or list item, whatever the rules above say (each needs another first
# character); the line found is examined by those rules.
_NEXT_NOT_PLAIN = re.compile(
    r"(?:\r\n|\r(?!\n)|[\n\u2028\u2029])"  # a CRLF is one break: never match its CR alone
    r"(?=[^\S\n\r\u2028\u2029]*(?:[^A-Za-z\s]|[A-Za-z][^\n\r\u2028\u2029]{0,6}\)|[\n\r\u2028\u2029]|\Z))"
)
# Characters a rule line, and a list item that is not numbered or lettered, can start with.
_RULE_CHARS = frozenset("-=*_~#+.")
_LIST_CHARS = frozenset("-*+(\u2022\u2023\u25e6\u2043\u2219")
# Sentence-final marks: punkt's, and CJK full stops (punkt does not know them; blocks are split
# after them before punkt runs).
_PUNKT_END = re.compile(r"[.?!]")
_CJK_END = re.compile(r"(?<=[\u3002\uff01\uff1f\uff61])\s*(?=\S)")
_CJK_STOP = re.compile(r"[\u3002\uff01\uff1f\uff61]")

# A sentence longer than the chunk size is split into words (whitespace kept in front of each, as
# tiktoken does; runs of 32+ non-space characters are split every 32), and the words into groups
# that end after a word whose hash is 0 mod 8, or after 16 words: about 8 words per group.
_WORD = re.compile(r"\s*\S{1,32}")
_GROUP_MOD = 8
_GROUP_MAX = 16

# punkt details re-traced by _Punkt (see there): its PUNCTUATION, marks that split off the end of
# the next word as tokens that cannot break, closing marks split off before a full stop ("word)."),
# and string.whitespace, searched from the right.
_PUNKT_PUNCTUATION = frozenset(";:,.!?")
_TRAILING_MARKS = frozenset(",;:)]}\"'")
_CLOSERS = ")]}\""
_OPENERS = frozenset("([{\"`")
_LAST_ASCII_SPACE = _regex.compile(r"[ \t\n\r\x0b\x0c]", _regex.REVERSE)

_TEXT_TEMPLATE = TextNode.model_fields["text_template"].default

# Unit kinds: a unit continues its block, starts a block (paragraph, list item, rule), or starts a
# Markdown heading.
CONTINUES, STARTS_BLOCK, STARTS_HEADING = 0, 1, 2


# ---------------------------------------------------------------------- sentences: punkt


def _bundled_nltk_dir() -> str:
    """The nltk data directory that llama-index-core ships (``punkt_tab`` lives there)."""
    import llama_index.core

    return os.path.join(os.path.dirname(os.path.abspath(llama_index.core.__file__)), "_static", "nltk_cache")


def _ensure_bundled_nltk_path() -> None:
    """Append llama-index-core's bundled nltk data directory to ``nltk.data.path``, once.

    Importing ``llama_index.core`` does not do this (its ``GlobalsHelper`` does, lazily, and may try
    a download); appending, not prepending, keeps ``NLTK_DATA`` and the user's directories first.
    """
    bundled = _bundled_nltk_dir()
    if os.path.isdir(bundled) and bundled not in nltk.data.path:
        nltk.data.path.append(bundled)


@lru_cache(maxsize=8)
def _punkt_params(language: str) -> PunktParameters:
    """Load the punkt_tab model for ``language`` from local nltk data; never downloads.

    Raises:
        LookupError: the model is not installed; the message names the resource and where it looked.
    """
    _ensure_bundled_nltk_path()
    resource = f"tokenizers/punkt_tab/{language}/"
    try:
        lang_dir = nltk.data.find(resource)
    except LookupError:
        raise LookupError(
            f"nltk resource {resource!r} (the punkt sentence model for language={language!r}) was not "
            f"found in {list(nltk.data.path)}. SentenceChunker never downloads it: llama-index-core "
            f"ships it under {_bundled_nltk_dir()!r}, so reinstall llama-index-core, choose a language "
            f"that is installed, or install the model with `python -m nltk.downloader punkt_tab`."
        ) from None
    return load_punkt_params(lang_dir)


def _unguarded(pattern: Any) -> Any:
    """The same compiled pattern without nltk's wall-clock guard.

    nltk >= 3.10 wraps its regexes in ``nltk.redos.TimedPattern``, which bounds a whole ``finditer``
    scan by 5 s, so a paragraph of a few megabytes would be refused. punkt's own patterns are
    linear; they are recompiled with the engine and flags nltk uses (the ``regex`` module there,
    ``re`` before 3.10), so matching is unchanged.
    """
    if isinstance(pattern, re.Pattern):
        return pattern
    return _regex.compile(pattern.pattern, pattern.flags)


class _Punkt:
    """nltk's punkt sentence boundaries over spans of a larger text.

    :meth:`spans` returns exactly what ``PunktSentenceTokenizer.span_tokenize(text[start:end])``
    returns, shifted by ``start`` (the test suite holds the two equal on real and generated text),
    but works on offsets rather than slices, decides the common contexts without building punkt
    tokens (:meth:`_simple_breaks`), and memoises the rest: punkt's per-candidate decision is a pure
    function of a short context ("word. Next") and is most of its cost.
    """

    def __init__(self, params: PunktParameters) -> None:
        self._tokenizer = PunktSentenceTokenizer()
        self._tokenizer._params = params
        self._params = params
        lang_vars = self._tokenizer._lang_vars
        self._period = _unguarded(lang_vars.period_context_re())
        self._realign = _unguarded(lang_vars.re_boundary_realignment)
        self._memo: dict[str, bool] = {}  # punkt's own decisions, by context
        self._decisions: dict[tuple[str, str, str], bool] = {}  # all decisions, by (word, mark, after)

    def __getstate__(self) -> dict[str, Any]:
        return {"params": self._params}  # patterns are recompiled and the memo rebuilt

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["params"])  # type: ignore[misc]

    def spans(self, text: str, start: int, end: int) -> list[Span]:
        """punkt's sentence spans of ``text[start:end]`` (with boundary realignment), absolute."""
        # punkt's _match_potential_end_contexts and _slices_from_text: each candidate mark, with the
        # word before it and the token after it; a break where the model says so.
        slices: list[Span] = []
        last_break = start
        prev_match = None
        prev_start = prev_stop = start  # the word before the previous candidate
        last_space = _LAST_ASCII_SPACE.search
        for match in self._period.finditer(text, start, end):
            m_start = match.start()
            # punkt's _get_last_whitespace_index: the last ASCII whitespace in text[prev_stop:m_start],
            # where one at index 0 counts as none (kept, for identical output).
            ws = last_space(text, prev_stop, m_start)
            word_start = ws.start() + 1 if ws is not None and ws.start() > prev_stop else prev_start
            if prev_match is not None and prev_stop <= word_start:
                last_break = self._decide(text, prev_match, prev_start, prev_stop, last_break, slices)
            prev_match, prev_start, prev_stop = match, word_start, m_start
        if prev_match is not None:
            last_break = self._decide(text, prev_match, prev_start, prev_stop, last_break, slices)
        stop = end
        while stop > last_break and text[stop - 1].isspace():
            stop -= 1
        slices.append((last_break, stop))
        # punkt's _realign_boundaries: closing quotes and brackets after a mark stay with it.
        out: list[Span] = []
        realign = 0
        last = len(slices) - 1
        for k, (s1, e1) in enumerate(slices):
            s1 += realign
            if k < last:
                s2, e2 = slices[k + 1]
                # The pattern starts with closing punctuation; a sentence starting with a letter or
                # digit (nearly all) cannot match it.
                m = None if s2 < e2 and text[s2].isalnum() else self._realign.match(text, s2, e2)
                if m:
                    out.append((s1, s2 + len(m.group(0).rstrip())))
                    realign = m.end() - s2
                    continue
                realign = 0
            if s1 < e1:
                out.append((s1, e1))
        return out

    def _decide(self, text: str, match: Any, word_start: int, word_stop: int, last_break: int, slices: list[Span]) -> int:
        word = text[word_start:word_stop]
        mark = match.group()
        after = match.group("after_tok")  # the next token is the non-space end of it, if any
        key = (word, mark, after)
        brk = self._decisions.get(key)
        if brk is None:  # half the candidates repeat a context already decided
            brk = self._simple_breaks(word, mark, match.group("next_tok"), after)
            if brk is None:
                brk = self._breaks(word + mark + after)
            if len(word) + len(mark) + len(after) <= _MEMO_MAX_KEY:
                if len(self._decisions) >= _MEMO_LIMIT:
                    self._decisions.clear()
                self._decisions[key] = brk
        if not brk:
            return last_break
        slices.append((last_break, match.end()))
        return match.start("next_tok") if match.group("next_tok") else match.end()

    def _breaks(self, context: str) -> bool:
        """punkt's own decision, memoised."""
        found = self._memo.get(context)
        if found is None:
            found = self._tokenizer.text_contains_sentbreak(context)
            if len(context) <= _MEMO_MAX_KEY:
                if len(self._memo) >= _MEMO_LIMIT:
                    self._memo.clear()
                self._memo[context] = found
        return found

    def _simple_breaks(self, word: str, mark: str, next_tok: str | None, after_tok: str) -> bool | None:
        """punkt's decision for the common contexts, without building punkt tokens; None otherwise.

        Handled: ``word`` empty, alphabetic or ASCII digits, possibly followed by closing ``)]}"``;
        ``mark`` one of ".?!"; after it, an alphabetic word with at most one trailing ``,;:)]}"'``
        and possibly one leading ``([{"`` (then the opener is the next token), or a single mark. Such a context tokenizes to the word (with its full stop, or with the
        closers and the mark as tokens of their own), the next word or mark, and at most one mark
        that cannot break, so punkt's answer is whether the token ending in ``mark`` is a break
        after its two annotation passes, which this re-traces: first pass (sentence-final mark,
        abbreviation), then collocation, abbreviation with the orthographic and sentence-starter
        heuristics, initial or number with the orthographic heuristic.
        """
        if next_tok is None:  # the mark is followed by another mark, which ends the context
            next_tok = after_tok
        if len(next_tok) == 1 and not next_tok.isalnum():
            next_word, next_typ, is_punct = next_tok, next_tok, next_tok in _PUNKT_PUNCTUATION
        elif next_tok[0] in _OPENERS:  # "(Word": the opener is the next token, the word cannot break
            rest = next_tok[1:-1] if next_tok[-1] in _TRAILING_MARKS else next_tok[1:]
            if not rest.isalpha():
                return None
            next_word = next_typ = next_tok[0]
            is_punct = False
        else:
            next_word = next_tok[:-1] if next_tok[-1] in _TRAILING_MARKS else next_tok
            if not next_word.isalpha():
                return None
            next_typ, is_punct = next_word.lower(), False
        core = word.rstrip(_CLOSERS)
        if core and not (core.isalpha() or _is_ascii_number(core)):
            return None
        if mark != ".":  # "?" and "!" are tokens of their own, and always breaks
            return True
        params = self._params
        if len(core) < len(word) or not word:  # "." is a token of its own
            return (".", next_typ) not in params.collocations
        number = _is_ascii_number(word)
        abbreviation = word.lower() in params.abbrev_types
        typ = "##number##" if number else word.lower()
        if (typ, next_typ) in params.collocations:
            return False
        initial = len(word) == 1 and not number
        if abbreviation and not initial:
            if self._starts_sentence(next_word, next_typ, is_punct) is True:
                return True
            if next_word[0].isupper() and next_typ in params.sent_starters:
                return True
        if initial or number:
            starts = self._starts_sentence(next_word, next_typ, is_punct)
            if starts is False:
                return False
            if (
                starts is None
                and initial
                and next_word[0].isupper()
                and not params.ortho_context.get(next_typ, 0) & _ORTHO_LC
            ):
                return False
        return not abbreviation

    def _starts_sentence(self, next_word: str, next_typ: str, is_punct: bool) -> bool | None:
        """punkt's orthographic heuristic: True, False, or None for "unknown"."""
        if is_punct:
            return False
        ortho = self._params.ortho_context.get(next_typ, 0)
        if next_word[0].isupper() and ortho & _ORTHO_LC and not ortho & _ORTHO_MID_UC:
            return True
        if next_word[0].islower() and (ortho & _ORTHO_UC or not ortho & _ORTHO_BEG_LC):
            return False
        return None


def _is_ascii_number(word: str) -> bool:
    return word.isascii() and word.isdigit()


# ---------------------------------------------------------------------- structure


def _blocks(text: str) -> Iterator[tuple[int, int, bool]]:
    """Trimmed ``(start, end, is_heading)`` spans of the structural blocks of ``text``, in order.

    A block is a run of non-blank lines; a Markdown heading or a rule line is a block of its own,
    and a list item starts a new block. Linear in ``len(text)``: lines are examined one by one,
    except runs of plain lines inside a block, which one search skips (see ``_NEXT_NOT_PLAIN``).
    """
    block_start = block_end = -1
    line_start = 0
    n = len(text)
    while line_start <= n:
        m = _NEWLINE.search(text, line_start)
        line_end = m.start() if m else n
        next_start = m.end() if m else n + 1
        first = _LEADING_SPACE.match(text, line_start, line_end).end()
        if first < line_end:  # a non-blank line
            last = line_end
            while text[last - 1].isspace():
                last -= 1
            c = text[first]  # most lines start with a letter and are none of the below: skip the regexes
            heading = c == "#" and _HEADING.match(text, line_start, line_end) is not None
            if heading or (c in _RULE_CHARS and _RULE.match(text, first, line_end)):
                if block_start >= 0:
                    yield block_start, block_end, False
                    block_start = -1
                yield first, last, heading
            else:
                if (
                    block_start >= 0
                    and (c in _LIST_CHARS or c.isdigit() or (c.isalpha() and ")" in text[first + 1 : first + 8]))
                    and _LIST_ITEM.match(text, first, line_end)
                ):
                    yield block_start, block_end, False
                    block_start = -1
                if block_start < 0:
                    block_start = first
                block_end = last
                if m is not None:  # skip the plain lines that follow, with one search
                    plain_end = _NEXT_NOT_PLAIN.search(text, line_end)
                    if plain_end is None:  # plain lines to the end of the text
                        last = n
                        next_start = n + 1
                    elif plain_end.start() > line_end:
                        last = plain_end.start()
                        next_start = plain_end.end()
                    if last > block_end:
                        while text[last - 1].isspace():
                            last -= 1
                        block_end = last
        elif block_start >= 0:
            yield block_start, block_end, False
            block_start = -1
        line_start = next_start
    if block_start >= 0:
        yield block_start, block_end, False


def _split_after_cjk_stops(text: str, start: int, end: int) -> Iterator[Span]:
    """Split ``[start, end)`` after CJK full stops; the parts stay trimmed."""
    pos = start
    for m in _CJK_END.finditer(text, start, end):
        yield pos, m.start()
        pos = m.end()
    yield pos, end


# ---------------------------------------------------------------------- the cut rules


class Units:
    """The units of one text as parallel lists: what :func:`plan_chunks` needs, and their spans.

    ``tokens[i]`` counts the unit's own text, ``gaps[i]`` what the whitespace before it adds (see
    :meth:`_Counts.gap`): inside a chunk a unit costs both, at the start of a chunk only
    the first (the chunk starts after the whitespace).
    ``kinds[i]`` is :data:`CONTINUES`, :data:`STARTS_BLOCK` or :data:`STARTS_HEADING`;
    ``block_tokens[i]`` is the size of the block that unit ``i`` starts, counted as a chunk of it
    would be (0 if it starts none).
    ``scores[i]`` is the unit's cut score (:func:`_unit_hash` of its text), or None until
    :meth:`score` computes it with ``score_of(text[starts[i]:ends[i]])``: most units never need one
    (a body shorter than ``min_body`` cannot end), so :func:`_units` leaves them to be computed.
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


def _cut_probability(tokens: int, mean: float) -> float:
    """Probability that a body ends after a unit of ``tokens`` tokens: 1 - exp(-tokens / mean).

    Token-weighted, so cuts fall at a rate of one per ``mean`` tokens whatever the sentence lengths
    (a Poisson process on the token axis, sampled at sentence ends).
    """
    return -math.expm1(-tokens / mean)


def plan_chunks(
    units: Units,
    chunk_size: int,
    chunk_overlap: int,
    mean_body: float,
    min_block: int,
    min_body: int = 0,
) -> list[tuple[int, int, int]]:
    """Group units into chunks by the content-defined rules: numbers in, unit indices out.

    A body (a chunk without its overlap) starts where the previous one ended, and ends

    * before a heading, and before a block when that block or the block before it has at least
      ``min_block`` tokens;
    * after unit ``i`` when the body has at least ``min_body`` tokens and
      ``scores[i] < 1 - exp(-tokens[i] / mean_body)``;
    * otherwise at :func:`_forced_cut` when the next unit would take it past
      ``chunk_size - chunk_overlap`` tokens.

    A body's size is its first unit's tokens plus the tokens and gaps of the others, so it does not
    depend on the whitespace before it. A unit of more than ``chunk_size - chunk_overlap`` tokens is
    a body of its own. A body that continues a block is preceded by the whole trailing units of the
    previous body, within the same block, whose tokens (with the gaps between them and the gap
    before the body) fit in ``min(chunk_overlap, chunk_size - body)``; never by the whole previous
    body, so no two chunks start at the same unit.

    Returns:
        ``(first, body_first, end)`` per chunk: units ``[first, end)`` form the chunk, of which
        ``[first, body_first)`` repeat the end of the previous body. The bodies tile the units.
    """
    tokens, gaps, kinds, block_tokens = units.tokens, units.gaps, units.kinds, units.block_tokens
    score = units.score
    n = len(tokens)
    body_max = chunk_size - chunk_overlap
    hard = [False] * n  # a body must end before unit i
    last_block = 0
    for i in range(n):
        if kinds[i] != CONTINUES:
            hard[i] = i > 0 and (
                kinds[i] == STARTS_HEADING or block_tokens[i] >= min_block or last_block >= min_block
            )
            last_block = block_tokens[i]
    plan: list[tuple[int, int, int]] = []
    prev_body = 0
    s = 0
    while s < n:
        if tokens[s] > body_max:
            end, body = s + 1, tokens[s]  # fits the chunk only without (most of) the overlap
        else:
            acc, i, end = 0, s, -1
            while i < n:
                if i > s and hard[i]:
                    end = i
                    break
                cost = tokens[i] if i == s else tokens[i] + gaps[i]
                if acc + cost > body_max:
                    break
                acc += cost
                i += 1
                if acc >= min_body and score(i - 1) < _cut_probability(tokens[i - 1], mean_body):
                    end = i
                    break
            body = acc  # the cost of units [s, i), and i == end unless the cut is forced
            if end < 0:
                if i < n:
                    end = _forced_cut(tokens, gaps, score, s, i, body_max)
                    body = tokens[s] + sum(tokens[k] + gaps[k] for k in range(s + 1, end))
                else:
                    end = n
        first = s
        if plan and kinds[s] == CONTINUES:
            room = min(chunk_overlap, chunk_size - body)
            rest = gaps[s]  # what the overlap adds besides its first unit's tokens
            while first > prev_body + 1 and tokens[first - 1] + rest <= room:
                first -= 1
                rest += tokens[first] + gaps[first]
                if kinds[first] != CONTINUES:  # the block's first unit: go no further back
                    break
        plan.append((first, s, end))
        prev_body, s = s, end
    return plan


def _forced_cut(
    tokens: Sequence[int], gaps: Sequence[int], score_of: Callable[[int], float], s: int, stop: int, body_max: int
) -> int:
    """End of a body that reached ``body_max`` at unit ``stop`` with no content-defined cut before.

    Cuts after the unit with the smallest score among those that leave the body at least half full
    (any unit if none does): the most cut-like sentence in range, so copies agree where their
    ranges overlap.
    """
    best, best_score = stop, 2.0
    fallback, fallback_score = stop, 2.0
    acc = -gaps[s]
    half = body_max / 2
    for j in range(s, stop):
        acc += tokens[j] + gaps[j]
        score = score_of(j)
        if score < fallback_score:
            fallback, fallback_score = j + 1, score
        if acc >= half and score < best_score:
            best, best_score = j + 1, score
    return best if best_score <= 1.0 else fallback


def _unit_hash(text: str) -> float:
    """``blake2b`` of the words of ``canonical(text)`` (single spaces between them) as a uniform
    number in [0, 1): the same for every copy, however its lines are wrapped or spaced."""
    h = _BLAKE2B.copy()
    h.update(" ".join(token_form(text).split()).encode("utf-8"))
    return int.from_bytes(h.digest(), "big") / _TWO_64


def _word_ends_group(word: str) -> bool:
    """Content-defined end of a word group: the CRC-32 of the word (without the whitespace before
    it) is 0 mod 8. CRC-32 is a fixed function, the same everywhere, and cheap per word."""
    return zlib.crc32(word.lstrip().encode("utf-8", "surrogatepass")) % _GROUP_MOD == 0


# ---------------------------------------------------------------------- units


class _Counts:
    """Token counts (and scores) of sentences and of the whitespace before them, memoised.

    A plain object rather than fields of the pydantic chunker: it is used once or twice per
    sentence, where pydantic's private-attribute lookup would cost as much as the memo.
    """

    __slots__ = ("_gaps", "_scores", "_sentences", "_words", "count", "tokenizer")

    def __init__(self, tokenizer: Callable[[str], Sequence[Any]]) -> None:
        self.tokenizer = tokenizer
        #: ``len(tokenizer(text))``; see :func:`_token_counter`.
        self.count: Callable[[str], int] = _token_counter(tokenizer)
        self._sentences: dict[str, int] = {}
        self._scores: dict[str, float] = {}
        self._gaps: dict[str, int] = {}
        self._words: dict[str, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        # The memos are rebuilt, not shipped. LlamaIndex's default tokenizer is shipped by reference:
        # unpickling a tiktoken encoding in a fresh worker process would look for its BPE file before
        # llama_index has pointed tiktoken at the copy it ships, and try to download it (a hang
        # offline); get_tokenizer() in the worker sets that up first.
        default = self.tokenizer is get_tokenizer()
        return {"tokenizer": None if default else self.tokenizer}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["tokenizer"] or get_tokenizer())  # type: ignore[misc]

    def sentence(self, sentence: str) -> tuple[int, float]:
        """``(tokens, score)`` of a trimmed sentence or piece."""
        return self.tokens(sentence), self.score(sentence)

    def tokens(self, sentence: str) -> int:
        """The token count of a trimmed sentence or piece."""
        hit = self._sentences.get(sentence)
        if hit is None:
            hit = self.count(sentence)
            if len(sentence) <= _MEMO_MAX_KEY:
                if len(self._sentences) >= _MEMO_LIMIT:
                    self._sentences.clear()
                self._sentences[sentence] = hit
        return hit

    def score(self, sentence: str) -> float:
        """The cut score (:func:`_unit_hash`) of a trimmed sentence or piece."""
        hit = self._scores.get(sentence)
        if hit is None:
            hit = _unit_hash(sentence)
            if len(sentence) <= _MEMO_MAX_KEY:
                if len(self._scores) >= _MEMO_LIMIT:
                    self._scores.clear()
                self._scores[sentence] = hit
        return hit

    def gap(self, text: str, start: int, end: int) -> int:
        """What the whitespace ``text[start:end]`` adds to the unit that starts at ``end`` inside a
        chunk: ``tokens(gap + w) - tokens(w)`` for the unit's first word ``w`` (memoised; the pairs
        recur). A tokenizer like tiktoken re-segments only the text next to the boundary, so a unit
        costs its own tokens plus this inside a chunk: on real text, exactly the tokens of gap and
        unit together for all but 2 of 54,000 sentences. It can be negative (" Redistributions" is
        one token, "Redistributions" two)."""
        if start == end:
            return 0
        word_end = _FIRST_WORD.match(text, end).end()
        key = text[start:word_end]
        delta = self._gaps.get(key)
        if delta is None:
            word = text[end:word_end]
            alone = self._words.get(word)
            if alone is None:
                alone = self.count(word)
                if len(word) <= _MEMO_MAX_KEY:
                    if len(self._words) >= _MEMO_LIMIT:
                        self._words.clear()
                    self._words[word] = alone
            delta = self.count(key) - alone
            if len(key) <= _MEMO_MAX_KEY:
                if len(self._gaps) >= _MEMO_LIMIT:
                    self._gaps.clear()
                self._gaps[key] = delta
        return delta


def _token_counter(tokenizer: Callable[[str], Sequence[Any]]) -> Callable[[str], int]:
    """A function returning ``len(tokenizer(text))``, the same number for every text.

    LlamaIndex's default tokenizer is ``partial(encoding.encode, allowed_special="all")`` for a
    tiktoken encoding. On a text that contains no special token (none contains their common prefix,
    "<|" for every OpenAI encoding) that is ``encoding.encode_ordinary(text)``, which skips the
    search for special tokens (a tenth of the time); texts with the prefix or with lone surrogates,
    other tokenizers, and encodings whose special tokens share no prefix take ``tokenizer`` itself.
    """

    def count(text: str) -> int:
        return len(tokenizer(text))

    if not (
        isinstance(tokenizer, functools.partial)
        and not tokenizer.args
        and tokenizer.keywords == {"allowed_special": "all"}
    ):
        return count
    try:
        import tiktoken
    except ImportError:  # pragma: no cover - llama-index-core depends on tiktoken
        return count
    encoding = getattr(tokenizer.func, "__self__", None)
    if not isinstance(encoding, tiktoken.Encoding) or getattr(tokenizer.func, "__func__", None) is not tiktoken.Encoding.encode:
        return count
    prefix = os.path.commonprefix(sorted(encoding.special_tokens_set))
    if not prefix:
        return count
    # encode_ordinary's core, without its wrapper; the wrapper's one other path (a text with lone
    # surrogates, which the core cannot take) goes through tokenizer itself. _core_bpe is tiktoken's
    # private attribute: without it, the public encode_ordinary (same tokens, a little slower).
    ordinary = getattr(getattr(encoding, "_core_bpe", None), "encode_ordinary", None) or encoding.encode_ordinary

    def count_ordinary(text: str) -> int:
        if prefix in text:
            return len(tokenizer(text))
        try:
            return len(ordinary(text))
        except UnicodeEncodeError:
            return len(tokenizer(text))

    return count_ordinary


def _units(text: str, sentences: Iterator[tuple[int, int, int]], budget: int, counts: _Counts) -> Units:
    """The sentences of ``text`` as units with token counts (scores computed when first asked for);
    a sentence of more than ``budget`` tokens becomes several units (its lines, or word groups)."""
    units = Units(text, counts.score)
    starts, ends, tokens, gaps, scores, kinds, blocks = (
        units.starts,
        units.ends,
        units.tokens,
        units.gaps,
        units.scores,
        units.kinds,
        units.block_tokens,
    )
    memo, sentence_tokens, gap = counts._sentences, counts.tokens, counts.gap
    gap_memo, first_word = counts._gaps, _FIRST_WORD.match  # _Counts.gap's memo hit, inlined
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
                delta = gap_memo.get(text[prev_end : first_word(text, s).end()])
                gaps.append(gap(text, prev_end, s) if delta is None else delta)
            scores.append(None)
            kinds.append(kind)
            blocks.append(0)
        else:
            _add_long_sentence(units, text, prev_end, e, budget, kind, counts)
        prev_end = e
    units.total_blocks()
    return units


def _add_long_sentence(
    units: Units, text: str, start: int, end: int, budget: int, kind: int, counts: _Counts
) -> None:
    """Units for ``text[start:end]``, a sentence (after whitespace from ``start``) of more than
    ``budget`` tokens: its lines, and a line still too long in word groups. (Such "sentences" are
    mostly blocks without sentence punctuation: lists, changelogs, code.)"""
    line_start = start
    for m in _NEWLINE.finditer(text, start, end):
        kind = _add_line(units, text, line_start, m.start(), budget, kind, counts)
        line_start = m.start()
    _add_line(units, text, line_start, end, budget, kind, counts)


def _add_line(units: Units, text: str, start: int, end: int, budget: int, kind: int, counts: _Counts) -> int:
    first = _LEADING_SPACE.match(text, start, end).end()
    if first >= end:
        return kind
    tokens, score = counts.sentence(text[first:end])
    if tokens <= budget:
        units.append(first, end, tokens, counts.gap(text, start, first), score, kind)
    else:
        _add_word_groups(units, text, start, end, budget, kind, counts)
    return CONTINUES


def _add_word_groups(
    units: Units, text: str, start: int, end: int, budget: int, kind: int, counts: _Counts
) -> None:
    """Split ``text[start:end]`` into units of at most ``budget`` tokens at word boundaries; a group
    of words ends after a word whose hash says so, or after ``_GROUP_MAX`` words."""
    group_start = start
    n_words = 0
    for m in _WORD.finditer(text, start, end):
        n_words += 1
        word_end = m.end()
        if word_end == end or n_words >= _GROUP_MAX or _word_ends_group(m.group()):
            for s, e, tokens, gap, score in _fit(text, group_start, word_end, budget, counts):
                units.append(s, e, tokens, gap, score, kind)
                kind = CONTINUES
            group_start = word_end
            n_words = 0


def _fit(text: str, start: int, end: int, budget: int, counts: _Counts) -> Iterator[tuple[int, int, int, int, float]]:
    """``text[start:end]`` as pieces of at most ``budget`` tokens: whole if it fits, else word by
    word, else halved (a word longer than the budget). Yields trimmed ``(start, end, tokens, gap,
    score)``; a single character over the budget is yielded as it is."""
    first = _LEADING_SPACE.match(text, start, end).end()
    if first >= end:
        return
    tokens, score = counts.sentence(text[first:end])
    if tokens <= budget or end - first <= 1:
        yield first, end, tokens, counts.gap(text, start, first), score
        return
    words = [m.span() for m in _WORD.finditer(text, start, end)]
    if len(words) > 1:
        for w_start, w_end in words:
            yield from _fit(text, w_start, w_end, budget, counts)
        return
    middle = first + (end - first) // 2
    yield from _fit(text, start, middle, budget, counts)
    yield from _fit(text, middle, end, budget, counts)


# ---------------------------------------------------------------------- the node parser


class SentenceChunker(MetadataAwareTextSplitter):
    """Split documents into sentence-aligned, overlapping chunks with content-defined boundaries.

    Guarantees, for every document:

    * ``doc.text[node.start_char_idx:node.end_char_idx] == node.text`` for every node.
    * Chunks start and end on sentence boundaries, except inside a sentence longer than the chunk
      size, which is split at word boundaries (inside a word only if one word is longer still).
    * Every sentence of at most ``chunk_size`` tokens appears whole in at least one chunk, and every
      non-whitespace character is in at least one chunk.
    * A chunk's sentences cost at most ``chunk_size`` tokens: the first one's own tokens, the others'
      with what the whitespace before them adds. For LlamaIndex's default tokenizer that is the
      chunk's own count, or more where tokens merge across a sentence end, so
      ``len(tokenizer(node.text)) <= chunk_size`` (held on the whole test corpus at sizes 32-512);
      a single character that alone exceeds the budget is the one exception.
    * A chunk that continues a paragraph repeats whole trailing sentences of the previous chunk
      totalling at most ``chunk_overlap`` tokens, chosen by those sentences alone.
    * Where a chunk ends depends on the text, not on its offset: a paragraph (of at least a third of
      ``chunk_size - chunk_overlap`` tokens) shared by two documents gets the same chunks in both,
      and a passage shared inside paragraphs gets the same cuts in its interior.
    * Node ids are uuid5 of (document id, start, end), so re-chunking gives the same ids, unless an
      ``id_func`` is given.

    ``chunk_size`` counts the text only by default, so that a passage is cut the same way in
    documents whose metadata differ; ``metadata_aware=True`` reserves room for the metadata string
    as LlamaIndex's ``SentenceSplitter`` does.

    Args:
        chunk_size: maximum tokens per chunk, overlap included.
        chunk_overlap: maximum tokens repeated from the previous chunk; below ``chunk_size``.
        mean_body_size: mean tokens between sentence cuts (a body is at least half of it before a
            sentence may end it); default ``(chunk_size - chunk_overlap) // 2``. Smaller gives more,
            smaller chunks, and finds more passages copied into the middle of paragraphs, where no
            paragraph break marks them: such a passage is found only if it holds a whole chunk. In
            ``benchmarks/bench_chunking.py`` (6-15-sentence passages, 256/64), 16 finds 98% of them with
            chunks of about 45 tokens; the default finds 59% with chunks of about 135.
        language: punkt model (a directory of ``tokenizers/punkt_tab``).
        metadata_aware: subtract each document's metadata string's tokens from ``chunk_size``.
        tokenizer: callable returning the tokens of a string; default LlamaIndex's ``get_tokenizer()``.
        include_metadata, include_prev_next_rel, callback_manager, id_func: as for every LlamaIndex
            ``NodeParser``.

    Raises:
        ValueError: a size out of range, or ``chunk_overlap >= chunk_size``.
        LookupError: the punkt model for ``language`` is not installed (nothing is downloaded).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=True)

    chunk_size: int = Field(
        default=DEFAULT_CHUNK_SIZE,
        ge=8,
        description="Maximum tokens per chunk, overlap included (at least 8).",
    )
    chunk_overlap: int = Field(
        default=DEFAULT_CHUNK_OVERLAP,
        ge=0,
        description="Maximum tokens of whole trailing sentences repeated from the previous chunk of the "
        "same paragraph; smaller than chunk_size.",
    )
    mean_body_size: int | None = Field(
        default=None,
        ge=1,
        description="Mean tokens between content-defined sentence cuts; None means "
        "(chunk_size - chunk_overlap) // 2.",
    )
    language: str = Field(
        default="english",
        pattern=r"^[a-z][a-z_-]{0,63}$",
        description="punkt_tab model used for sentence boundaries.",
    )
    metadata_aware: bool = Field(
        default=False,
        description="Reserve room for each document's metadata string in chunk_size, as "
        "SentenceSplitter does. Off by default, so that boundaries do not depend on metadata.",
    )

    _counts: _Counts = PrivateAttr()
    _punkt: _Punkt | None = PrivateAttr(default=None)
    _punkt_language: str = PrivateAttr(default="")

    def __init__(
        self,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        mean_body_size: int | None = None,
        language: str = "english",
        metadata_aware: bool = False,
        tokenizer: Callable[[str], Sequence[Any]] | None = None,
        callback_manager: CallbackManager | None = None,
        include_metadata: bool = True,
        include_prev_next_rel: bool = True,
        id_func: Callable[[int, BaseNode], str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Validate the settings and load the punkt model (see the class docstring)."""
        if isinstance(id_func, dict):  # the serialised form that to_dict() writes
            name = id_func.get("id_func_name")
            if name != default_id_func.__name__:
                raise ValueError(
                    f"id_func {name!r} cannot be restored from its name; pass the function as id_func="
                )
            id_func = None
        if tokenizer is not None and not callable(tokenizer):
            raise TypeError(f"tokenizer must be callable (str -> tokens), got {type(tokenizer).__name__}")
        super().__init__(
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            mean_body_size=mean_body_size,
            language=language,
            metadata_aware=metadata_aware,
            callback_manager=callback_manager or CallbackManager([]),
            include_metadata=include_metadata,
            include_prev_next_rel=include_prev_next_rel,
            id_func=id_func or default_id_func,
            **kwargs,
        )
        self._counts = _Counts(tokenizer or get_tokenizer())
        self._sentence_tokenizer()  # fail now, not at the first document, if the model is missing

    @field_validator("chunk_overlap")
    @classmethod
    def _overlap_below_size(cls, value: int, info: Any) -> int:
        size = info.data.get("chunk_size")
        if size is not None and value >= size:
            raise ValueError(
                f"chunk_overlap ({value}) must be smaller than chunk_size ({size}); "
                f"lower chunk_overlap or raise chunk_size"
            )
        return value

    @field_validator("chunk_size")
    @classmethod
    def _size_above_overlap(cls, value: int, info: Any) -> int:
        overlap = info.data.get("chunk_overlap")  # known on assignment, not yet at construction
        if overlap is not None and overlap >= value:
            raise ValueError(
                f"chunk_overlap ({overlap}) must be smaller than chunk_size ({value}); "
                f"lower chunk_overlap first or choose a larger chunk_size"
            )
        return value

    @classmethod
    def class_name(cls) -> str:
        return "SentenceChunker"

    def __setstate__(self, state: dict[str, Any]) -> None:
        # BaseComponent re-runs __init__ from the public fields, which would fall back to the default
        # tokenizer in a worker process (IngestionPipeline(num_workers=...)); keep the one given.
        super().__setstate__(state)
        counts = (state.get("__pydantic_private__") or {}).get("_counts")
        if isinstance(counts, _Counts):
            self._counts = counts

    # ------------------------------------------------------------------ sentences

    def _sentence_tokenizer(self) -> _Punkt:
        if self._punkt is None or self._punkt_language != self.language:
            self._punkt = _Punkt(_punkt_params(self.language))
            self._punkt_language = self.language
        return self._punkt

    def sentence_spans(self, text: str) -> list[Span]:
        """The sentence spans of ``text``: its blocks split by punkt, trimmed of whitespace.

        The spans are in order, disjoint and non-empty, and cover every non-whitespace character.

        Raises:
            TypeError: ``text`` is not a ``str``.
        """
        _check_text(text, "text")
        return [(s, e) for s, e, _ in self._sentences(text)]

    def _sentences(self, text: str) -> Iterator[tuple[int, int, int]]:
        """``(start, end, kind)`` per sentence, in order; ``kind`` as in :class:`Units`."""
        punkt = self._sentence_tokenizer()
        any_cjk = _CJK_STOP.search(text) is not None  # one scan instead of one per block
        for b_start, b_end, heading in _blocks(text):
            kind = STARTS_HEADING if heading else STARTS_BLOCK
            cjk = None if heading or not any_cjk else _CJK_END.search(text, b_start, b_end)
            mark = None if heading or cjk else _PUNKT_END.search(text, b_start, b_end)
            if not cjk and (mark is None or mark.end() == b_end):
                # No mark, or only the final one: punkt has no candidate (one needs text after it).
                yield b_start, b_end, kind
                continue
            pieces = _split_after_cjk_stops(text, b_start, b_end) if cjk else ((b_start, b_end),)
            for p_start, p_end in pieces:
                for s, e in punkt.spans(text, p_start, p_end):
                    while s < e and text[s].isspace():
                        s += 1
                    while e > s and text[e - 1].isspace():
                        e -= 1
                    if s < e:
                        yield s, e, kind
                        kind = CONTINUES

    # ------------------------------------------------------------------ units and chunks

    def _units(self, text: str, budget: int) -> Units:
        return _units(text, self._sentences(text), budget, self._counts)

    def _budget(self, metadata_str: str) -> int:
        """The token budget for a document's text, after reserving the metadata if asked to."""
        if not self.metadata_aware or not metadata_str:
            return self.chunk_size
        metadata_len = self._counts.count(metadata_str)
        budget = self.chunk_size - metadata_len
        if budget <= self.chunk_overlap:
            raise ValueError(
                f"metadata takes {metadata_len} of chunk_size ({self.chunk_size}) tokens, leaving "
                f"{budget}, not more than chunk_overlap ({self.chunk_overlap}); raise chunk_size, "
                f"shorten the metadata, or set metadata_aware=False"
            )
        if budget < 50:
            warnings.warn(
                f"metadata takes {metadata_len} of chunk_size ({self.chunk_size}) tokens, leaving "
                f"{budget} for text; raise chunk_size or shorten the metadata",
                stacklevel=2,
            )
        return budget

    def chunk_spans(self, text: str, metadata_str: str = "") -> list[Span]:
        """The ``(start, end)`` span of every chunk of ``text``, in order; none for blank text.

        ``metadata_str`` is used only when ``metadata_aware`` is set.

        Raises:
            TypeError: ``text`` is not a ``str``.
            ValueError: ``metadata_aware`` is set and the metadata leaves no room for text.
        """
        _check_text(text, "text")
        budget = self._budget(metadata_str)
        units = self._units(text, budget)
        if not units.starts:
            return []
        body_max = budget - self.chunk_overlap
        mean = float(self.mean_body_size or max(1, int(body_max * _MEAN_BODY_FRACTION)))
        plan = plan_chunks(
            units,
            budget,
            self.chunk_overlap,
            mean,
            min_block=max(1, int(body_max * _MIN_BLOCK_FRACTION)),
            min_body=int(mean * _MIN_BODY_OF_MEAN),
        )
        return [(units.starts[first], units.ends[end - 1]) for first, _, end in plan]

    # ------------------------------------------------------------------ LlamaIndex interface

    def split_text(self, text: str) -> list[str]:
        """The chunk texts of ``text`` (see :meth:`chunk_spans`)."""
        return [text[s:e] for s, e in self.chunk_spans(text)]

    def split_text_metadata_aware(self, text: str, metadata_str: str) -> list[str]:
        """The chunk texts of ``text``, reserving ``metadata_str``'s tokens if ``metadata_aware``."""
        return [text[s:e] for s, e in self.chunk_spans(text, metadata_str)]

    def _parse_nodes(self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any) -> list[BaseNode]:
        """Chunk every node; each chunk is built complete in :meth:`_build_nodes`.

        Raises:
            TypeError: a node's text is not a ``str`` (the message names the node).
        """
        all_nodes: list[BaseNode] = []
        for node in get_tqdm_iterable(nodes, show_progress, "Parsing nodes"):
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            _check_text(text, f"text of node {node.node_id!r}")
            metadata_str = self._get_metadata_str(node) if self.metadata_aware else ""
            with self.callback_manager.event(CBEventType.CHUNKING, payload={EventPayload.CHUNKS: [text]}) as event:
                spans = self.chunk_spans(text, metadata_str)
                chunks = [text[s:e] for s, e in spans]
                event.on_end(payload={EventPayload.CHUNKS: chunks})
            if chunks:
                all_nodes.extend(self._build_nodes(node, chunks, spans))
        return all_nodes

    def _build_nodes(self, node: BaseNode, chunks: list[str], spans: list[Span]) -> list[BaseNode]:
        """The chunks of ``node`` as nodes: exact offsets, and the SOURCE relationship and metadata
        that ``SentenceSplitter``'s nodes end up with after ``NodeParser._postprocess_parsed_nodes``
        (SOURCE is the input's own source if it has one, else the input; metadata a copy of the
        input's)."""
        id_func = self.id_func
        if id_func is default_id_func:  # no id_func given: ids from the document id and the span
            id_func = _span_ids(node.node_id, spans)
        source = node.source_node or node.as_related_node_info()
        metadata = dict(node.metadata) if self.include_metadata else {}
        if isinstance(node, ImageDocument):  # image chunks keep LlamaIndex's own builder
            images: list[BaseNode] = list(build_nodes_from_splits(chunks, node, id_func=id_func))
            for child, (s, e) in zip(images, spans):
                child.relationships[NodeRelationship.SOURCE] = source
                child.metadata = dict(metadata)
                child.start_char_idx, child.end_char_idx = s, e  # type: ignore[attr-defined]
            return images
        # Every value below comes from the validated input node or is built here with the field's
        # exact type, so validating it again per chunk would only copy it (a third of the parse
        # time for small chunks): one node is constructed without validation and copied per chunk,
        # with the per-chunk fields (mutable ones fresh) set on the copy. The test suite holds these
        # nodes equal to TextNode(**node.model_dump()) and to their JSON round trip.
        embedding = node.embedding
        embed_keys = node.excluded_embed_metadata_keys
        llm_keys = node.excluded_llm_metadata_keys
        template = TextNode.model_construct(
            id_="",
            text="",
            embedding=None,
            excluded_embed_metadata_keys=[],
            excluded_llm_metadata_keys=[],
            metadata_separator=node.metadata_separator,
            metadata_template=node.metadata_template,
            text_template=getattr(node, "text_template", _TEXT_TEMPLATE),
            relationships={},
            metadata={},
            start_char_idx=0,
            end_char_idx=0,
        )
        # copy.copy(template) and an update of its __dict__, inlined: pydantic's __copy__ copies the
        # four attributes set below the same way, through three nested copy.copy calls per node.
        fields = template.__dict__
        fields_set = template.__pydantic_fields_set__
        extra = template.__pydantic_extra__  # None: TextNode allows no extra fields
        private = template.__pydantic_private__  # None: TextNode has no private attributes
        new, set_attr = TextNode.__new__, object.__setattr__
        built = []
        for i, (chunk, (s, e)) in enumerate(zip(chunks, spans)):
            child = new(TextNode)
            state = dict(fields)
            state.update(
                id_=id_func(i, node),
                text=chunk,
                embedding=None if embedding is None else list(embedding),
                excluded_embed_metadata_keys=list(embed_keys),
                excluded_llm_metadata_keys=list(llm_keys),
                relationships={NodeRelationship.SOURCE: source},
                metadata=dict(metadata),
                start_char_idx=s,
                end_char_idx=e,
            )
            set_attr(child, "__dict__", state)
            set_attr(child, "__pydantic_extra__", copy.copy(extra))
            set_attr(child, "__pydantic_fields_set__", set(fields_set))
            set_attr(child, "__pydantic_private__", copy.copy(private))
            built.append(child)
        return built

    def _postprocess_parsed_nodes(self, nodes: list[BaseNode], parent_doc_map: dict[str, Document]) -> list[BaseNode]:
        """Link consecutive chunks of the same source with PREVIOUS/NEXT, as the base class does.

        The rest of the base class's pass is done exactly in :meth:`_build_nodes`: it would re-derive
        offsets with ``str.find`` from the previous chunk's start, which lands on an earlier copy of
        repeated text.
        """
        if not self.include_prev_next_rel or len(nodes) < 2:
            return nodes
        sources = [None if src is None else src.node_id for src in (n.source_node for n in nodes)]
        infos: dict[int, RelatedNodeInfo] = {}

        def info(i: int) -> RelatedNodeInfo:
            if i not in infos:
                infos[i] = _related_node_info(nodes[i])
            return infos[i]

        for i in range(len(nodes) - 1):
            if sources[i] is not None and sources[i] == sources[i + 1]:
                nodes[i + 1].relationships[NodeRelationship.PREVIOUS] = info(i)
                nodes[i].relationships[NodeRelationship.NEXT] = info(i + 1)
        return nodes


def _related_node_info(node: BaseNode) -> RelatedNodeInfo:
    """``node.as_related_node_info()``, built without validation for a ``TextNode``.

    Its values are already valid: a str id, ``ObjectType.TEXT``, a str hash, and the metadata
    copied shallowly, as pydantic's ``dict[str, Any]`` validation copies it; the fields set are the
    same four. Other node types take ``as_related_node_info()``.
    """
    if type(node) is not TextNode:
        return node.as_related_node_info()
    return RelatedNodeInfo.model_construct(
        node_id=node.id_, node_type=TextNode.get_type(), metadata=dict(node.metadata), hash=node.hash
    )


def _span_ids(doc_id: str, spans: Sequence[Span]) -> Callable[[int, BaseNode], str]:
    """An ``id_func`` giving chunk ``i`` the id uuid5(namespace, "<doc id>\\x1f<start>\\x1f<end>")."""
    prefix = _ID_NAMESPACE.bytes + f"{doc_id}\x1f".encode("utf-8", "surrogatepass")
    ids = [_uuid5(prefix + f"{s}\x1f{e}".encode()) for s, e in spans]

    def span_id(i: int, _doc: BaseNode) -> str:
        return ids[i]

    return span_id


def _uuid5(namespace_and_name: bytes) -> str:
    """``str(uuid.uuid5(namespace, name))`` from the namespace's bytes and the name's, formatted
    directly (uuid.UUID's constructor is most of the cost of uuid5; the tests hold the two equal)."""
    digest = bytearray(hashlib.sha1(namespace_and_name).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _check_text(text: Any, what: str) -> None:
    if not isinstance(text, str):
        raise TypeError(f"{what} must be str, got {type(text).__name__}; give the document a text")
