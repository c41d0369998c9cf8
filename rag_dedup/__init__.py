"""rag-dedup: remove duplicated evidence from retrieval-augmented generation.

The public API is what this module exports; everything else may change. The core (normalisation,
shingles, MinHash, LSH, :class:`DedupIndex`) needs no LlamaIndex; the LlamaIndex components
(:class:`SentenceChunker`, :class:`DedupTransform`, :class:`DedupPostprocessor`,
:class:`DistinctRetriever`) and the node metadata keys are imported on first use, so
``import rag_dedup`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rag_dedup._extras import lazy_exports
from rag_dedup.errors import (
    CorruptIndexError,
    CorruptResultError,
    IndexIncomplete,
    IndexMismatchError,
    InvalidTextError,
    KeyConflictError,
    LockLost,
    LockTimeout,
    NamespaceLost,
    PolicyError,
    RagDedupError,
    RedisConfigurationError,
    RedisUnavailable,
    SharedIndexRequired,
    SparkSetupError,
    TransformStateError,
)
from rag_dedup.index import DedupIndex, Match
from rag_dedup.lsh import candidate_probability, choose_bands, knee
from rag_dedup.normalize import canonical, exact_key
from rag_dedup.policy import Member, longest_then_authority
from rag_dedup.shingles import shingle_hashes
from rag_dedup.similarity import jaccard
from rag_dedup.stamps import DEDUP_CLUSTER, DEDUP_COLLAPSED, DEDUP_DUPLICATE_OF
from rag_dedup.storage import MemoryStorage, Storage
from rag_dedup.surrogates import escape_surrogates

if TYPE_CHECKING:
    from rag_dedup.llama_index.chunking import SentenceChunker
    from rag_dedup.llama_index.postprocessor import DedupPostprocessor
    from rag_dedup.llama_index.retriever import DistinctRetriever
    from rag_dedup.llama_index.transform import DedupTransform

__all__ = [
    "DEDUP_CLUSTER",
    "DEDUP_COLLAPSED",
    "DEDUP_DUPLICATE_OF",
    "CorruptIndexError",
    "CorruptResultError",
    "DedupIndex",
    "DedupPostprocessor",
    "DedupTransform",
    "DistinctRetriever",
    "IndexIncomplete",
    "IndexMismatchError",
    "InvalidTextError",
    "KeyConflictError",
    "LockLost",
    "LockTimeout",
    "Match",
    "Member",
    "MemoryStorage",
    "NamespaceLost",
    "PolicyError",
    "RagDedupError",
    "RedisConfigurationError",
    "RedisUnavailable",
    "SentenceChunker",
    "SharedIndexRequired",
    "SparkSetupError",
    "Storage",
    "TransformStateError",
    "candidate_probability",
    "canonical",
    "choose_bands",
    "escape_surrogates",
    "exact_key",
    "jaccard",
    "knee",
    "longest_then_authority",
    "shingle_hashes",
]
__version__ = "0.1.0"

# The LlamaIndex components, by the module that defines each.
_LAZY = {
    "SentenceChunker": "rag_dedup.llama_index.chunking",
    "DedupTransform": "rag_dedup.llama_index.transform",
    "DedupPostprocessor": "rag_dedup.llama_index.postprocessor",
    "DistinctRetriever": "rag_dedup.llama_index.retriever",
}
__getattr__, __dir__ = lazy_exports(globals(), _LAZY, __all__)
