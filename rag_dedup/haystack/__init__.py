"""The Haystack door: the same engine as Haystack components.

=========================  ==============================================================================
component                  role
=========================  ==============================================================================
``DocumentDeduplicator``   ingest: index documents, stamp ``meta``, tag or drop (before a DocumentWriter)
``SentenceChunker``        ingest: boundary-stable chunks (sets ``source_id``, ``split_id``, ``split_idx_start``)
``DuplicateCollapser``     query: fold near-identical passages after any retriever or ranker (``top_k``)
=========================  ==============================================================================

Each has ``run`` and ``run_async``, serialises with ``to_dict``/``from_dict`` (a pipeline holding them
round-trips through YAML), and opens its heavy state (the index) in ``warm_up``. Needs
``pip install "rag-dedup[haystack]"`` (haystack-ai); importing this package without it raises an ImportError
that says so.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from rag_dedup._extras import require

require("haystack", "haystack", "rag_dedup.haystack")

if TYPE_CHECKING:
    from rag_dedup.haystack.components import DocumentDeduplicator, DuplicateCollapser, SentenceChunker

__all__ = ["DocumentDeduplicator", "DuplicateCollapser", "SentenceChunker"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        value = getattr(import_module("rag_dedup.haystack.components"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rag_dedup.haystack' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
