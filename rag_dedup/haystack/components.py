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

import copy
import dataclasses
import os
import threading
from typing import Any, Literal

from haystack import Document, component, default_from_dict, default_to_dict

from rag_dedup.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, Chunker
from rag_dedup.chunking.bundled import default_tokenizer
from rag_dedup.collapse import Collapser, Kept, Passage, first_of_each_key
from rag_dedup.haystack.ledger import encode_ledger, load_ledger, save_ledger
from rag_dedup.index import DedupIndex
from rag_dedup.ingest import Ingestor, Verdict
from rag_dedup.settings import check_threshold, check_top
from rag_dedup.stamps import DEDUP_CLUSTER, DEDUP_COLLAPSED, DEDUP_DUPLICATE_OF, collapsed_entries, detached

__all__ = ["DocumentDeduplicator", "DuplicateCollapser", "SentenceChunker"]


def _open_index(threshold: float, storage: str | None, namespace: str, index_path: str | None) -> DedupIndex:
    """The index a component's parameters describe (see the module docstring)."""
    if storage is not None:
        return DedupIndex(threshold=threshold, storage=storage, namespace=namespace)
    if index_path is not None and os.path.exists(index_path) and not _empty_folder(index_path):
        index = DedupIndex.load(index_path)
        if index.threshold != threshold:
            raise ValueError(
                f"the index saved in {index_path!r} has threshold {index.threshold}, not {threshold}; "
                "pass the same threshold or another index_path"
            )
        return index
    return DedupIndex(threshold=threshold)


def _empty_folder(path: str) -> bool:
    """Whether ``path`` is a directory with nothing in it (a place made for the index: it starts new)."""
    return os.path.isdir(path) and not any(os.scandir(path))


def _check_index_params(threshold: float, storage: str | None, index_path: str | os.PathLike[str] | None) -> str | None:
    """Refuse contradictory index parameters; return ``index_path`` as the ``str`` the component keeps
    (and serialises), a ``Path`` included."""
    check_threshold(threshold)
    if isinstance(index_path, os.PathLike):
        index_path = os.fspath(index_path)
    if index_path is not None and not isinstance(index_path, str):
        raise TypeError(f"index_path must be a directory (a str or a Path), got {type(index_path).__name__}")
    if storage is not None and index_path is not None:
        raise ValueError("give storage (a Redis URL) or index_path (a directory), not both")
    return index_path


def _stamped(verdict: Verdict[Document]) -> Document:
    """A copy of the verdict's document carrying its ingest stamps (the document itself is not changed)."""
    doc = verdict.payload
    # Deep: nested meta (a converter's) must not be shared with the caller's document either.
    if verdict.cluster is None:
        return dataclasses.replace(doc, meta=detached(doc.meta))
    return dataclasses.replace(
        doc, meta={**detached(doc.meta), DEDUP_CLUSTER: verdict.cluster, DEDUP_DUPLICATE_OF: verdict.duplicate_of}
    )


#: Held while a component opens its index (run_async runs concurrent calls in executor threads).
_OPENING = threading.Lock()


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
        index_path = _check_index_params(threshold, storage, index_path)
        if mode not in ("tag", "drop"):
            raise ValueError(f'mode must be "tag" or "drop", got {mode!r}')
        self.threshold = float(threshold)
        self.mode = mode
        self.storage = storage
        self.namespace = namespace
        self.index_path = index_path
        if not isinstance(source_key, str):
            raise TypeError(f"source_key must be a str, got {type(source_key).__name__}")
        self.source_key = source_key
        self._ingestor: Ingestor[Document] | None = None

    def warm_up(self) -> None:
        """Open the index (once)."""
        self._ready()

    def _ready(self) -> Ingestor[Document]:
        if self._ingestor is None:
            with _OPENING:  # run_async's threads: one index, opened once
                if self._ingestor is None:
                    index = _open_index(self.threshold, self.storage, self.namespace, self.index_path)
                    saved = None
                    if self.mode == "drop" and self.index_path is not None and os.path.isdir(self.index_path) \
                            and not _empty_folder(self.index_path):
                        saved = load_ledger(self.index_path)
                    self._ingestor = Ingestor(index, self.mode, ledger=saved)
        return self._ingestor

    @property
    def index(self) -> DedupIndex:
        """The index (opened by ``warm_up``)."""
        return self._ready().index

    def save(self) -> None:
        """Write the in-memory index to ``index_path`` (atomically), and in drop mode what it passed and
        dropped (:mod:`rag_dedup.haystack.ledger`), which ``warm_up`` reads back: a reloaded component
        passes each passage once as before."""
        if self.index_path is None:
            raise ValueError("save() needs index_path; a Redis index persists by itself")
        ingestor = self._ready()
        with ingestor.locked():  # no run changes the index or the record meanwhile
            # Encoded first: a document the record cannot hold fails the save before anything is written.
            record = encode_ledger(ingestor.ledger) if self.mode == "drop" else None
            ingestor.index.save(self.index_path)
            if record is not None:
                save_ledger(self.index_path, record)

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, list[Document]]:
        """Index ``documents``; return the stamped copies that pass on, in input order.

        Raises:
            TypeError: An item is not a Haystack ``Document``.
            ValueError: As :meth:`DedupIndex.update`, naming the document. (An id already indexed with
                another content is replaced, as ``DuplicatePolicy.OVERWRITE`` replaces it in the store.)
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


def _score(doc: Document) -> float | None:
    """The document's score when it is a number, else None. A NaN stays NaN: the collapse reads a
    NaN-scored passage last, so it never keeps a scored copy of itself out (as in LlamaIndex)."""
    if type(doc.score) is float:
        return doc.score
    return float(doc.score) if isinstance(doc.score, (int, float)) and not isinstance(doc.score, bool) else None


def _passage(doc: Document, source_key: str) -> Passage:
    meta = doc.meta
    text = doc.content if isinstance(doc.content, str) else None
    start = meta.get("split_idx_start")
    has_span = isinstance(start, int) and not isinstance(start, bool) and text is not None
    cluster = meta.get(DEDUP_CLUSTER)
    # Windows are merged by the document their offsets count in (source_id, which the splitters set),
    # so with merge_overlaps that is also the source their folds cite.
    source = meta.get("source_id", meta.get(source_key))
    return Passage(
        doc.id,
        text,
        _score(doc),
        cluster if isinstance(cluster, str) else None,
        source if isinstance(source, str) else None,
        start if has_span else None,
        start + len(text) if has_span else None,  # type: ignore[operator]
    )


def _survivor(kept: Kept, documents: list[Document]) -> Document:
    doc = documents[kept.position]
    if not kept.folded:
        return doc  # unchanged: returned as given (nothing is written on it)
    entries = collapsed_entries(
        doc.meta.get(DEDUP_COLLAPSED), kept.folded, lambda i: documents[i].meta.get(DEDUP_COLLAPSED)
    )
    meta = {**detached(doc.meta), DEDUP_COLLAPSED: entries}  # nothing shared with the caller's
    if kept.text is None:
        return _with_meta(doc, meta)
    meta["split_idx_start"] = kept.start
    return dataclasses.replace(doc, content=kept.text, meta=meta, score=kept.score)


def _with_meta(doc: Document, meta: dict[str, Any]) -> Document:
    """``dataclasses.replace(doc, meta=meta)``: the same Document, its other fields shared, in a tenth of
    the time. ``replace`` runs ``__init__`` and ``__post_init__`` again, which change nothing for a
    Document whose id is set, whose content is a string or None and whose embedding is a list or None
    (the id is kept, there is nothing to convert); any other goes through ``replace``."""
    embedding = doc.embedding
    if (
        type(doc) is not Document
        or not doc.id
        or not (doc.content is None or type(doc.content) is str)
        or not (embedding is None or type(embedding) is list)
    ):
        return dataclasses.replace(doc, meta=meta)
    new = object.__new__(Document)
    state = new.__dict__
    state.update(doc.__dict__)
    state["meta"] = meta
    return new


@component
class DuplicateCollapser:
    """At query time, fold near-identical documents into the first copy (after any retriever or ranker).

    Reads the documents in the order given (best first), keeps a document unless it duplicates one kept
    already, and folds it into the keeper's ``meta["dedup_collapsed"]`` (``{id, source, score, reason,
    similarity}``), so citations survive; returns them in input order, at most ``top_k``: a keeper that
absorbed others as a copy, one that absorbed none as given (nothing is written on the input). The decision
    is :class:`rag_dedup.collapse.Collapser`'s. With ``storage`` or ``index_path``, the index's current
    clusters override the ``dedup_cluster`` stamps.

    Args:
        top_k: Keep at most this many documents (None: every distinct one); ``run`` may override it.
        threshold: Jaccard similarity of shingle sets at or above which two documents are duplicates.
        trust_clusters: Take cluster stamps as proof (faster; by default texts are checked too).
        merge_overlaps: Join kept windows of one source that overlap (uses ``split_idx_start``).
        storage, namespace, index_path: The index to ask for current clusters (see the module docstring).
        source_key: The ``meta`` key naming the source that folds cite (else ``source_id``); with
            ``merge_overlaps``, ``source_id`` comes first (the windows' offsets count in that document).

    Example:
        >>> text = "Permission is hereby granted, free of charge, to any person obtaining a copy of this"
        >>> docs = [Document(content=text, score=2.0), Document(content=text.upper(), score=1.0)]
        >>> [d.meta["dedup_collapsed"][0]["reason"] for d in DuplicateCollapser().run(docs)["documents"]]
        ['exact']
    """

    def __init__(
        self,
        top_k: int | None = None,
        threshold: float = 0.8,
        trust_clusters: bool = False,
        merge_overlaps: bool = False,
        storage: str | None = None,
        namespace: str = "rag-dedup",
        index_path: str | None = None,
        source_key: str = "file_path",
    ) -> None:
        index_path = _check_index_params(threshold, storage, index_path)
        _check_top_k(top_k)
        self.top_k = top_k
        self.threshold = float(threshold)
        self.trust_clusters = bool(trust_clusters)
        self.merge_overlaps = bool(merge_overlaps)
        self.storage = storage
        self.namespace = namespace
        self.index_path = index_path
        if not isinstance(source_key, str):
            raise TypeError(f"source_key must be a str, got {type(source_key).__name__}")
        self.source_key = source_key
        self._collapser: Collapser | None = None

    def warm_up(self) -> None:
        """Open the index, when one is named (once)."""
        self._ready()

    def _ready(self) -> Collapser:
        if self._collapser is None:
            with _OPENING:  # run_async's threads: one index, opened once
                return self._open_collapser()
        return self._collapser

    def _open_collapser(self) -> Collapser:
        if self._collapser is None:
            index = None
            if self.storage is not None or self.index_path is not None:
                index = _open_index(self.threshold, self.storage, self.namespace, self.index_path)
            self._collapser = Collapser(
                self.threshold, trust_clusters=self.trust_clusters, merge_overlaps=self.merge_overlaps, index=index
            )
        return self._collapser

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document], top_k: int | None = None) -> dict[str, list[Document]]:
        """The distinct documents among ``documents``, in their order, at most ``top_k`` (a document given
        twice, by its id, counts once: see :func:`~rag_dedup.collapse.first_of_each_key`)."""
        _check_top_k(top_k)
        for i, doc in enumerate(documents):
            if not isinstance(doc, Document):
                raise TypeError(f"documents[{i}] is a {type(doc).__name__}, not a haystack Document")
        limit = top_k if top_k is not None else self.top_k
        collapser = self._ready()
        if collapser.merge_overlaps:
            passages = [_passage(d, self.source_key) for d in documents]
            keep = first_of_each_key([p.key for p in passages])
            if keep is not None:  # a document retrieved twice is one document
                documents, passages = [documents[i] for i in keep], [passages[i] for i in keep]
            kept = collapser.collapse(passages, top_n=limit)
        else:  # _passage's columns without the spans: this runs for every document of every query
            keys, texts, scores, stamps, sources = [], [], [], [], []
            for doc in documents:
                meta = doc.meta
                keys.append(doc.id)
                texts.append(doc.content if isinstance(doc.content, str) else None)
                score = doc.score
                scores.append(score if type(score) is float and score - score == 0.0 else _score(doc))  # finite
                cluster = meta.get(DEDUP_CLUSTER)
                stamps.append(cluster if isinstance(cluster, str) else None)
                source = meta.get(self.source_key, meta.get("source_id"))  # as DocumentDeduplicator's
                sources.append(source if isinstance(source, str) else None)
            keep = first_of_each_key(keys)
            if keep is not None:  # a document retrieved twice is one document
                documents = [documents[i] for i in keep]
                keys, texts, scores, stamps, sources = ([column[i] for i in keep] for column in (keys, texts, scores, stamps, sources))
            kept = collapser.collapse_columns(keys, texts, scores, stamps, limit, sources)
        return {"documents": [_survivor(k, documents) for k in kept]}

    @component.output_types(documents=list[Document])
    async def run_async(self, documents: list[Document], top_k: int | None = None) -> dict[str, list[Document]]:
        """As :meth:`run` (in the default executor when an index is asked)."""
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(None, self.run, documents, top_k)

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            top_k=self.top_k,
            threshold=self.threshold,
            trust_clusters=self.trust_clusters,
            merge_overlaps=self.merge_overlaps,
            storage=self.storage,
            namespace=self.namespace,
            index_path=self.index_path,
            source_key=self.source_key,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DuplicateCollapser:
        return default_from_dict(cls, data)


def _check_top_k(top_k: object) -> None:
    check_top(top_k, "top_k", optional=True)


@component
class SentenceChunker:
    """Split documents into boundary-stable, sentence-aligned, overlapping chunks (a Haystack splitter).

    The cut plan is :class:`rag_dedup.chunking.Chunker`'s: a boundary depends on the text next to it,
    so a passage copied into two documents yields the same chunks in both. Sizes are in tokens of
    LlamaIndex's default tokenizer (tiktoken cl100k). Each chunk is a new ``Document`` with a copy of its
    document's ``meta`` and, as Haystack's ``DocumentSplitter`` writes them, ``source_id`` (the document's
    id), ``split_id`` (its number), ``split_idx_start`` (its character offset), ``page_number`` (form feeds
    before it, plus one) and ``_split_overlap`` (``[{doc_id, range}]`` with every chunk it shares text with).

    Args:
        chunk_size: Maximum tokens per chunk, overlap included.
        chunk_overlap: Maximum tokens repeated from the previous chunk (whole sentences).
        chunk_target: The mean tokens per chunk to aim for (default: the chunker's, 3/8 of chunk_size).
        language: The punkt sentence model.

    Raises:
        ValueError: Sizes out of range (at construction); a document whose content is None (at run).

    Example:
        >>> text = "One sentence here. " * 20
        >>> chunks = SentenceChunker(chunk_size=32, chunk_overlap=8).run([Document(content=text)])["documents"]
        >>> all(text[c.meta["split_idx_start"]:].startswith(c.content) for c in chunks), chunks[1].meta["split_id"]
        (True, 1)
    """

    def __init__(
        self,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        chunk_target: int | None = None,
        language: str = "english",
    ) -> None:
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.chunk_target = chunk_target
        self.language = language
        self._chunker = Chunker(
            default_tokenizer(), chunk_size=chunk_size, chunk_overlap=chunk_overlap, chunk_target=chunk_target,
            language=language,
        )

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, list[Document]]:
        """The chunks of every document, in order."""
        out: list[Document] = []
        for i, doc in enumerate(documents):
            if not isinstance(doc, Document):
                raise TypeError(f"documents[{i}] is a {type(doc).__name__}, not a haystack Document")
            if doc.content is None:
                raise ValueError(f"SentenceChunker splits text documents; the content of document {doc.id!r} is None")
            out.extend(self._split(doc))
        return {"documents": out}

    @component.output_types(documents=list[Document])
    async def run_async(self, documents: list[Document]) -> dict[str, list[Document]]:
        """As :meth:`run`."""
        return self.run(documents)

    def _split(self, doc: Document) -> list[Document]:
        text = doc.content or ""
        spans = self._chunker.chunk_spans(text)
        chunks = []
        for n, (start, end) in enumerate(spans):
            meta = copy.deepcopy(doc.meta)
            meta.update(source_id=doc.id, split_id=n, split_idx_start=start, page_number=1 + text.count("\f", 0, start))
            if self.chunk_overlap > 0:
                meta["_split_overlap"] = []
            chunks.append(Document(content=text[start:end], meta=meta))
        if self.chunk_overlap > 0:  # every earlier chunk the text reaches back into, not only the one before
            for i, (ps, pe) in enumerate(spans):
                for j in range(i + 1, len(spans)):
                    s, e = spans[j]
                    if s >= pe:  # spans start in order: no later one reaches back into chunk i
                        break
                    shared = min(pe, e)
                    chunks[j].meta["_split_overlap"].append({"doc_id": chunks[i].id, "range": (s - ps, shared - ps)})
                    chunks[i].meta["_split_overlap"].append({"doc_id": chunks[j].id, "range": (0, shared - s)})
        return chunks

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            chunk_size=self.chunk_size,
            chunk_overlap=self.chunk_overlap,
            chunk_target=self.chunk_target,
            language=self.language,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SentenceChunker:
        return default_from_dict(cls, data)
