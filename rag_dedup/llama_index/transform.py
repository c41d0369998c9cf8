"""``DedupTransform``: the ingest half. Every chunk goes into a ``DedupIndex`` and leaves stamped.

Place it after the chunker in an ``IngestionPipeline``::

    pipeline = IngestionPipeline(transformations=[SentenceChunker(), DedupTransform(), embed_model])

Each text node is added to the index under its node id, with its document's id (``ref_doc_id``) as the
index ``source``, and is stamped with ``metadata["dedup_cluster"]`` and ``metadata["dedup_duplicate_of"]``
(see :mod:`rag_dedup.llama_index.metadata`; neither reaches the embedding model or the LLM). With ``mode="drop"``
only representatives pass on, so duplicates cost no embedding; the dropped nodes stay in the index,
so ``index.resolve(node_id)`` still names their representative.

How it stays correct inside a real ``IngestionPipeline``:

* **Re-ingested documents** (``DocstoreStrategy.UPSERTS``, or any second ingestion of a document): the
  nodes of one call are grouped by document; a document's chunks from an earlier call that are not in
  this call leave the index (``index.remove``), and chunks whose ids are already in the index are
  removed and added again with their new text. Their clusters re-elect representatives. The
  contract this relies on: all chunks of one document arrive in one call, as they do when the chunker
  runs in the same pipeline (set ``replace_documents=False`` if you feed a document's chunks in pieces).
  Documents deleted without re-ingestion (``DocstoreStrategy.UPSERTS_AND_DELETE``) leave through
  :meth:`DedupTransform.delete_ref_doc`.
* **Dropped nodes that become representatives.** When a representative leaves (its document changed)
  or a new text re-splits a cluster, a node dropped earlier can become a representative. It was never
  passed on, so the transform keeps dropped nodes and passes such a node on in the call where it is
  promoted. (Kept in this process and written by :meth:`DedupTransform.persist`.)
* **The transformation cache.** The pipeline caches a transformation's output under a hash of its input
  nodes and its ``to_dict()``, so a stateful transform would be skipped on a second run and its index
  never see the nodes. ``to_dict()`` therefore includes ``index_state``, a token that is renewed by
  every call: a cached DedupTransform output is never replayed. The chunker before it and the
  embedding after it are still served from the cache (unchanged stamps give the same embedding key).
* **num_workers > 1.** The pipeline pickles transformations into worker processes. A copy of an
  in-memory index would deduplicate each worker's batch against a private copy and silently miss every
  duplicate across batches, so pickling a DedupTransform raises :class:`SharedIndexRequired` unless its
  index lives in a shared store (``DedupIndex(storage="redis://...")``, ``index.shared`` is True).
* **Persistence.** :meth:`DedupTransform.persist` writes the index and settings into the directory that
  ``pipeline.persist()`` uses; :meth:`DedupTransform.from_persist_dir` reads them back.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.schema import BaseNode, TransformComponent
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc
from pydantic import computed_field

from rag_dedup.index import DedupIndex
from rag_dedup.llama_index.metadata import dedup_text, source_of, stamp_node

__all__ = ["DEFAULT_INDEX_DIRNAME", "DEFAULT_SETTINGS_FILENAME", "DedupTransform", "SharedIndexRequired"]

logger = logging.getLogger(__name__)

#: Sub-directory of a persist dir that holds the saved in-memory index.
DEFAULT_INDEX_DIRNAME = "dedup_index"
#: JSON file of a persist dir that holds the transform's settings and the dropped nodes.
DEFAULT_SETTINGS_FILENAME = "dedup_transform.json"
_FORMAT = "rag-dedup-transform"
_FORMAT_VERSION = 1


class SharedIndexRequired(RuntimeError):
    """A DedupTransform with a process-local index was about to be copied into another process."""


class DedupTransform(TransformComponent):
    """Add every text node to a ``DedupIndex`` and stamp it with its cluster (see the module docstring).

    Args:
        index: The ``DedupIndex`` to use (in memory, or shared through Redis). Default: a new in-memory
            ``DedupIndex(threshold=threshold)``.
        threshold: Jaccard similarity of word-shingle sets at and above which two chunks are
            duplicates. Default: the index's threshold, or 0.8 for a new index. Giving both an index
            and a different threshold is an error.
        mode: ``"tag"`` passes every node on, stamped; ``"drop"`` passes on representatives only.
        replace_documents: A document's chunks from earlier calls that are missing from this call
            leave the index (re-ingestion replaces a document, as ``DocstoreStrategy.UPSERTS`` does).

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
        default="tag", description='"tag": pass every node on, stamped; "drop": pass on representatives only.'
    )
    replace_documents: bool = Field(
        default=True,
        description="A document's chunks from earlier calls that are missing from this call leave the index.",
    )

    _index: DedupIndex = PrivateAttr()
    _state: str = PrivateAttr(default="")
    _dropped: dict[str, BaseNode] = PrivateAttr(default_factory=dict)
    _counts: Counter = PrivateAttr(default_factory=Counter)

    def __init__(
        self,
        index: DedupIndex | None = None,
        threshold: float | None = None,
        mode: Literal["tag", "drop"] = "tag",
        replace_documents: bool = True,
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
        super().__init__(threshold=threshold, mode=mode, replace_documents=replace_documents, **kwargs)
        self._index = index if index is not None else DedupIndex(threshold=self.threshold)
        self._renew_state()

    @classmethod
    def class_name(cls) -> str:
        return "DedupTransform"

    # -- state visible to the pipeline's cache ---------------------------------------------------

    @computed_field(description="Renewed by every call, so IngestionPipeline's cache never replays a dedup decision.")  # type: ignore[prop-decorator]
    @property
    def index_state(self) -> str:
        """A token that changes with every call (part of ``to_dict()``, hence of the pipeline's cache key)."""
        return self._state

    def _renew_state(self) -> None:
        self._state = uuid.uuid4().hex

    @property
    def index(self) -> DedupIndex:
        """The ``DedupIndex`` this transform adds to."""
        return self._index

    @property
    def counts(self) -> Counter:
        """Running counts: ``unique`` (nodes that represent their cluster or are alone), ``exact`` and
        ``near`` (duplicates, by :attr:`Match.kind <rag_dedup.index.Match.kind>`), ``dropped``,
        ``removed`` (stale keys that left the index), ``promoted`` (dropped nodes passed on later)."""
        return Counter(self._counts)

    @property
    def dropped(self) -> dict[str, BaseNode]:
        """The dropped nodes (``mode="drop"``) that may still be needed, by node id (a copy)."""
        return dict(self._dropped)

    # -- the transformation --------------------------------------------------------------------------

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[BaseNode]:
        """Index and stamp the text nodes of ``nodes`` (in place); return what passes on, in input order.

        Raises:
            ValueError: Two nodes of ``nodes`` have the same node id.
        """
        try:
            return self._transform(list(nodes))
        finally:
            self._renew_state()

    def _transform(self, nodes: list[BaseNode]) -> list[BaseNode]:
        index = self._index
        texts = [dedup_text(n) for n in nodes]
        text_nodes = [(n, t) for n, t in zip(nodes, texts) if t is not None]
        keys = [n.node_id for n, _ in text_nodes]
        if len(set(keys)) != len(keys):
            seen: set[str] = set()
            twice = next(k for k in keys if k in seen or seen.add(k))  # type: ignore[func-returns-value]
            raise ValueError(f"node id {twice!r} appears twice in one call; every node needs its own id")
        batch = set(keys)

        removed = 0
        if self.replace_documents:
            documents = {n.ref_doc_id for n, _ in text_nodes if n.ref_doc_id is not None}
            for doc_id in sorted(documents):
                for key in index.keys_of_source(doc_id):
                    if key not in batch:
                        index.remove(key)
                        self._dropped.pop(key, None)
                        removed += 1
        # Keys ingested before may carry a changed text: they are removed and added afresh. (One batch
        # lookup in the index's storage: one round trip for a shared store, not one per key.)
        for key, record in zip(keys, index.storage.get_items(keys)):
            if record is not None:
                index.remove(key)
            self._dropped.pop(key, None)
        self._counts["removed"] += removed

        matches = index.add_many([{"key": n.node_id, "text": t, "source": source_of(n)} for n, t in text_nodes])
        passed: list[BaseNode] = []
        next_match = iter(matches).__next__  # matches are in the order of the text nodes
        counts, dropped, drop = self._counts, self._dropped, self.mode == "drop"
        for node, text in zip(nodes, texts):
            if text is None:
                passed.append(node)
                continue
            match = next_match()
            stamp_node(node, match.cluster_id, match.duplicate_of)
            counts["unique" if match.duplicate_of is None else match.kind] += 1  # kept, or a duplicate's kind
            if drop and match.duplicate_of is not None:
                dropped[node.node_id] = node
                counts["dropped"] += 1
            else:
                passed.append(node)
        if self.mode == "drop" or self._dropped:
            passed.extend(self._promote())
        logger.info("DedupTransform: %d nodes in, %d out, %d stale keys removed", len(nodes), len(passed), removed)
        return passed

    def delete_ref_doc(self, ref_doc_id: str) -> list[BaseNode]:
        """Remove a deleted document's chunks from the index (``DocstoreStrategy.UPSERTS_AND_DELETE``
        deletes documents without running the transformations, so call this for each one).

        Returns:
            Dropped nodes that became representatives because of the removal: pass them on (embed and
            insert them) as the pipeline would have, or their passages leave retrieval.

        Raises:
            TypeError: ``ref_doc_id`` is not a str.
        """
        if not isinstance(ref_doc_id, str):
            raise TypeError(f"ref_doc_id must be str, got {type(ref_doc_id).__name__}")
        try:
            for key in self._index.keys_of_source(ref_doc_id):
                self._index.remove(key)
                self._dropped.pop(key, None)
                self._counts["removed"] += 1
            return self._promote()
        finally:
            self._renew_state()

    def _promote(self) -> list[BaseNode]:
        """Dropped nodes that are representatives now (their representative left, or a cluster re-split)."""
        if not self._dropped:
            return []
        index = self._index
        gone = [k for k in self._dropped if k not in index]
        for key in gone:
            del self._dropped[key]
        keys = list(self._dropped)
        promoted = []
        for key, match in zip(keys, index.matches(keys)):
            if match.duplicate_of is None:
                node = self._dropped.pop(key)
                stamp_node(node, match.cluster_id, None)
                promoted.append(node)
        self._counts["promoted"] += len(promoted)
        return promoted

    # -- copies into other processes -------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        if not getattr(self._index, "shared", False):
            raise SharedIndexRequired(
                "DedupTransform cannot be copied into another process (IngestionPipeline num_workers > 1) "
                "with an in-memory DedupIndex: each worker would deduplicate against its own copy and miss "
                "duplicates across batches. Run the pipeline with num_workers=None, or give the transform a "
                'shared index: DedupTransform(index=DedupIndex(storage="redis://localhost:6379/0")).'
            )
        state = {
            "fields": {"threshold": self.threshold, "mode": self.mode, "replace_documents": self.replace_documents},
            "index": self._index,
            "state": self._state,
        }
        self._renew_state()  # the workers' cache entries must not match this transform's next run
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(index=state["index"], **state["fields"])  # type: ignore[misc]
        self._state = state["state"]

    # -- persistence -----------------------------------------------------------------------------

    def persist(self, persist_dir: str | os.PathLike[str] = "./pipeline_storage") -> None:
        """Write the settings, the dropped nodes and (for an in-memory index) the index to ``persist_dir``.

        Use the directory of ``pipeline.persist(persist_dir)``: the files (``dedup_transform.json`` and
        ``dedup_index/``) do not collide with the pipeline's. A shared (Redis) index persists by itself.
        """
        path = Path(persist_dir)
        path.mkdir(parents=True, exist_ok=True)
        shared = bool(getattr(self._index, "shared", False))
        if not shared:
            self._index.save(path / DEFAULT_INDEX_DIRNAME)
        settings = {
            "format": _FORMAT,
            "format_version": _FORMAT_VERSION,
            "threshold": self.threshold,
            "mode": self.mode,
            "replace_documents": self.replace_documents,
            "shared_index": shared,
            "dropped": [doc_to_json(node) for node in self._dropped.values()],
        }
        target = path / DEFAULT_SETTINGS_FILENAME
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(settings), encoding="utf-8")
        os.replace(tmp, target)

    @classmethod
    def from_persist_dir(
        cls, persist_dir: str | os.PathLike[str] = "./pipeline_storage", *, index: DedupIndex | None = None
    ) -> DedupTransform:
        """Read a transform written by :meth:`persist`.

        Args:
            persist_dir: The directory.
            index: The index to use; required when the saved transform used a shared (Redis) index,
                otherwise the saved in-memory index is loaded.

        Raises:
            FileNotFoundError: No saved transform in ``persist_dir``.
            ValueError: The file is not a saved DedupTransform, or comes from a newer format, or a
                shared index was used and none is passed.
        """
        path = Path(persist_dir)
        target = path / DEFAULT_SETTINGS_FILENAME
        if not target.is_file():
            raise FileNotFoundError(
                f"no saved DedupTransform in {os.fspath(path)!r} (missing {DEFAULT_SETTINGS_FILENAME})"
            )
        settings = json.loads(target.read_text(encoding="utf-8"))
        version = settings.get("format_version")
        if settings.get("format") != _FORMAT or not isinstance(version, int):
            raise ValueError(f"{os.fspath(target)!r} is not a saved DedupTransform")
        if version > _FORMAT_VERSION:
            raise ValueError(
                f"{os.fspath(target)!r} has format version {version}, newer than this rag-dedup reads "
                f"({_FORMAT_VERSION}); upgrade rag-dedup"
            )
        if index is None:
            if settings["shared_index"]:
                raise ValueError(f"the transform saved in {os.fspath(path)!r} used a shared index; pass it as index=")
            index = DedupIndex.load(path / DEFAULT_INDEX_DIRNAME)
        transform = cls(index=index, mode=settings["mode"], replace_documents=settings["replace_documents"])
        transform._dropped = {node.node_id: node for node in map(json_to_doc, settings["dropped"])}
        return transform
