"""Sentences: nltk's punkt over the blocks of a text, as exact ``(start, end)`` spans.

punkt uses the ``punkt_tab`` model that llama-index-core ships (``llama_index/core/_static/
nltk_cache``; found on disk, without importing llama_index) or any the user installed; it is never
downloaded. :class:`Punkt` gives exactly ``PunktSentenceTokenizer.span_tokenize`` on spans of a
larger text, faster (see there).
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import nltk
import regex as _regex

from rag_dedup.chunking._punkt_internals import (
    ORTHO_BEG_LC,
    ORTHO_LC,
    ORTHO_MID_UC,
    ORTHO_UC,
    PunktParameters,
    boundary_realignment_re,
    load_punkt_params,
    period_context_re,
    tokenizer_with_params,
)
from rag_dedup.chunking.blocks import (
    CJK_END,
    CONTINUES,
    STARTS_BLOCK,
    STARTS_HEADING,
    Span,
    blocks,
    split_after_cjk_stops,
)
from rag_dedup.chunking.memo import BoundedMemo

__all__ = ["Punkt", "bundled_nltk_dir", "punkt_params", "sentences"]

# Sentence-final marks: punkt's, and CJK full stops.
_PUNKT_END = re.compile(r"[.?!]")
_CJK_STOP = re.compile(r"[\u3002\uff01\uff1f\uff61]")

# punkt details re-traced by Punkt (see there): its PUNCTUATION, marks that split off the end of
# the next word as tokens that cannot break, closing marks split off before a full stop ("word)."),
# and string.whitespace, searched from the right.
_PUNKT_PUNCTUATION = frozenset(";:,.!?")
_TRAILING_MARKS = frozenset(",;:)]}\"'")
_CLOSERS = ")]}\""
_OPENERS = frozenset("([{\"`")
_LAST_ASCII_SPACE = _regex.compile(r"[ \t\n\r\x0b\x0c]", _regex.REVERSE)


def bundled_nltk_dir() -> str | None:
    """The nltk data directory that llama-index-core ships (``punkt_tab`` lives there), or None.

    Found from the installed ``llama_index`` namespace package's location, without importing
    llama_index: the chunking core imports no framework.
    """
    spec = importlib.util.find_spec("llama_index")
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = os.path.join(root, "core", "_static", "nltk_cache")
        if os.path.isdir(candidate):
            return candidate
    return None


def _ensure_bundled_nltk_path() -> None:
    """Append llama-index-core's bundled nltk data directory to ``nltk.data.path``, once.

    Appending, not prepending, keeps ``NLTK_DATA`` and the user's directories first.
    """
    bundled = bundled_nltk_dir()
    if bundled is not None and bundled not in nltk.data.path:
        nltk.data.path.append(bundled)


@lru_cache(maxsize=8)
def punkt_params(language: str) -> PunktParameters:
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
            f"found in {list(nltk.data.path)}. rag-dedup never downloads it: llama-index-core "
            f"ships it under llama_index/core/_static/nltk_cache, so reinstall llama-index-core, choose "
            f"a language that is installed, or install the model with `python -m nltk.downloader punkt_tab`."
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


class Punkt:
    """nltk's punkt sentence boundaries over spans of a larger text.

    :meth:`spans` returns exactly what ``PunktSentenceTokenizer.span_tokenize(text[start:end])``
    returns, shifted by ``start`` (the test suite holds the two equal on real and generated text),
    but works on offsets rather than slices, decides the common contexts without building punkt
    tokens (:meth:`_simple_breaks`), and memoises the rest: punkt's per-candidate decision is a pure
    function of a short context ("word. Next") and is most of its cost.
    """

    def __init__(self, params: PunktParameters) -> None:
        self._tokenizer = tokenizer_with_params(params)
        self._params = params
        self._period = _unguarded(period_context_re(self._tokenizer))
        self._realign = _unguarded(boundary_realignment_re(self._tokenizer))
        self._memo: BoundedMemo[str, bool] = BoundedMemo()  # punkt's own decisions, by context
        # all decisions, by (word, mark, after)
        self._decisions: BoundedMemo[tuple[str, str, str], bool] = BoundedMemo()

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
            self._decisions.put(key, brk, len(word) + len(mark) + len(after))
        if not brk:
            return last_break
        slices.append((last_break, match.end()))
        return match.start("next_tok") if match.group("next_tok") else match.end()

    def _breaks(self, context: str) -> bool:
        """punkt's own decision, memoised."""
        found = self._memo.get(context)
        if found is None:
            found = self._memo.put(context, self._tokenizer.text_contains_sentbreak(context), len(context))
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
                and not params.ortho_context.get(next_typ, 0) & ORTHO_LC
            ):
                return False
        return not abbreviation

    def _starts_sentence(self, next_word: str, next_typ: str, is_punct: bool) -> bool | None:
        """punkt's orthographic heuristic: True, False, or None for "unknown"."""
        if is_punct:
            return False
        ortho = self._params.ortho_context.get(next_typ, 0)
        if next_word[0].isupper() and ortho & ORTHO_LC and not ortho & ORTHO_MID_UC:
            return True
        if next_word[0].islower() and (ortho & ORTHO_UC or not ortho & ORTHO_BEG_LC):
            return False
        return None


def _is_ascii_number(word: str) -> bool:
    return word.isascii() and word.isdigit()


def sentences(text: str, punkt: Punkt) -> Iterator[tuple[int, int, int]]:
    """``(start, end, kind)`` per sentence of ``text``, in order: its blocks split by punkt (and
    after CJK full stops), trimmed of whitespace; ``kind`` is :data:`~rag_dedup.chunking.blocks.CONTINUES`,
    ``STARTS_BLOCK`` or ``STARTS_HEADING``.

    The spans are disjoint and non-empty, and cover every non-whitespace character.
    """
    any_cjk = _CJK_STOP.search(text) is not None  # one scan instead of one per block
    for b_start, b_end, heading in blocks(text):
        kind = STARTS_HEADING if heading else STARTS_BLOCK
        cjk = None if heading or not any_cjk else CJK_END.search(text, b_start, b_end)
        mark = None if heading or cjk else _PUNKT_END.search(text, b_start, b_end)
        if not cjk and (mark is None or mark.end() == b_end):
            # No mark, or only the final one: punkt has no candidate (one needs text after it).
            yield b_start, b_end, kind
            continue
        pieces = split_after_cjk_stops(text, b_start, b_end) if cjk else ((b_start, b_end),)
        for p_start, p_end in pieces:
            for s, e in punkt.spans(text, p_start, p_end):
                while s < e and text[s].isspace():
                    s += 1
                while e > s and text[e - 1].isspace():
                    e -= 1
                if s < e:
                    yield s, e, kind
                    kind = CONTINUES
