"""``DedupPostprocessor``: at query time, no two of the passages handed to the LLM are the same evidence.

Plug it in wherever LlamaIndex takes node postprocessors::

    query_engine = index.as_query_engine(
        similarity_top_k=30,                                   # over-fetch: 3x what you want to keep
        node_postprocessors=[DedupPostprocessor(top_n=10)],
    )

Given the retrieved nodes, best score first, it keeps a node unless it duplicates a node already kept,
and folds the duplicate into the kept node's ``metadata["dedup_collapsed"]`` (node id, document, score,
reason, similarity), so citations survive. Two nodes are duplicates when

* ``"cluster"``: both belong to one cluster: the *current* cluster when a ``DedupIndex`` is given and
  holds them (``index.resolve(node_id)``), else the cluster stamped at ingest by ``DedupTransform``;
* ``"exact"`` / ``"near"``: at least one of them has no cluster, and the Jaccard similarity of their word
  5-gram shingle sets is at least ``threshold`` (1.0 is an exact duplicate up to normalisation).

Nodes without a cluster are compared by text, so the postprocessor also works on an index that was built
without rag-dedup. The similarity computed is exact, not a MinHash estimate (shingles are compared by
64-bit hashes, at least 58 bits of which count: two different shingles share one with probability
about 2^-58): for the tens to hundreds of nodes one query returns, hashing all their shingles in one
pass and sorting them together once, then counting the pairs within runs of equal shingles, gives the
Jaccard similarity of every pair for less than MinHash signatures of the same nodes would cost (see
:func:`~rag_dedup.shingles.shingle_stream` and :func:`jaccard_matrix`); exact copies are shingled
once. Two nodes that
both carry a cluster are compared by cluster alone (the index compared their texts at ingest): the fast
path. The index splits a chain A~B~C around representatives, so members of two clusters can still be
within the threshold of each other; set ``trust_clusters=False`` to compare their texts as well, which
guarantees that no two kept nodes reach the threshold (``DistinctRetriever`` does so by default).

Options: ``top_n`` keeps at most that many nodes (over-fetch ``similarity_top_k = 3 * top_n`` so that
``top_n`` distinct ones remain; ``DistinctRetriever`` fetches more until they do); ``show`` picks the text
a group shows, its best-scoring member or its cluster's representative; ``merge_overlaps`` joins kept
windows of one document that overlap (the chunker's overlap) into one contiguous passage.

Nodes without text (images, empty nodes) pass through untouched and keep their place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.storage.docstore.types import BaseDocumentStore

from rag_dedup.collapse import Collapser, Kept, Passage
from rag_dedup.index import DedupIndex
from rag_dedup.llama_index.metadata import DEDUP_CLUSTER, DEDUP_COLLAPSED, collapsed_entry, dedup_text, hide_keys
from rag_dedup.shingles import DEFAULT_NGRAM
from rag_dedup.similarity import TextSimilarity

__all__ = ["DedupPostprocessor"]

_COLLAPSED_ONLY = (DEDUP_COLLAPSED,)


def _text_of(node: BaseNode) -> str | None:
    """:func:`~rag_dedup.llama_index.metadata.dedup_text`, with a short path for a plain ``TextNode``."""
    if type(node) is TextNode:
        text = node.text
        return None if not text or text.isspace() else text  # `not text.strip()`, without a copy
    return dedup_text(node)


def _score(nws: NodeWithScore) -> float:
    return -math.inf if nws.score is None else float(nws.score)


class DedupPostprocessor(BaseNodePostprocessor):
    """Keep the best-scoring node of each group of duplicates, in score order (see the module docstring).

    Args:
        threshold: Jaccard similarity (of word 5-gram shingle sets) at or above which two nodes
            without a common cluster are duplicates. Defaults to the index's threshold, else 0.8.
        top_n: Keep at most this many nodes (``None``: all distinct ones).
        index: A ``DedupIndex`` to ask for current clusters (``index.matches(node_ids)``). Optional:
            without it, ingest stamps are used, and nodes without stamps are compared by text.
        show: Which text a group shows: ``"best"``, its best-scoring member; ``"representative"``, its
            cluster's representative, if that node was retrieved too or can be read from ``docstore``.
            Either way the group keeps its best score and its place.
        merge_overlaps: Join kept nodes of one document whose character ranges overlap into one passage.
        trust_clusters: Compare two nodes that both have a cluster by cluster alone (fast); ``False``
            compares their texts too.
        ngram: Words per shingle for text comparison (the index's, when one is given).
        docstore: Where to read a representative that was not retrieved, for ``show="representative"``.
        cache_size: How many texts' shingles to remember between calls (0: none). Results never
            depend on it; repeated chunks are compared faster.

    Raises:
        ValueError: A value out of range (the message gives the bound).
        TypeError: ``index`` or ``docstore`` of the wrong type.

    Example:
        >>> from llama_index.core.schema import TextNode, NodeWithScore
        >>> text = "Permission is hereby granted, free of charge, to any person obtaining a copy"
        >>> rows = [(text, "a", 3.0), (text + ".", "b", 2.0), ("Something else entirely here", "c", 1.0)]
        >>> nodes = [NodeWithScore(node=TextNode(text=t, id_=i), score=s) for t, i, s in rows]
        >>> kept = DedupPostprocessor().postprocess_nodes(nodes)
        >>> [n.node_id for n in kept], [c["node_id"] for c in kept[0].node.metadata["dedup_collapsed"]]
        (['a', 'c'], ['b'])
    """

    model_config = ConfigDict(validate_assignment=True, arbitrary_types_allowed=True)

    threshold: float = Field(
        default=0.8, gt=0.0, le=1.0, description="Jaccard similarity at or above which two texts are duplicates."
    )
    top_n: int | None = Field(
        default=None, ge=1, description="Keep at most this many nodes; None keeps all distinct ones."
    )
    show: Literal["best", "representative"] = Field(
        default="best", description="Text a group shows: its best-scoring member, or its cluster's representative."
    )
    merge_overlaps: bool = Field(
        default=False, description="Join kept windows of one document that overlap into one contiguous passage."
    )
    trust_clusters: bool = Field(
        default=True, description="Compare two nodes that both have a cluster by cluster alone, not by text."
    )
    ngram: int = Field(default=DEFAULT_NGRAM, ge=1, le=64, description="Words per shingle for text comparison.")

    cache_size: int = Field(
        default=4096, ge=0, description="Texts whose shingles are remembered between calls (0: none)."
    )

    _index: DedupIndex | None = PrivateAttr(default=None)
    _docstore: BaseDocumentStore | None = PrivateAttr(default=None)
    _similarity: TextSimilarity = PrivateAttr(default_factory=TextSimilarity)

    def __init__(
        self,
        threshold: float | None = None,
        top_n: int | None = None,
        index: DedupIndex | None = None,
        show: Literal["best", "representative"] = "best",
        merge_overlaps: bool = False,
        trust_clusters: bool = True,
        ngram: int | None = None,
        docstore: BaseDocumentStore | None = None,
        cache_size: int = 4096,
        **kwargs: Any,
    ) -> None:
        if index is not None and not isinstance(index, DedupIndex):
            raise TypeError(f"index must be a rag_dedup.DedupIndex, got {type(index).__name__}")
        if docstore is not None and not isinstance(docstore, BaseDocumentStore):
            raise TypeError(f"docstore must be a llama_index BaseDocumentStore, got {type(docstore).__name__}")
        if threshold is None:
            threshold = float(getattr(index, "threshold", 0.8)) if index is not None else 0.8
        if ngram is None:
            ngram = int(getattr(index, "ngram", DEFAULT_NGRAM)) if index is not None else DEFAULT_NGRAM
        super().__init__(
            threshold=threshold,
            top_n=top_n,
            show=show,
            merge_overlaps=merge_overlaps,
            trust_clusters=trust_clusters,
            ngram=ngram,
            cache_size=cache_size,
            **kwargs,
        )
        self._index = index
        self._docstore = docstore

    @classmethod
    def class_name(cls) -> str:
        return "DedupPostprocessor"

    @property
    def index(self) -> DedupIndex | None:
        """The ``DedupIndex`` asked for current clusters, or ``None``."""
        return self._index

    # -- the adapter: nodes to passages, the core's decision back onto nodes ------------------------

    def _collapser(self) -> Collapser:
        return Collapser(
            self.threshold,
            ngram=self.ngram,
            trust_clusters=self.trust_clusters,
            merge_overlaps=self.merge_overlaps,
            index=self._index,
            cache_size=self.cache_size,
            similarity=self._similarity,
        )

    def _postprocess_nodes(
        self,
        nodes: list[NodeWithScore],
        query_bundle: QueryBundle | None = None,
    ) -> list[NodeWithScore]:
        kept = self.collapse(nodes)
        return kept if self.top_n is None else kept[: self.top_n]

    def collapse(self, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        """All distinct nodes of ``nodes``, best score first, duplicates folded in (``top_n`` not applied)."""
        if not nodes:
            return []
        ordered = sorted(nodes, key=_score, reverse=True)  # stable: ties keep the retriever's order
        spans = self.merge_overlaps
        passages = [_passage(nws, spans) for nws in ordered]
        out: list[NodeWithScore] = []
        for kept in self._collapser().collapse(passages):
            nws = ordered[kept.position]
            if passages[kept.position].text is None:
                out.append(nws)  # nothing to compare: passes through untouched
                continue
            folded = [
                collapsed_entry(ordered[f.position].node, f.score, f.reason, f.similarity) for f in kept.folded
            ]
            if kept.text is not None:  # windows joined into one passage
                node = nws.node.model_copy(
                    update={"text": kept.text, "start_char_idx": kept.start, "end_char_idx": kept.end}
                )
                nws = NodeWithScore(node=node, score=kept.score)
            elif self.show == "representative":
                nws, folded = self._show_representative(nws, kept, ordered, folded)
            out.append(_annotate(nws, folded, kept.score))
        return out

    def clear_cache(self) -> None:
        """Forget the remembered shingles (results never depend on them; only the time does)."""
        self._similarity.clear()

    def _show_representative(
        self, shown: NodeWithScore, kept: Kept, ordered: Sequence[NodeWithScore], folded: list[dict[str, Any]]
    ) -> tuple[NodeWithScore, list[dict[str, Any]]]:
        """Show the cluster's representative in place of the kept node, where it can be had."""
        cluster = kept.cluster
        if cluster is None or shown.node.node_id == cluster:
            return shown, folded
        for f in kept.folded:
            if f.key == cluster:
                rep_node: BaseNode | None = ordered[f.position].node
                break
        else:
            rep_node = self._docstore.get_node(cluster, raise_error=False) if self._docstore is not None else None
        if rep_node is None or dedup_text(rep_node) is None:
            return shown, folded  # the representative cannot be read: keep showing the kept node
        folded = [e for e in folded if e["node_id"] != rep_node.node_id]
        folded.insert(0, collapsed_entry(shown.node, shown.score, "cluster", None))
        return NodeWithScore(node=rep_node, score=kept.score), folded


def _passage(nws: NodeWithScore, spans: bool) -> Passage:
    """The core's view of a node: its id, text, score and cluster stamp (and its span, for merging)."""
    node = nws.node
    cluster = node.metadata.get(DEDUP_CLUSTER)  # read_cluster, inlined
    cluster = cluster if isinstance(cluster, str) else None
    if spans and isinstance(node, TextNode):
        return Passage(
            node.node_id, _text_of(node), nws.score, cluster, node.ref_doc_id, node.start_char_idx, node.end_char_idx
        )
    return Passage(node.node_id, _text_of(node), nws.score, cluster)


def _annotate(shown: NodeWithScore, folded: list[dict[str, Any]], score: float | None) -> NodeWithScore:
    """The shown node, with ``dedup_collapsed`` written on it (in place, as LlamaIndex postprocessors
    annotate the fresh nodes a retriever returns) and hidden from embed and LLM text."""
    node = shown.node
    node.metadata[DEDUP_COLLAPSED] = folded
    hide_keys(node, _COLLAPSED_ONLY)
    if shown.score != score:
        shown = NodeWithScore(node=node, score=score)
    return shown
