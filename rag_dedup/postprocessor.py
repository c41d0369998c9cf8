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
without rag-dedup. The similarity computed is exact, not a MinHash estimate: for the tens to hundreds
of nodes one query returns, sorting their shingles together once and counting the pairs within runs of
equal shingles gives the Jaccard similarity of every pair for less than MinHash signatures of the same
nodes would cost (see :func:`jaccard_matrix`); exact copies are shingled once. Two nodes that
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

import itertools
import math
import threading
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.storage.docstore.types import BaseDocumentStore

from rag_dedup.index import DedupIndex
from rag_dedup.metadata import DEDUP_COLLAPSED, collapsed_entry, dedup_text, hide_keys, read_cluster
from rag_dedup.normalize import token_form
from rag_dedup.shingles import DEFAULT_NGRAM, shingle_hashes_many

__all__ = ["DedupPostprocessor", "jaccard_matrix", "query_shingles"]

# Shared shingles are counted pair by pair up to this many (set, set, shingle) pairs (a few MB of
# temporaries); beyond it, when many near-identical texts share most of their shingles, one matrix
# product is cheaper.
_MAX_PAIRS = 1 << 20
# The product lays shared shingles out in column blocks of this width, which bounds the (texts x block)
# 0/1 matrix to a few MB whatever the number of texts.
_BLOCK_COLUMNS = 4096
_COLLAPSED_ONLY = (DEDUP_COLLAPSED,)


def _normalize(text: str) -> str:
    """:func:`~rag_dedup.normalize.token_form`: a form whose shingles equal ``shingle_hashes(text)``.

    It has the words of ``canonical(text)`` (whitespace is left unfolded, the shingling reads words
    only); for an ASCII text it is a single ``lower()``, several times cheaper than folding whitespace.
    """
    return token_form(text)


def query_shingles(texts: Sequence[str], ngram: int = DEFAULT_NGRAM) -> list[np.ndarray]:
    """Shingle-hash sets of ``texts``, equal value for value to ``shingle_hashes(text, ngram)``,
    through the query-time normalisation of :func:`_normalize`."""
    return shingle_hashes_many([_normalize(t) for t in texts], ngram, canonicalized=True)


def jaccard_matrix(sets: Sequence[np.ndarray]) -> np.ndarray:
    """The exact Jaccard similarity of every pair of shingle-hash sets, as an ``(n, n)`` float array.

    Each set must be a sorted array of unique values (as :func:`~rag_dedup.shingles.shingle_hashes`
    returns). All values are sorted together, tagged with their set; a value held by several sets then
    forms a run, and every pair of sets in a run shares that value. ``|A ∩ B|`` is the number of runs
    holding both, ``|A ∪ B| = |A| + |B| - |A ∩ B|``. An empty set has similarity 0 with everything,
    itself included, as :func:`~rag_dedup.shingles.jaccard` has it.
    """
    n = len(sets)
    size_list = [len(s) for s in sets]
    sizes = np.array(size_list, dtype=np.int64)
    if n > 1 and sum(size_list):
        inter = _intersections(sets, sizes, n)
    else:
        inter = np.zeros((n, n), dtype=np.int64)
    np.fill_diagonal(inter, sizes)
    union = sizes[:, None] + sizes[None, :] - inter
    if min(size_list, default=1) > 0:
        return inter / union
    out = np.zeros((n, n), dtype=np.float64)
    np.divide(inter, union, out=out, where=union > 0)
    empty = sizes == 0
    out[empty, :] = 0.0
    out[:, empty] = 0.0
    return out


def _intersections(sets: Sequence[np.ndarray], sizes: np.ndarray, n: int) -> np.ndarray:
    """``|A ∩ B|`` for every pair of distinct sets (the diagonal is left to the caller)."""
    values = np.concatenate(sets)
    owners = np.repeat(np.arange(n, dtype=np.intp), sizes)
    order = np.argsort(values, kind="stable")  # the sets are sorted runs: timsort merges them fast
    values, owners = values[order], owners[order]  # within a run of equal values, owners ascend
    same = values[1:] == values[:-1]
    # Every position pairs with the later positions of its run: p with p+1 .. end-1.
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    ends = np.append(starts[1:], len(values))
    after = np.repeat(ends, ends - starts) - np.arange(len(values)) - 1
    pairs = int(after.sum())
    if pairs > _MAX_PAIRS:
        return _count_by_product(values, owners, same, n)
    first = np.repeat(np.arange(len(values)), after)
    second = first + np.arange(1, pairs + 1) - np.repeat(np.cumsum(after) - after, after)
    upper = np.bincount(owners[first] * n + owners[second], minlength=n * n).reshape(n, n)
    return upper + upper.T


def _count_by_product(values: np.ndarray, owners: np.ndarray, same: np.ndarray, n: int) -> np.ndarray:
    """Shared-value counts for all pairs as ``M Mᵀ``, ``M`` the 0/1 matrix of sets x shared values."""
    shared = np.zeros(len(values), dtype=bool)
    shared[1:] |= same
    shared[:-1] |= same
    values, owners = values[shared], owners[shared]
    column = np.concatenate(([0], np.cumsum(values[1:] != values[:-1]))).astype(np.intp)
    columns = int(column[-1]) + 1
    inter = np.zeros((n, n), dtype=np.float64)
    for first in range(0, columns, _BLOCK_COLUMNS):
        lo, hi = np.searchsorted(column, [first, first + _BLOCK_COLUMNS])
        block = np.zeros((n, min(_BLOCK_COLUMNS, columns - first)), dtype=np.float32)
        block[owners[lo:hi], column[lo:hi] - first] = 1.0
        inter += block @ block.T  # float32 sums of 0/1 are exact below 2**24
    return inter.astype(np.int64)


def _score(nws: NodeWithScore) -> float:
    return -math.inf if nws.score is None else float(nws.score)


class _Group:
    """A kept node and the nodes folded into it."""

    __slots__ = ("position", "shown", "best_score", "folded", "cluster", "members")

    def __init__(self, position: int, shown: NodeWithScore, cluster: str | None) -> None:
        self.position = position  # index in the score-ordered input
        self.shown = shown
        self.best_score = shown.score
        self.folded: list[dict[str, Any]] = []
        self.cluster = cluster
        self.members: list[NodeWithScore] = [shown]


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
    _cache: dict[tuple[int, str], tuple[str, np.ndarray]] = PrivateAttr(default_factory=dict)
    _cache_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

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

    # -- the greedy pass -------------------------------------------------------------------------

    def _clusters(self, nodes: Sequence[BaseNode]) -> list[str | None]:
        """The current cluster of each node: from the index if it holds the node, else the stamp."""
        index = self._index
        if index is None:
            return [read_cluster(n) for n in nodes]
        keys = [n.node_id for n in nodes]
        known = [k for k in dict.fromkeys(keys) if k in index]
        current = {m.key: m.cluster_id for m in index.matches(known)} if known else {}
        return [current[k] if k in current else read_cluster(n) for k, n in zip(keys, nodes)]

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
        texts = [dedup_text(n.node) for n in ordered]
        text_pos = [i for i, t in enumerate(texts) if t is not None]
        clusters: list[str | None] = [None] * len(ordered)
        for i, c in zip(text_pos, self._clusters([ordered[i].node for i in text_pos])):
            clusters[i] = c

        need_text = not self.trust_clusters or any(clusters[i] is None for i in text_pos)
        sim: list[list[float]] | None = None
        row_of: dict[int, int] = {}
        if need_text and len(text_pos) > 1:
            rows, sets = self._rows([texts[i] for i in text_pos])  # type: ignore[misc]
            row_of = dict(zip(text_pos, rows))
            sim = jaccard_matrix(sets).tolist()  # Python floats: the greedy pass reads them one by one

        groups: list[_Group] = []  # kept text nodes, score order
        by_cluster: dict[str, _Group] = {}
        passthrough: list[tuple[int, NodeWithScore]] = []
        threshold, trust = self.threshold, self.trust_clusters
        for i, nws in enumerate(ordered):
            if texts[i] is None:
                passthrough.append((i, nws))
                continue
            cluster = clusters[i]
            target: _Group | None = None
            reason, similarity = "", None
            if cluster is not None and cluster in by_cluster:
                target, reason = by_cluster[cluster], "cluster"
            elif sim is not None:
                row = sim[row_of[i]]
                for g in groups:
                    if trust and cluster is not None and g.cluster is not None:
                        continue  # both clustered, different clusters: the index already compared them
                    s = row[row_of[g.position]]
                    if s >= threshold:
                        target, reason, similarity = g, ("exact" if s >= 1.0 else "near"), round(s, 4)
                        break
            if target is None:
                group = _Group(i, nws, cluster)
                groups.append(group)
                if cluster is not None:
                    by_cluster[cluster] = group
            else:
                target.folded.append(collapsed_entry(nws.node, nws.score, reason, similarity))
                target.members.append(nws)

        if self.show == "representative":
            for g in groups:
                self._show_representative(g)
        if self.merge_overlaps:
            groups = _merge_overlaps(groups)

        kept: list[tuple[int, NodeWithScore]] = [(g.position, _annotate(g)) for g in groups]
        kept.extend(passthrough)
        kept.sort(key=lambda pair: pair[0])
        return [nws for _, nws in kept]

    def _rows(self, texts: list[str]) -> tuple[list[int], list[np.ndarray]]:
        """The row of each text in the similarity matrix, and the shingle set of each row.

        Texts equal after normalisation share a row, so exact copies are shingled once; the shingles of
        recent texts are remembered (``cache_size``), as the same chunks come back query after query.
        """
        cache, ngram = self._cache, self.ngram
        with self._cache_lock:
            known = [cache.get((ngram, t)) for t in texts]
        row_of_norm: dict[str, int] = {}
        norms: list[str] = []
        sets: list[np.ndarray | None] = []
        rows: list[int] = []
        for text, entry in zip(texts, known):
            norm = entry[0] if entry is not None else _normalize(text)
            row = row_of_norm.get(norm)
            if row is None:
                row = row_of_norm[norm] = len(norms)
                norms.append(norm)
                sets.append(None)
            if entry is not None:
                sets[row] = entry[1]
            rows.append(row)
        missing = [row for row, found in enumerate(sets) if found is None]
        if missing:
            computed = shingle_hashes_many([norms[row] for row in missing], ngram, canonicalized=True)
            for row, shingles in zip(missing, computed):
                sets[row] = shingles
        if self.cache_size:
            with self._cache_lock:
                for text, entry, row in zip(texts, known, rows):
                    if entry is None:
                        cache[(ngram, text)] = (norms[row], sets[row])  # type: ignore[assignment]
                excess = len(cache) - self.cache_size
                if excess > 0:
                    for key in list(itertools.islice(cache, excess)):
                        del cache[key]  # the oldest first: dicts keep insertion order
        return rows, sets  # type: ignore[return-value]

    def clear_cache(self) -> None:
        """Forget the remembered shingles (results never depend on them; only the time does)."""
        with self._cache_lock:
            self._cache.clear()

    def _show_representative(self, group: _Group) -> None:
        """Show the cluster's representative in place of the best-scoring member, where it can be had."""
        cluster = group.cluster
        if cluster is None or group.shown.node.node_id == cluster:
            return
        shown = group.shown
        for member in group.members[1:]:
            if member.node.node_id == cluster:
                rep_node: BaseNode | None = member.node
                break
        else:
            rep_node = self._docstore.get_node(cluster, raise_error=False) if self._docstore is not None else None
        if rep_node is None or dedup_text(rep_node) is None:
            return  # the representative cannot be read: keep showing the best-scoring text
        group.folded = [e for e in group.folded if e["node_id"] != rep_node.node_id]
        group.folded.insert(0, collapsed_entry(shown.node, shown.score, "cluster", None))
        group.shown = NodeWithScore(node=rep_node, score=group.best_score)


def _annotate(group: _Group) -> NodeWithScore:
    """The group's shown node, with ``dedup_collapsed`` written on it (in place, as LlamaIndex
    postprocessors annotate the fresh nodes a retriever returns) and hidden from embed and LLM text."""
    shown = group.shown
    node = shown.node
    node.metadata[DEDUP_COLLAPSED] = group.folded
    hide_keys(node, _COLLAPSED_ONLY)
    if shown.score != group.best_score:
        shown = NodeWithScore(node=node, score=group.best_score)
    return shown


def _span(node: BaseNode) -> tuple[int, int] | None:
    """The node's (start, end) in its document, if it is a text window whose text fills that range."""
    if not isinstance(node, TextNode) or node.ref_doc_id is None:
        return None
    start, end = node.start_char_idx, node.end_char_idx
    if start is None or end is None or end - start != len(node.text):
        return None
    return start, end


def _merge_overlaps(groups: list[_Group]) -> list[_Group]:
    """Join kept windows of one document whose ranges overlap; the joined passage takes the better place.

    Two windows join only where the text they claim to share is the same text, so positions that do not
    describe the node text (a chunker that strips or rewrites) never produce a spliced passage.
    """
    spans = {id(g): _span(g.shown.node) for g in groups}
    by_doc: dict[str, list[_Group]] = {}
    for g in groups:
        if spans[id(g)] is not None:
            by_doc.setdefault(g.shown.node.ref_doc_id, []).append(g)  # type: ignore[arg-type]
    absorbed: set[int] = set()
    for members in by_doc.values():
        if len(members) < 2:
            continue
        members.sort(key=lambda g: spans[id(g)])  # type: ignore[arg-type, return-value]
        run: list[_Group] = [members[0]]
        text = members[0].shown.node.text  # type: ignore[attr-defined]
        start, end = spans[id(members[0])]  # type: ignore[misc]
        for g in [*members[1:], None]:
            if g is not None:
                s, e = spans[id(g)]  # type: ignore[misc]
                other = g.shown.node.text  # type: ignore[attr-defined]
                shared = min(end, e) - s  # length of the range both claim, if they overlap
                if shared > 0 and text[s - start : s - start + shared] == other[:shared]:
                    if e > end:
                        text, end = text + other[end - s :], e
                    run.append(g)
                    continue
            if len(run) > 1:
                _join(run, text, start, end, absorbed)
            if g is not None:
                run, text, (start, end) = [g], g.shown.node.text, spans[id(g)]  # type: ignore[attr-defined, misc]
    return [g for g in groups if id(g) not in absorbed]


def _join(run: list[_Group], text: str, start: int, end: int, absorbed: set[int]) -> None:
    """Make the best-placed group of ``run`` show the joined passage and fold the others into it."""
    head = min(run, key=lambda g: g.position)
    for g in run:
        if g is head:
            continue
        absorbed.add(id(g))
        head.folded.append(collapsed_entry(g.shown.node, g.best_score, "overlap", None))
        head.folded.extend(g.folded)
        if g.best_score is not None and (head.best_score is None or g.best_score > head.best_score):
            head.best_score = g.best_score
    node = head.shown.node
    head.shown = NodeWithScore(
        node=node.model_copy(update={"text": text, "start_char_idx": start, "end_char_idx": end}),
        score=head.best_score,
    )
