"""How much of a retrieved context is repeated evidence: ``rag-dedup query`` over BM25.

For each question three top-k lists are compared over the same BM25 retriever:

- ``plain``: the retriever's top ``k``;
- ``postprocessor``: :class:`~rag_dedup.llama_index.postprocessor.DedupPostprocessor` (``top_n=k``) over
  the top ``fetch_factor * k`` (the README's over-fetch recipe), which can return fewer than ``k``;
- ``distinct``: :class:`~rag_dedup.llama_index.retriever.DistinctRetriever` (``top_k=k``), which fetches
  deeper until it holds ``k`` distinct passages.

The *distinct-evidence ratio* of a list is ``D / k``, where ``D`` is the size of the greedy set over the
list in rank order: a passage joins when its Jaccard similarity (shingle sets, the index's ``ngram``) to
every passage already in the set is below the index's threshold. ``1.0`` means ``k`` distinct pieces of
evidence; a plain top 10 at ``0.6`` spends four of its ten slots on copies. For each list the report also
counts the duplicates removed: for ``plain`` the ``k - D`` copies it carries, for the other two the
retrieved nodes they folded into the passages they kept.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rag_dedup.app.report import Chunk

__all__ = [
    "FETCH_FACTOR",
    "METHODS",
    "MethodResult",
    "QuestionReport",
    "RetrievalReport",
    "bm25_retriever",
    "compare",
    "distinct_count",
]

#: The compared lists, in display order, with their labels.
METHODS: dict[str, str] = {
    "plain": "plain top k",
    "postprocessor": "DedupPostprocessor",
    "distinct": "DistinctRetriever",
}
#: The postprocessor runs over the top ``FETCH_FACTOR * k`` (the README's recipe: over-fetch about 3x).
FETCH_FACTOR = 3


def bm25_retriever(chunks: Sequence[Chunk]) -> Any:
    """A ``BM25Retriever`` over ``chunks``: one node per chunk, id = chunk key, ``metadata["source"]``."""
    from llama_index.core.schema import TextNode
    from llama_index.retrievers.bm25 import BM25Retriever

    nodes = [TextNode(id_=c.key, text=c.text, metadata={"source": c.source}) for c in chunks]
    return BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=min(len(nodes), 10))


def matching_only(retriever: Any) -> Any:
    """``retriever`` (a ``BM25Retriever``) returning only the chunks that match the question.

    BM25 scores a chunk 0 when no term of the question is in it, and ``BM25Retriever`` still fills its
    top k with such chunks, in an arbitrary order: counted, they would be distinct evidence that is
    none. This retriever drops them, so a question that matches nothing gets empty lists and one that
    matches fewer than k chunks gets fewer results (``DistinctRetriever`` then stops fetching deeper:
    the matches ran out). ``similarity_top_k`` and ``corpus`` are the wrapped retriever's.
    """
    from llama_index.core.base.base_retriever import BaseRetriever

    class MatchingOnly(BaseRetriever):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        @property
        def similarity_top_k(self) -> int:
            return int(self.inner.similarity_top_k)

        @similarity_top_k.setter
        def similarity_top_k(self, k: int) -> None:
            self.inner.similarity_top_k = k

        @property
        def corpus(self) -> Any:
            return self.inner.corpus

        def _retrieve(self, query_bundle: Any) -> list[Any]:
            return [n for n in self.inner.retrieve(query_bundle) if float(n.score or 0.0) > 0.0]

    return MatchingOnly(retriever)


def distinct_count(texts: Sequence[str], *, threshold: float, ngram: int) -> int:
    """Size of the greedy set over ``texts`` (in order) with pairwise Jaccard < ``threshold``."""
    from rag_dedup.shingles import shingle_hashes
    from rag_dedup.similarity import jaccard_many

    kept: list[Any] = []
    for text in texts:
        s = shingle_hashes(text, ngram)
        if not kept or bool((jaccard_many(s, kept) < threshold).all()):
            kept.append(s)
    return len(kept)


@dataclass(frozen=True)
class MethodResult:
    """One top-k list: the keys returned (best first), how many are distinct, the duplicates removed."""

    keys: tuple[str, ...]
    distinct: int
    removed: int
    k: int

    @property
    def ratio(self) -> float:
        """The distinct-evidence ratio ``distinct / k``."""
        return self.distinct / self.k

    def to_dict(self) -> dict[str, Any]:
        return {"returned": len(self.keys), "distinct": self.distinct, "ratio": round(self.ratio, 4),
                "removed": self.removed, "keys": list(self.keys)}


@dataclass(frozen=True)
class QuestionReport:
    """The three lists for one question; ``nodes`` keeps each list's NodeWithScore objects for display."""

    question: str
    results: dict[str, MethodResult]
    nodes: dict[str, list[Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, **{m: r.to_dict() for m, r in self.results.items()}}


@dataclass(frozen=True)
class RetrievalReport:
    """Every question's lists, with ``k``, the threshold and ``ngram`` used, and the means per list."""

    k: int
    threshold: float
    ngram: int
    chunks: int
    questions: tuple[QuestionReport, ...]

    def mean(self, method: str, field: str = "ratio") -> float:
        """The mean over questions of ``ratio`` (or ``removed``, ``distinct``) of ``method``."""
        values = [getattr(q.results[method], field) for q in self.questions]
        return sum(values) / len(values) if values else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "rag-dedup.queries/1",
            "k": self.k,
            "threshold": self.threshold,
            "ngram": self.ngram,
            "chunks": self.chunks,
            "fetch_factor": FETCH_FACTOR,
            "mean": {m: {"ratio": round(self.mean(m), 4), "removed": round(self.mean(m, "removed"), 4)}
                     for m in METHODS},
            "questions": [q.to_dict() for q in self.questions],
        }


def _folded(nodes: Sequence[Any]) -> int:
    from rag_dedup.llama_index.metadata import DEDUP_COLLAPSED

    return sum(len(n.node.metadata.get(DEDUP_COLLAPSED) or ()) for n in nodes)


def compare(retriever: Any, index: Any, questions: Sequence[str], k: int, *, progress: Any = None) -> RetrievalReport:
    """Retrieve each question three ways (see the module docstring) and measure each list.

    Args:
        retriever: a ``BM25Retriever`` (its ``similarity_top_k`` is set per call).
        index: the ``DedupIndex`` holding every node id of the retriever.
        questions: the questions, each non-empty.
        k: results per list (>= 1).
        progress: wraps the loop over questions (e.g. :func:`rag_dedup.app.progress.track`).

    Raises:
        ValueError: ``k`` < 1, no questions, or an empty question (named by its number).
    """
    from llama_index.core.schema import QueryBundle

    from rag_dedup.llama_index.postprocessor import DedupPostprocessor
    from rag_dedup.llama_index.retriever import DistinctRetriever

    if k < 1:
        raise ValueError(f"k ({k}) must be at least 1")
    if not questions:
        raise ValueError("no questions given")
    for i, q in enumerate(questions, 1):
        if not q.strip():
            raise ValueError(f"question {i} is empty")
    size = len(retriever.corpus)
    retriever = matching_only(retriever)
    # bm25s logs "The query is empty" at INFO for a question of stopwords only; the report says it.
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    threshold, ngram = float(index.threshold), int(index.ngram)
    post = DedupPostprocessor(index=index, top_n=k)
    distinct = DistinctRetriever(retriever, top_k=min(k, size), index=index)
    reports = []
    loop = progress(questions) if progress is not None else questions
    for question in loop:
        retriever.similarity_top_k = min(size, FETCH_FACTOR * k)
        fetched = retriever.retrieve(question)
        lists = {"plain": fetched[:k]}
        plain_texts = [n.node.get_content() for n in lists["plain"]]
        lists["postprocessor"] = post.postprocess_nodes(list(fetched), query_bundle=QueryBundle(question))
        lists["distinct"] = distinct.retrieve(question)
        results = {}
        for method, nodes in lists.items():
            texts = plain_texts if method == "plain" else [n.node.get_content() for n in nodes]
            d = distinct_count(texts, threshold=threshold, ngram=ngram)
            removed = len(nodes) - d if method == "plain" else _folded(nodes)
            results[method] = MethodResult(tuple(n.node.node_id for n in nodes), d, removed, k)
        reports.append(QuestionReport(question, results, lists))
    return RetrievalReport(k, threshold, ngram, size, tuple(reports))
