"""``SentenceChunker`` as a LangChain ``TextSplitter``: boundary-stable, sentence-aligned chunks.

The cut plan is :class:`rag_dedup.chunking.Chunker`'s (see the README's "Chunk boundaries that follow
the text"): a chunk boundary depends on the text next to it, not on where a passage starts, so a
passage copied into two documents yields the same chunks in both, and the dedup transform finds them.
Sizes are in tokens of LlamaIndex's default tokenizer unless ``tokenizer=`` (a callable returning a
string's tokens) or LangChain's ``length_function=`` (one returning their number) is given; LangChain's
``SentenceChunker.from_tiktoken_encoder(...)`` and ``.from_huggingface_tokenizer(...)`` work as on any
``TextSplitter``.

``split_documents``/``create_documents`` keep each chunk's exact character offset in
``metadata["start_index"]`` when ``add_start_index=True``, as LangChain's splitters do (here computed
from the cut, not searched for, so a repeated sentence never gets another copy's offset).
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.documents import Document
from langchain_text_splitters import TextSplitter

from rag_dedup.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, Chunker
from rag_dedup.chunking.bundled import default_tokenizer

__all__ = ["SentenceChunker"]


@dataclass(frozen=True)
class _Counted:
    """A tokenizer made of a LangChain ``length_function``: ``len(_Counted(f)(text)) == f(text)`` (the
    chunker uses only the number of tokens). Picklable when ``f`` is."""

    length_function: Callable[[str], int]

    def __call__(self, text: str) -> range:
        n = self.length_function(text)
        try:
            count = -1 if isinstance(n, bool) else operator.index(n)
        except TypeError:
            count = -1
        if count < 0:
            raise TypeError(f"length_function must return a size (an int >= 0), got {n!r} for the text {text[:40]!r}")
        return range(count)


class SentenceChunker(TextSplitter):
    """Split text into overlapping, sentence-aligned chunks whose boundaries follow the text.

    Args:
        chunk_size: Maximum tokens per chunk, overlap included.
        chunk_overlap: Maximum tokens repeated from the previous chunk (whole sentences).
        chunk_target: The mean tokens per chunk to aim for (see :class:`~rag_dedup.chunking.Chunker`).
        language: The punkt sentence model.
        tokenizer: A callable returning a string's tokens; default LlamaIndex's (tiktoken cl100k).
        length_function: LangChain's alternative to ``tokenizer``: a callable returning a string's
            size (its number of tokens, or ``len`` for characters). Give one of the two at most.
        add_start_index: Write each chunk's character offset in its document to ``metadata["start_index"]``.

    Raises:
        TypeError, ValueError: As :class:`~rag_dedup.chunking.Chunker` (sizes out of range); both
            ``tokenizer`` and ``length_function`` given.

    Example:
        >>> chunker = SentenceChunker(chunk_size=32, chunk_overlap=8, add_start_index=True)
        >>> text = "One sentence here. " * 20
        >>> docs = chunker.create_documents([text])
        >>> all(text[d.metadata["start_index"]:].startswith(d.page_content) for d in docs)
        True
    """

    def __init__(
        self,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        *,
        chunk_target: int | None = None,
        language: str = "english",
        tokenizer: Callable[[str], Sequence[Any]] | None = None,
        length_function: Callable[[str], int] | None = None,
        add_start_index: bool = False,
    ) -> None:
        if tokenizer is not None and length_function is not None:
            raise ValueError("give tokenizer= or length_function=, not both: both say how a chunk's size is counted")
        if length_function is not None:
            if not callable(length_function):
                raise TypeError(f"length_function must be callable (str -> int), got {type(length_function).__name__}")
            tokenizer = _Counted(length_function)
        self._chunker = Chunker(
            tokenizer or default_tokenizer(),
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            chunk_target=chunk_target,
            language=language,
        )
        super().__init__(
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            length_function=self._chunker.count_tokens,
            add_start_index=add_start_index,
            strip_whitespace=False,
        )

    @property
    def chunker(self) -> Chunker:
        """The framework-free chunker this splitter wraps."""
        return self._chunker

    def split_text(self, text: str) -> list[str]:
        """The chunks of ``text``, in order (exact substrings of it)."""
        return [text[start:end] for start, end in self._chunker.chunk_spans(text)]

    def create_documents(self, texts: list[str], metadatas: list[dict[Any, Any]] | None = None) -> list[Document]:
        """One ``Document`` per chunk of each text, with a copy of that text's metadata (and ``start_index``)."""
        metadatas_ = metadatas or [{}] * len(texts)
        if len(metadatas_) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(metadatas_)} metadatas; give one metadata dict per text")
        documents = []
        for text, meta in zip(texts, metadatas_):
            for start, end in self._chunker.chunk_spans(text):
                metadata = copy.deepcopy(meta)
                if self._add_start_index:
                    metadata["start_index"] = start
                documents.append(Document(page_content=text[start:end], metadata=metadata))
        return documents
