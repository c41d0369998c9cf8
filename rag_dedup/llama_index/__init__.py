"""The LlamaIndex door: SentenceChunker (NodeParser), DedupTransform, DedupPostprocessor, DistinctRetriever.

Each class is a thin adapter over the framework-free core (:mod:`rag_dedup.index` and friends); this
package is the only one that imports ``llama_index``. The names are imported on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rag_dedup.llama_index.chunking import SentenceChunker
    from rag_dedup.llama_index.metadata import DEDUP_CLUSTER, DEDUP_COLLAPSED, DEDUP_DUPLICATE_OF
    from rag_dedup.llama_index.postprocessor import DedupPostprocessor
    from rag_dedup.llama_index.retriever import DistinctRetriever
    from rag_dedup.llama_index.transform import DedupTransform, SharedIndexRequired

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
    "DEDUP_CLUSTER": "rag_dedup.llama_index.metadata",
    "DEDUP_COLLAPSED": "rag_dedup.llama_index.metadata",
    "DEDUP_DUPLICATE_OF": "rag_dedup.llama_index.metadata",
    "SentenceChunker": "rag_dedup.llama_index.chunking",
    "DedupTransform": "rag_dedup.llama_index.transform",
    "SharedIndexRequired": "rag_dedup.llama_index.transform",
    "DedupPostprocessor": "rag_dedup.llama_index.postprocessor",
    "DistinctRetriever": "rag_dedup.llama_index.retriever",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rag_dedup.llama_index' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
