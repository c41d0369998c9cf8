"""``DedupTransform``: the ingest half. Every chunk goes into a ``DedupIndex`` and leaves stamped.

Place it after the chunker in an ``IngestionPipeline``::

    pipeline = IngestionPipeline(transformations=[SentenceChunker(), DedupTransform(), embed_model])

Each text node is added to the index under its node id, with its document's id (``ref_doc_id``) as the
index ``source`` (and, if asked, ``authority`` and ``first_seen`` from the metadata keys
``authority_key`` and ``first_seen_key``), and is stamped with ``metadata["dedup_cluster"]`` and
``metadata["dedup_duplicate_of"]`` (see :mod:`rag_dedup.llama_index.metadata`; neither reaches the
embedding model or the LLM): the stamps always follow the index's representative rule.

**Drop mode** (``mode="drop"``) passes on one copy of each passage, once: a node is passed on only when
its cluster has no member passed on before, in this call or an earlier one (the stores already hold
that evidence). In one call that copy is the cluster's representative; across calls it is the first
copy passed on, even when a later, longer copy becomes the representative (the stamps say so; the
store keeps the first). Every dropped node stays in the index and is kept by the transform as what
it takes to pass it on later: whenever a cluster holding a dropped node has no member passed on
any more (its document was deleted or changed, or the cluster split), one of its dropped nodes is
*promoted*: it comes out of the call that caused it, or out of :meth:`DedupTransform.delete_ref_doc`.
A node passed on before passes again when a call brings it again. These rules are
:mod:`rag_dedup.ingest`'s, which the LangChain and Haystack adapters follow too; the transform keeps
the ingest ledger in its state (:mod:`rag_dedup.llama_index.state`) and saves it with :meth:`persist`.

How it stays correct inside a real ``IngestionPipeline``:

* **One call applies whole or not at all.** Stale keys to remove, changed keys to replace and new keys
  go to the index in one :meth:`~rag_dedup.index.DedupIndex.update` (for a Redis index, one batch
  under the write lock); the transform's own records change only after it succeeded.
* **Re-ingested documents** (``DocstoreStrategy.UPSERTS``, or any second ingestion of a document): a
  document's chunks from an earlier call that are not in this call leave the index; chunks whose ids
  are in the index with another text are replaced; unchanged ones stay. The contract this relies on:
  all chunks of one document arrive in one call, as they do when the chunker runs in the same
  pipeline (set ``replace_documents=False`` if you feed a document's chunks in pieces).
* **Deleted documents.** The transform finds the pipeline that runs it (its ``run`` is on the call
  stack; LlamaIndex passes a transformation nothing else) and, when the pipeline has a docstore,
  removes from the index the documents it indexed that the docstore no longer holds
  (``DocstoreStrategy.UPSERTS_AND_DELETE`` deletes them before the transformations run; under another
  strategy nothing is taken for deleted: the docstore holds only what went through that pipeline). A docstore
  that holds chunks (a pipeline fed pre-chunked nodes) is recognised and not followed. Deletions
  the pipeline does not see (``VectorStoreIndex.delete_ref_doc``) go through
  :meth:`DedupTransform.delete_ref_doc`. A transform with an empty index meeting a docstore that
  already holds documents (a pipeline loaded without :meth:`DedupTransform.from_persist_dir`) warns.
* **A node id twice in one call** (the same ``Document`` twice in ``run``) is one node, as in
  LlamaIndex's stores: indexed once, every occurrence stamped alike, passed on in tag mode (the first
  occurrence only in drop mode). One id with two different texts is refused: the stores would keep only
  the last of them.
* **The transformation cache.** The pipeline caches a transformation's output under a hash of its
  input nodes and its ``to_dict()``. ``to_dict()`` includes ``index_state``, a token renewed by every
  call that changed the index or the transform's records and kept by calls that changed nothing, so a
  cached output is replayed only when the call would decide the same, and repeated runs of the same
  input add no entries. For a shared (Redis) index, which other processes change unseen, the token is
  renewed by every call. Pending deletions (above) are part of the token too.
* **num_workers > 1.** The pipeline pickles transformations into worker processes. A copy of an
  in-memory index would deduplicate each worker's batch against a private copy and silently miss every
  duplicate across batches, so pickling a DedupTransform raises :class:`SharedIndexRequired` unless its
  index lives in a shared store (``DedupIndex(storage="redis://...")``). Drop mode refuses workers
  (the workers' records of what they passed on would not come back), and ``counts`` read in the parent
  after a run with workers warns that it counts only the parent's calls.
* **Persistence.** :meth:`DedupTransform.persist` writes the index and the transform's state
  (:mod:`rag_dedup.llama_index.state`) into the directory that ``pipeline.persist()`` uses;
  :meth:`DedupTransform.from_persist_dir` reads and validates them.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import os
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.schema import BaseNode, Document, TransformComponent
from pydantic import computed_field

from rag_dedup._gc import gc_paused
from rag_dedup.errors import SharedIndexRequired, TransformStateError
from rag_dedup.finite import is_finite_number
from rag_dedup.index import DedupIndex, Match
from rag_dedup.ingest import Ingestor
from rag_dedup.llama_index.caller import calling_pipeline, input_names_digest, pipeline_inputs
from rag_dedup.llama_index.metadata import dedup_text, ref_doc_id, source_of, stamp_node
from rag_dedup.llama_index.state import TransformState
from rag_dedup.policy import Policy

__all__ = [
    "DEFAULT_INDEX_DIRNAME",
    "DEFAULT_SETTINGS_FILENAME",
    "DedupTransform",
    "SharedIndexRequired",
    "TransformStateError",
]

logger = logging.getLogger(__name__)

#: Sub-directory of a persist dir that holds the saved in-memory index.
DEFAULT_INDEX_DIRNAME = "dedup_index"
#: JSON file of a persist dir that holds the transform's settings and state (see :mod:`~rag_dedup.llama_index.state`).
DEFAULT_SETTINGS_FILENAME = "dedup_transform.json"


class DedupTransform(TransformComponent):
    """Add every text node to a ``DedupIndex`` and stamp it with its cluster (see the module docstring).

    Args:
        index: The ``DedupIndex`` to use (in memory, or shared through Redis). Default: a new in-memory
            ``DedupIndex(threshold=threshold)``.
        threshold: Jaccard similarity of word-shingle sets at and above which two chunks are
            duplicates. Default: the index's threshold, or 0.8 for a new index. Giving both an index
            and a different threshold is an error.
        mode: ``"tag"`` passes every node on, stamped; ``"drop"`` passes a node on only when no copy
            of its passage was passed on before (in this call or an earlier one).
        replace_documents: A document's chunks from earlier calls that are missing from this call
            leave the index (re-ingestion replaces a document, as ``DocstoreStrategy.UPSERTS`` does).
        authority_key: A node metadata key whose value (a finite number) is the node's ``authority``
            in the index: higher wins a tie in length when the representative is chosen.
        first_seen_key: A node metadata key whose value (a POSIX timestamp, or an ISO 8601 string;
            without a time zone it means UTC) is the node's ``first_seen``: earlier wins the next tie.

    Raises:
        TypeError: ``index`` is not a ``DedupIndex``.
        ValueError: A value out of range, or a ``threshold`` that contradicts the index's.

    Nodes without text (images, empty nodes) pass through untouched and are not indexed.

    Example:
        >>> from llama_index.core import Document
        >>> from llama_index.core.ingestion import IngestionPipeline
        >>> from rag_dedup.llama_index.chunking import SentenceChunker
        >>> text = "Permission is hereby granted, free of charge, to any person obtaining a copy of this software."
        >>> docs = [Document(text=text, id_="a"), Document(text=text, id_="b")]
        >>> dedup = DedupTransform(mode="drop")
        >>> nodes = IngestionPipeline(transformations=[SentenceChunker(), dedup]).run(documents=docs)
        >>> len(nodes), len(dedup.index), nodes[0].metadata["dedup_duplicate_of"]
        (1, 2, None)
    """

    model_config = ConfigDict(validate_assignment=True, arbitrary_types_allowed=True)

    threshold: float = Field(
        default=0.8,
        gt=0.0,
        le=1.0,
        description="Jaccard similarity of word-shingle sets at and above which two chunks are duplicates.",
    )
    mode: Literal["tag", "drop"] = Field(
        default="tag",
        description='"tag": pass every node on, stamped; "drop": pass on one copy of each passage, once.',
    )
    replace_documents: bool = Field(
        default=True,
        description="A document's chunks from earlier calls that are missing from this call leave the index.",
    )
    authority_key: str | None = Field(
        default=None, min_length=1, description="Node metadata key holding the node's authority (a number)."
    )
    first_seen_key: str | None = Field(
        default=None,
        min_length=1,
        description="Node metadata key holding when the node was first seen (POSIX timestamp or ISO 8601).",
    )

    _index: DedupIndex = PrivateAttr()
    _state: TransformState = PrivateAttr(default_factory=TransformState)
    _counts: Counter = PrivateAttr(default_factory=Counter)
    _sent: bool = PrivateAttr(default=False)
    _docstore_checked: bool = PrivateAttr(default=False)
    _docstore_holds_chunks: bool = PrivateAttr(default=False)

    def __init__(
        self,
        index: DedupIndex | None = None,
        threshold: float | None = None,
        mode: Literal["tag", "drop"] = "tag",
        replace_documents: bool = True,
        authority_key: str | None = None,
        first_seen_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("index_state", None)  # written by to_dict(); a fresh transform gets a fresh token
        if index is not None and not isinstance(index, DedupIndex):
            raise TypeError(f"index must be a rag_dedup.DedupIndex, got {type(index).__name__}")
        if index is not None and threshold is not None and float(threshold) != index.threshold:
            raise ValueError(
                f"threshold ({threshold}) differs from the index's threshold ({index.threshold}); "
                "pass only the index, or only a threshold"
            )
        if threshold is None:
            threshold = index.threshold if index is not None else 0.8
        super().__init__(
            threshold=threshold,
            mode=mode,
            replace_documents=replace_documents,
            authority_key=authority_key,
            first_seen_key=first_seen_key,
            **kwargs,
        )
        self._index = index if index is not None else DedupIndex(threshold=self.threshold)

    def __setattr__(self, name: str, value: Any) -> None:
        # The index decides at its own threshold, fixed when it was built: a new threshold on the
        # transform alone would be shown (to_dict, persist) but not applied.
        if name == "threshold" and "_index" in (self.__pydantic_private__ or {}):
            index = self._index
            if not is_finite_number(value) or float(value) != index.threshold:
                raise ValueError(
                    f"threshold cannot be changed after the transform is built (its index decides at "
                    f"{index.threshold}, got {value!r}); build a new DedupTransform(threshold=...) for an empty "
                    "index, or DedupTransform(index=DedupIndex(threshold=...))"
                )
        super().__setattr__(name, value)

    @classmethod
    def class_name(cls) -> str:
        return "DedupTransform"

    # -- state visible to the pipeline's cache ---------------------------------------------------

    @computed_field(  # type: ignore[prop-decorator]
        description="Changes whenever a call could decide differently (part of the pipeline's cache key)."
    )
    @property
    def index_state(self) -> str:
        """Part of ``to_dict()``, hence of the pipeline's cache key: a replayed output is a current one.

        A token renewed by every call that changes the index or the transform's records, kept by
        calls that change nothing; for a shared index, renewed by every call (other processes change
        it unseen). When the calling pipeline's docstore lost documents the transform indexed, their
        ids are appended, so that the deletion is never served from the cache; and when the pipeline
        is computing the cache key of a call (``get_transformation_hash``, which hashes the nodes'
        content and metadata but not their ids), a digest of the input's node and document ids, so that
        the same text under other ids is never answered with nodes that are not the input's.
        """
        token = self._state.token
        pending = self._pending_deletions(calling_pipeline())
        if pending:
            token += ":" + hashlib.sha256("\x1f".join(pending).encode()).hexdigest()[:16]
        names = input_names_digest()
        if names:
            # The pipeline's cache key names the input by content only: the same text under another
            # node id or document would replay this output, whose nodes are not the input's.
            token += "/" + names
        return token

    @property
    def index(self) -> DedupIndex:
        """The ``DedupIndex`` this transform adds to."""
        return self._index

    @property
    def counts(self) -> Counter:
        """Running counts of this process's calls: ``unique`` (nodes stamped as representatives),
        ``exact`` and ``near`` (stamped as duplicates), ``repeated`` (a node id seen again in one call),
        ``dropped``, ``removed`` (keys that left the index), ``promoted`` (dropped nodes passed on later).

        With ``num_workers > 1`` the calls run in copies of the transform in worker processes, and
        their counts stay there: reading ``counts`` then warns. The index holds the totals
        (``len(index)``, ``index.clusters(include_singletons=False)``).
        """
        if self._sent:
            warnings.warn(
                "DedupTransform.counts covers the calls made in this process only; this transform was "
                "copied into worker processes (num_workers > 1), whose counts are not sent back. "
                "The index holds the totals: len(dedup.index), dedup.index.clusters(include_singletons=False)",
                stacklevel=2,
            )
        return Counter(self._counts)

    @property
    def dropped(self) -> dict[str, BaseNode]:
        """The dropped nodes (``mode="drop"``) kept for promotion, by node id (rebuilt copies)."""
        return dict(self._state.ledger.dropped)

    # -- the transformation --------------------------------------------------------------------------

    def _ingestor(self) -> Ingestor[BaseNode]:
        """The shared ingest rule (:mod:`rag_dedup.ingest`) over this transform's index, mode and ledger."""
        return Ingestor(self._index, self.mode, ledger=self._state.ledger)

    @gc_paused()
    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[BaseNode]:
        """Index and stamp the text nodes of ``nodes`` (in place); return what passes on.

        The pipeline's own input nodes (``run(documents=...)`` or ``run(nodes=...)`` with nothing
        before this transform) are stamped on copies, which are what passes on: the pipeline records
        in its docstore the hash of its input after the run, and a node's hash covers its metadata, so
        stamps on the input would make every unchanged document look changed at the next run.

        The nodes passed on keep their input order; dropped nodes promoted by this call follow them.
        A node id that appears more than once with the same text and document is one node: indexed
        once, every occurrence stamped alike (and passed on in tag mode; in drop mode the first only).

        The call applies whole or not at all: on any error the index and the transform's records
        are as before it. The cyclic garbage collector is paused during the call (and restored, also
        on error): see :mod:`rag_dedup._gc`.

        Raises:
            TypeError: An item is not a LlamaIndex node (named by its position).
            ValueError: A node id appears twice with different texts or documents, or a node lacks
                the ``authority_key`` / ``first_seen_key`` metadata or has a bad value there.
            RedisUnavailable: A shared index's server went away (nothing of the call was recorded).
        """
        nodes = list(nodes)
        for i, node in enumerate(nodes):
            if not isinstance(node, BaseNode):
                raise TypeError(f"nodes[{i}] is a {type(node).__name__}, not a LlamaIndex node (a Document or a "
                                "TextNode, e.g. a chunker's output)")
        pipeline = calling_pipeline()
        # The caller's own objects are stamped on copies: a pipeline's input (whose hashes it writes to
        # its docstore after the transformations) and any Document (VectorStoreIndex.from_documents with
        # transformations=[DedupTransform()] hands over the user's documents; a stamp would change their
        # hash, and refresh_ref_docs would take every one for changed). A chunker's nodes are its own.
        inputs = pipeline_inputs()
        nodes = [_stampable_copy(n) if id(n) in inputs or isinstance(n, Document) else n for n in nodes]
        texts = [dedup_text(n) for n in nodes]
        items, first = self._items(nodes, texts)
        batch_sources = {item["source"] for item in items}
        deleted: list[str] = []
        docstore = pipeline.docstore if pipeline is not None else None
        if docstore is not None:
            in_store = set(docstore.get_all_document_hashes().values())
            if _deletes(pipeline):
                deleted = self._deleted(_absent(docstore, self._state.sources - in_store - batch_sources), in_store)
            if not self._docstore_checked:
                self._docstore_checked = True
                self._warn_unseen(in_store - batch_sources - first.keys() - self._state.sources)
        remove = self._stale(nodes, first, deleted)
        matches, written = self._index.update(items, remove=remove)
        # Nothing below depends on the input any more: the records change only after the index did.
        state = self._state
        state.sources.difference_update(deleted)
        state.sources.update(batch_sources)
        self._ingestor().forget(remove)
        self._counts["removed"] += len(remove)
        keys = [item["key"] for item in items]
        by_key = dict(zip(keys, matches))
        counts = self._counts
        for match in matches:
            counts[_kind(match)] += 1
        counts["repeated"] += sum(1 for n, t in zip(nodes, texts) if t is not None) - len(items)
        for node, text in zip(nodes, texts):
            if text is not None:
                match = by_key[node.node_id]
                stamp_node(node, match.cluster_id, match.duplicate_of)

        changed = bool(remove) or written > 0
        ledger = state.ledger
        before = {k: (k in ledger.passed, k in ledger.dropped) for k in keys}
        decision = self._ingestor().decide([(n.node_id, n) for n, t in zip(nodes, texts) if t is not None], by_key)
        verdicts = iter(decision.verdicts)
        passed = [node for node, text in zip(nodes, texts) if text is None or next(verdicts).passed]
        for v in decision.promoted:
            stamp_node(v.payload, v.cluster, v.duplicate_of)
            passed.append(v.payload)
        counts["promoted"] += len(decision.promoted)
        if self.mode == "drop":
            counts["dropped"] += len(keys) - sum(v.passed for v in decision.verdicts)
        changed = changed or bool(decision.promoted)
        changed = changed or any(before[k] != (k in ledger.passed, k in ledger.dropped) for k in keys)
        if changed or self._index.shared:
            state.renew_token()
        logger.info(
            "DedupTransform: %d nodes in, %d out, %d keys removed", len(nodes), len(passed), len(remove)
        )
        return list(passed)

    def _items(self, nodes: list[BaseNode], texts: list[str | None]) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """One index item per distinct node id, and the position of each id's first occurrence."""
        items: list[dict[str, Any]] = []
        first: dict[str, int] = {}
        item_of: dict[str, dict[str, Any]] = {}
        authority_key, first_seen_key = self.authority_key, self.first_seen_key
        for i, (node, text) in enumerate(zip(nodes, texts)):
            if text is None:
                continue
            key = node.node_id
            item: dict[str, Any] = {"key": key, "text": text, "source": source_of(node)}
            if authority_key is not None:
                item["authority"] = _authority(node, authority_key)
            if first_seen_key is not None:
                item["first_seen"] = _first_seen(node, first_seen_key)
            seen = first.get(key)
            if seen is None:
                first[key] = i
                item_of[key] = item
                items.append(item)
            elif item_of[key] != item:
                raise ValueError(
                    f"node id {key!r} appears twice in one call with different texts or documents "
                    f"(nodes {seen} and {i}); LlamaIndex's stores would keep only the last, so one of them "
                    "would be deduplicated but never stored: give every node its own id"
                )
        return items, first

    def _stale(self, nodes: list[BaseNode], first: dict[str, int], deleted: list[str]) -> list[str]:
        """Keys to remove: earlier chunks of this call's documents missing from it, and deleted documents'."""
        index = self._index
        remove: list[str] = []
        if self.replace_documents:
            documents = sorted({doc for doc in (ref_doc_id(nodes[i]) for i in first.values()) if doc is not None})
            for doc_id in documents:
                remove.extend(key for key in index.keys_of_source(doc_id) if key not in first)
        for doc_id in deleted:
            remove.extend(key for key in index.keys_of_source(doc_id) if key not in first)
        return list(dict.fromkeys(remove))

    def delete_ref_doc(self, ref_doc_id: str) -> list[BaseNode]:
        """Remove a deleted document's chunks from the index; return the dropped nodes to insert now.

        Call it after ``VectorStoreIndex.delete_ref_doc(ref_doc_id)`` (or any deletion the pipeline
        does not see) and insert what it returns: ``vector_index.insert_nodes(promoted)``. In tag
        mode it returns ``[]``; in drop mode, the dropped nodes whose passage the deleted document
        held in the stores (without them, that passage would leave retrieval although another
        document still contains it). A pipeline with a docstore and
        ``DocstoreStrategy.UPSERTS_AND_DELETE`` needs no call: documents it deletes leave the index
        at its next run, and the promoted nodes come out of that run.

        Raises:
            TypeError: ``ref_doc_id`` is not a str.
        """
        if not isinstance(ref_doc_id, str):
            raise TypeError(f"ref_doc_id must be str, got {type(ref_doc_id).__name__}")
        remove = self._index.keys_of_source(ref_doc_id)
        promoted = self._ingestor().remove(remove)
        self._state.sources.discard(ref_doc_id)
        self._counts["removed"] += len(remove)
        self._counts["promoted"] += len(promoted)
        for v in promoted:
            stamp_node(v.payload, v.cluster, v.duplicate_of)
        if remove or self._index.shared:
            self._state.renew_token()
        return [v.payload for v in promoted]

    def _deleted(self, missing: list[str], in_store: set[str]) -> list[str]:
        """The documents of ``missing`` (indexed, not in the docstore) that were deleted.

        A pipeline fed chunks (``run(nodes=...)``) keeps the chunks in its docstore, not their
        documents, so every document is missing from it from the start: when a missing document's
        chunks are in the docstore, the docstore holds chunks, and no deletion is inferred from it.
        """
        if self._docstore_holds_chunks:
            return []
        for doc in missing:
            if not in_store.isdisjoint(self._index.keys_of_source(doc)):
                self._docstore_holds_chunks = True
                return []
        return missing

    def _pending_deletions(self, pipeline: IngestionPipeline | None) -> list[str]:
        """Documents this transform indexed that the pipeline's docstore no longer holds (when the
        pipeline deletes documents: :func:`_deletes`)."""
        if pipeline is None or not _deletes(pipeline) or not self._state.sources or self._docstore_holds_chunks:
            return []
        in_store = set(pipeline.docstore.get_all_document_hashes().values())
        return _absent(pipeline.docstore, self._state.sources - in_store)

    def _warn_unseen(self, unseen: set[str]) -> None:
        """Warn when the pipeline's docstore holds documents whose chunks are not in the index."""
        index = self._index
        asked = sorted(unseen)
        # a chunk (one batch lookup), or a document
        found = {doc for doc, here in zip(asked, index.contains_many(asked)) if here or index.keys_of_source(doc)}
        self._state.sources.update(found)
        missing = sorted(unseen - found)
        if missing:
            warnings.warn(
                f"the pipeline's docstore holds {len(missing)} documents (e.g. {missing[0]!r}) whose chunks are "
                "not in this DedupTransform's index, so new documents are not compared with them. To resume "
                "a saved pipeline, load the transform too: DedupTransform.from_persist_dir(persist_dir)",
                stacklevel=4,
            )

    # -- copies into other processes -------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        if not getattr(self._index, "shared", False):
            raise SharedIndexRequired(
                "DedupTransform cannot be copied into another process (IngestionPipeline num_workers > 1) "
                "with an in-memory DedupIndex: each worker would deduplicate against its own copy and miss "
                "duplicates across batches. Run the pipeline with num_workers=None, or give the transform a "
                'shared index: DedupTransform(index=DedupIndex(storage="redis://localhost:6379/0")).'
            )
        if self.mode == "drop":
            raise RuntimeError(
                "DedupTransform(mode='drop') cannot run in worker processes (IngestionPipeline num_workers > 1): "
                "which copy of each passage the stores hold is recorded by the transform, and the workers' "
                "records would not come back, so a dropped node could never be promoted. Run drop mode with "
                "num_workers=None, or use mode='tag' with workers."
            )
        self._sent = True
        state = {"fields": self.model_dump(exclude={"index_state"}), "index": self._index}
        self._state.renew_token()  # the workers' cache entries must not match this transform's next run
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(index=state["index"], **state["fields"])  # type: ignore[misc]

    # -- persistence -----------------------------------------------------------------------------

    def persist(self, persist_dir: str | os.PathLike[str] = "./pipeline_storage") -> None:
        """Write the settings, the state and (for an in-memory index) the index to ``persist_dir``.

        Use the directory of ``pipeline.persist(persist_dir)``: the files (``dedup_transform.json`` and
        ``dedup_index/``) do not collide with the pipeline's. A shared (Redis) index persists by itself.
        Both are written atomically, the index first.
        """
        path = Path(persist_dir)
        path.mkdir(parents=True, exist_ok=True)
        shared = bool(getattr(self._index, "shared", False))
        if not shared:
            self._index.save(path / DEFAULT_INDEX_DIRNAME)
        settings = {**self.model_dump(exclude={"index_state"}), "shared_index": shared}
        self._state.write(path / DEFAULT_SETTINGS_FILENAME, settings)

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: str | os.PathLike[str] = "./pipeline_storage",
        *,
        index: DedupIndex | None = None,
        policy: Policy | None = None,
    ) -> DedupTransform:
        """Read a transform written by :meth:`persist`.

        Args:
            persist_dir: The directory.
            index: The index to use; required when the saved transform used a shared (Redis) index,
                otherwise the saved in-memory index is loaded.
            policy: The representative policy of the saved index, when it is not the default.

        Raises:
            FileNotFoundError: No saved transform in ``persist_dir``.
            TransformStateError: ``dedup_transform.json`` is damaged, foreign, from another format
                version, or does not match the index (a node it records is not in the index).
            ValueError: A shared index was used and none is passed.
        """
        path = Path(persist_dir)
        target = path / DEFAULT_SETTINGS_FILENAME
        if not target.is_file():
            raise FileNotFoundError(
                f"no saved DedupTransform in {os.fspath(path)!r} (missing {DEFAULT_SETTINGS_FILENAME})"
            )
        state, payload = TransformState.read(target)
        where = os.fspath(target)
        fields: dict[str, Any] = {}
        for name, ok in _SETTINGS.items():
            value = payload.get(name)
            if not ok(value):
                raise TransformStateError(f"{where!r}: setting {name!r} has a bad value {value!r}")
            fields[name] = value
        if index is None:
            if fields.pop("shared_index"):
                raise ValueError(f"the transform saved in {os.fspath(path)!r} used a shared index; pass it as index=")
            index = DedupIndex.load(path / DEFAULT_INDEX_DIRNAME, policy=policy)
        else:
            fields.pop("shared_index")
        if fields.pop("threshold") != index.threshold:
            raise TransformStateError(
                f"{where!r} was saved with another threshold than the index's ({index.threshold})"
            )
        recorded = sorted(state.passed | set(state.dropped_ids()))
        for key, here in zip(recorded, index.contains_many(recorded)):
            if not here:
                raise TransformStateError(
                    f"{where!r} does not match its index: node {key!r} is recorded but not in the index"
                )
        transform = cls(index=index, **fields)
        transform._state = state
        return transform


_SETTINGS = {
    "threshold": lambda v: isinstance(v, float) and 0.0 < v <= 1.0,
    "mode": lambda v: v in ("tag", "drop"),
    "replace_documents": lambda v: isinstance(v, bool),
    "authority_key": lambda v: v is None or (isinstance(v, str) and bool(v)),
    "first_seen_key": lambda v: v is None or (isinstance(v, str) and bool(v)),
    "shared_index": lambda v: isinstance(v, bool),
}


def _deletes(pipeline: IngestionPipeline) -> bool:
    """Whether ``pipeline`` deletes documents: ``DocstoreStrategy.UPSERTS_AND_DELETE`` with a docstore
    and a vector store (without one the pipeline falls back to ``DUPLICATES_ONLY``). Only then is a
    document missing from its docstore taken for deleted: under another strategy, or in a second
    pipeline that shares the transform, the docstore holds only what went through it."""
    return (pipeline.docstore is not None and pipeline.vector_store is not None
            and pipeline.docstore_strategy == DocstoreStrategy.UPSERTS_AND_DELETE)


def _absent(docstore: Any, unnamed: set[str]) -> list[str]:
    """Of the document ids ``unnamed`` (not among ``docstore.get_all_document_hashes()``'s values), those
    the docstore does not hold, sorted. That map is keyed by hash, so of documents with equal hashes (the
    same text and metadata: what dedup is for) it names one only; each id it does not name is asked for
    by itself (``get_document_hash``), which only ids missing from the map cost."""
    return sorted(doc for doc in unnamed if docstore.get_document_hash(doc) is None)




def _stampable_copy(node: BaseNode) -> BaseNode:
    """A copy of ``node`` whose metadata and excluded-key lists are its own (stamping it leaves ``node`` as it was)."""
    return node.model_copy(
        update={
            "metadata": dict(node.metadata),
            "excluded_embed_metadata_keys": list(node.excluded_embed_metadata_keys),
            "excluded_llm_metadata_keys": list(node.excluded_llm_metadata_keys),
        }
    )


def _kind(match: Match) -> str:
    """How a node is counted: ``unique`` for a representative, else ``exact`` or ``near``."""
    if match.duplicate_of is None:
        return "unique"
    return "exact" if match.kind == "exact" else "near"


def _authority(node: BaseNode, key: str) -> float:
    value = _metadata(node, key, "authority_key")
    if not is_finite_number(value):
        raise ValueError(
            f"node {node.node_id!r}: metadata[{key!r}] (authority_key) must be a finite number, got {value!r}"
        )
    return float(value)


def _first_seen(node: BaseNode, key: str) -> float:
    value = _metadata(node, key, "first_seen_key")
    if isinstance(value, str):
        try:
            value = _dt.datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(
                f"node {node.node_id!r}: metadata[{key!r}] (first_seen_key) is not an ISO 8601 time: {value!r}"
            ) from None
    if isinstance(value, _dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)).timestamp()
    if not is_finite_number(value):
        raise ValueError(
            f"node {node.node_id!r}: metadata[{key!r}] (first_seen_key) must be a POSIX timestamp or an "
            f"ISO 8601 string, got {value!r}"
        )
    return float(value)


def _metadata(node: BaseNode, key: str, setting: str) -> Any:
    if key not in node.metadata:
        raise ValueError(f"node {node.node_id!r} has no metadata[{key!r}], which {setting}={key!r} asks for")
    return node.metadata[key]
