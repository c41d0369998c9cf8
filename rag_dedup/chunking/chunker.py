"""``Chunker``: the framework-free chunker that every adapter wraps.

Give it a tokenizer (any callable returning the tokens of a string) and sizes; ask it for the
chunks of a text as exact ``(start, end)`` spans into that text, or as :class:`Chunk` records that
also say where each chunk's own text starts after the part it repeats from the previous chunk.

The steps, per text:

1. **Blocks** (:mod:`~rag_dedup.chunking.blocks`) and **sentences**
   (:mod:`~rag_dedup.chunking.sentences`): exact spans, no sentence across two blocks.
2. **Units** (:mod:`~rag_dedup.chunking.units`): sentences with token counts; a sentence longer
   than the budget is split at line breaks, then at content-defined word groups.
3. **The cut plan** (:mod:`~rag_dedup.chunking.cuts`): which units form each chunk.

Example:
    >>> chunker = Chunker(str.split, chunk_size=20, chunk_overlap=4)
    >>> text = "First sentence here. Second one follows.\\n\\nA new paragraph."
    >>> [text[s:e] for s, e in chunker.chunk_spans(text)]
    ['First sentence here. Second one follows.', 'A new paragraph.']
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from rag_dedup.chunking.blocks import Span
from rag_dedup.chunking.cuts import plan_chunks, unit_hash
from rag_dedup.chunking.memo import BoundedMemo
from rag_dedup.chunking.sentences import Punkt, punkt_params, sentences
from rag_dedup.chunking.tokens import TokenCounts, Tokenizer
from rag_dedup.chunking.units import Units, build_units
from rag_dedup.surrogates import check_unicode

__all__ = ["DEFAULT_CHUNK_OVERLAP", "DEFAULT_CHUNK_SIZE", "MIN_CHUNK_SIZE", "Chunk", "Chunker", "check_text", "default_chunk_target"]

DEFAULT_CHUNK_SIZE = 256
DEFAULT_CHUNK_OVERLAP = 64
#: The smallest ``chunk_size`` accepted.
MIN_CHUNK_SIZE = 8

# The derived sizes. The default chunk_target is 3/8 of chunk_size (96 tokens at 256). In running
# text a chunk is its body plus the last chunk_overlap tokens (whole sentences) before it, so the
# mean body (the mean distance between content-defined cuts) is m = max(target - chunk_overlap,
# target / 4) (32 at 96/64): the smallest m whose chunks of real documents, headings and short
# blocks included, still average 100 tokens or more at 256/64, as issue 15 asks (the README's
# chunking table has the figures). With the body budget B = chunk_size - chunk_overlap, a paragraph
# of B/3 tokens or more, or of 5 sentences or more, gets chunks of its own; shorter blocks next to
# each other are grouped up to B.
_TARGET_FRACTION = 3 / 8
_MIN_BLOCK_FRACTION = 1 / 3

_LANGUAGE = re.compile(r"[a-z][a-z_-]{0,63}")


class Chunk(NamedTuple):
    """One chunk: ``text[start:end]``, of which ``text[start:body_start]`` repeats the end of the
    previous chunk (the overlap; empty when the chunk starts a block or the text)."""

    start: int
    end: int
    body_start: int


class Chunker:
    """Sentence-aligned, overlapping chunks with content-defined boundaries, for any framework.

    Guarantees, for every text: chunks are exact spans in order, starting and ending on sentence
    boundaries (except inside a sentence longer than the budget); every non-whitespace character is
    in a chunk; a chunk's units cost at most ``chunk_size`` tokens (less any reserved tokens); the
    overlap is whole trailing sentences of the previous chunk (at most ``chunk_overlap`` tokens, in
    the same paragraph, never the whole previous chunk); the same text always gives the same chunks.

    Args:
        tokenizer: a callable returning the tokens of a string (only their number is used), or a
            :class:`~rag_dedup.chunking.tokens.TokenCounts` to share its memos.
        chunk_size: maximum tokens per chunk, overlap included (at least 8).
        chunk_overlap: maximum tokens repeated from the previous chunk; below ``chunk_size``.
        chunk_target: the mean tokens per chunk to aim for in running text, overlap included
            (at most ``chunk_size``); default ``3 * chunk_size // 8`` (96 at 256). What to expect
            at 256/64 with the default: chunks in running text average about 102 tokens and all
            chunks of real documents (headings and short blocks included) about 101, 2.1 times
            the vectors of ``SentenceSplitter(256, 64)``. Smaller finds more passages spliced into
            running text, at the price of more chunks (see the README's curve); ``chunk_size``
            stays the maximum. A running-text chunk holds about ``chunk_overlap`` tokens of overlap
            besides its body, so a target under about ``chunk_overlap + 32`` shrinks only the
            bodies (at 256/64, 64 gives chunks of about 90 tokens); lower ``chunk_overlap`` too for
            smaller chunks.
        language: punkt model (a directory of ``tokenizers/punkt_tab``).

    Raises:
        TypeError: ``tokenizer`` is not callable, or a size is not an ``int``.
        ValueError: a size out of range, or ``chunk_overlap >= chunk_size``.
        LookupError: the punkt model for ``language`` is not installed (nothing is downloaded).
    """

    __slots__ = ("_counts", "_punkt", "_scores", "chunk_overlap", "chunk_size", "chunk_target", "language")

    def __init__(
        self,
        tokenizer: Tokenizer | TokenCounts,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        chunk_target: int | None = None,
        language: str = "english",
    ) -> None:
        for name, value in (("chunk_size", chunk_size), ("chunk_overlap", chunk_overlap), ("chunk_target", chunk_target)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if chunk_size < MIN_CHUNK_SIZE:
            raise ValueError(f"chunk_size ({chunk_size}) must be at least {MIN_CHUNK_SIZE}")
        if not 0 <= chunk_overlap < chunk_size:
            raise ValueError(
                f"chunk_overlap ({chunk_overlap}) must be at least 0 and smaller than chunk_size ({chunk_size}); "
                f"lower chunk_overlap or raise chunk_size"
            )
        if chunk_target is not None and not 1 <= chunk_target <= chunk_size:
            raise ValueError(
                f"chunk_target ({chunk_target}) must be between 1 and chunk_size ({chunk_size}), or None for "
                f"the default ({default_chunk_target(chunk_size)})"
            )
        if not isinstance(language, str) or not _LANGUAGE.fullmatch(language):
            raise ValueError(f"language ({language!r}) must be a punkt_tab model name such as 'english'")
        self._counts = tokenizer if isinstance(tokenizer, TokenCounts) else TokenCounts(tokenizer)
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.chunk_target = chunk_target
        self.language = language
        self._punkt = Punkt(punkt_params(language))
        self._scores: BoundedMemo[str, float] = BoundedMemo()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "tokenizer": self._counts,
            "chunk_size": self.chunk_size,
            "chunk_overlap": self.chunk_overlap,
            "chunk_target": self.chunk_target,
            "language": self.language,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state.pop("tokenizer"), **state)  # type: ignore[misc]

    def __repr__(self) -> str:
        return (
            f"Chunker(chunk_size={self.chunk_size}, chunk_overlap={self.chunk_overlap}, "
            f"chunk_target={self.chunk_target}, language={self.language!r})"
        )

    @property
    def counts(self) -> TokenCounts:
        """The memoised token counter (``counts.count(text)`` is ``len(tokenizer(text))``)."""
        return self._counts

    def count_tokens(self, text: str) -> int:
        """``len(tokenizer(text))``."""
        return self._counts.count(text)

    def sentence_spans(self, text: str) -> list[Span]:
        """The sentence spans of ``text``: its blocks split by punkt, trimmed of whitespace.

        The spans are in order, disjoint and non-empty, and cover every non-whitespace character.

        Raises:
            TypeError: ``text`` is not a ``str``.
        """
        check_text(text, "text")
        return [(s, e) for s, e, _ in sentences(text, self._punkt)]

    def budget(self, reserved_tokens: int = 0) -> int:
        """The token budget left for a chunk's text when ``reserved_tokens`` go to something sent
        with every chunk (a metadata string), as LlamaIndex's ``SentenceSplitter`` reserves them.

        Raises:
            ValueError: ``reserved_tokens`` is not below ``chunk_size``.
        """
        budget = self.chunk_size - reserved_tokens
        if budget <= 0:
            raise ValueError(
                f"Metadata length ({reserved_tokens}) is longer than chunk size ({self.chunk_size}). "
                f"Consider increasing the chunk size or decreasing the size of your metadata to avoid this."
            )
        return budget

    def units(self, text: str, budget: int) -> Units:
        """The units of ``text`` for a chunk budget of ``budget`` tokens."""
        return build_units(text, sentences(text, self._punkt), budget, self._counts, self._score)

    def chunks(self, text: str, reserved_tokens: int = 0) -> list[Chunk]:
        """The chunks of ``text``, in order; none for blank text.

        ``reserved_tokens`` are taken off ``chunk_size`` for every chunk (see :meth:`budget`); the
        overlap is then at most half of what is left. Only the size limit depends on them, not the
        content-defined cuts, so a passage is cut alike whatever is reserved beside it.

        Raises:
            TypeError: ``text`` is not a ``str``.
            ValueError: ``reserved_tokens`` leaves no room for text.
        """
        check_text(text, "text")
        budget = self.budget(reserved_tokens)
        units = self.units(text, budget)
        if not units.starts:
            return []
        overlap = min(self.chunk_overlap, budget // 2) if reserved_tokens else self.chunk_overlap
        plan = plan_chunks(
            units,
            budget,
            overlap,
            self.mean_body(),
            min_block=max(1, int((self.chunk_size - self.chunk_overlap) * _MIN_BLOCK_FRACTION)),
        )
        starts, ends = units.starts, units.ends
        return [Chunk(starts[first], ends[end - 1], starts[body]) for first, body, end in plan]

    def mean_body(self) -> float:
        """The mean tokens between content-defined cuts, from the settings (never from a budget):
        ``max(target - chunk_overlap, target / 4)`` for ``target = chunk_target`` or its default
        (a chunk in running text is its body plus about ``chunk_overlap`` tokens of overlap)."""
        target = self.chunk_target or default_chunk_target(self.chunk_size)
        return float(max(target - self.chunk_overlap, target / 4, 1.0))

    def chunk_spans(self, text: str, reserved_tokens: int = 0) -> list[Span]:
        """The ``(start, end)`` span of every chunk of ``text`` (see :meth:`chunks`)."""
        return [(c.start, c.end) for c in self.chunks(text, reserved_tokens)]

    def _score(self, unit: str) -> float:
        hit = self._scores.get(unit)
        if hit is None:
            hit = self._scores.put(unit, unit_hash(unit), len(unit))
        return hit


def default_chunk_target(chunk_size: int) -> int:
    """The default ``chunk_target``: ``3 * chunk_size // 8`` (96 tokens at 256)."""
    return max(1, int(chunk_size * _TARGET_FRACTION))


def check_text(text: Any, what: str) -> None:
    """Raise ``TypeError`` naming ``what`` unless ``text`` is a ``str``, and
    :class:`~rag_dedup.errors.InvalidTextError` if it holds a lone surrogate (the one rule of
    :mod:`rag_dedup.surrogates`: such text cannot be hashed, stored or embedded)."""
    if not isinstance(text, str):
        raise TypeError(f"{what} must be str, got {type(text).__name__}; give the document a text")
    check_unicode(text, what)
