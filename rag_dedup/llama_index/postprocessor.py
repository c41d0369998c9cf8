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
from rag_dedup.llama_index.metadata import (
    DEDUP_CLUSTER,
    DEDUP_COLLAPSED,
    collapsed_entry,
    dedup_text,
    hide_keys,
    read_cluster,
)
from rag_dedup.normalize import token_form
from rag_dedup.shingles import DEFAULT_NGRAM, shingle_hashes_many, shingle_stream

__all__ = ["DedupPostprocessor", "jaccard_matrix", "query_shingles"]

# Shared shingles are counted pair by pair up to this many (set, set, shingle) pairs (a few MB of
# temporaries); beyond it, when many near-identical texts share most of their shingles, one matrix
# product is cheaper.
_MAX_PAIRS = 1 << 20
# The product lays shared shingles out in column blocks of this width, which bounds the (texts x block)
# 0/1 matrix to a few MB whatever the number of texts.
_BLOCK_COLUMNS = 4096
# Bit i set: the bit mask of set i, for up to 64 sets (see _shared_counts).
_BITS = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64))
_POWERS_OF_TWO = np.ldexp(1.0, np.arange(53))
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
    if n == 0:
        return np.zeros((0, 0), dtype=np.float64)
    sizes = np.fromiter((len(s) for s in sets), dtype=np.int64, count=n)
    values = np.concatenate(sets)
    if values.dtype != np.uint32 and len(values) and (values.min() < 0 or values.max() > 0xFFFFFFFF):
        values = np.unique(values, return_inverse=True)[1]  # ranks: equal exactly where the values are
    return _jaccard(*_pair_counts(values.astype(np.uint64) << np.uint64(32), sizes))


def _pair_counts(hashes: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The set sizes and the ``|A ∩ B|`` of every pair of sets, from their hashes laid end to end.

    ``hashes`` holds set 0's values, then set 1's, ... (``counts[i]`` of them for set i, repeats
    allowed); two values are equal when their top ``64 - b`` bits are, ``b`` the bits a set number
    takes (at most 32, so at least the top 32 bits count). One sort of ``value | set`` keys puts each
    set's repeats next to each other (dropped) and each value's sets in one run (counted).
    """
    n = len(counts)
    bits = max(1, (n - 1).bit_length())
    low = np.uint64((1 << bits) - 1)
    keys = hashes & ~low
    keys |= np.repeat(np.arange(n, dtype=np.uint64), counts)
    keys = _sorted(keys)
    fresh = np.empty(len(keys), dtype=bool)
    fresh[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=fresh[1:])
    keys = keys[fresh]  # each set's repeats dropped
    owners = (keys & low).astype(np.intp)
    sizes = np.bincount(owners, minlength=n)
    values = keys >> np.uint64(bits)
    same = values[1:] == values[:-1]
    if n < 2 or not same.any():
        return sizes, np.zeros((n, n), dtype=np.int64)
    shared = np.zeros(len(values), dtype=bool)
    shared[1:] = same
    shared[:-1] |= same
    values, owners = values[shared], owners[shared]  # only values held by two sets or more
    return sizes, _shared_counts(values, owners, n)


def _sorted(keys: np.ndarray) -> np.ndarray:
    """``np.sort(keys)``, faster for the few thousand keys of a query: a radix sort (numpy's stable
    sort of 16-bit values) on the top 16 bits, then timsort, which finds the result nearly sorted
    (out of order only where two keys share their top 16 bits) and fixes it in about one pass."""
    if len(keys) < 1024:
        keys.sort()
        return keys
    order = np.argsort((keys >> np.uint64(48)).astype(np.uint16), kind="stable")
    keys = keys[order]
    keys.sort(kind="stable")
    return keys


def _shared_counts(values: np.ndarray, owners: np.ndarray, n: int) -> np.ndarray:
    """``|A ∩ B|`` for every pair of distinct sets, from runs of equal ``values`` (owners unique per run).

    Up to 64 sets, each run becomes the bit mask of the sets holding it (one ``bitwise_or.reduceat``);
    runs with equal masks are counted together, and the ``D`` distinct masks unpacked to a 0/1
    ``D x n`` matrix ``B`` give ``Bᵀ diag(count) B``, whose entry ``(i, j)`` is the number of runs
    holding both i and j. A query's copies of one licence paragraph share hundreds of shingles
    among the same few sets, so ``D`` stays small. Beyond 64 sets: either a 0/1 ``sets x runs``
    matrix product, or, when runs are short and sets many, every pair of each run counted with
    ``bincount``. The diagonal is left to the caller.
    """
    new_run = np.empty(len(values), dtype=bool)
    new_run[0] = True
    np.not_equal(values[1:], values[:-1], out=new_run[1:])
    starts = np.flatnonzero(new_run)
    if n <= 64:
        masks = np.bitwise_or.reduceat(_BITS[owners], starts)
        masks.sort()
        first = np.empty(len(masks), dtype=bool)
        first[0] = True
        np.not_equal(masks[1:], masks[:-1], out=first[1:])
        at = np.flatnonzero(first)
        weight = np.diff(np.append(at, len(masks))).astype(np.float64)
        as_bytes = masks[at].astype("<u8", copy=False).view(np.uint8).reshape(-1, 8)  # byte 0: sets 0-7
        unpacked = np.unpackbits(as_bytes, axis=1, bitorder="little")
        held = unpacked[:, :n].astype(np.float64)
        inter = (held.T * weight) @ held  # exact: integer sums far below 2**53
        np.fill_diagonal(inter, 0.0)
        return inter.astype(np.int64)
    lengths = np.diff(np.append(starts, len(values)))
    runs = len(starts)
    pairs = int((lengths * (lengths - 1) // 2).sum())
    if n * n * runs <= 50 * pairs or pairs > _MAX_PAIRS:
        column = np.repeat(np.arange(runs, dtype=np.intp), lengths)
        return _count_by_product(owners, column, runs, n)
    # Every position pairs with the later positions of its run: p with p+1 .. end-1.
    after = np.repeat(starts + lengths, lengths) - np.arange(len(values)) - 1
    first_of_pair = np.repeat(np.arange(len(values)), after)
    second = first_of_pair + np.arange(1, pairs + 1) - np.repeat(np.cumsum(after) - after, after)
    upper = np.bincount(owners[first_of_pair] * n + owners[second], minlength=n * n).reshape(n, n)
    return upper + upper.T


def _count_by_product(owners: np.ndarray, column: np.ndarray, columns: int, n: int) -> np.ndarray:
    """Shared-value counts for all pairs as ``M Mᵀ``, ``M`` the 0/1 matrix of sets x shared values."""
    if columns <= _BLOCK_COLUMNS:
        block = np.zeros((n, columns), dtype=np.float32)
        block[owners, column] = 1.0
        inter = block @ block.T  # float32 sums of 0/1 are exact below 2**24
        np.fill_diagonal(inter, 0.0)
        return inter.astype(np.int64)
    total = np.zeros((n, n), dtype=np.float64)
    for first in range(0, columns, _BLOCK_COLUMNS):
        lo, hi = np.searchsorted(column, [first, first + _BLOCK_COLUMNS])
        block = np.zeros((n, min(_BLOCK_COLUMNS, columns - first)), dtype=np.float32)
        block[owners[lo:hi], column[lo:hi] - first] = 1.0
        total += block @ block.T
    np.fill_diagonal(total, 0.0)
    return total.astype(np.int64)


def _jaccard(sizes: np.ndarray, inter: np.ndarray) -> np.ndarray:
    """Jaccard similarities from set sizes and pairwise intersections (diagonal ignored): an empty set
    has similarity 0 with everything, itself included."""
    np.fill_diagonal(inter, sizes)
    union = sizes[:, None] + sizes[None, :] - inter
    if sizes.all():
        return inter / union
    out = np.zeros(inter.shape, dtype=np.float64)
    np.divide(inter, union, out=out, where=union > 0)
    empty = sizes == 0
    out[empty, :] = 0.0
    out[:, empty] = 0.0
    return out


def _row_masks(matrix: np.ndarray) -> list[int]:
    """Row ``i`` of a square boolean matrix as the Python int whose bit ``j`` is ``matrix[i, j]``."""
    k = len(matrix)
    if k <= 53:  # one float product: the sums of distinct powers of two below 2**53 are exact
        return (matrix @ _POWERS_OF_TWO[:k]).astype(np.int64).tolist()
    packed = np.packbits(matrix, axis=1, bitorder="little")
    return [int.from_bytes(row.tobytes(), "little") for row in packed]


class _ShingleCache:
    """The shingle hashes of recently seen texts, keyed by ``(ngram, text)``, oldest evicted first.

    An entry is ``(hashes, start, stop)``: the text's hashes are ``hashes[start:stop]`` of the batch it
    was hashed in (a tuple costs less to make than an array view, and the cold path makes 30 of
    them per query). One object behind one private attribute: pydantic resolves each private
    attribute access through ``__getattr__``, which costs about as much as a numpy call.
    """

    __slots__ = ("entries", "lock")

    def __init__(self) -> None:
        self.entries: dict[tuple[int, str], tuple[np.ndarray, int, int]] = {}
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.entries)

    def get_many(self, ngram: int, texts: list[str]) -> list[tuple[np.ndarray, int, int] | None]:
        with self.lock:
            get = self.entries.get
            return [get((ngram, t)) for t in texts]

    def put_many(self, ngram: int, texts: list[str], hashes: np.ndarray, counts: np.ndarray, capacity: int) -> None:
        """Remember ``texts``, whose hashes lie end to end in ``hashes``, ``counts[i]`` for text i."""
        stop = 0
        with self.lock:
            entries = self.entries
            for text, count in zip(texts, counts.tolist()):
                entries[(ngram, text)] = (hashes, stop, stop + count)
                stop += count
            excess = len(entries) - capacity
            if excess > 0:
                for key in list(itertools.islice(entries, excess)):
                    del entries[key]  # the oldest first: dicts keep insertion order

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()


def _text_of(node: BaseNode) -> str | None:
    """:func:`~rag_dedup.llama_index.metadata.dedup_text`, with a short path for a plain ``TextNode``."""
    if type(node) is TextNode:
        text = node.text
        return None if not text or text.isspace() else text  # `not text.strip()`, without a copy
    return dedup_text(node)


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
    _cache: _ShingleCache = PrivateAttr(default_factory=lambda: _ShingleCache())

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
            clusters = [n.metadata.get(DEDUP_CLUSTER) for n in nodes]  # read_cluster, inlined
            return [c if c is None or isinstance(c, str) else None for c in clusters]
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
        inner = [n.node for n in ordered]
        texts = [_text_of(node) for node in inner]
        text_pos = [i for i, t in enumerate(texts) if t is not None]
        if len(text_pos) == len(ordered):
            clusters = self._clusters(inner)
        else:
            clusters = [None] * len(ordered)
            for i, c in zip(text_pos, self._clusters([inner[i] for i in text_pos])):
                clusters[i] = c

        need_text = not self.trust_clusters or any(clusters[i] is None for i in text_pos)
        sim: np.ndarray | None = None
        masks: list[int] = []  # masks[a]: bit b set when texts a and b are within the threshold
        slot: list[int] = []  # position in `ordered` -> row of its text in `sim`
        if need_text and len(text_pos) > 1:
            sim = self._similarity([texts[i] for i in text_pos])  # type: ignore[misc]
            masks = _row_masks(sim >= self.threshold)
            if len(text_pos) == len(ordered):
                slot = text_pos
            else:
                slot = [-1] * len(ordered)
                for a, i in enumerate(text_pos):
                    slot[i] = a

        groups: list[_Group] = []  # kept text nodes, score order
        by_cluster: dict[str, _Group] = {}
        group_of_row: dict[int, _Group] = {}
        kept_rows = 0  # bits: rows of the kept groups
        kept_free = 0  # bits: rows of the kept groups without a cluster
        passthrough: list[tuple[int, NodeWithScore]] = []
        trust = self.trust_clusters
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
                a = slot[i]
                # Both clustered, different clusters: the index already compared them (when trusted).
                hits = masks[a] & (kept_free if trust and cluster is not None else kept_rows)
                if hits:
                    b = (hits & -hits).bit_length() - 1  # the lowest row: the best-placed kept group
                    s = float(sim[a, b])
                    target, reason, similarity = group_of_row[b], ("exact" if s >= 1.0 else "near"), round(s, 4)
            if target is None:
                group = _Group(i, nws, cluster)
                groups.append(group)
                if cluster is not None:
                    by_cluster[cluster] = group
                if sim is not None:
                    a = slot[i]
                    group_of_row[a] = group
                    kept_rows |= 1 << a
                    if cluster is None:
                        kept_free |= 1 << a
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

    def _similarity(self, texts: list[str]) -> np.ndarray:
        """The exact Jaccard similarity of the shingle sets of every pair of ``texts``, ``(k, k)``.

        Equal texts share a row, so exact copies are shingled once. The texts not remembered from
        earlier calls (``cache_size``) are shingled together in one pass
        (:func:`~rag_dedup.shingles.shingle_stream`), and the shingles of all of them are sorted
        together once (:func:`_pair_counts`): a constant number of numpy calls per query, whatever
        the number of texts, where per-text calls cost more than the work itself at this size.
        """
        row_of: dict[str, int] = {}
        rows = [row_of.setdefault(t, len(row_of)) for t in texts]
        unique = list(row_of)
        ngram, capacity = self.ngram, self.cache_size
        cache = self._cache if capacity else None
        known = cache.get_many(ngram, unique) if cache is not None else [None] * len(unique)
        fresh = [t for t, entry in zip(unique, known) if entry is None]
        if fresh:
            hashes, counts = shingle_stream(fresh, ngram)
        else:
            hashes, counts = np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
        if cache is not None:
            cache.put_many(ngram, fresh, hashes, counts, capacity)
        if len(fresh) < len(unique):  # some remembered: lay all texts' hashes end to end, row order
            ends = np.cumsum(counts).tolist()
            computed = iter(zip(ends, counts.tolist()))
            parts = []
            for entry in known:
                if entry is None:
                    stop, count = next(computed)
                    parts.append(hashes[stop - count : stop])
                else:
                    parts.append(entry[0][entry[1] : entry[2]])
            hashes = np.concatenate(parts)
            counts = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        sim = _jaccard(*_pair_counts(hashes, counts))
        if len(unique) < len(texts):
            index = np.array(rows, dtype=np.intp)
            sim = sim.take(index, axis=0).take(index, axis=1)
        return sim

    def clear_cache(self) -> None:
        """Forget the remembered shingles (results never depend on them; only the time does)."""
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
