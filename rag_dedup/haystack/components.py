"""Haystack components over the rag-dedup core: ingest dedup, boundary-stable chunks, query-time collapse.

Heavy state (the :class:`~rag_dedup.index.DedupIndex`) opens in ``warm_up``, which a ``Pipeline``
calls before the first run (and ``run`` calls itself when a component is used alone). The index is
described by serialisable parameters, so ``to_dict``/``from_dict`` (and a pipeline's YAML) round-trip:

* ``storage="redis://host:6379/0"`` (with ``namespace``): a Redis index shared by every process;
* ``index_path="dir"``: an in-memory index loaded from that directory in ``warm_up`` when it exists,
  written back by :meth:`DocumentDeduplicator.save`;
* neither: a new in-memory index.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Literal

from haystack import Document, component, default_from_dict, default_to_dict

from rag_dedup.index import DedupIndex
from rag_dedup.ingest import Ingestor, Verdict
from rag_dedup.stamps import DEDUP_CLUSTER, DEDUP_DUPLICATE_OF

__all__ = ["DocumentDeduplicator"]


def _open_index(threshold: float, storage: str | None, namespace: str, index_path: str | None) -> DedupIndex:
    """The index a component's parameters describe (see the module docstring)."""
    if storage is not None:
        return DedupIndex(threshold=threshold, storage=storage, namespace=namespace)
    if index_path is not None and os.path.exists(index_path):
        index = DedupIndex.load(index_path)
        if index.threshold != threshold:
            raise ValueError(
                f"the index saved in {index_path!r} has threshold {index.threshold}, not {threshold}; "
                "pass the same threshold or another index_path"
            )
        return index
    return DedupIndex(threshold=threshold)


def _check_index_params(threshold: float, storage: str | None, index_path: str | None) -> None:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold ({threshold!r}) must be a number in (0, 1]; 0.8 is a common start")
    if storage is not None and index_path is not None:
        raise ValueError("give storage (a Redis URL) or index_path (a directory), not both")


def _stamped(verdict: Verdict[Document]) -> Document:
    """A copy of the verdict's document carrying its ingest stamps (the document itself is not changed)."""
    doc = verdict.payload
    if verdict.cluster is None:
        return dataclasses.replace(doc, meta=dict(doc.meta))
    return dataclasses.replace(
        doc, meta={**doc.meta, DEDUP_CLUSTER: verdict.cluster, DEDUP_DUPLICATE_OF: verdict.duplicate_of}
    )


@component
class DocumentDeduplicator:
    """Add documents to a ``DedupIndex`` and stamp ``meta``; in drop mode pass each passage on once.

    Each document with text is indexed under its ``id`` with ``meta[source_key]`` (else
    ``meta["source_id"]``, which Haystack's splitters set) as its source, and leaves as a copy (the
    input is not modified) whose ``meta`` carries ``dedup_cluster`` and ``dedup_duplicate_of``. Documents
    without text pass through untouched. Dropped documents stay in the index.

    Args:
        threshold: Jaccard similarity of shingle sets at and above which two documents are duplicates.
        mode: ``"tag"`` passes every document on, stamped; ``"drop"`` each passage once.
        storage: A Redis URL for an index shared by every worker, or None.
        namespace: The Redis key prefix (one per corpus).
        index_path: A directory to load the in-memory index from in ``warm_up`` and to :meth:`save` it to.
        source_key: The ``meta`` key that names a document's source.

    Example:
        >>> text = "Permission is hereby granted, free of charge, to any person obtaining a copy of this software."
        >>> dedup = DocumentDeduplicator(mode="drop")
        >>> out = dedup.run([Document(content=text), Document(content=text.upper())])["documents"]
        >>> len(out), out[0].meta["dedup_duplicate_of"]
        (1, None)
    """

    def __init__(
        self,
        threshold: float = 0.8,
        mode: Literal["tag", "drop"] = "tag",
        storage: str | None = None,
        namespace: str = "rag-dedup",
        index_path: str | None = None,
        source_key: str = "file_path",
    ) -> None:
        _check_index_params(threshold, storage, index_path)
        if mode not in ("tag", "drop"):
            raise ValueError(f'mode must be "tag" or "drop", got {mode!r}')
        self.threshold = float(threshold)
        self.mode = mode
        self.storage = storage
        self.namespace = namespace
        self.index_path = index_path
        self.source_key = source_key
        self._ingestor: Ingestor[Document] | None = None

    def warm_up(self) -> None:
        """Open the index (once)."""
        self._ready()

    def _ready(self) -> Ingestor[Document]:
        if self._ingestor is None:
            index = _open_index(self.threshold, self.storage, self.namespace, self.index_path)
            self._ingestor = Ingestor(index, self.mode)
        return self._ingestor

    @property
    def index(self) -> DedupIndex:
        """The index (opened by ``warm_up``)."""
        return self._ready().index

    def save(self) -> None:
        """Write the in-memory index to ``index_path`` (atomically)."""
        if self.index_path is None:
            raise ValueError("save() needs index_path; a Redis index persists by itself")
        self.index.save(self.index_path)

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, list[Document]]:
        """Index ``documents``; return the stamped copies that pass on, in input order.

        Raises:
            TypeError: An item is not a Haystack ``Document``.
            ValueError: As :meth:`DedupIndex.add_many`, naming the document.
        """
        ingestor = self._ready()
        items = []
        for i, doc in enumerate(documents):
            if not isinstance(doc, Document):
                raise TypeError(f"documents[{i}] is a {type(doc).__name__}, not a haystack Document")
            source = doc.meta.get(self.source_key, doc.meta.get("source_id"))
            text = doc.content if isinstance(doc.content, str) else None
            items.append((doc.id, text, source if isinstance(source, str) else None, doc))
        return {"documents": [_stamped(v) for v in ingestor.run(items).passed()]}

    def delete(self, document_ids: list[str]) -> dict[str, list[Document]]:
        """Remove documents (by id) that left the store; return the dropped copies promoted in their place.

        In drop mode, a removed document may have been the only copy of a passage that the store held:
        another copy dropped earlier is then returned, stamped, for the caller to write.
        """
        return {"documents": [_stamped(v) for v in self._ready().remove(document_ids)]}

    @component.output_types(documents=list[Document])
    async def run_async(self, documents: list[Document]) -> dict[str, list[Document]]:
        """As :meth:`run`, in the default executor (the index may do Redis I/O)."""
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(None, self.run, documents)

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            threshold=self.threshold,
            mode=self.mode,
            storage=self.storage,
            namespace=self.namespace,
            index_path=self.index_path,
            source_key=self.source_key,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DocumentDeduplicator:
        return default_from_dict(cls, data)
