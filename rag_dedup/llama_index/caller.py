"""What a transformation can learn of the ``IngestionPipeline`` that calls it, from the call stack.

LlamaIndex hands a transformation nothing but the nodes. The pipeline's docstore (which documents
``DocstoreStrategy.UPSERTS_AND_DELETE`` deleted, which a loaded pipeline already holds), the nodes it
passes on as its input, and the nodes whose cache key it is computing are only reachable as locals of
a calling frame: :func:`calling_pipeline`, :func:`pipeline_inputs`, :func:`nodes_being_hashed`.

The cache key (``get_transformation_hash(nodes, transformation)``) hashes the nodes' content and
metadata and ``transformation.to_dict()``, not the nodes' ids. Two documents with the same text (what
rag-dedup exists for) then share a key, and the second is answered with the first one's output, whose
nodes carry the first document's ids. A transformation whose output depends on the input's ids puts
:func:`input_names_digest` in its ``to_dict()`` (a computed field), and the keys differ.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator, Sequence
from types import FrameType

from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.schema import BaseNode

from rag_dedup.llama_index.metadata import ref_doc_id

__all__ = ["calling_pipeline", "input_names_digest", "nodes_being_hashed", "pipeline_inputs"]

# How far up the call stack to look (IngestionPipeline.run -> run_transformations -> dispatcher span
# wrapper -> __call__; get_transformation_hash -> to_dict -> model_dump -> a computed field).
_PIPELINE_FRAMES = 12


def calling_pipeline() -> IngestionPipeline | None:
    """The ``IngestionPipeline`` whose ``run``/``arun`` is on the call stack, if any. Inside a worker
    process (``num_workers > 1``) no pipeline is on the stack and this returns None."""
    frame = _pipeline_frame(sys._getframe(1))
    return None if frame is None else frame.f_locals["self"]


def pipeline_inputs() -> set[int]:
    """The ids (``id()``) of the objects the calling ``IngestionPipeline.run``/``arun`` passes on as its
    input (its ``nodes_to_run``, whose hashes it writes to its docstore after the transformations), or
    an empty set outside a pipeline."""
    frame = _pipeline_frame(sys._getframe(1))
    found = None if frame is None else frame.f_locals.get("nodes_to_run")
    return {id(n) for n in found} if isinstance(found, Sequence) else set()


def nodes_being_hashed() -> Sequence[BaseNode] | None:
    """The nodes of the ``get_transformation_hash(nodes, transformation)`` call on the stack (the
    pipeline computing a cache key: it calls ``to_dict()``), or None outside one."""
    for frame in _outer_frames(sys._getframe(1)):
        if frame.f_code.co_name == "get_transformation_hash":
            nodes = frame.f_locals.get("nodes")
            return nodes if isinstance(nodes, Sequence) else None
    return None


def input_names_digest() -> str:
    """A digest (16 hex digits) of the node ids and document ids of the nodes whose cache key is being
    computed, or ``""`` outside a cache key's computation."""
    hashed = nodes_being_hashed()
    if hashed is None:
        return ""
    names = "\x1f".join(f"{n.node_id}\x1e{ref_doc_id(n) or ''}" for n in hashed)
    return hashlib.sha256(names.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _pipeline_frame(frame: FrameType) -> FrameType | None:
    """The frame of an ``IngestionPipeline`` method (``run``, ``arun``) among those above ``frame``."""
    return next((f for f in _outer_frames(frame) if isinstance(f.f_locals.get("self"), IngestionPipeline)), None)


def _outer_frames(frame: FrameType) -> Iterator[FrameType]:
    """The frames above ``frame`` (its caller first), at most ``_PIPELINE_FRAMES`` of them."""
    for _ in range(_PIPELINE_FRAMES):
        outer = frame.f_back
        if outer is None:
            return
        frame = outer
        yield frame
