"""The metadata keys rag-dedup writes on a framework's documents or nodes: their names, in one place.

========================  ==============  ==============================================================
key                       written at      value
========================  ==============  ==============================================================
``dedup_cluster``         ingest          the cluster id: the key of the cluster's representative
``dedup_duplicate_of``    ingest          the representative's key, or ``None`` on the representative
``dedup_collapsed``       query time      the passages folded into this one: a list of dicts
========================  ==============  ==============================================================

The two ingest stamps are flat (``str`` or ``None``), as vector stores require of metadata. Every
adapter (LlamaIndex nodes, LangChain ``Document.metadata``, Haystack ``Document.meta``) uses these names.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["DEDUP_CLUSTER", "DEDUP_COLLAPSED", "DEDUP_DUPLICATE_OF", "DEDUP_KEYS", "STAMP_KEYS"]
__all__ += ["collapsed_entries", "detached", "folded_entry"]

#: The cluster an item belonged to when it was ingested: its representative's key.
DEDUP_CLUSTER = "dedup_cluster"
#: The representative's key if the item is a duplicate, ``None`` if it is the representative.
DEDUP_DUPLICATE_OF = "dedup_duplicate_of"
#: On a passage kept at query time: the passages folded into it.
DEDUP_COLLAPSED = "dedup_collapsed"

#: The keys written at ingest time.
STAMP_KEYS: tuple[str, ...] = (DEDUP_CLUSTER, DEDUP_DUPLICATE_OF)
#: Every key rag-dedup writes.
DEDUP_KEYS: tuple[str, ...] = (DEDUP_CLUSTER, DEDUP_DUPLICATE_OF, DEDUP_COLLAPSED)


def folded_entry(
    key: str, source: str | None, score: float | None, reason: str, similarity: float | None
) -> dict[str, Any]:
    """One ``dedup_collapsed`` entry in LangChain and Haystack metadata: which passage was folded, from
    which source, with what score, and why (LlamaIndex nodes keep their ``node_id``/``ref_doc_id`` names)."""
    return {"id": key, "source": source, "score": score, "reason": reason, "similarity": similarity}


def collapsed_entries(
    own: Iterable[dict[str, Any]] | None, folds: Iterable[Any], earlier: Callable[[int], Iterable[dict[str, Any]] | None]
) -> list[dict[str, Any]]:
    """A keeper's ``dedup_collapsed`` after a collapse: its own entries from an earlier pass, then for
    each :class:`~rag_dedup.collapse.Fold` its entry followed by the entries the folded passage carried
    (``earlier(fold.position)``): a second pass merges citations, never erases them."""
    entries = list(own or [])
    for fold in folds:
        entries.append(folded_entry(fold.key, fold.ref_doc_id, fold.score, fold.reason, fold.similarity))
        entries.extend(earlier(fold.position) or [])
    return entries


def detached(metadata: dict[str, Any]) -> dict[str, Any]:
    """A copy of a document's metadata that shares nothing mutable with it, for a stamped or collapsed
    copy (nothing is written on the caller's objects, nested values included): values that are not
    None, str, int, float, bool or bytes are deep-copied, those (immutable) taken as they are; a value
    that cannot be copied (a lock, a client) is shared, as the frameworks' own shallow copies share it."""
    return {k: v if v is None or type(v) in _IMMUTABLE else _copied(v) for k, v in metadata.items()}


_IMMUTABLE = frozenset({str, int, float, bool, bytes})


def _copied(value: Any) -> Any:
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - any object may refuse to be copied; it is then shared
        return value
