"""The one door to pydantic's and LlamaIndex's internals for building chunk nodes fast.

Building a ``TextNode`` with validation costs a third of the parse time for small chunks, and every
value the chunker sets is already valid (it comes from a validated input node, or is built with the
field's exact type). So one node is constructed without validation and copied per chunk by writing
pydantic's ``__dict__``, ``__pydantic_fields_set__``, ``__pydantic_extra__`` and
``__pydantic_private__`` directly. The names this relies on are checked at import (an ``ImportError``
naming what is missing), and ``tests/llama_index/test_chunking.py`` holds the nodes built here equal
to ``TextNode(**node.model_dump())`` and to their JSON round trip (``tests/llama_index/test_nodes.py``
tests the door itself), so a pydantic or LlamaIndex upgrade that changes them fails loudly.

:func:`shallow_copy` (:mod:`rag_dedup._pydantic`'s, shared with the LangChain adapter) is
``model.model_copy(update=...)`` by the same writes, for the postprocessor's copies of the nodes that
absorbed others; :func:`private` reads a private attribute without pydantic's ``__getattr__``.

:func:`presigned` gives a method LlamaIndex's instrumentation wraps (``DispatcherSpanMixin``: the
span of ``BaseNodePostprocessor._postprocess_nodes``) its signature once, as ``__signature__``: the span
calls ``inspect.signature`` on the method at every call, which otherwise rebuilds it from the code object.

LlamaIndex's ``NodeParser._postprocess_parsed_nodes`` is the hook ``SentenceChunker`` overrides (the
base class would re-derive offsets with ``str.find``); :data:`POSTPROCESS_HOOK` names it and the
import check makes sure the base class still has it.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from llama_index.core.node_parser.interface import NodeParser
from llama_index.core.bridge.pydantic import BaseModel
from llama_index.core.schema import BaseNode, NodeRelationship, RelatedNodeInfo, TextNode

from rag_dedup._pydantic import shallow_copy

__all__ = ["POSTPROCESS_HOOK", "build_text_nodes", "presigned", "private", "related_node_info", "shallow_copy"]

#: The NodeParser method that get_nodes_from_documents calls on the parsed nodes.
POSTPROCESS_HOOK = "_postprocess_parsed_nodes"

_TEMPLATE_FIELDS = (
    "id_",
    "text",
    "embedding",
    "excluded_embed_metadata_keys",
    "excluded_llm_metadata_keys",
    "metadata_separator",
    "metadata_template",
    "text_template",
    "relationships",
    "metadata",
    "start_char_idx",
    "end_char_idx",
)


def _check() -> None:
    missing = [f for f in _TEMPLATE_FIELDS if f not in TextNode.model_fields]
    if not callable(getattr(NodeParser, POSTPROCESS_HOOK, None)):
        missing.append(f"NodeParser.{POSTPROCESS_HOOK}")
    probe = TextNode.model_construct(text="")
    for attr in ("__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"):
        if not hasattr(probe, attr):
            missing.append(f"TextNode.{attr}")
    if missing:
        raise ImportError(
            f"rag_dedup's SentenceChunker builds nodes through LlamaIndex and pydantic internals that this "
            f"installation lacks: {', '.join(missing)}; install a llama-index-core 0.12-0.14 / pydantic 2 "
            f"release or report it to rag-dedup"
        )


_check()

_TEXT_TEMPLATE = TextNode.model_fields["text_template"].default
_RELATED_TEMPLATE = RelatedNodeInfo.model_construct(node_id="", node_type=TextNode.get_type(), metadata={}, hash="")


def build_text_nodes(
    node: BaseNode,
    chunks: Sequence[str],
    spans: Sequence[tuple[int, int]],
    id_func: Callable[[int, BaseNode], str],
    source: RelatedNodeInfo,
    metadata: dict[str, Any],
) -> list[TextNode]:
    """``TextNode`` per chunk of ``node``, equal to validated construction, without validating.

    Each node gets ``id_func(i, node)``, its chunk text and span, a fresh copy of ``node``'s
    embedding and excluded keys, ``source`` as its SOURCE relationship and a copy of ``metadata``.
    """
    embedding = node.embedding
    embed_keys = node.excluded_embed_metadata_keys
    llm_keys = node.excluded_llm_metadata_keys
    template = TextNode.model_construct(
        id_="",
        text="",
        embedding=None,
        excluded_embed_metadata_keys=[],
        excluded_llm_metadata_keys=[],
        metadata_separator=node.metadata_separator,
        metadata_template=node.metadata_template,
        text_template=getattr(node, "text_template", _TEXT_TEMPLATE),
        relationships={},
        metadata={},
        start_char_idx=0,
        end_char_idx=0,
    )
    # copy.copy(template) and an update of its __dict__, inlined: pydantic's __copy__ copies the
    # four attributes set below the same way, through three nested copy.copy calls per node.
    fields = template.__dict__
    fields_set = template.__pydantic_fields_set__
    extra = template.__pydantic_extra__  # None: TextNode allows no extra fields
    private = template.__pydantic_private__  # None: TextNode has no private attributes
    new, set_attr = TextNode.__new__, object.__setattr__
    built = []
    for i, (chunk, (s, e)) in enumerate(zip(chunks, spans)):
        child = new(TextNode)
        state = dict(fields)
        state.update(
            id_=id_func(i, node),
            text=chunk,
            embedding=None if embedding is None else list(embedding),
            excluded_embed_metadata_keys=list(embed_keys),
            excluded_llm_metadata_keys=list(llm_keys),
            relationships={NodeRelationship.SOURCE: source},
            metadata=dict(metadata),
            start_char_idx=s,
            end_char_idx=e,
        )
        set_attr(child, "__dict__", state)
        set_attr(child, "__pydantic_extra__", copy.copy(extra))
        set_attr(child, "__pydantic_fields_set__", set(fields_set))
        set_attr(child, "__pydantic_private__", copy.copy(private))
        built.append(child)
    return built


def related_node_info(node: BaseNode) -> RelatedNodeInfo:
    """``node.as_related_node_info()``, built without validation for a ``TextNode``.

    Its values are already valid: a str id, ``ObjectType.TEXT``, a str hash, and the metadata
    copied shallowly, as pydantic's ``dict[str, Any]`` validation copies it; the fields set are the
    same four. Other node types take ``as_related_node_info()``.
    """
    if type(node) is not TextNode:
        return node.as_related_node_info()
    # A copy of one template (model_construct's work done once): a third less per node.
    return shallow_copy(_RELATED_TEMPLATE, {"node_id": node.id_, "metadata": dict(node.metadata), "hash": node.hash})


def private(model: BaseModel, name: str) -> Any:
    """``getattr(model, name)`` for a pydantic private attribute, read from ``__pydantic_private__``:
    pydantic (and LlamaIndex's ``BaseComponent``) resolve a private attribute through ``__getattr__``,
    which costs several microseconds per read on a query's path."""
    values = model.__pydantic_private__
    if values is None or name not in values:
        return getattr(model, name)
    return values[name]


_Function = TypeVar("_Function", bound=Callable[..., Any])


def presigned(function: _Function) -> _Function:
    """``function`` with its own ``inspect.signature(function)`` stored as ``function.__signature__``.

    LlamaIndex's span (``Dispatcher.span``, which ``DispatcherSpanMixin`` wraps ``_postprocess_nodes`` in)
    calls ``inspect.signature(...).bind(...)`` at every call; ``inspect.signature`` returns a stored
    ``__signature__`` (the same ``Signature``, for the bound method too) instead of rebuilding it from the
    code object (signature and bind: 11 us without it, 5 us with it, CPU time under load). The span itself
    is unchanged: its handlers get the same bound arguments. Apply it inside the class body, before the
    mixin wraps the method."""
    function.__signature__ = inspect.signature(function)  # type: ignore[attr-defined]
    return function
