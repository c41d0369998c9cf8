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

from typing import TYPE_CHECKING

from rag_dedup._extras import lazy_exports, require

require("haystack", "haystack", "rag_dedup.haystack")

if TYPE_CHECKING:
    from rag_dedup.haystack.components import DocumentDeduplicator, DuplicateCollapser, SentenceChunker

__all__ = ["DocumentDeduplicator", "DuplicateCollapser", "SentenceChunker"]
__getattr__, __dir__ = lazy_exports(globals(), dict.fromkeys(__all__, "rag_dedup.haystack.components"), __all__)
