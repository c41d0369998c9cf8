"""The LangChain door: the same engine behind LangChain's own interfaces.

=============================  ======================================  =========================================
class                          LangChain interface                     role
=============================  ======================================  =========================================
``DedupDocumentTransformer``   ``BaseDocumentTransformer``             ingest: index, stamp, tag or drop
``SentenceChunker``            ``TextSplitter``                        ingest: boundary-stable chunks
``DedupCompressor``            ``BaseDocumentCompressor``              query: fold near-identical passages
``DistinctRetriever``          ``BaseRetriever``                       query: refill until k distinct passages
=============================  ======================================  =========================================

Needs ``pip install "rag-dedup[langchain]"`` (langchain-core); importing this package without it raises an
ImportError that says so. The names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_dedup._extras import lazy_exports, require

require("langchain_core", "langchain", "rag_dedup.langchain")

if TYPE_CHECKING:
    from rag_dedup.langchain.compressor import DedupCompressor
    from rag_dedup.langchain.retriever import DistinctRetriever
    from rag_dedup.langchain.splitter import SentenceChunker
    from rag_dedup.langchain.transformer import DedupDocumentTransformer

__all__ = ["DedupCompressor", "DedupDocumentTransformer", "DistinctRetriever", "SentenceChunker"]

_LAZY = {
    "DedupCompressor": "rag_dedup.langchain.compressor",
    "DedupDocumentTransformer": "rag_dedup.langchain.transformer",
    "DistinctRetriever": "rag_dedup.langchain.retriever",
    "SentenceChunker": "rag_dedup.langchain.splitter",
}
__getattr__, __dir__ = lazy_exports(globals(), _LAZY, __all__)
