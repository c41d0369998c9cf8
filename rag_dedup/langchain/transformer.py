"""``DedupDocumentTransformer``: LangChain documents into a ``DedupIndex``, stamped, tagged or dropped.

Place it between a loader/splitter and a vector store, or before LangChain's indexing API::

    dedup = DedupDocumentTransformer(mode="drop", replace_sources=True)
    index(dedup.transform_documents(docs), record_manager, vector_store, cleanup="incremental",
          source_id_key="source")
    index(dedup.take_promoted(), record_manager, vector_store, cleanup=None, source_id_key="source")

(``replace_sources=True`` follows the cleanup: a file edited and indexed again replaces its earlier
chunks in the dedup index as it does in the store, and a copy of another source that takes the place of
one it lost waits for ``take_promoted()``, which is indexed without a cleanup.)

Each document with text is added to the index under its key (``Document.id``, else a digest of its
text and metadata) with ``metadata[source_key]`` as its source, and comes back as a *new* ``Document``
(the input is never modified) whose ``id`` is that key and whose metadata carries ``dedup_cluster`` and
``dedup_duplicate_of``
(:mod:`rag_dedup.stamps`). In drop mode each passage passes once (:mod:`rag_dedup.ingest`); dropped
documents stay in the index, so ``transformer.index.resolve(key)`` still names their representative.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.documents import BaseDocumentTransformer, Document

from rag_dedup.collapse import is_blank
from rag_dedup.index import DedupIndex
from rag_dedup.ingest import Ingestor, Mode, Verdict
from rag_dedup.stamps import DEDUP_CLUSTER, DEDUP_DUPLICATE_OF, detached

__all__ = ["DedupDocumentTransformer", "document_key"]


def document_key(doc: Document) -> str:
    """The index key of a LangChain document: its ``id``, else ``sha256:`` of its text and metadata.

    The digest is deterministic, in every process, so the same document transformed twice has the same
    key (and re-adding it is a no-op): the metadata is written as JSON with sorted keys; a value JSON
    cannot hold is written as its ``repr``, a set's members in sorted order (a set's own ``repr``
    follows the process's hash seed); keys of mixed types (``{"source": ..., 2: ...}``) are sorted as
    JSON writes them, as strings.

    Raises:
        ValueError: A metadata value's ``repr`` names its memory address (``<Foo object at 0x...>``),
            which differs in every process: give the document an ``id``, or metadata JSON can hold.
    """
    if doc.id:
        return str(doc.id)
    try:
        meta = json.dumps(doc.metadata, sort_keys=True, default=_stable_repr, ensure_ascii=False)
    except TypeError:  # keys of mixed types, which sort_keys cannot order
        meta = json.dumps(_str_keys(doc.metadata), sort_keys=True, default=_stable_repr, ensure_ascii=False)
    payload = f"{doc.page_content}\x00{meta}".encode("utf-8", "surrogatepass")
    return "sha256:" + hashlib.sha256(payload).hexdigest()


#: A ``repr`` that names a memory address (object's default): it differs in every process.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")


def _stable_repr(value: object) -> str:
    """What :func:`document_key` writes for a value JSON cannot hold: its ``repr``, a set's with its
    members sorted; a ``repr`` that names an address is refused."""
    if isinstance(value, (set, frozenset)):
        text = "{" + ", ".join(sorted(json.dumps(v, sort_keys=True, default=_stable_repr) for v in value)) + "}"
    else:
        text = repr(value)
    if _ADDRESS.search(text):
        raise ValueError(
            f"a document without an id has a metadata value of type {type(value).__name__} whose repr names its "
            f"memory address ({text[:60]}), "
            "so its key (a digest of its text and metadata) would differ in every process; give the document "
            "an id, or metadata JSON can hold"
        )
    return text


def _str_keys(value: object) -> object:
    """``value`` with every dict's keys as JSON writes them (strings), so that mixed keys sort."""
    if isinstance(value, dict):
        return {json.dumps(k) if not isinstance(k, str) else k: _str_keys(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_str_keys(v) for v in value]
    return value


class DedupDocumentTransformer(BaseDocumentTransformer):
    """Index documents and stamp them with their cluster; in drop mode pass each passage on once.

    Args:
        index: The ``DedupIndex`` (in memory, or shared through Redis). Default: a new in-memory index.
        threshold: Jaccard similarity of shingle sets at and above which two documents are duplicates,
            for a new index (giving both ``index`` and another threshold is an error).
        mode: ``"tag"`` returns every document stamped; ``"drop"`` each passage once.
        source_key: The metadata key that names a document's source (LangChain loaders write ``source``).
        replace_sources: Follow LangChain's indexing API with a cleanup (``cleanup="incremental"``). A
            source in a call replaces its earlier version: its documents from earlier calls that are
            not in this call leave the index first, as the cleanup deletes them from the store. Give
            every document of a source to one call then. And a document of *another* source that the
            call promotes (drop mode) is not returned with the call's documents, where the cleanup would
            take its source for re-indexed and delete that source's other documents: it is held for
            :meth:`take_promoted`, to be indexed with ``cleanup=None``. Use it with drop mode and a
            cleanup: without it an edited passage is dropped as a copy of its earlier version, which the
            cleanup then deletes, and the passage is in the store in no version. (With
            ``cleanup="full"``, a source that left the corpus is in no call: remove its documents with
            ``transformer.delete(transformer.index.keys_of_source(source))`` and index what that returns.)

    Example:
        >>> text = "Permission is hereby granted, free of charge, to any person obtaining a copy of this software."
        >>> docs = [Document(text, metadata={"source": "a"}), Document(text, metadata={"source": "b"})]
        >>> out = DedupDocumentTransformer(mode="drop").transform_documents(docs)
        >>> len(out), out[0].metadata["dedup_duplicate_of"]
        (1, None)
    """

    def __init__(
        self,
        index: DedupIndex | None = None,
        *,
        threshold: float | None = None,
        mode: Mode = "tag",
        source_key: str = "source",
        replace_sources: bool = False,
    ) -> None:
        if index is None:
            index = DedupIndex() if threshold is None else DedupIndex(threshold=threshold)
        elif threshold is not None and threshold != index.threshold:
            raise ValueError(f"threshold ({threshold}) contradicts the index's threshold ({index.threshold})")
        if not isinstance(source_key, str):
            raise TypeError(f"source_key must be str, got {type(source_key).__name__}")
        if not isinstance(replace_sources, bool):
            raise TypeError(f"replace_sources must be a bool, got {type(replace_sources).__name__}")
        self._ingestor: Ingestor[Document] = Ingestor(index, mode)
        self.source_key = source_key
        self.replace_sources = replace_sources
        self._held: dict[str, Document] = {}  # promoted documents of other sources, by key (replace_sources)

    @property
    def index(self) -> DedupIndex:
        """The index the documents go into."""
        return self._ingestor.index

    @property
    def mode(self) -> Mode:
        return self._ingestor.mode

    def transform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        """Index ``documents`` and return stamped copies (in drop mode, of each passage once), in input order.

        In drop mode, earlier dropped documents that this call promoted (their passage lost the copy the
        store held, see :mod:`rag_dedup.ingest`) follow, stamped; with ``replace_sources``, only those of
        the call's own sources (the others wait for :meth:`take_promoted`).

        Raises:
            TypeError: An item is not a LangChain ``Document``.
            ValueError: As :meth:`DedupIndex.update`, naming it. (A key already indexed with another text is
                replaced, as a vector store upserts a document id added again.)
        """
        items = []
        for i, doc in enumerate(documents):
            if not isinstance(doc, Document):
                raise TypeError(f"documents[{i}] is a {type(doc).__name__}, not a langchain_core Document")
            text = doc.page_content if isinstance(doc.page_content, str) else None
            source = doc.metadata.get(self.source_key)
            try:  # a blank document is not indexed, and needs no key of its own
                key = document_key(doc) if text is not None and not is_blank(text) else str(doc.id or "")
            except (TypeError, ValueError) as e:  # metadata no key can be made of (a circular dict, ...)
                raise type(e)(f"documents[{i}]: {e}") from None
            items.append((key, text, source if isinstance(source, str) else None, doc))
        replacing: list[str] = []
        if self.replace_sources:
            here = {key for key, _, _, _ in items}
            for source in sorted({source for _, _, source, _ in items if source is not None}):
                replacing.extend(k for k in self.index.keys_of_source(source) if k not in here)
        decision = self._ingestor.run(items, replacing=replacing)
        out = [_stamped(v) for v in decision.verdicts if v.passed]
        for verdict in decision.promoted:
            promoted = _stamped(verdict)
            if self.replace_sources and self._source(promoted) not in {source for _, _, source, _ in items}:
                self._held[verdict.key] = promoted
            else:
                out.append(promoted)
        for key in [v.key for v in decision.verdicts if v.passed]:
            self._held.pop(key, None)  # submitted again: returned now with its source
        return out

    def take_promoted(self) -> list[Document]:
        """The documents of other sources that calls promoted and held back (``replace_sources``, drop
        mode), stamped, in the order they were promoted; each is returned once. Index them with
        ``cleanup=None``: they belong to sources the calls did not re-index::

            index(dedup.take_promoted(), record_manager, vector_store, cleanup=None, source_id_key="source")

        A held document that the index no longer holds (its source was replaced or it was deleted
        since) is not returned.
        """
        held, self._held = self._held, {}
        index = self.index
        present = index.contains_many(list(held)) if held else []
        return [doc for doc, here in zip(held.values(), present) if here]

    def _source(self, doc: Document) -> str | None:
        source = doc.metadata.get(self.source_key)
        return source if isinstance(source, str) else None

    def delete(self, keys: Sequence[str]) -> list[Document]:
        """Remove documents (by key, see :func:`document_key`) that left the store; return those promoted.

        In drop mode, a removed document may have been the only copy of a passage that the store
        held: another copy dropped earlier is then returned, stamped, for the caller to add.
        """
        promoted = self._ingestor.remove(keys)
        for key in keys:
            self._held.pop(key, None)
        return [_stamped(v) for v in promoted]

    async def atransform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        """As :meth:`transform_documents`, in the default executor (the index may do Redis I/O)."""
        from langchain_core.runnables.config import run_in_executor

        return await run_in_executor(None, self.transform_documents, documents, **kwargs)

    def __repr__(self) -> str:
        return (
            f"DedupDocumentTransformer(index={self.index!r}, mode={self.mode!r}, source_key={self.source_key!r}, "
            f"replace_sources={self.replace_sources!r})"
        )


def _stamped(verdict: Verdict[Document]) -> Document:
    """A copy of the verdict's document carrying its ingest stamps (the document itself is not changed)."""
    doc = verdict.payload
    if verdict.cluster is None:  # a blank document: a copy, its metadata detached as a stamped one's is
        return doc.model_copy(update={"metadata": detached(doc.metadata)})
    # Deep: nested metadata (a loader's) must not be shared with the caller's document either.
    metadata = {**detached(doc.metadata), DEDUP_CLUSTER: verdict.cluster, DEDUP_DUPLICATE_OF: verdict.duplicate_of}
    return doc.model_copy(update={"metadata": metadata, "id": verdict.key})
