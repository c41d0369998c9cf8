"""rag-dedup: remove duplicated evidence from retrieval-augmented generation.

The public API is what this module exports; everything else may change.
"""

from rag_dedup.index import DedupIndex, IndexMismatchError, Match
from rag_dedup.lsh import candidate_probability, choose_bands, knee
from rag_dedup.normalize import canonical, exact_key
from rag_dedup.policy import Member, longest_then_authority
from rag_dedup.shingles import jaccard, shingle_hashes
from rag_dedup.storage import CorruptIndexError, MemoryStorage, Storage

__all__ = [
    "CorruptIndexError",
    "DedupIndex",
    "IndexMismatchError",
    "Match",
    "Member",
    "MemoryStorage",
    "Storage",
    "candidate_probability",
    "canonical",
    "choose_bands",
    "exact_key",
    "jaccard",
    "knee",
    "longest_then_authority",
    "shingle_hashes",
]
__version__ = "0.1.0"
