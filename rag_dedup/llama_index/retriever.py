"""``DistinctRetriever``: top-k that holds k distinct pieces of evidence, not k copies of one.

Deduplicating after retrieval leaves fewer than k passages whenever the top k held duplicates (and
LlamaIndex's own id-based dedup silently does the same). ``DistinctRetriever`` wraps any retriever,
over-fetches (``fetch_factor * top_k``, by setting the wrapped retriever's ``similarity_top_k``), collapses
duplicates with a :class:`~rag_dedup.llama_index.postprocessor.DedupPostprocessor`, and, while fewer than ``top_k``
distinct passages remain, fetches again with twice the depth, until it holds ``top_k`` or the corpus
runs out (the retriever returned fewer nodes than asked for) or ``max_fetch`` is reached.

Example (run for real in ``examples/quickstart.py``)::

    from llama_index.retrievers.bm25 import BM25Retriever
    retriever = DistinctRetriever(BM25Retriever.from_defaults(nodes=nodes), top_k=10)
    query_engine = RetrieverQueryEngine.from_args(retriever)
"""

from __future__ import annotations

import asyncio
import math
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, ImageNode, IndexNode, NodeWithScore, QueryBundle, TextNode

from rag_dedup.collapse import is_blank
from rag_dedup.index import DedupIndex
from rag_dedup.llama_index.postprocessor import DedupPostprocessor
from rag_dedup.settings import check_fetch_factor, check_top

__all__ = ["DistinctRetriever"]

#: A query's IndexNode expansions: (node id, id of its target) -> (the target, what it brought). The
#: target is kept so that its id stays its own while the query runs.
_Expansions = dict[tuple[str, int], tuple[Any, list[NodeWithScore]]]


def _corpus_size(retriever: BaseRetriever) -> int | None:
    """How many nodes the retriever can return at most, when it tells (BM25Retriever keeps its corpus)."""
    corpus = getattr(retriever, "corpus", None)
    try:
        return len(corpus) if corpus is not None else None  # type: ignore[arg-type]
    except TypeError:
        return None


def _blank(nws: NodeWithScore) -> bool:
    """A text node with empty or whitespace text: no evidence (images are evidence)."""
    node = nws.node
    return isinstance(node, TextNode) and not isinstance(node, ImageNode) and is_blank(node.text)


class DistinctRetriever(BaseRetriever):
    """Wrap ``retriever`` so that it returns ``top_k`` distinct passages (see the module docstring).

    Args:
        retriever: Any LlamaIndex retriever. If it has a settable ``similarity_top_k`` (vector index,
            BM25 and most others do), it is set for each fetch and restored afterwards; if not, its
            own result is collapsed once.
        top_k: How many distinct passages to return.
        postprocessor: The collapse rules; its ``top_n`` is ignored. Defaults to
            ``DedupPostprocessor(threshold=threshold, index=index)``: no two passages returned have
            Jaccard similarity at or above the threshold, clusters or not.
        threshold: Passed to the default postprocessor (not with ``postprocessor``).
        index: A ``DedupIndex`` for the default postprocessor (not with ``postprocessor``).
        fetch_factor: The first fetch asks for ``ceil(fetch_factor * top_k)`` nodes (at least ``top_k``).
        max_fetch: Never ask the wrapped retriever for more nodes than this.
        callback_manager, object_map, objects, verbose: As for every LlamaIndex ``BaseRetriever``.

    Raises:
        TypeError: ``retriever`` is not a ``BaseRetriever``, ``postprocessor`` not a
            ``DedupPostprocessor``, ``top_k`` or ``max_fetch`` not an int, or ``fetch_factor`` not a number.
        ValueError: ``top_k`` < 1, ``fetch_factor`` < 1 or not finite, ``max_fetch`` < ``top_k``, or both
            ``postprocessor`` and ``threshold``/``index``.
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        top_k: int = 10,
        postprocessor: DedupPostprocessor | None = None,
        *,
        threshold: float | None = None,
        index: DedupIndex | None = None,
        fetch_factor: float = 3.0,
        max_fetch: int = 1000,
        callback_manager: CallbackManager | None = None,
        object_map: dict[str, Any] | None = None,
        objects: list[IndexNode] | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(retriever, BaseRetriever):
            raise TypeError(f"retriever must be a llama_index BaseRetriever, got {type(retriever).__name__}")
        check_top(top_k, "top_k")
        if isinstance(max_fetch, bool) or not isinstance(max_fetch, int):
            raise TypeError(f"max_fetch must be int, got {type(max_fetch).__name__}")
        if max_fetch < top_k:
            raise ValueError(
                f"max_fetch ({max_fetch}) must be at least top_k ({top_k}); raise max_fetch or lower top_k"
            )
        fetch_factor = check_fetch_factor(fetch_factor)
        if postprocessor is None:
            postprocessor = DedupPostprocessor(threshold=threshold, index=index)
        elif not isinstance(postprocessor, DedupPostprocessor):
            raise TypeError(f"postprocessor must be a DedupPostprocessor, got {type(postprocessor).__name__}")
        elif threshold is not None or index is not None:
            raise ValueError("pass threshold and index to the DedupPostprocessor, or pass no postprocessor, not both")
        self.retriever = retriever
        self.top_k = top_k
        self.fetch_factor = fetch_factor
        self.max_fetch = max_fetch
        self._postprocessor = postprocessor
        self._sets_top_k = hasattr(retriever, "similarity_top_k")
        self._lock = threading.Lock()
        # One asyncio.Lock per event loop: a lock is bound to the loop it first waits on.
        self._alocks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()
        #: Nodes asked of the wrapped retriever by the last query, one entry per fetch (for inspection).
        self.last_fetches: list[int] = []
        super().__init__(callback_manager=callback_manager, object_map=object_map, objects=objects, verbose=verbose)

    @property
    def top_k(self) -> int:
        """How many distinct passages to return (checked when set, as at construction)."""
        return self._top_k

    @top_k.setter
    def top_k(self, value: int) -> None:
        check_top(value, "top_k")
        max_fetch = getattr(self, "max_fetch", None)
        if max_fetch is not None and max_fetch < value:
            raise ValueError(f"top_k ({value}) must be at most max_fetch ({max_fetch}); raise max_fetch first")
        self._top_k = value

    @property
    def postprocessor(self) -> DedupPostprocessor:
        """The postprocessor that decides what is a duplicate."""
        return self._postprocessor

    def _first_fetch(self) -> int:
        cap = self._cap()
        return min(max(self.top_k, math.ceil(self.fetch_factor * self.top_k)), cap)

    def _cap(self) -> int:
        size = _corpus_size(self.retriever)
        return self.max_fetch if size is None else max(1, min(self.max_fetch, size))

    @contextmanager
    def _top_k_set(self, k: int) -> Iterator[None]:
        """The wrapped retriever's ``similarity_top_k`` set to ``k`` meanwhile; and its children's, for a
        retriever that fuses others' results (``QueryFusionRetriever``: its own only caps the fused list,
        each child searches to its own depth)."""
        if not self._sets_top_k:
            yield
            return
        targets = [self.retriever] + [
            r for r in getattr(self.retriever, "_retrievers", None) or [] if hasattr(r, "similarity_top_k")
        ]
        previous = [r.similarity_top_k for r in targets]  # type: ignore[attr-defined]
        for r in targets:
            r.similarity_top_k = k  # type: ignore[attr-defined]
        try:
            yield
        finally:
            for r, was in zip(targets, previous):
                r.similarity_top_k = was  # type: ignore[attr-defined]

    def _collapse(self, fetched: list[NodeWithScore]) -> tuple[list[NodeWithScore], int]:
        """The first ``top_k`` distinct nodes (the postprocessor's own ``top_n`` does not apply), and
        how many of them carry evidence (a node with blank text takes no place)."""
        distinct = self._postprocessor.collapse(fetched, self.top_k)
        return distinct, sum(1 for n in distinct if not _blank(n))

    def _done(self, k: int, fetched: int, distinct: int, before: int) -> bool:
        """Stop when there are enough, the corpus ran out, or fetching deeper is not possible.

        The corpus ran out when a fetch brought fewer than asked; from a retriever that fuses others
        (``QueryFusionRetriever``, which drops the copies its children both found, by id and text), only
        when it brought no more than the fetch before it (``before``).
        """
        fused = bool(getattr(self.retriever, "_retrievers", None))
        ran_out = fetched < k and (not fused or fetched <= before)
        return distinct >= self.top_k or ran_out or not self._sets_top_k or k >= self._cap()

    def _link_target(self, n: NodeWithScore) -> Any:
        """What ``n`` leads to when it is an IndexNode that leads somewhere (``BaseRetriever``'s
        expansion replaces it with what that brings), else None."""
        node = n.node
        return (node.obj or self.object_map.get(node.index_id)) if isinstance(node, IndexNode) else None

    def _expanded(self, fetched: list[NodeWithScore], expansions: _Expansions) -> list[NodeWithScore]:
        """``BaseRetriever._handle_recursive_retrieval`` of ``fetched``, from the expansions of its
        IndexNodes made for this query (by node id and target: a deeper fetch brings the earlier ones
        again), each node id once, its first occurrence kept, as there. A node or a query engine's
        answer takes the IndexNode's score, as there, which a deeper fetch may have changed (fused
        scores are rescaled); what a retriever brings keeps its own scores."""
        out: list[NodeWithScore] = []
        for n in fetched:
            target = self._link_target(n)
            if target is None:
                out.append(n)
            elif isinstance(target, (BaseNode, BaseQueryEngine)):
                out.extend(NodeWithScore(node=c.node, score=n.score or 1.0) for c in expansions[(n.node.node_id, id(target))][1])
            else:
                out.extend(expansions[(n.node.node_id, id(target))][1])
        seen: set[str] = set()
        return [n for n in out if not (n.node.node_id in seen or seen.add(n.node.node_id))]  # type: ignore[func-returns-value]

    def _unexpanded(self, fetched: list[NodeWithScore], expansions: _Expansions) -> list[tuple[tuple[str, int], NodeWithScore]]:
        """The IndexNodes of ``fetched`` that lead somewhere and were not expanded for this query yet, by key."""
        out: dict[tuple[str, int], NodeWithScore] = {}
        for n in fetched:
            target = self._link_target(n)
            if target is not None and (key := (n.node.node_id, id(target))) not in expansions:
                out.setdefault(key, n)
        return list(out.items())

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.last_fetches = []
        k, before = self._first_fetch(), -1
        expansions: _Expansions = {}
        while True:
            with self._lock, self._top_k_set(k):
                fetched = self.retriever.retrieve(query_bundle)
            self.last_fetches.append(k)
            # IndexNodes expanded here, before the collapse (BaseRetriever.retrieve would expand them
            # after _retrieve, and what they bring would then be neither collapsed nor counted); each
            # once per query, not again at every deeper fetch (it may run a retriever or a query engine).
            for key, n in self._unexpanded(fetched, expansions):
                expansions[key] = (self._link_target(n), self._handle_recursive_retrieval(query_bundle, [n]))
            distinct, count = self._collapse(self._expanded(fetched, expansions))
            if self._done(k, len(fetched), count, before):
                return distinct
            before, k = len(fetched), min(2 * k, self._cap())

    def _alock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        with self._lock:
            lock = self._alocks.get(loop)
            if lock is None:
                lock = self._alocks[loop] = asyncio.Lock()
        return lock

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.last_fetches = []
        k, before = self._first_fetch(), -1
        expansions: _Expansions = {}
        while True:
            async with self._alock():
                with self._top_k_set(k):
                    fetched = await self.retriever.aretrieve(query_bundle)
            self.last_fetches.append(k)
            for key, n in self._unexpanded(fetched, expansions):
                expansions[key] = (self._link_target(n), await self._ahandle_recursive_retrieval(query_bundle, [n]))
            distinct, count = self._collapse(self._expanded(fetched, expansions))
            if self._done(k, len(fetched), count, before):
                return distinct
            before, k = len(fetched), min(2 * k, self._cap())
