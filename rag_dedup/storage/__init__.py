"""Where a DedupIndex keeps its state: in memory (saved to a directory) or in Redis."""

from rag_dedup.storage.base import EMPTY_GROUP, ItemRecord, Storage
from rag_dedup.storage.memory import MemoryStorage

__all__ = ["EMPTY_GROUP", "ItemRecord", "MemoryStorage", "Storage"]
