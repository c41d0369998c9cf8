"""Token counts of sentences and of the whitespace before them, memoised.

The chunker counts each sentence once, on its own, and what the whitespace before a sentence adds
inside a chunk once per (whitespace, first word) pair: a chunk then costs its first sentence's
tokens plus every later sentence's tokens and gap, which is its own token count (up to merges
across sentence ends, which only lower it) and does not depend on what precedes the chunk.

Any tokenizer works: a callable returning the tokens of a string (only their number is used).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from rag_dedup.chunking.memo import BoundedMemo

__all__ = ["TokenCounts", "Tokenizer", "token_counter"]

#: A callable returning the tokens of a string; only ``len`` of the result is used.
Tokenizer = Callable[[str], Sequence[Any]]

FIRST_WORD = re.compile(r"\S*")


class TokenCounts:
    """Token counts of trimmed sentences, and of the whitespace before them inside a chunk.

    A plain object with memos: it is used once or twice per sentence. Pickles as its tokenizer
    (the memos are rebuilt).
    """

    __slots__ = ("_gaps", "_words", "count", "sentences", "tokenizer")

    def __init__(self, tokenizer: Tokenizer) -> None:
        if not callable(tokenizer):
            raise TypeError(f"tokenizer must be callable (str -> tokens), got {type(tokenizer).__name__}")
        self.tokenizer = tokenizer
        #: ``len(tokenizer(text))``; see :func:`token_counter`.
        self.count: Callable[[str], int] = token_counter(tokenizer)
        #: Token counts of trimmed sentences (read with ``.get`` on hot paths; written by :meth:`tokens`).
        self.sentences: BoundedMemo[str, int] = BoundedMemo()
        self._gaps: BoundedMemo[str, int] = BoundedMemo()
        self._words: BoundedMemo[str, int] = BoundedMemo()

    def __getstate__(self) -> dict[str, Any]:
        return {"tokenizer": self.tokenizer}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["tokenizer"])  # type: ignore[misc]

    def tokens(self, sentence: str) -> int:
        """The token count of a trimmed sentence or piece."""
        hit = self.sentences.get(sentence)
        if hit is None:
            hit = self.sentences.put(sentence, self.count(sentence), len(sentence))
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
        word_end = FIRST_WORD.match(text, end).end()
        key = text[start:word_end]
        delta = self._gaps.get(key)
        if delta is None:
            word = text[end:word_end]
            alone = self._words.get(word)
            if alone is None:
                alone = self._words.put(word, self.count(word), len(word))
            delta = self._gaps.put(key, self.count(key) - alone, len(key))
        return delta

    def cached_gap(self, key: str) -> int | None:
        """The memoised :meth:`gap` for ``key`` (the whitespace and the unit's first word), if any."""
        return self._gaps.get(key)


def token_counter(tokenizer: Tokenizer) -> Callable[[str], int]:
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
    except ImportError:
        return count
    encoding = getattr(tokenizer.func, "__self__", None)
    if not isinstance(encoding, tiktoken.Encoding) or getattr(tokenizer.func, "__func__", None) is not tiktoken.Encoding.encode:
        return count
    prefix = os.path.commonprefix(sorted(encoding.special_tokens_set))
    if not prefix:
        return count
    from rag_dedup.chunking._tiktoken_internals import core_encode_ordinary

    ordinary = core_encode_ordinary(encoding)

    def count_ordinary(text: str) -> int:
        if prefix in text:
            return len(tokenizer(text))
        try:
            return len(ordinary(text))
        except UnicodeEncodeError:
            return len(tokenizer(text))

    return count_ordinary
