"""Query-time collapse: which of the passages one query returned fold into which, and why. No framework.

Adapters (LlamaIndex's ``DedupPostprocessor`` and ``DistinctRetriever``, and any other framework's) turn
their retrieved objects into :class:`Passage` tuples, call :meth:`Collapser.collapse`, and carry the
decision back onto their own objects: each :class:`Kept` names an input position, and the positions
folded into it, each with a :class:`Fold` (reason and similarity) so citations survive. A LangChain
document compressor, for example, is a few lines::

    collapser = Collapser()
    passages = [Passage(str(i), d.page_content, d.metadata.get("score"), d.metadata.get("dedup_cluster"))
                for i, d in enumerate(documents)]
    kept = [documents[k.position] for k in collapser.collapse(passages, top_n=10)]

The greedy pass reads the passages in the order given (the caller orders them: best first; a passage
with a NaN score is read last) and keeps a passage unless it duplicates one already kept; then it is
folded into the first such keeper. By default (``trust_clusters=False``) a stamp is a hint, never a
proof, and every decision is checked on the texts, by the exact Jaccard similarity ``J`` of their word
``ngram``-shingle sets (:class:`~rag_dedup.similarity.TextSimilarity`). A passage folds into a kept one
when

* ``"exact"`` / ``"near"``: ``J >= threshold``, whatever their clusters (1.0: an exact duplicate up to
  normalisation);
* ``"cluster"``: both belong to one cluster and ``J >= floor`` (the index's ``drift_floor``, else
  ``threshold - 0.1``): the *current* cluster when a ``DedupIndex`` is given and holds the key
  (``index.matches``), else the cluster stamped at ingest (``Passage.cluster``).

So no two kept passages have ``J >= threshold`` (across clusters too: the index splits a chain A~B~C
around representatives), and no passage is folded into one it shares less than ``floor`` with (two
members of one cluster are each within the floor of their representative, not of each other).

``trust_clusters=True`` takes stamps as proof, as rag-dedup did before: two passages of one cluster fold
without a text check, and two passages of two clusters are never compared (the index compared them at
ingest); only passages without a cluster are compared by text. Faster when texts are long and unseen,
with neither guarantee above.

With ``merge_overlaps``, kept windows of one document (``ref_doc_id``) whose character ranges
(``start``, ``end``) overlap, and whose texts agree on the overlap, are joined into one passage
(reason ``"overlap"``); the joined text is returned on the :class:`Kept`.

The similarities and the greedy pass run as the compiled kernel
:func:`rag_dedup.compiled.collapse.collapse_rows` when :data:`rag_dedup.compiled.COMPILED` (read at each
call), texts are compared and at most 64 passages have text; otherwise as :meth:`Collapser._greedy`,
the reference, which the tests hold the kernel equal to, decision for decision. A query of 2 to 64
passages, each with text and none with a NaN score, is decided in one kernel call: on the shingle
cache's sets when every text is remembered (warm), else by
:func:`rag_dedup.compiled.collapse.collapse_stream`, from the new texts' bytes to the decision, the
remembered sets beside them (cold); the new texts' sets are remembered after it.

A passage whose text is ``None`` (an image: nothing to compare) passes through and keeps its place;
so does a passage whose text is empty or whitespace, which carries no evidence and so never takes one
of the ``top_n`` places (it is returned only before the last passage that does).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import eq, is_
from typing import NamedTuple, TypeVar

import numpy as np

from rag_dedup import compiled
from rag_dedup.compiled.collapse import REASONS, collapse_rows, collapse_stream, new_scratch
from rag_dedup.index import DedupIndex
from rag_dedup.settings import check_cache_size, check_drift_floor, check_ngram, check_threshold, check_top
from rag_dedup.shingles import _NO_SETTLED, _PIECE_BYTES, DEFAULT_NGRAM, _stream_buffer, _stream_rules, _stream_settled
from rag_dedup.similarity import TextSimilarity
from rag_dedup.surrogates import check_unicode

__all__ = ["Collapser", "Fold", "Kept", "Passage", "first_of_each_key", "is_blank", "rounded"]

_POWERS_OF_TWO = np.ldexp(1.0, np.arange(53))
_NO_VALUES = np.empty(0, dtype=np.uint64)
_NO_COUNTS = np.empty(0, dtype=np.int64)
_NO_SPANS = _NO_COUNTS  # collapse_rows: the sets lie end to end
_ROWS = np.arange(64, dtype=np.int64)  # the rows in input order (a view of its first n)
_NO_CLUSTERS = np.full(64, -1, dtype=np.int64)  # no row has a cluster (a view of its first n; read only)
_NO_PLACES = np.zeros(64, dtype=np.int64)  # collapse_stream: no row's set is remembered (a view of its first n)
# Each thread's hash-table memory for collapse_rows (compiled.collapse.new_scratch), taken for a call and
# put back after it: a call that raises leaves none half-used behind, and none is used by two at once.
_local = threading.local()
_T = TypeVar("_T")


def _collapse_rows(*args: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`~rag_dedup.compiled.collapse.collapse_rows` with this thread's scratch tables."""
    return _with_scratch(collapse_rows, args)  # type: ignore[return-value]


def _with_scratch(kernel: Callable[..., _T], args: tuple[object, ...]) -> _T:
    """``kernel(*args, scratch)`` with this thread's scratch tables (taken for the call, put back after it)."""
    scratch = getattr(_local, "scratch", None)
    if scratch is None:
        scratch = new_scratch()
    _local.scratch = None
    decided = kernel(*args, scratch)
    _local.scratch = scratch
    return decided


class Passage(NamedTuple):
    """One retrieved passage, as the collapse sees it.

    Attributes:
        key: The passage's id (a node or document id); with an index, looked up in it.
        text: The text compared; ``None`` when there is nothing to compare (an image: it passes through
            and takes a ``top_n`` place); empty or whitespace: no evidence (passes, takes no place).
        score: The retriever's score (``None``: unscored). Reported back on folds.
        cluster: The cluster stamped at ingest (``dedup_cluster``), or ``None``.
        ref_doc_id: The document the passage comes from, for citations and ``merge_overlaps``.
        start: Where ``text`` starts in its document (characters), for ``merge_overlaps``.
        end: Where ``text`` ends in its document; ``end - start == len(text)`` for a window.
    """

    key: str
    text: str | None
    score: float | None = None
    cluster: str | None = None
    ref_doc_id: str | None = None
    start: int | None = None
    end: int | None = None


class Fold(NamedTuple):
    """A passage folded into a kept one.

    Attributes:
        position: Its index in the input.
        key: Its key.
        ref_doc_id: Its document.
        score: Its score.
        reason: ``"cluster"``, ``"exact"``, ``"near"`` or ``"overlap"`` (see the module docstring).
        similarity: Its exact Jaccard similarity to the keeper, rounded to 4 places, where computed.
    """

    position: int
    key: str
    ref_doc_id: str | None
    score: float | None
    reason: str
    similarity: float | None


class Kept(NamedTuple):
    """A kept passage and what was folded into it.

    Attributes:
        position: Its index in the input.
        folded: The passages folded into it, in the order they were folded.
        score: Its score; a joined passage (``merge_overlaps``) takes the best score of its windows.
        cluster: Its current cluster (the index's, else its stamp), or ``None``.
        text: The joined passage when ``merge_overlaps`` joined windows, else ``None`` (the input's text).
        start: The joined passage's start, when joined.
        end: The joined passage's end, when joined.
    """

    position: int
    folded: tuple[Fold, ...]
    score: float | None
    cluster: str | None = None
    text: str | None = None
    start: int | None = None
    end: int | None = None


#: A fold in the core's internal column form: ``(position, reason, similarity)``, the similarity unrounded
#: (``None``: not computed). :class:`Fold` is its public form (:func:`_folds`).
_RawFold = tuple[int, str, "float | None"]


class _Group:
    """A kept passage being built: the passages folded into it so far."""

    __slots__ = ("position", "score", "folded", "cluster")

    def __init__(self, position: int, score: float | None, cluster: str | None) -> None:
        self.position = position
        self.score = score
        self.folded: list[Fold] = []
        self.cluster = cluster


def _row_masks(matrix: np.ndarray) -> list[int]:
    """Row ``i`` of a boolean matrix as the Python int whose bit ``j`` is ``matrix[i, j]``."""
    width = matrix.shape[1]
    if width <= 53:  # one float product: the sums of distinct powers of two below 2**53 are exact
        return (matrix @ _POWERS_OF_TWO[:width]).astype(np.int64).tolist()
    packed = np.packbits(matrix, axis=1, bitorder="little")
    return [int.from_bytes(row.tobytes(), "little") for row in packed]


class Collapser:
    """The collapse rules and the shingles remembered between calls (see the module docstring).

    Args:
        threshold: Jaccard similarity (of word ``ngram``-shingle sets) at or above which two passages
            are duplicates. Defaults to the index's threshold, else 0.8.
        floor: The least similarity at which a passage folds into a kept passage of its cluster;
            at most ``threshold``. Defaults to the index's ``drift_floor``, else ``threshold - 0.1``.
        ngram: Words per shingle (the index's, when one is given).
        trust_clusters: Take cluster stamps as proof (see the module docstring); ``False`` (default)
            checks every decision on the texts.
        merge_overlaps: Join kept windows of one document that overlap into one passage.
        index: A ``DedupIndex`` to ask for current clusters; its clusters override stamps.
        cache_size: How many texts' shingles to remember between calls (0: none). Results never
            depend on it.

    Raises:
        TypeError: An argument of the wrong type.
        ValueError: A value out of range (the message gives the bound).

    Example:
        >>> text = "Permission is hereby granted, free of charge, to any person obtaining a copy"
        >>> rows = [Passage("a", text, 3.0), Passage("b", text.upper(), 2.0), Passage("c", "Something else", 1.0)]
        >>> [(k.position, [(f.key, f.reason, f.similarity) for f in k.folded]) for k in Collapser().collapse(rows)]
        [(0, [('b', 'exact', 1.0)]), (2, [])]
    """

    __slots__ = ("threshold", "floor", "ngram", "trust_clusters", "merge_overlaps", "index", "cache_size", "similarity")

    def __init__(
        self,
        threshold: float | None = None,
        *,
        floor: float | None = None,
        ngram: int | None = None,
        trust_clusters: bool = False,
        merge_overlaps: bool = False,
        index: DedupIndex | None = None,
        cache_size: int = 4096,
        similarity: TextSimilarity | None = None,
    ) -> None:
        if index is not None and not isinstance(index, DedupIndex):
            raise TypeError(f"index must be a rag_dedup.DedupIndex, got {type(index).__name__}")
        if threshold is None:
            threshold = index.threshold if index is not None else 0.8
        threshold = check_threshold(threshold)
        if floor is None and index is not None:
            floor = min(index.drift_floor, threshold)
        floor = check_drift_floor(floor, threshold, "floor")
        if ngram is None:
            ngram = index.ngram if index is not None else DEFAULT_NGRAM
        ngram = check_ngram(ngram)
        cache_size = check_cache_size(cache_size)
        self.threshold = threshold
        self.floor = floor
        self.ngram = ngram
        self.trust_clusters = bool(trust_clusters)
        self.merge_overlaps = bool(merge_overlaps)
        self.index = index
        self.cache_size = cache_size
        #: The shingles remembered between calls (share one between collapsers to share the memory).
        self.similarity = similarity if similarity is not None else TextSimilarity()

    def clusters(self, passages: Sequence[Passage]) -> list[str | None]:
        """The current cluster of each passage: from the index if it holds the key, else the stamp."""
        return self._clusters([p.key for p in passages], [p.cluster for p in passages])

    def _clusters(self, keys: Sequence[str], stamps: Sequence[str | None]) -> list[str | None]:
        index = self.index
        if index is None:
            return list(stamps)
        known = [k for k in dict.fromkeys(keys) if k in index]
        current = {m.key: m.cluster_id for m in index.matches(known)} if known else {}
        return [current.get(k, c) for k, c in zip(keys, stamps)]

    def collapse(self, passages: Sequence[Passage], top_n: int | None = None) -> list[Kept]:
        """The kept passages, in input order, each with the passages folded into it.

        Args:
            passages: The retrieved passages, best first.
            top_n: Keep the first ``top_n`` passages that carry evidence (``None``: all).

        Raises:
            InvalidTextError: A passage's text holds a lone surrogate (:mod:`rag_dedup.surrogates`).
        """
        check_top(top_n, "top_n", optional=True)
        if not passages:
            return []
        keys, texts, scores, stamps, sources = [], [], [], [], []
        for p in passages:
            keys.append(p.key)
            texts.append(p.text)
            scores.append(p.score)
            stamps.append(p.cluster)
            sources.append(p.ref_doc_id)
        return self._collapse(keys, texts, scores, stamps, sources, passages, top_n)

    def collapse_columns(
        self,
        keys: Sequence[str],
        texts: Sequence[str | None],
        scores: Sequence[float | None],
        clusters: Sequence[str | None],
        top_n: int | None = None,
        sources: Sequence[str | None] | None = None,
    ) -> list[Kept]:
        """:meth:`collapse` of ``Passage(keys[i], texts[i], scores[i], clusters[i], sources[i])``, the same
        decision, without building the passages: the adapters' path, which runs for every query.
        ``sources`` (``None``: none) is only reported back on the folds (:attr:`Fold.ref_doc_id`).

        Raises:
            ValueError: The columns differ in length, or ``merge_overlaps`` is set (it needs the
                passages' documents and spans: use :meth:`collapse`).
            InvalidTextError: A text holds a lone surrogate (:mod:`rag_dedup.surrogates`).
        """
        kept, folds, current = self.decide_columns(keys, texts, scores, clusters, top_n, sources)
        return _kept_rows(kept, folds, keys, scores, sources, current)

    def decide_columns(
        self,
        keys: Sequence[str],
        texts: Sequence[str | None],
        scores: Sequence[float | None],
        clusters: Sequence[str | None],
        top_n: int | None = None,
        sources: Sequence[str | None] | None = None,
    ) -> tuple[list[int], dict[int, list[tuple[int, str, float | None]]], list[str | None]]:
        """:meth:`collapse_columns`' decision in the core's column form, for adapters that carry it onto
        their own objects without the :class:`Kept` and :class:`Fold` tuples: ``(kept, folds, current)``,
        the kept positions in input order (``Kept.position``), the folds of each keeper that has any
        (``Kept.folded``, by position: read it by the kept positions, a kept position absent from it folded
        nothing; it may also hold keepers cut by ``top_n``), each
        ``(position, reason, similarity)`` with the similarity *unrounded* (``Fold.similarity`` is
        ``round(similarity, 4)``; ``None``: not computed), and each input position's current cluster
        (``Kept.cluster``). The same checks and errors as :meth:`collapse_columns`.
        """
        check_top(top_n, "top_n", optional=True)
        if not len(keys) == len(texts) == len(scores) == len(clusters) == len(keys if sources is None else sources):
            raise ValueError(
                f"keys, texts, scores, clusters and sources must have one entry per passage, got {len(keys)}, "
                f"{len(texts)}, {len(scores)}, {len(clusters)} and {len(keys if sources is None else sources)}"
            )
        if self.merge_overlaps:
            raise ValueError("merge_overlaps needs each passage's document and span: call collapse(passages)")
        if not keys:
            return [], {}, []
        return self._decide(keys, texts, scores, clusters, top_n)

    def _collapse(
        self,
        keys: Sequence[str],
        texts_in: Sequence[str | None],
        scores: Sequence[float | None],
        stamps: Sequence[str | None],
        sources: Sequence[str | None] | None,
        passages: Sequence[Passage] | None,
        top_n: int | None,
    ) -> list[Kept]:
        merging = self.merge_overlaps and passages is not None
        kept_pos, folds, clusters = self._decide(keys, texts_in, scores, stamps, top_n, merging)
        if merging:
            groups = []
            for i in kept_pos:
                group = _Group(i, scores[i], clusters[i])
                group.folded = list(_folds(folds.get(i, []), keys, scores, sources))
                groups.append(group)
            kept = _merge_overlaps(groups, passages)  # type: ignore[arg-type]
            texts = [t if t and not t.isspace() else None for t in texts_in]
            kept.extend(Kept(i, (), scores[i]) for i, t in enumerate(texts) if t is None)
            kept.sort(key=lambda k: k.position)
            return kept if top_n is None else _first(kept, texts_in, top_n)
        return _kept_rows(kept_pos, folds, keys, scores, sources, clusters)

    def _decide(
        self,
        keys: Sequence[str],
        texts_in: Sequence[str | None],
        scores: Sequence[float | None],
        stamps: Sequence[str | None],
        top_n: int | None,
        merging: bool = False,
    ) -> tuple[list[int], dict[int, list[_RawFold]], list[str | None]]:
        """The decision in its internal column form, for :meth:`collapse_columns` and the adapters:
        ``(kept, folds, clusters)``: the kept positions in input order (the passages without text
        included, cut after the ``top_n``-th that carries evidence; ``merging``: only those with text, uncut,
        for :func:`_merge_overlaps`), the
        folds of each keeper that has any (by position, in the order folded) as :data:`_RawFold`
        ``(position, reason, similarity)`` with the similarity *unrounded* (``None``: not computed;
        :class:`Fold` shows it rounded to 4 places), and each position's current cluster (``None`` for
        the passages without text)."""
        n = len(keys)
        if (
            compiled.COMPILED
            and 1 < n <= 64
            and not merging
            and (not self.trust_clusters or (self.index is None and None in stamps))
        ):
            decided = self._decide_compiled(keys, texts_in, scores, stamps, top_n)
            if decided is not None:
                return decided
        if None not in texts_in and all(texts_in) and not any(map(str.isspace, texts_in)):  # none blank
            texts: list[str | None] = list(texts_in)
        else:
            texts = [t if t and not t.isspace() else None for t in texts_in]  # is_blank, inlined
        if None in texts:  # some pass through (no text, or blank): the others are read by their rows
            text_pos = [i for i, t in enumerate(texts) if t is not None]
            present: list[str] = [texts[i] for i in text_pos]  # type: ignore[misc]
            clusters: list[str | None] = [None] * n
            for i, c in zip(text_pos, self._clusters([keys[i] for i in text_pos], [stamps[i] for i in text_pos])):
                clusters[i] = c
        else:
            text_pos = list(range(n))
            present = texts  # type: ignore[assignment]
            clusters = self._clusters(keys, stamps)
        if not all(map(str.isascii, present)):  # check_unicode's own fast path, for all texts at once
            valid = self.similarity.remembered(self.ngram)  # shingled before, so valid Unicode
            for i in text_pos:
                if texts[i] not in valid:
                    check_unicode(texts[i], "the text of passage %r", keys[i])  # type: ignore[arg-type]

        rows = len(text_pos)
        # A passage with a NaN score is placed last: it never keeps a copy that has a score out.
        if all(map(eq, scores, scores)):  # no NaN (NaN != NaN; None == None)
            order, nan_last = list(text_pos), False
        else:
            order = [i for i in text_pos if scores[i] == scores[i]]
            nan_last = len(order) < rows
        if nan_last:
            order += [i for i in text_pos if scores[i] != scores[i]]
        # Texts are compared unless every clustered passage is trusted and none lacks a cluster.
        compare = rows > 1 and (not self.trust_clusters or None in clusters)
        if compiled.COMPILED and compare and rows <= 64:  # (without comparing, the Python pass is cheaper)
            kept_pos, folds = self._greedy_compiled(present, clusters, text_pos, order, compare)
        else:
            kept_pos, folds = self._greedy(present, clusters, text_pos, order, compare)

        if nan_last:  # back to input order
            kept_pos.sort()
        if merging:
            return kept_pos, folds, clusters
        if rows < n:
            kept_pos.extend(i for i, t in enumerate(texts) if t is None)
            kept_pos.sort()
        if top_n is not None:
            kept_pos = _first_positions(kept_pos, texts_in, top_n)
        return kept_pos, folds, clusters

    def _decide_compiled(
        self,
        keys: Sequence[str],
        texts: Sequence[str | None],
        scores: Sequence[float | None],
        stamps: Sequence[str | None],
        top_n: int | None,
    ) -> tuple[list[int], dict[int, list[_RawFold]], list[str | None]] | None:
        """:meth:`_decide` by one compiled kernel call, or ``None`` where it does not apply (then
        :meth:`_decide` reads the passages): a text ``None``, blank or not a ``str``, a NaN score, texts
        too long for one buffer or in the character-gram regime.

        Every text remembered (a warm query): :func:`~rag_dedup.compiled.collapse.collapse_rows` on the
        shingle cache's arena. Else (a cold query, or some texts new): the new texts, each distinct one once,
        go from their bytes to their sets and, with the remembered sets, to the decision in one call of
        :func:`~rag_dedup.compiled.collapse.collapse_stream`; their sets are then remembered. Either way it
        settles what :meth:`_decide` checks one by one: no text is ``None`` or blank (a remembered set has a
        shingle; a new text is tested), none holds a lone surrogate (shingling refused a remembered one; the
        buffer's UTF-8 encoding refuses a new one, then named with :meth:`_decide`'s error); with no NaN score the pass reads the rows in
        input order, every one of which carries evidence (``top_n``). Called with 2 to 64 passages, the
        kernels on, texts compared (checked, or trusted with a passage without a stamp and no index)."""
        similarity = self.similarity
        ngram = self.ngram
        try:
            arena, places = similarity.lookup(texts, ngram)  # type: ignore[arg-type]
        except TypeError:  # an unhashable text: _decide's checks name it
            return None
        if not all(map(eq, scores, scores)):  # a NaN score (NaN != NaN; None == None)
            return None
        n = len(texts)
        complete = None not in places
        if not complete:
            try:
                if not all(texts) or any(map(str.isspace, texts)):  # type: ignore[arg-type]
                    return None  # some pass through (None or blank): _decide reads them by their rows
            except TypeError:  # not a str: _decide's checks name it
                return None
        clusters = list(stamps) if self.index is None else self._clusters(keys, stamps)
        if clusters.count(None) == n:  # no cluster (unstamped passages)
            cluster_ids = _NO_CLUSTERS[:n]
        else:
            ids: dict[str | None, int] = {None: -1}  # each cluster: the row of its first passage (below n)
            cluster_ids = np.fromiter(map(ids.setdefault, clusters, range(n)), dtype=np.int64, count=n)
        if complete:
            kept_rows, fold_rows, fold_similarity = _collapse_rows(
                arena,
                _NO_COUNTS,
                _ROWS[:n],
                cluster_ids,
                self.trust_clusters,
                True,
                self.threshold,
                self.floor,
                np.fromiter(places, dtype=np.int64, count=n),
            )
        else:
            first: dict[str, int] = {}  # each new distinct text's number, in first-seen order
            if all(map(is_, places, repeat(None))):  # none remembered (a cold query)
                row_text = [first.setdefault(t, len(first)) for t in texts]  # type: ignore[arg-type]
                at = _NO_PLACES[:n]
            else:
                row_text = [-1 if p is not None else first.setdefault(t, len(first)) for t, p in zip(texts, places)]  # type: ignore[arg-type]
                at = np.fromiter([0 if p is None else p for p in places], dtype=np.int64, count=n)
            fresh = list(first)
            if sum(map(len, fresh)) + len(fresh) >= _PIECE_BYTES:
                return None
            try:  # the buffer encodes every new text to UTF-8, which refuses a lone surrogate
                data, buf, loads = _stream_buffer(fresh, True)
            except UnicodeEncodeError:  # check_unicode names the first such passage, as _decide does
                for i, (t, p) in enumerate(zip(texts, places)):
                    if p is None:
                        check_unicode(t, "the text of passage %r", keys[i])  # type: ignore[arg-type]
                raise
            streamed = (buf, loads, len(fresh))
            rules = _stream_rules(ngram)
            rows = (np.fromiter(row_text, dtype=np.int64, count=n), arena, at, cluster_ids, self.trust_clusters, self.threshold, self.floor)
            values, spans, pending, kept_rows, fold_rows, fold_similarity = _with_scratch(
                collapse_stream, (*streamed, _NO_SETTLED, *rules, *rows)
            )
            if len(pending):  # words of non-ASCII punctuation and symbols: settled by the reference's rule
                values, spans, pending, kept_rows, fold_rows, fold_similarity = _with_scratch(
                    collapse_stream, (*streamed, _stream_settled(data, pending), *rules, *rows)
                )
            if not len(kept_rows):  # a text in the character-gram regime: _decide's path
                return None
            if self.cache_size:
                similarity.remember(fresh, values, spans, ngram, self.cache_size)
        kept = kept_rows.tolist()  # rows are positions: every passage has text; each carries evidence (top_n)
        return kept[:top_n] if top_n is not None else kept, _grouped(fold_rows, fold_similarity, None), clusters

    def _greedy(
        self,
        present: list[str],
        clusters: Sequence[str | None],
        text_pos: list[int],
        order: list[int],
        compare: bool,
    ) -> tuple[list[int], dict[int, list[_RawFold]]]:
        """The greedy pass (the reference): the kept positions in the order kept, and the folds of each
        keeper (by position) in the order folded (:data:`_RawFold`). ``present`` are the texts of the
        positions ``text_pos``, read in ``order``."""
        trust = self.trust_clusters
        rows = len(text_pos)
        sim: np.ndarray | None = None
        near: list[int] = []  # near[a]: bit b set when texts a and b are within the threshold
        close: list[int] = []  # close[a]: bit b set when texts a and b are within the floor
        if compare:
            sim = self.similarity.matrix(present, self.ngram, self.cache_size)
            if trust or self.floor == self.threshold:
                near = close = _row_masks(sim >= self.threshold)
            else:  # both levels in one product
                levels = np.empty((2 * rows, rows), dtype=bool)
                np.greater_equal(sim, self.threshold, out=levels[:rows])
                np.greater_equal(sim, self.floor, out=levels[rows:])
                near = _row_masks(levels)
                close = near[rows:]
        slot = text_pos if rows == len(clusters) else {i: a for a, i in enumerate(text_pos)}  # position -> row in `sim`
        # The kept passages with text (positions), and the folds of each, made when it gets its first.
        kept_pos: list[int] = []
        folds: dict[int, list[_RawFold]] = {}
        by_cluster: dict[str, int] = {}  # trusted: the first kept passage of each cluster
        cluster_rows: dict[str, int] = {}  # checked: bits: rows of the kept passages of each cluster
        kept_rows = 0  # bits: rows of the kept passages
        kept_free = 0  # bits: rows of the kept passages without a cluster
        for i in order:
            cluster = clusters[i]
            target = -1
            if trust and cluster is not None and cluster in by_cluster:
                target, reason, similarity = by_cluster[cluster], "cluster", None
            elif sim is not None:
                a = slot[i]
                # Trusted: two clustered passages of different clusters were compared at ingest.
                hits = near[a] & (kept_free if trust and cluster is not None else kept_rows)
                if cluster is not None and cluster in cluster_rows:
                    hits |= close[a] & cluster_rows[cluster]
                if hits:
                    b = (hits & -hits).bit_length() - 1  # the lowest row: the first kept passage
                    target = text_pos[b]
                    s = sim.item(a, b)
                    if cluster is not None and clusters[target] == cluster:
                        reason = "cluster"
                    else:
                        reason = "exact" if s >= 1.0 else "near"
                    similarity = s
            if target < 0:
                kept_pos.append(i)
                if cluster is not None:
                    by_cluster.setdefault(cluster, i)
                if sim is not None:
                    bit = 1 << slot[i]
                    kept_rows |= bit
                    if cluster is None:
                        kept_free |= bit
                    elif not trust:
                        cluster_rows[cluster] = cluster_rows.get(cluster, 0) | bit
            else:
                entry = (i, reason, similarity)
                if target in folds:
                    folds[target].append(entry)
                else:
                    folds[target] = [entry]
        return kept_pos, folds

    def _greedy_compiled(
        self,
        present: list[str],
        clusters: Sequence[str | None],
        text_pos: list[int],
        order: list[int],
        compare: bool,
    ) -> tuple[list[int], dict[int, list[_RawFold]]]:
        """:meth:`_greedy` by the compiled kernel (:func:`rag_dedup.compiled.collapse.collapse_rows`), the
        same decisions, for up to 64 passages with text."""
        rows = len(text_pos)
        if compare:
            values, counts = self.similarity.sets(present, self.ngram, self.cache_size)
        else:
            values, counts = _NO_VALUES, np.zeros(rows, dtype=np.int64)
        if rows == len(clusters):
            row_clusters: Sequence[str | None] = clusters
            order_rows = order
        else:
            row_clusters = [clusters[i] for i in text_pos]
            slot = {i: a for a, i in enumerate(text_pos)}
            order_rows = [slot[i] for i in order]
        ids: dict[str | None, int] = {c: k for k, c in enumerate(dict.fromkeys(row_clusters))}  # one int per cluster
        ids[None] = -1
        kept_rows, fold_rows, fold_similarity = _collapse_rows(
            values,
            counts,
            np.fromiter(order_rows, dtype=np.int64, count=rows),
            np.fromiter(map(ids.__getitem__, row_clusters), dtype=np.int64, count=rows),
            self.trust_clusters,
            compare,
            self.threshold,
            self.floor,
            _NO_SPANS,
        )
        positions = None if rows == len(clusters) else text_pos
        kept = kept_rows.tolist()
        return kept if positions is None else [positions[a] for a in kept], _grouped(fold_rows, fold_similarity, positions)


def _grouped(rows: np.ndarray, similarity: np.ndarray, positions: list[int] | None) -> dict[int, list[_RawFold]]:
    """:func:`~rag_dedup.compiled.collapse.collapse_rows`' folds as :meth:`Collapser._greedy` gives them: the
    folds of each target (by position), in reading order, each :data:`_RawFold`; ``positions[row]`` is a
    row's position (``None``: the same)."""
    folds: dict[int, list[_RawFold]] = {}
    if not rows.shape[1]:
        return folds
    reasons = REASONS
    last = -1
    group: list[_RawFold] = []
    fold_rows, targets, codes = rows.tolist()
    if positions is not None:
        fold_rows = [positions[a] for a in fold_rows]
        targets = [positions[b] for b in targets]
    for a, b, r, s in zip(fold_rows, targets, codes, similarity.tolist()):
        if b != last:  # the folds come grouped by target
            group = folds[b] = []
            last = b
        group.append((a, reasons[r], None if s != s else s))
    return folds


def first_of_each_key(keys: Sequence[str]) -> list[int] | None:
    """The positions of each key's first occurrence, in order; None when no key comes twice (the
    common case: nothing to leave out).

    A key that comes again in one retrieved list is the same document retrieved twice (by two
    retrievers of a fusion; a Haystack or LangChain id is a digest of the content and metadata when
    none was given), as every framework's store holds one document per id: the adapters keep its first
    occurrence and leave the later ones out, rather than fold the document into itself as its own copy.
    """
    first: dict[str, int] = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    return None if len(first) == len(keys) else list(first.values())


def is_blank(text: str) -> bool:
    """Whether ``text`` carries no evidence: empty or whitespace only."""
    return not text or text.isspace()  # `not text.strip()`, without a copy



def _kept_rows(
    kept: Sequence[int],
    folds: dict[int, list[_RawFold]],
    keys: Sequence[str],
    scores: Sequence[float | None],
    sources: Sequence[str | None] | None,
    clusters: Sequence[str | None],
) -> list[Kept]:
    """The :class:`Kept` rows of the kept positions, each with its :class:`Fold` s (built with
    ``tuple.__new__``: a NamedTuple's own constructor costs a Python call a row)."""
    new, empty = tuple.__new__, ()
    return [
        new(Kept, (i, _folds(folds[i], keys, scores, sources) if i in folds else empty, scores[i], clusters[i], None, None, None))
        for i in kept
    ]

def _folds(
    raw: list[_RawFold], keys: Sequence[str], scores: Sequence[float | None], sources: Sequence[str | None] | None
) -> tuple[Fold, ...]:
    """The :class:`Fold` of each :data:`_RawFold` of one keeper (the similarity :func:`rounded`)."""
    new = tuple.__new__  # Fold(...), without the Python frame of a NamedTuple's __new__
    if sources:
        return tuple([new(Fold, (i, keys[i], sources[i], scores[i], r, None if s is None else rounded(s))) for i, r, s in raw])
    return tuple([new(Fold, (i, keys[i], None, scores[i], r, None if s is None else rounded(s))) for i, r, s in raw])


# round(s, 4) of the similarities already rounded: a query's similarities are ratios of small integers,
# so few distinct values recur, and Python's round(x, 4) (a correctly rounded decimal conversion) costs
# six times a dict hit. Cleared when it reaches _ROUNDED_MAX entries.
_ROUNDED: dict[float, float] = {}
_ROUNDED_MAX = 1 << 16


def rounded(similarity: float) -> float:
    """``round(similarity, 4)``: the form :attr:`Fold.similarity` and the adapters' ``dedup_collapsed``
    entries report a similarity in (the same float; remembered, since few distinct values recur).
    Adapters in a hot loop read ``_ROUNDED.get(similarity)`` first and call this on a miss."""
    value = _ROUNDED.get(similarity)
    if value is None:
        if len(_ROUNDED) >= _ROUNDED_MAX:
            _ROUNDED.clear()
        value = _ROUNDED[similarity] = round(similarity, 4)
    return value


def _first_positions(kept: list[int], texts: Sequence[str | None], n: int) -> list[int]:
    """The kept positions up to the ``n``-th that carries evidence (a blank text carries none)."""
    for at, i in enumerate(kept):
        text = texts[i]
        if text is None or not is_blank(text):
            n -= 1
            if n == 0:
                return kept[: at + 1]
    return kept


def _first(kept: list[Kept], texts: Sequence[str | None], n: int) -> list[Kept]:
    """The kept passages up to the ``n``-th that carries evidence (a blank text carries none)."""
    for at, k in enumerate(kept):
        text = texts[k.position]
        if text is None or not is_blank(text):
            n -= 1
            if n == 0:
                return kept[: at + 1]
    return kept


def _kept(group: _Group) -> Kept:
    return Kept(group.position, tuple(group.folded), group.score, group.cluster)


def _span(passage: Passage) -> tuple[int, int] | None:
    """The passage's (start, end) in its document, if it is a window whose text fills that range."""
    start, end, text = passage.start, passage.end, passage.text
    if passage.ref_doc_id is None or start is None or end is None or text is None or end - start != len(text):
        return None
    return start, end


def _merge_overlaps(groups: list[_Group], passages: Sequence[Passage]) -> list[Kept]:
    """Join kept windows of one document whose ranges overlap; the joined passage takes the first place.

    Two windows join only where the text they claim to share is the same text, so positions that do not
    describe the passage text (a chunker that strips or rewrites) never produce a spliced passage.
    """
    spans = {g.position: _span(passages[g.position]) for g in groups}
    by_doc: dict[str, list[_Group]] = {}
    for g in groups:
        if spans[g.position] is not None:
            by_doc.setdefault(passages[g.position].ref_doc_id, []).append(g)  # type: ignore[arg-type]
    joined: dict[int, Kept] = {}  # head position -> the joined passage
    absorbed: set[int] = set()
    for members in by_doc.values():
        if len(members) < 2:
            continue
        members.sort(key=lambda g: spans[g.position])  # type: ignore[arg-type, return-value]
        run: list[_Group] = [members[0]]
        text = passages[members[0].position].text or ""
        start, end = spans[members[0].position]  # type: ignore[misc]
        for g in [*members[1:], None]:
            if g is not None:
                s, e = spans[g.position]  # type: ignore[misc]
                other = passages[g.position].text or ""
                shared = min(end, e) - s  # length of the range both claim, if they overlap
                if shared > 0 and text[s - start : s - start + shared] == other[:shared]:
                    if e > end:
                        text, end = text + other[end - s :], e
                    run.append(g)
                    continue
            if len(run) > 1:
                head = _join(run, passages, absorbed)
                joined[head.position] = Kept(head.position, tuple(head.folded), head.score, head.cluster, text, start, end)
            if g is not None:
                run, text, (start, end) = [g], passages[g.position].text or "", spans[g.position]  # type: ignore[misc]
    return [joined.get(g.position) or _kept(g) for g in groups if g.position not in absorbed]


def _join(run: list[_Group], passages: Sequence[Passage], absorbed: set[int]) -> _Group:
    """Fold the other groups of ``run`` into its first-placed one (``"overlap"``), which takes the best score."""
    head = min(run, key=lambda g: g.position)
    for g in run:
        if g is head:
            continue
        absorbed.add(g.position)
        p = passages[g.position]
        head.folded.append(Fold(g.position, p.key, p.ref_doc_id, g.score, "overlap", None))
        head.folded.extend(g.folded)
        if g.score is not None and (head.score is None or g.score > head.score):
            head.score = g.score
    return head
