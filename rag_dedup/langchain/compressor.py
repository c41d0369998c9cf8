"""``DedupCompressor``: at query time, no two of the documents handed to the LLM are the same evidence.

A LangChain document compressor, so it plugs in wherever those go::

    retriever = ContextualCompressionRetriever(base_compressor=DedupCompressor(top_n=4),
                                               base_retriever=vector_store.as_retriever(search_kwargs={"k": 12}))

It reads the documents in the order given (best first), keeps a document unless it duplicates one
kept already, and folds the duplicate into the keeper's ``metadata["dedup_collapsed"]``: a list of
``{id, source, score, reason, similarity}`` (the document's key, ``metadata[source_key]``, its
``metadata["score"]``, else a reranker's ``metadata["relevance_score"]``, if any, and why), so citations survive. The decision is
:class:`rag_dedup.collapse.Collapser`'s (see there for the reasons ``cluster``, ``exact``, ``near``,
``overlap``); the stamps ``DedupDocumentTransformer`` wrote (``dedup_cluster``) are used as it says.
Nothing is written on the input: a kept document that absorbed others is returned as a copy, one that
absorbed none as given; citations a document already carried from an earlier pass are kept (a second
pass merges, never erases).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import ConfigDict, Field, PrivateAttr, field_validator

from rag_dedup._pydantic import shallow_copy
from rag_dedup.collapse import Collapser, Kept, Passage, first_of_each_key
from rag_dedup.index import DedupIndex
from rag_dedup.langchain.transformer import document_key
from rag_dedup.settings import check_threshold, check_top
from rag_dedup.stamps import DEDUP_CLUSTER, DEDUP_COLLAPSED, collapsed_entries, detached

__all__ = ["DedupCompressor", "collapse_documents"]


def _passage(doc: Document, source_key: str) -> Passage:
    meta = doc.metadata
    start = meta.get("start_index")
    text = doc.page_content if isinstance(doc.page_content, str) else None
    cluster = meta.get(DEDUP_CLUSTER)
    source = meta.get(source_key)
    has_span = isinstance(start, int) and not isinstance(start, bool) and text is not None
    return Passage(
        document_key(doc),
        text,
        _score(meta),
        cluster if isinstance(cluster, str) else None,
        source if isinstance(source, str) else None,
        start if has_span else None,
        start + len(text) if has_span else None,  # type: ignore[operator]
    )


def _score(meta: dict[str, Any]) -> float | None:
    """``metadata["score"]``, else ``metadata["relevance_score"]`` (what LangChain's rerankers write),
    when it is a number; else None. A NaN stays NaN: the collapse reads a NaN-scored passage last, so it
    never keeps a scored copy of itself out (as in LlamaIndex)."""
    score = meta.get("score")
    if score is None:
        score = meta.get("relevance_score")
    if score is None:
        return None
    return float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None


def collapse_documents(
    collapser: Collapser, documents: Sequence[Document], top_n: int | None, source_key: str = "source"
) -> list[Document]:
    """The kept documents, in input order, each a copy carrying what was folded into it (a document
    given twice, by its key, counts once: see :func:`~rag_dedup.collapse.first_of_each_key`).

    Raises:
        TypeError: An item is not a LangChain ``Document``.
    """
    for i, doc in enumerate(documents):
        if not isinstance(doc, Document):
            raise TypeError(f"documents[{i}] is a {type(doc).__name__}, not a langchain_core Document")
    if collapser.merge_overlaps:
        passages = [_passage(d, source_key) for d in documents]
        keep = first_of_each_key([p.key for p in passages])
        if keep is not None:  # a document retrieved twice is one document
            documents, passages = [documents[i] for i in keep], [passages[i] for i in keep]
        kept = collapser.collapse(passages, top_n=top_n)
    else:  # _passage's columns without the spans: this runs for every document of every query
        keys, texts, scores, stamps, sources = [], [], [], [], []
        for doc in documents:
            meta = doc.metadata
            key = doc.id
            keys.append(key if type(key) is str and key else document_key(doc))  # document_key's first case, inlined
            text = doc.page_content
            texts.append(text if type(text) is str or isinstance(text, str) else None)
            scores.append(None if meta.get("score") is None and meta.get("relevance_score") is None else _score(meta))
            cluster = meta.get(DEDUP_CLUSTER)
            stamps.append(cluster if type(cluster) is str or isinstance(cluster, str) else None)
            source = meta.get(source_key)
            sources.append(source if type(source) is str or isinstance(source, str) else None)
        keep = first_of_each_key(keys)
        if keep is not None:  # a document retrieved twice is one document
            documents = [documents[i] for i in keep]
            keys, texts, scores, stamps, sources = ([column[i] for i in keep] for column in (keys, texts, scores, stamps, sources))
        kept = collapser.collapse_columns(keys, texts, scores, stamps, top_n, sources)
    return [_survivor(k, documents, source_key) for k in kept]


def _survivor(kept: Kept, documents: Sequence[Document], source_key: str) -> Document:
    doc = documents[kept.position]
    if not kept.folded:
        return doc  # unchanged: returned as given (nothing is written on it)
    entries = collapsed_entries(
        doc.metadata.get(DEDUP_COLLAPSED), kept.folded, lambda i: documents[i].metadata.get(DEDUP_COLLAPSED)
    )
    metadata = {**detached(doc.metadata), DEDUP_COLLAPSED: entries}  # nothing shared with the caller's
    if kept.text is None:
        return shallow_copy(doc, {"metadata": metadata})  # doc.model_copy(update=...), faster
    metadata["start_index"] = kept.start
    return doc.model_copy(update={"metadata": metadata, "page_content": kept.text})


class DedupCompressor(BaseDocumentCompressor):
    """Fold near-identical retrieved documents into the first copy (see the module docstring).

    Args:
        top_n: Keep at most this many documents (None: all distinct ones).
        threshold: Jaccard similarity of shingle sets at or above which two documents are duplicates
            (default: the index's, else 0.8).
        trust_clusters: Take cluster stamps as proof: two stamped documents are compared by cluster
            alone (faster; by default their texts are checked too, as :class:`~rag_dedup.collapse.Collapser` does).
        merge_overlaps: Join kept windows of one source that overlap (needs ``start_index``).
        index: A ``DedupIndex`` whose current clusters override the stamps.
        source_key: The metadata key naming a document's source.

    Example:
        >>> text = "Permission is hereby granted, free of charge, to any person obtaining a copy of this"
        >>> docs = [Document(text, metadata={"source": "a"}), Document(text.upper(), metadata={"source": "b"})]
        >>> [d.metadata["dedup_collapsed"][0]["source"] for d in DedupCompressor().compress_documents(docs, "q")]
        ['b']
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=True)

    # The bounds are rag_dedup.settings' (the same rules and messages as the core's), checked below.
    top_n: int | None = Field(default=None, description="Keep at most this many documents.")
    threshold: float | None = Field(default=None, description="Duplicate threshold (Jaccard).")
    trust_clusters: bool = Field(
        default=False, description="Take two documents' cluster stamps as proof (no text check between them)."
    )
    merge_overlaps: bool = Field(default=False, description="Join overlapping windows of one source.")
    index: DedupIndex | None = Field(default=None, description="An index whose clusters override the stamps.")
    source_key: str = Field(default="source", description="The metadata key naming a document's source.")
    _collapser: Collapser | None = PrivateAttr(default=None)

    @field_validator("top_n", mode="before")
    @classmethod
    def _check_top_n(cls, value: object) -> int | None:
        return check_top(value, "top_n", optional=True)

    @field_validator("threshold", mode="before")
    @classmethod
    def _check_threshold(cls, value: object) -> float | None:
        return None if value is None else check_threshold(value)

    def model_post_init(self, context: Any, /) -> None:
        self.collapser()  # bad settings fail here, not at the first query

    def collapser(self) -> Collapser:
        """The collapse for the current settings (made anew when a setting was assigned since)."""
        c = self._collapser
        if c is None or (c.threshold, c.trust_clusters, c.merge_overlaps, c.index) != (
            self.threshold if self.threshold is not None else c.threshold,
            self.trust_clusters,
            self.merge_overlaps,
            self.index,
        ):
            c = Collapser(
                self.threshold, trust_clusters=self.trust_clusters, merge_overlaps=self.merge_overlaps, index=self.index
            )
            self._collapser = c
        return c

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """The distinct documents among ``documents``, in their order (``query`` is not needed)."""
        return collapse_documents(self.collapser(), documents, self.top_n, self.source_key)
