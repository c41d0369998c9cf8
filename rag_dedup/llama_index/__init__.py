"""The LlamaIndex door: SentenceChunker (NodeParser), DedupTransform, DedupPostprocessor, DistinctRetriever.

Each class is a thin adapter over the framework-free core (:mod:`rag_dedup.index` and friends); this
package is the only one that imports ``llama_index``. The names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_dedup._extras import lazy_exports
from rag_dedup.errors import SharedIndexRequired
from rag_dedup.stamps import DEDUP_CLUSTER, DEDUP_COLLAPSED, DEDUP_DUPLICATE_OF

if TYPE_CHECKING:
    from rag_dedup.llama_index.chunking import SentenceChunker
    from rag_dedup.llama_index.postprocessor import DedupPostprocessor
    from rag_dedup.llama_index.retriever import DistinctRetriever
    from rag_dedup.llama_index.transform import DedupTransform

__all__ = [
    "DEDUP_CLUSTER",
    "DEDUP_COLLAPSED",
    "DEDUP_DUPLICATE_OF",
    "DedupPostprocessor",
    "DedupTransform",
    "DistinctRetriever",
    "SentenceChunker",
    "SharedIndexRequired",
]

_LAZY = {
    "SentenceChunker": "rag_dedup.llama_index.chunking",
    "DedupTransform": "rag_dedup.llama_index.transform",
    "DedupPostprocessor": "rag_dedup.llama_index.postprocessor",
    "DistinctRetriever": "rag_dedup.llama_index.retriever",
}
__getattr__, __dir__ = lazy_exports(globals(), _LAZY, __all__)
