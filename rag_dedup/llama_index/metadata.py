"""The metadata rag-dedup writes on LlamaIndex nodes, and the helpers that write them (the key names
are :mod:`rag_dedup.stamps`'s, shared by every framework adapter).

Three keys, all excluded from the text a node shows its embedding model and its LLM
(``excluded_embed_metadata_keys`` and ``excluded_llm_metadata_keys``), so a stamp changes neither an
embedding nor a prompt:

========================  =====================  ==============================================================
key                       written by             value
========================  =====================  ==============================================================
``dedup_cluster``         ``DedupTransform``     the cluster id: the key (node id) of the cluster's representative
``dedup_duplicate_of``    ``DedupTransform``     the representative's key, or ``None`` on the representative itself
``dedup_collapsed``       ``DedupPostprocessor`` the nodes folded into this one at query time: a list of dicts
                                                 ``{node_id, ref_doc_id, score, reason, similarity}``
========================  =====================  ==============================================================

The two ingest stamps are flat (``str`` or ``None``), as vector stores require of metadata. A stamp is the
cluster as it was when the node was ingested; representatives can change as documents arrive and leave,
so query-time code that holds the index asks it (``index.resolve(node_id)``) instead of trusting a stamp.

Example:
    >>> from llama_index.core.schema import TextNode
    >>> node = TextNode(text="Permission is hereby granted ...", id_="n1")
    >>> stamp_node(node, cluster="n0", duplicate_of="n0")
    >>> node.metadata
    {'dedup_cluster': 'n0', 'dedup_duplicate_of': 'n0'}
    >>> read_cluster(node), node.excluded_llm_metadata_keys
    ('n0', ['dedup_cluster', 'dedup_duplicate_of'])
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llama_index.core.schema import BaseNode, ImageNode, Node, NodeRelationship, RelatedNodeInfo, TextNode

from rag_dedup.stamps import DEDUP_CLUSTER, DEDUP_COLLAPSED, DEDUP_DUPLICATE_OF, DEDUP_KEYS, STAMP_KEYS

__all__ = [
    "DEDUP_CLUSTER",
    "DEDUP_COLLAPSED",
    "DEDUP_DUPLICATE_OF",
    "DEDUP_KEYS",
    "STAMP_KEYS",
    "collapsed_entry",
    "dedup_text",
    "hide_keys",
    "read_cluster",
    "ref_doc_id",
    "source_of",
    "stamp_node",
]



def hide_keys(node: BaseNode, keys: Iterable[str] = DEDUP_KEYS) -> None:
    """Add ``keys`` to the node's excluded embed and LLM metadata keys (each once, order kept).

    The lists are extended in place: that skips pydantic's assignment validation, which would
    otherwise dominate the cost of stamping. A list shared with other nodes then hides the keys for
    them too, which changes nothing for a node that does not carry them.
    """
    for hidden in (node.excluded_embed_metadata_keys, node.excluded_llm_metadata_keys):
        for key in keys:
            if key not in hidden:
                hidden.append(key)


def stamp_node(node: BaseNode, cluster: str, duplicate_of: str | None) -> None:
    """Write the ingest stamps on ``node`` in place and hide them from embed and LLM text.

    Args:
        node: The node.
        cluster: The cluster id (the representative's key).
        duplicate_of: The representative's key, or ``None`` when ``node`` is the representative.
    """
    node.metadata[DEDUP_CLUSTER] = cluster
    node.metadata[DEDUP_DUPLICATE_OF] = duplicate_of
    hide_keys(node, STAMP_KEYS)


def read_cluster(node: BaseNode) -> str | None:
    """The cluster stamped on ``node`` at ingest, or ``None`` if it carries no stamp."""
    value = node.metadata.get(DEDUP_CLUSTER)
    return value if isinstance(value, str) else None


def source_of(node: BaseNode) -> str:
    """The source recorded in the index for ``node``: its document's id (``ref_doc_id``), else its own id."""
    return ref_doc_id(node) or node.node_id


def dedup_text(node: BaseNode) -> str | None:
    """The text deduplication compares for ``node``, or ``None`` if the node has no text to compare.

    Images (``ImageNode``, or a ``Node`` carrying an image, audio or video resource) return ``None``
    even when they have a caption: two pictures with one caption are not the same evidence. A node whose
    text is empty or whitespace returns ``None`` as well.
    """
    if isinstance(node, ImageNode):
        return None
    if isinstance(node, TextNode):
        text = node.text
    elif isinstance(node, Node):
        if node.image_resource is not None or node.audio_resource is not None or node.video_resource is not None:
            return None
        text = node.text_resource.text if node.text_resource is not None else None
    else:
        return None
    if not isinstance(text, str) or not text.strip():
        return None
    return text


def ref_doc_id(node: BaseNode) -> str | None:
    """``node.ref_doc_id``: the node id of its SOURCE relationship, or ``None``.

    Read straight from ``relationships`` for a ``TextNode`` (the property walks ``source_node``, two
    Python-level property calls, for every node folded at query time); any other node type, or a SOURCE
    that is not one ``RelatedNodeInfo``, goes through the property (and its error for a list).
    """
    if type(node) is TextNode:
        relation = node.relationships.get(_SOURCE)
        if relation is None:
            return None
        if type(relation) is RelatedNodeInfo:
            return relation.node_id
    return node.ref_doc_id


_SOURCE = NodeRelationship.SOURCE


def collapsed_entry(node: BaseNode, score: float | None, reason: str, similarity: float | None) -> dict[str, Any]:
    """One ``dedup_collapsed`` entry: which node was folded, from which document, and why."""
    return {
        "node_id": node.id_ if type(node) is TextNode else node.node_id,
        "ref_doc_id": ref_doc_id(node),
        "score": score,
        "reason": reason,
        "similarity": similarity,
    }
