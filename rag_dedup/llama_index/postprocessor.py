"""``DedupPostprocessor``: at query time, no two of the passages handed to the LLM are the same evidence.

Plug it in wherever LlamaIndex takes node postprocessors::

    query_engine = index.as_query_engine(
        similarity_top_k=30,                                   # over-fetch: 3x what you want to keep
        node_postprocessors=[DedupPostprocessor(top_n=10)],
    )

A thin adapter over the framework-free :mod:`rag_dedup.collapse` (which holds the rules, the
guarantees and the math): the nodes become passages (node id, text, score, ``dedup_cluster`` stamp),
and the decision comes back as nodes. Reading the nodes in the order given (the first occurrence is
the best-ranked one, as a retriever or an earlier postprocessor such as ``LongContextReorder`` placed
it), it keeps a node unless it duplicates a node already kept, and folds the duplicate into the kept
node's ``metadata["dedup_collapsed"]`` (node id, document, score, reason, similarity), so citations
survive. By default every decision is checked on the texts: no two kept nodes have Jaccard similarity
at or above ``threshold``, and no node is folded into one it shares less than the drift floor with;
``trust_clusters=True`` takes cluster stamps as proof instead (faster on long unseen texts, without
those guarantees).

The kept nodes keep their input order. A kept node that absorbed others is returned as a *copy*
carrying ``dedup_collapsed``; the caller's nodes are never written to, so a retriever that returns
the same node objects on every query never shows a stale list. A node that already carries
``dedup_collapsed`` (from ``DistinctRetriever`` or an earlier pass) keeps those entries, and the
entries of a node folded into it are carried over: a second pass merges citations, never erases them.
A node with a NaN score is read last (it never absorbs a scored copy of itself).

Options: ``top_n`` keeps at most that many nodes (over-fetch ``similarity_top_k = 3 * top_n`` so that
``top_n`` distinct ones remain; ``DistinctRetriever`` fetches more until they do); ``show`` picks the text
a group shows, its first member or its cluster's representative; ``merge_overlaps`` joins kept
windows of one document that overlap (the chunker's overlap) into one contiguous passage.

Nodes without text (images) pass through untouched and keep their place; nodes with empty text pass
through too, but never take one of the ``top_n`` places.
"""

from __future__ import annotations

import copy
import logging
import pickle
from collections.abc import Sequence
from typing import Any, Literal

from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, ImageNode, NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo, TextNode
from llama_index.core.storage.docstore.types import BaseDocumentStore

from rag_dedup.collapse import _ROUNDED, Collapser, Kept, Passage, first_of_each_key, rounded
from rag_dedup.index import DedupIndex
from rag_dedup.llama_index._nodes import presigned, private, shallow_copy
from rag_dedup.llama_index.metadata import DEDUP_CLUSTER, DEDUP_COLLAPSED, collapsed_entry, dedup_text
from rag_dedup.settings import check_cache_size, check_drift_floor, check_ngram, check_threshold, check_top
from rag_dedup.shingles import DEFAULT_NGRAM
from rag_dedup.similarity import TextSimilarity

_log = logging.getLogger(__name__)

__all__ = ["DedupPostprocessor"]

_SOURCE = NodeRelationship.SOURCE
_OTHER = object()  # not a TextNode: collapsed_entry reads it

def _text_of(node: BaseNode) -> str | None:
    """The text the core compares: a ``TextNode``'s text (blank included: it carries no evidence), else
    :func:`~rag_dedup.llama_index.metadata.dedup_text` (``None`` for images: nothing to compare)."""
    if type(node) is TextNode:
        return node.text
    text = dedup_text(node)
    if text is None and isinstance(node, TextNode) and not isinstance(node, ImageNode):
        return ""  # a TextNode subclass with blank text
    return text


class DedupPostprocessor(BaseNodePostprocessor):
    """Keep the first node of each group of duplicates, in input order (see the module docstring).

    Args:
        threshold: Jaccard similarity (of word 5-gram shingle sets) at or above which two nodes
            are duplicates. Defaults to the index's threshold, else 0.8.
        top_n: Keep at most this many nodes (``None``: all distinct ones).
        index: A ``DedupIndex`` to ask for current clusters (``index.matches(node_ids)``). Optional:
            without it, ingest stamps are used, and nodes without stamps are compared by text.
        show: Which text a group shows: ``"best"``, its best-ranked member (the first in the order
            given: a retriever's or a reranker's ranking); ``"representative"``, its
            cluster's representative, if that node was retrieved too or can be read from ``docstore``.
            Either way the group keeps its first member's score and place.
        merge_overlaps: Join kept nodes of one document whose character ranges overlap into one passage.
        trust_clusters: Take cluster stamps as proof: two nodes of one cluster fold without a text
            check, two of different clusters are not compared. ``False`` (default): checked on texts.
        floor: The least Jaccard similarity at which a node folds into a kept node of its cluster
            (at most ``threshold``). Defaults to the index's ``drift_floor``, else ``threshold - 0.1``.
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

    # The bounds are rag_dedup.settings' (one rule per parameter, the same messages as the core's and
    # the other adapters'), checked by the validators below, at construction and on assignment.
    threshold: float = Field(default=0.8, description="Jaccard similarity at or above which two texts are duplicates.")
    top_n: int | None = Field(default=None, description="Keep at most this many nodes; None keeps all distinct ones.")
    show: Literal["best", "representative"] = Field(
        default="best", description="Text a group shows: its best-ranked (first) member, or its cluster's representative."
    )
    merge_overlaps: bool = Field(
        default=False, description="Join kept windows of one document that overlap into one contiguous passage."
    )
    trust_clusters: bool = Field(
        default=False, description="Take cluster stamps as proof (no text check between clustered nodes)."
    )
    floor: float | None = Field(default=None, description="Least similarity to fold into a node of one's cluster.")
    ngram: int = Field(default=DEFAULT_NGRAM, description="Words per shingle for text comparison.")

    cache_size: int = Field(default=4096, description="Texts whose shingles are remembered between calls (0: none).")

    _index: DedupIndex | None = PrivateAttr(default=None)
    _docstore: BaseDocumentStore | None = PrivateAttr(default=None)
    _similarity: TextSimilarity = PrivateAttr(default_factory=TextSimilarity)
    # The Collapser for the current settings and the settings it was made for (one private attribute:
    # pydantic resolves each private attribute read through __getattr__, a Python call per read).
    _made: tuple[tuple[Any, ...], Collapser] | None = PrivateAttr(default=None)

    @field_validator("threshold", mode="before")
    @classmethod
    def _check_threshold(cls, value: object, info: ValidationInfo) -> float:
        threshold = check_threshold(value)
        floor = info.data.get("floor")  # set: a threshold assigned later, which must stay above the floor
        if floor is not None:
            check_drift_floor(floor, threshold, "floor")
        return threshold

    @field_validator("top_n", mode="before")
    @classmethod
    def _check_top_n(cls, value: object) -> int | None:
        return check_top(value, "top_n", optional=True)

    @field_validator("floor", mode="before")
    @classmethod
    def _check_floor(cls, value: object, info: ValidationInfo) -> float | None:
        return None if value is None else check_drift_floor(value, info.data.get("threshold", 1.0), "floor")

    @field_validator("ngram", mode="before")
    @classmethod
    def _check_ngram(cls, value: object) -> int:
        return check_ngram(value)

    @field_validator("cache_size", mode="before")
    @classmethod
    def _check_cache_size(cls, value: object) -> int:
        return check_cache_size(value)

    def __init__(
        self,
        threshold: float | None = None,
        top_n: int | None = None,
        index: DedupIndex | None = None,
        show: Literal["best", "representative"] = "best",
        merge_overlaps: bool = False,
        trust_clusters: bool = False,
        floor: float | None = None,
        ngram: int | None = None,
        docstore: BaseDocumentStore | None = None,
        cache_size: int = 4096,
        **kwargs: Any,
    ) -> None:
        if docstore is not None and not isinstance(docstore, BaseDocumentStore):
            raise TypeError(f"docstore must be a llama_index BaseDocumentStore, got {type(docstore).__name__}")
        # The core checks every setting (rag_dedup.settings' rules) and resolves the index's defaults.
        rules = Collapser(threshold, floor=floor, ngram=ngram, index=index, cache_size=cache_size)
        super().__init__(
            threshold=rules.threshold,
            top_n=top_n,
            show=show,
            merge_overlaps=merge_overlaps,
            trust_clusters=trust_clusters,
            floor=floor,
            ngram=rules.ngram,
            cache_size=cache_size,
            **kwargs,
        )
        self._index = index
        self._docstore = docstore

    @classmethod
    def class_name(cls) -> str:
        return "DedupPostprocessor"

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> DedupPostprocessor:
        """A copy with the same settings that reads the same ``index`` and ``docstore`` (stores, shared
        as a copied retriever shares its index) and remembers no shingles."""
        fields = {name: copy.deepcopy(value, memo) for name, value in self.__dict__.items()}
        return type(self)(index=self._index, docstore=self._docstore, **fields)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with its index and docstore (LlamaIndex's components are rebuilt from their fields
        alone, which would leave a copy in another process answering from stale stamps without its
        index). A field that does not pickle (a callback manager's handler) is left out with a logged
        warning, as LlamaIndex leaves it out, and takes its default.

        Raises:
            TypeError: The docstore does not pickle (one that holds a client): name the docstore
                again in the other process, ``DedupPostprocessor(docstore=...)``.
        """
        fields = {}
        for name, value in self.__dict__.items():
            try:
                pickle.dumps(value)
            except Exception:  # noqa: BLE001 - as llama_index.core.schema.BaseComponent.__getstate__
                _log.warning("DedupPostprocessor: leaving out the field %s, which cannot be pickled", name)
                continue
            fields[name] = value
        if self._docstore is not None:
            try:
                pickle.dumps(self._docstore)
            except Exception as exc:  # noqa: BLE001 - any object may refuse
                raise TypeError(
                    f"DedupPostprocessor cannot be pickled with its docstore ({type(self._docstore).__name__}: {exc}); "
                    "make the copy in the other process with DedupPostprocessor(docstore=...) of its own"
                ) from None
        return {"fields": fields, "index": self._index, "docstore": self._docstore}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(index=state["index"], docstore=state["docstore"], **state["fields"])  # type: ignore[misc]

    @property
    def index(self) -> DedupIndex | None:
        """The ``DedupIndex`` asked for current clusters, or ``None``."""
        return self._index

    # -- the adapter: nodes to passages, the core's decision back onto nodes ------------------------

    def _collapser(self) -> Collapser:
        """The core's collapse for the current settings, made anew only when a setting was assigned."""
        settings = (self.threshold, self.floor, self.ngram, self.trust_clusters, self.merge_overlaps, self.cache_size)
        made = private(self, "_made")
        if made is not None and made[0] == settings:
            return made[1]
        collapser = Collapser(
            self.threshold,
            floor=self.floor,
            ngram=self.ngram,
            trust_clusters=self.trust_clusters,
            merge_overlaps=self.merge_overlaps,
            index=self._index,
            cache_size=self.cache_size,
            similarity=self._similarity,
        )
        self._made = (settings, collapser)
        return collapser

    @presigned  # the instrumentation span around it reads its signature at every call
    def _postprocess_nodes(
        self,
        nodes: list[NodeWithScore],
        query_bundle: QueryBundle | None = None,
    ) -> list[NodeWithScore]:
        return self.collapse(nodes, self.top_n)

    def collapse(self, nodes: Sequence[NodeWithScore], top_n: int | None = None) -> list[NodeWithScore]:
        """The distinct nodes of ``nodes`` in input order, duplicates folded in, the first ``top_n``
        that carry evidence (``None``: all; a node with blank text takes no place).

        A node id that comes again (the same node retrieved twice, by two retrievers of a fusion) is one
        node, as in LlamaIndex's stores: its later occurrences are left out, not folded in as copies
        (:func:`~rag_dedup.collapse.first_of_each_key`)."""
        if not nodes:
            return []
        try:
            keep = first_of_each_key([nws.node.id_ for nws in nodes])
        except AttributeError:  # not a NodeWithScore: named, not a bare AttributeError from deep inside
            i, bad = next((i, n) for i, n in enumerate(nodes) if not isinstance(n, NodeWithScore))
            raise TypeError(f"nodes[{i}] is a {type(bad).__name__}, not a NodeWithScore (a retriever's result: "
                            "NodeWithScore(node=..., score=...))") from None
        if keep is not None:
            nodes = [nodes[i] for i in keep]
        collapser = self._collapser()
        if self.merge_overlaps:
            passages = [_passage_with_span(nws) for nws in nodes]
            texts: list[str | None] = [p.text for p in passages]
            decision = collapser.collapse(passages, top_n)
        else:  # the passages' columns, without the spans: this runs for every node of every query
            keys: list[str] = []
            texts = []
            scores: list[float | None] = []
            stamps: list[str | None] = []
            for nws in nodes:
                node = nws.node
                keys.append(node.id_)
                texts.append(node.text if type(node) is TextNode else _text_of(node))
                scores.append(nws.score)
                cluster = node.metadata.get(DEDUP_CLUSTER)  # read_cluster, inlined
                stamps.append(cluster if isinstance(cluster, str) else None)
            if self.show != "representative":  # the core's column form: no Kept or Fold tuples
                return _carried(nodes, *collapser.decide_columns(keys, texts, scores, stamps, top_n)[:2])
            decision = collapser.collapse_columns(keys, texts, scores, stamps, top_n)
        show_representative = self.show == "representative"
        out: list[NodeWithScore] = []
        for kept in decision:
            nws = nodes[kept.position]
            if texts[kept.position] is None or not (kept.folded or show_representative):
                out.append(nws)  # nothing folded in (or nothing to compare): the caller's node, untouched
                continue
            own = nws.node.metadata.get(DEDUP_COLLAPSED)
            folded = [] if own is None else _entries(nws.node)
            for f in kept.folded:
                node = nodes[f.position].node
                folded.append(collapsed_entry(node, f.score, f.reason, f.similarity))
                if DEDUP_COLLAPSED in node.metadata:  # _entries, only where an earlier pass wrote
                    folded.extend(_entries(node))
            update: dict[str, Any] = {}
            shown = nws
            if kept.text is not None:  # windows joined into one passage
                update = {"text": kept.text, "start_char_idx": kept.start, "end_char_idx": kept.end,
                          "relationships": _joined_links(nws.node, [nodes[f.position].node for f in kept.folded
                                                                   if f.reason == "overlap"])}
            elif show_representative:
                shown, folded = self._show_representative(nws, kept, nodes, folded)
            if shown is nws and not kept.folded:
                out.append(nws)  # nothing folded in: the caller's node, untouched
            else:
                out.append(_annotated(shown, folded, kept.score, update))
        return out

    def clear_cache(self) -> None:
        """Forget the remembered shingles (results never depend on them; only the time does)."""
        private(self, "_similarity").clear()

    def _show_representative(
        self, shown: NodeWithScore, kept: Kept, nodes: Sequence[NodeWithScore], folded: list[dict[str, Any]]
    ) -> tuple[NodeWithScore, list[dict[str, Any]]]:
        """Show the cluster's representative in place of the kept node, where it can be had."""
        cluster = kept.cluster
        if cluster is None or shown.node.node_id == cluster:
            return shown, folded
        for f in kept.folded:
            if f.key == cluster:
                rep_node: BaseNode | None = nodes[f.position].node
                break
        else:
            rep_node = self._docstore.get_node(cluster, raise_error=False) if self._docstore is not None else None
        if rep_node is None or dedup_text(rep_node) is None:
            return shown, folded  # the representative cannot be read: keep showing the kept node
        folded = [e for e in folded if e["node_id"] != rep_node.node_id]
        folded.insert(0, collapsed_entry(shown.node, shown.score, "cluster", None))
        return NodeWithScore(node=rep_node, score=kept.score), folded


def _joined_links(kept: BaseNode, windows: Sequence[BaseNode]) -> dict[NodeRelationship, Any]:
    """The relationships of a passage joined from ``kept`` and the ``windows`` folded into it: the
    kept node's, with PREVIOUS that of the window that starts first and NEXT that of the one that ends
    last (the kept node's own pointed at windows now inside the passage, which LlamaIndex's
    ``PrevNextNodePostprocessor`` would add again)."""
    members = [kept, *windows]
    first = min(members, key=lambda n: n.start_char_idx if n.start_char_idx is not None else 0)
    last = max(members, key=lambda n: n.end_char_idx if n.end_char_idx is not None else 0)
    links = dict(kept.relationships)
    for relation, end in ((NodeRelationship.PREVIOUS, first), (NodeRelationship.NEXT, last)):
        if relation in end.relationships:
            links[relation] = end.relationships[relation]
        else:
            links.pop(relation, None)
    return links


def _carried(
    nodes: Sequence[NodeWithScore], kept: list[int], folds: dict[int, list[tuple[int, str, float | None]]]
) -> list[NodeWithScore]:
    """The core's decision (:meth:`~rag_dedup.collapse.Collapser.decide_columns`) carried onto the nodes,
    for ``show="best"`` without merging: the caller's node where nothing was folded in, else an
    :func:`_annotated` copy with the folded nodes' entries (and the entries they carried) appended to its
    own, the entries :meth:`DedupPostprocessor.collapse` writes on every path (similarities
    :func:`~rag_dedup.collapse.rounded`, read from its memo first: this runs for every fold of every query)."""
    out: list[NodeWithScore] = []
    memo = _ROUNDED
    for position in kept:
        raw = folds.get(position)
        if raw is None:
            out.append(nodes[position])  # nothing folded in (or nothing to compare): the caller's node, untouched
            continue
        nws = nodes[position]
        node = nws.node
        folded = [] if DEDUP_COLLAPSED not in node.metadata else _entries(node)
        for i, reason, similarity in raw:
            other = nodes[i]
            node = other.node
            if similarity is not None:
                similarity = memo.get(similarity) or rounded(similarity)  # a memoised 0.0 is rounded again: 0.0
            relation = node.relationships.get(_SOURCE) if type(node) is TextNode else _OTHER
            if relation is None or type(relation) is RelatedNodeInfo:  # collapsed_entry and ref_doc_id, inlined
                folded.append({
                    "node_id": node.id_,
                    "ref_doc_id": None if relation is None else relation.node_id,
                    "score": other.score,
                    "reason": reason,
                    "similarity": similarity,
                })
            else:
                folded.append(collapsed_entry(node, other.score, reason, similarity))
            if DEDUP_COLLAPSED in node.metadata:  # _entries, only where an earlier pass wrote
                folded.extend(_entries(node))
        out.append(_annotated(nws, folded, nws.score, {}))
    return out


def _passage_with_span(nws: NodeWithScore) -> Passage:
    """The core's view of a node: its id, text, score, cluster stamp, and its span, for merging."""
    node = nws.node
    cluster = node.metadata.get(DEDUP_CLUSTER)  # read_cluster, inlined
    cluster = cluster if isinstance(cluster, str) else None
    if isinstance(node, TextNode):
        return Passage(
            node.node_id, _text_of(node), nws.score, cluster, node.ref_doc_id, node.start_char_idx, node.end_char_idx
        )
    return Passage(node.node_id, _text_of(node), nws.score, cluster)


def _entries(node: BaseNode) -> list[dict[str, Any]]:
    """A copy of the ``dedup_collapsed`` list an earlier pass wrote on ``node`` (empty if none)."""
    value = node.metadata.get(DEDUP_COLLAPSED)
    return [dict(e) for e in value if isinstance(e, dict)] if isinstance(value, list) else []


def _annotated(
    shown: NodeWithScore, folded: list[dict[str, Any]], score: float | None, update: dict[str, Any]
) -> NodeWithScore:
    """A copy of ``shown`` whose node (a copy too) carries ``dedup_collapsed`` (hidden from embed and LLM
    text), with ``update`` applied to the node. Shallow copies, as pydantic's ``model_copy`` makes them
    (:func:`~rag_dedup.llama_index._nodes.shallow_copy`): the node's other fields are shared with the
    caller's node, and never written to (the metadata and the two excluded-keys lists are new)."""
    node = shown.node
    embed, llm = node.excluded_embed_metadata_keys, node.excluded_llm_metadata_keys
    metadata = node.metadata.copy()
    metadata[DEDUP_COLLAPSED] = folded
    update["metadata"] = metadata
    update["excluded_embed_metadata_keys"] = embed.copy() if DEDUP_COLLAPSED in embed else [*embed, DEDUP_COLLAPSED]
    update["excluded_llm_metadata_keys"] = llm.copy() if DEDUP_COLLAPSED in llm else [*llm, DEDUP_COLLAPSED]
    return shallow_copy(shown, {"node": shallow_copy(node, update), "score": score})
