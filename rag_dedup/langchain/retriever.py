"""``DistinctRetriever``: any LangChain retriever, refilled until it returns k distinct passages.

Over-fetching and collapsing can still leave fewer than k distinct documents when the corpus repeats
itself more than expected. This retriever asks the wrapped one for ``ceil(top_k * fetch_factor)``
documents, collapses them (:func:`~rag_dedup.langchain.compressor.collapse_documents`, comparing
texts by default, so no two returned documents reach the threshold), and, while fewer than ``top_k``
distinct ones remain, asks again for twice as many, until the wrapped retriever returns fewer than
asked (the corpus ran out) or ``max_fetch`` is reached. How many documents the wrapped retriever
returns is set on a copy of it: ``search_kwargs["k"]`` (vector store retrievers) or its ``k`` field
(BM25Retriever and most others); a retriever with neither is refused at construction.
"""

from __future__ import annotations

import math
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from rag_dedup.collapse import is_blank
from rag_dedup.index import DedupIndex
from rag_dedup.langchain.compressor import DedupCompressor, collapse_documents
from rag_dedup.settings import check_fetch_factor, check_threshold, check_top

__all__ = ["DistinctRetriever"]


#: LangChain's default ``fetch_k`` of an MMR search (``VectorStore.max_marginal_relevance_search``).
_MMR_FETCH_K = 20


def _sized(retriever: BaseRetriever, k: int) -> BaseRetriever:
    """A copy of ``retriever`` that returns ``k`` documents.

    An MMR search (``search_type="mmr"``) picks its ``k`` among ``fetch_k`` candidates and returns at
    most ``fetch_k``: that is raised to ``k`` too, so that a short page still means the corpus ran out.
    """
    kwargs = getattr(retriever, "search_kwargs", None)
    if isinstance(kwargs, dict):
        sized = {**kwargs, "k": k}
        if getattr(retriever, "search_type", None) == "mmr":
            fetch_k = kwargs.get("fetch_k", _MMR_FETCH_K)
            sized["fetch_k"] = max(fetch_k, k) if isinstance(fetch_k, int) else k
        return retriever.model_copy(update={"search_kwargs": sized})
    return retriever.model_copy(update={"k": k})


def _evidence(kept: list[Document]) -> int:
    """How many of ``kept`` carry evidence: a document with blank text takes no place of ``top_k`` (it
    passes through the collapse, as in LlamaIndex's ``DistinctRetriever``)."""
    return sum(1 for d in kept if not is_blank(d.page_content))


class DistinctRetriever(BaseRetriever):
    """Return ``top_k`` distinct documents from ``retriever``, fetching deeper when duplicates eat the top.

    Args:
        retriever: The retriever to wrap (it is never modified; copies are sized per fetch).
        top_k: How many distinct documents to return.
        fetch_factor: The first fetch asks for ``ceil(top_k * fetch_factor)`` documents (>= 1, finite).
        max_fetch: The deepest fetch.
        threshold, trust_clusters, index, source_key: As :class:`DedupCompressor`.

    Example:
        >>> from langchain_community.retrievers import BM25Retriever
        >>> text = "Permission is hereby granted, free of charge, to any person obtaining a copy of this"
        >>> docs = [Document(text), Document(text.upper()), Document("Something else entirely, about bees")]
        >>> [d.page_content[:9] for d in DistinctRetriever(retriever=BM25Retriever.from_documents(docs), top_k=2).invoke("copy")]
        ['Permissio', 'Something']
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=True)

    retriever: BaseRetriever
    # The bounds are rag_dedup.settings' (the same rules and messages as the core's), checked below.
    top_k: int = Field(default=4, description="How many distinct documents to return.")
    fetch_factor: float = Field(default=3.0, description="First fetch: top_k times this.")
    max_fetch: int = Field(default=1000, validate_default=True, description="The deepest fetch.")
    threshold: float | None = Field(default=None, description="Duplicate threshold (Jaccard).")
    trust_clusters: bool = Field(default=False, description="Compare two stamped documents by cluster alone.")
    index: DedupIndex | None = Field(default=None, description="An index whose clusters override the stamps.")
    source_key: str = Field(default="source", description="The metadata key naming a document's source.")

    # The collapse for the current settings and the settings it was made for (one compressor, so the
    # shingles of the texts seen are remembered from one query to the next).
    _made: tuple[tuple[Any, ...], DedupCompressor] | None = PrivateAttr(default=None)

    @field_validator("top_k", "max_fetch", mode="before")
    @classmethod
    def _check_count(cls, value: object, info: ValidationInfo) -> int | None:
        count = check_top(value, info.field_name)
        # Here, not in a model validator, so that an assignment refused leaves the old value (pydantic
        # keeps an assigned value that a model validator then refuses). At construction top_k comes
        # first, so max_fetch's check sees both.
        pair = {**info.data, info.field_name: count}
        if "top_k" in pair and "max_fetch" in pair and pair["max_fetch"] < pair["top_k"]:
            raise ValueError(
                f"max_fetch ({pair['max_fetch']}) must be at least top_k ({pair['top_k']}); raise max_fetch or lower top_k"
            )
        return count

    @field_validator("fetch_factor", mode="before")
    @classmethod
    def _check_fetch_factor(cls, value: object) -> float:
        return check_fetch_factor(value)

    @field_validator("threshold", mode="before")
    @classmethod
    def _check_threshold(cls, value: object) -> float | None:
        return None if value is None else check_threshold(value)

    @model_validator(mode="after")
    def _check_retriever(self) -> DistinctRetriever:
        has_k = isinstance(getattr(self.retriever, "search_kwargs", None), dict) or "k" in type(self.retriever).model_fields
        if not has_k:
            raise ValueError(
                f"DistinctRetriever cannot set how many documents a {type(self.retriever).__name__} returns: "
                "it has neither search_kwargs nor a k field"
            )
        return self

    def _compressor(self) -> DedupCompressor:
        settings = (self.top_k, self.threshold, self.trust_clusters, self.index, self.source_key)
        made = self._made
        if made is None or made[0] != settings:
            compressor = DedupCompressor(
                top_n=self.top_k, threshold=self.threshold, trust_clusters=self.trust_clusters, index=self.index,
                source_key=self.source_key,
            )
            made = self._made = (settings, compressor)
        return made[1]

    def _first_fetch(self) -> int:
        return min(self.max_fetch, max(self.top_k, math.ceil(self.top_k * self.fetch_factor)))

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        collapser = self._compressor().collapser()
        k = self._first_fetch()
        while True:
            fetched = _sized(self.retriever, k).invoke(query, config={"callbacks": run_manager.get_child()})
            kept = collapse_documents(collapser, fetched, self.top_k, self.source_key)
            if _evidence(kept) >= self.top_k or len(fetched) < k or k >= self.max_fetch:
                return kept
            k = min(self.max_fetch, 2 * k)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        collapser = self._compressor().collapser()
        k = self._first_fetch()
        while True:
            fetched = await _sized(self.retriever, k).ainvoke(query, config={"callbacks": run_manager.get_child()})
            kept = collapse_documents(collapser, fetched, self.top_k, self.source_key)
            if _evidence(kept) >= self.top_k or len(fetched) < k or k >= self.max_fetch:
                return kept
            k = min(self.max_fetch, 2 * k)
