"""The chunking core: content-defined, sentence-aligned chunks of any text; no framework.

:class:`Chunker` is what the framework adapters wrap (LlamaIndex's ``SentenceChunker`` today): text
and a tokenizer in, exact ``(start, end)`` spans out. The modules, one job each: ``blocks``
(paragraphs, headings, list items), ``sentences`` (punkt over blocks), ``tokens`` (memoised token
counts), ``units`` (sentences with their counts), ``cuts`` (the cut plan), ``memo`` (the bounded
memo); ``_punkt_internals`` and ``_tiktoken_internals`` are the only doors to those libraries'
private names.
"""

from rag_dedup.chunking.blocks import CONTINUES, STARTS_BLOCK, STARTS_HEADING, Span
from rag_dedup.chunking.chunker import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, Chunk, Chunker
from rag_dedup.chunking.cuts import plan_chunks
from rag_dedup.chunking.tokens import TokenCounts, Tokenizer
from rag_dedup.chunking.units import Units

__all__ = [
    "CONTINUES",
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "STARTS_BLOCK",
    "STARTS_HEADING",
    "Chunk",
    "Chunker",
    "Span",
    "TokenCounts",
    "Tokenizer",
    "Units",
    "plan_chunks",
]
