"""``SentenceChunker``: LlamaIndex's ``NodeParser`` around the framework-free :class:`~rag_dedup.chunking.Chunker`.

The chunking algorithm (blocks, sentences, content-defined cuts, overlap) lives in
:mod:`rag_dedup.chunking`; this module turns its spans into LlamaIndex nodes with exact offsets,
the SOURCE/PREVIOUS/NEXT relationships ``SentenceSplitter``'s nodes have, and deterministic ids.

Example:
    >>> from llama_index.core import Document
    >>> chunker = SentenceChunker(chunk_size=64, chunk_overlap=16)
    >>> doc = Document(text="First sentence here. Second one follows.\\n\\nA new paragraph.", id_="d")
    >>> nodes = chunker.get_nodes_from_documents([doc])
    >>> all(doc.text[n.start_char_idx:n.end_char_idx] == n.text for n in nodes)
    True
    >>> [n.node_id for n in nodes] == [n.node_id for n in chunker.get_nodes_from_documents([doc])]
    True
"""

from __future__ import annotations

import hashlib
import uuid
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.bridge.pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
)
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.node_parser.interface import MetadataAwareTextSplitter
from llama_index.core.node_parser.node_utils import (
    build_nodes_from_splits,
    default_id_func,
)
from llama_index.core.schema import (
    BaseNode,
    Document,
    ImageDocument,
    MetadataMode,
    NodeRelationship,
    RelatedNodeInfo,
)
from llama_index.core.utils import get_tokenizer, get_tqdm_iterable
from pydantic import computed_field

from rag_dedup._gc import gc_paused
from rag_dedup.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, Chunker, Span, TokenCounts
from rag_dedup.chunking.chunker import MIN_CHUNK_SIZE, check_text
from rag_dedup.llama_index._nodes import build_text_nodes, related_node_info
from rag_dedup.llama_index.caller import input_names_digest

__all__ = ["SentenceChunker"]

# Node ids are uuid5(namespace, "<document id>\x1f<start>\x1f<end>"): the same document chunked twice
# gets the same ids, and a chunk's id names exactly which text it is.
_ID_NAMESPACE = uuid.UUID("0c5f3e8e-6a0b-5d2e-9c53-2f1f7d1b9a41")


#: SentenceSplitter's own options, which SentenceChunker has no use for (named in its TypeError).
_SPLITTER_ONLY = frozenset({"separator", "paragraph_separator", "secondary_chunking_regex", "chunking_tokenizer_fn"})


class SentenceChunker(MetadataAwareTextSplitter):
    """Split documents into sentence-aligned, overlapping chunks with content-defined boundaries.

    Guarantees, for every document:

    * ``doc.text[node.start_char_idx:node.end_char_idx] == node.text`` for every node.
    * Chunks start and end on sentence boundaries, except inside a sentence longer than the chunk
      size, which is split at word boundaries (inside a word only if one word is longer still).
    * Every sentence of at most ``chunk_size`` tokens appears whole in at least one chunk, and every
      non-whitespace character is in at least one chunk.
    * A chunk's sentences cost at most ``chunk_size`` tokens: the first one's own tokens, the others'
      with what the whitespace before them adds. For LlamaIndex's default tokenizer that is the
      chunk's own count, or more where tokens merge across a sentence end, so
      ``len(tokenizer(node.text)) <= chunk_size`` (held on the whole test corpus at sizes 32-512);
      a single character that alone exceeds the budget is the one exception.
    * A chunk that continues a paragraph repeats whole trailing sentences of the previous chunk
      totalling at most ``chunk_overlap`` tokens (never the whole previous chunk), so where it
      starts is fixed by the sentences before its own text alone. Short blocks next to each other
      (list items, short paragraphs, headings and what follows them, each under a third of
      ``chunk_size - chunk_overlap`` tokens and under five sentences) share chunks.
    * Where a chunk ends depends on the text, not on its offset: a paragraph (of at least a third of
      ``chunk_size - chunk_overlap`` tokens, or five sentences) shared by two documents gets the same
      chunks in both, and a passage shared inside paragraphs gets the same cuts in its interior.
    * Node ids are uuid5 of (document id, start, end), so re-chunking gives the same ids, unless an
      ``id_func`` is given.

    As for LlamaIndex's ``SentenceSplitter``, each document's metadata string (the longer of its
    embed and LLM forms) is counted in ``chunk_size`` (``metadata_aware=False`` counts the text
    only), metadata longer than ``chunk_size`` raises ``ValueError("Metadata length (N) is longer
    than chunk size (M)...")``, and metadata that leaves fewer than 50 tokens warns. The
    content-defined cuts do not depend on the metadata (only the size limit does), so a passage is
    still cut alike in documents whose metadata differ.

    Args:
        chunk_size: maximum tokens per chunk, overlap included.
        chunk_overlap: maximum tokens repeated from the previous chunk; below ``chunk_size``.
        chunk_target: the mean tokens per chunk to aim for in running text, overlap included (at
            most ``chunk_size``, which stays the maximum); default ``3 * chunk_size // 8`` (96 at
            256; then chunks in running text average about 102 tokens and all chunks of real
            documents, headings and short blocks included, about 101: 2.1 times the vectors of
            ``SentenceSplitter(256, 64)``). Smaller finds more
            passages spliced into running text, where no paragraph break marks them (such a passage
            is found only if it holds a whole chunk of each copy), at the price of more chunks: the
            README's "Chunk boundaries that follow the text" has the measured sizes and the curve.
        language: punkt model (a directory of ``tokenizers/punkt_tab``).
        metadata_aware: count each document's metadata string in ``chunk_size`` (default True, as
            SentenceSplitter does).
        tokenizer: callable returning the tokens of a string; default LlamaIndex's ``get_tokenizer()``.
        include_metadata, include_prev_next_rel, callback_manager, id_func: as for every LlamaIndex
            ``NodeParser``.

    Raises:
        ValueError: a size out of range, or ``chunk_overlap >= chunk_size``.
        LookupError: the punkt model for ``language`` is not installed (nothing is downloaded).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=True)

    chunk_size: int = Field(
        default=DEFAULT_CHUNK_SIZE,
        ge=8,
        description="Maximum tokens per chunk, overlap included (at least 8).",
    )
    chunk_overlap: int = Field(
        default=DEFAULT_CHUNK_OVERLAP,
        ge=0,
        description="Maximum tokens of whole trailing sentences repeated from the previous chunk of the "
        "same paragraph; smaller than chunk_size.",
    )
    chunk_target: int | None = Field(
        default=None,
        ge=1,
        description="Mean tokens per chunk to aim for in running text, overlap included (at most "
        "chunk_size); None means 3 * chunk_size // 8.",
    )
    language: str = Field(
        default="english",
        pattern=r"^[a-z][a-z_-]{0,63}$",
        description="punkt_tab model used for sentence boundaries.",
    )
    metadata_aware: bool = Field(
        default=True,
        description="Reserve room for each document's metadata string in chunk_size, as "
        "SentenceSplitter does (the content-defined cuts do not depend on it; only the size limit does).",
    )

    _counts: TokenCounts = PrivateAttr()
    _core: Chunker | None = PrivateAttr(default=None)

    def __init__(
        self,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        chunk_target: int | None = None,
        language: str = "english",
        metadata_aware: bool = True,
        tokenizer: Callable[[str], Sequence[Any]] | None = None,
        callback_manager: CallbackManager | None = None,
        include_metadata: bool = True,
        include_prev_next_rel: bool = True,
        id_func: Callable[[int, BaseNode], str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Validate the settings and load the punkt model (see the class docstring)."""
        if isinstance(id_func, dict):  # the serialised form that to_dict() writes
            name = id_func.get("id_func_name")
            if name != default_id_func.__name__:
                raise ValueError(
                    f"id_func {name!r} cannot be restored from its name; pass the function as id_func="
                )
            id_func = None
        if tokenizer is not None and not callable(tokenizer):
            raise TypeError(f"tokenizer must be callable (str -> tokens), got {type(tokenizer).__name__}")
        unknown = sorted(set(kwargs) - set(type(self).model_fields) - set(type(self).model_computed_fields))
        if unknown:  # SentenceSplitter refuses them too (TypeError); pydantic would drop them silently
            splitter_only = [k for k in unknown if k in _SPLITTER_ONLY]
            raise TypeError(
                f"SentenceChunker got unexpected keyword argument(s) {', '.join(map(repr, unknown))}"
                + (
                    f" ({', '.join(splitter_only)}: SentenceSplitter's, which have no equivalent here: the cuts are "
                    "at sentence ends found by punkt, placed by content)"
                    if splitter_only
                    else ""
                )
            )
        super().__init__(
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            chunk_target=chunk_target,
            language=language,
            metadata_aware=metadata_aware,
            callback_manager=callback_manager or CallbackManager([]),
            include_metadata=include_metadata,
            include_prev_next_rel=include_prev_next_rel,
            id_func=id_func or default_id_func,
            **kwargs,
        )
        if chunk_target is not None and chunk_target > chunk_size:
            raise ValueError(f"chunk_target ({chunk_target}) must not exceed chunk_size ({chunk_size})")
        self._counts = TokenCounts(tokenizer or get_tokenizer())
        self._chunker()  # fail now, not at the first document, if the model is missing

    @field_validator("chunk_overlap")
    @classmethod
    def _overlap_below_size(cls, value: int, info: Any) -> int:
        size = info.data.get("chunk_size")
        if size is not None and value >= size:
            raise ValueError(
                f"chunk_overlap ({value}) must be smaller than chunk_size ({size}); "
                f"lower chunk_overlap or raise chunk_size"
            )
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        """Assign a field; lowering ``chunk_size`` to or below ``chunk_overlap`` takes the overlap
        along (to a quarter of the new size, with a warning), so that LlamaIndex's
        ``Settings.chunk_size = 50`` works whatever was set before, as it does for SentenceSplitter.
        Assigning ``chunk_overlap >= chunk_size`` itself is refused (set ``chunk_size`` first)."""
        if (
            name == "chunk_size"
            and isinstance(value, int)
            and not isinstance(value, bool)
            and value >= MIN_CHUNK_SIZE
            and value <= self.chunk_overlap
        ):
            overlap = value // 4
            warnings.warn(
                f"chunk_size ({value}) is not larger than chunk_overlap ({self.chunk_overlap}): "
                f"chunk_overlap lowered to {overlap}; set chunk_overlap after chunk_size to choose another",
                stacklevel=2,
            )
            super().__setattr__("chunk_overlap", overlap)
        if name == "chunk_size" and isinstance(value, int) and self.chunk_target is not None and value < self.chunk_target:
            warnings.warn(
                f"chunk_size ({value}) is below chunk_target ({self.chunk_target}): chunks aim at {value} tokens "
                f"until chunk_target is lowered or chunk_size raised",
                stacklevel=2,
            )
        super().__setattr__(name, value)

    @classmethod
    def class_name(cls) -> str:
        return "SentenceChunker"

    @computed_field(  # type: ignore[prop-decorator]
        description="While a pipeline computes a cache key: a digest of the input's node and document ids."
    )
    @property
    def input_names(self) -> str:
        """Part of ``to_dict()``, hence of the pipeline's cache key: ``""``, except while an
        ``IngestionPipeline`` computes the key of a call, when it is a digest of the input's node and
        document ids (:func:`~rag_dedup.llama_index.caller.input_names_digest`). The chunks' ids and
        ``ref_doc_id`` are the input's, and the key hashes the input's content only: without this, a
        document with the text (and metadata) of one chunked before was answered from the cache with
        that one's chunks, and never indexed as itself (``SentenceSplitter`` shares that flaw)."""
        return input_names_digest()

    def __getstate__(self) -> dict[str, Any]:
        # LlamaIndex's default tokenizer is not shipped: unpickling a tiktoken encoding in a fresh
        # worker process (IngestionPipeline(num_workers=...)) would look for its BPE file before
        # llama_index has pointed tiktoken at the copy it ships, and try to download it (a hang
        # offline); __init__ in the worker calls get_tokenizer(), which sets that up first.
        state = super().__getstate__()
        private = dict(state.get("__pydantic_private__") or {})
        counts = private.get("_counts")
        if isinstance(counts, TokenCounts) and counts.tokenizer is get_tokenizer():
            private["_counts"] = None
        private["_core"] = None  # rebuilt from the fields
        state["__pydantic_private__"] = private
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # BaseComponent re-runs __init__ from the public fields, which would fall back to the default
        # tokenizer in a worker process; keep the one given.
        super().__setstate__(state)
        counts = (state.get("__pydantic_private__") or {}).get("_counts")
        if isinstance(counts, TokenCounts):
            self._counts = counts
            self._core = None

    # ------------------------------------------------------------------ the core

    def _target(self) -> int | None:
        """``chunk_target``, lowered to ``chunk_size`` if an assignment left it above (warned there)."""
        return None if self.chunk_target is None else min(self.chunk_target, self.chunk_size)

    def _chunker(self) -> Chunker:
        """The core :class:`~rag_dedup.chunking.Chunker` for the current fields (rebuilt after an
        assignment changes them; it shares this parser's token memos)."""
        core = self._core
        if (
            core is None
            or core.chunk_size != self.chunk_size
            or core.chunk_overlap != self.chunk_overlap
            or core.chunk_target != self._target()
            or core.language != self.language
        ):
            core = self._core = Chunker(
                self._counts,
                chunk_size=self.chunk_size,
                chunk_overlap=self.chunk_overlap,
                chunk_target=self._target(),
                language=self.language,
            )
        return core

    def sentence_spans(self, text: str) -> list[Span]:
        """The sentence spans of ``text`` (see :meth:`rag_dedup.chunking.Chunker.sentence_spans`).

        Raises:
            TypeError: ``text`` is not a ``str``.
        """
        return self._chunker().sentence_spans(text)

    def _reserved(self, metadata_str: str) -> int:
        """The tokens reserved for a document's metadata string, if ``metadata_aware``."""
        if not self.metadata_aware or not metadata_str:
            return 0
        metadata_len = self._counts.count(metadata_str)
        budget = self._chunker().budget(metadata_len)
        if budget < 50:
            warnings.warn(
                f"Metadata length ({metadata_len}) is close to chunk size ({self.chunk_size}). Resulting "
                f"chunks are less than 50 tokens. Consider increasing the chunk size or decreasing the "
                f"size of your metadata to avoid this.",
                stacklevel=3,
            )
        return metadata_len

    def chunk_spans(self, text: str, metadata_str: str = "") -> list[Span]:
        """The ``(start, end)`` span of every chunk of ``text``, in order; none for blank text.

        ``metadata_str`` is used only when ``metadata_aware`` is set.

        Raises:
            TypeError: ``text`` is not a ``str``.
            ValueError: ``metadata_aware`` is set and the metadata is longer than ``chunk_size``.
        """
        return self._chunker().chunk_spans(text, self._reserved(metadata_str))

    # ------------------------------------------------------------------ LlamaIndex interface

    def split_text(self, text: str) -> list[str]:
        """The chunk texts of ``text`` (see :meth:`chunk_spans`), in a ``CBEventType.CHUNKING``
        event, as ``SentenceSplitter.split_text`` emits one."""
        return self._split(text, "")[1]

    def split_text_metadata_aware(self, text: str, metadata_str: str) -> list[str]:
        """The chunk texts of ``text``, reserving ``metadata_str``'s tokens if ``metadata_aware``
        (in a ``CBEventType.CHUNKING`` event)."""
        return self._split(text, metadata_str)[1]

    def _split(self, text: str, metadata_str: str) -> tuple[list[Span], list[str]]:
        """The spans and texts of ``text``'s chunks, inside one ``CBEventType.CHUNKING`` event."""
        with self.callback_manager.event(CBEventType.CHUNKING, payload={EventPayload.CHUNKS: [text]}) as event:
            spans = self.chunk_spans(text, metadata_str)
            chunks = [text[s:e] for s, e in spans]
            event.on_end(payload={EventPayload.CHUNKS: chunks})
        return spans, chunks

    @gc_paused()
    def _parse_nodes(self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any) -> list[BaseNode]:
        """Chunk every node; each chunk is built complete in :meth:`_build_nodes`.

        The cyclic garbage collector is paused meanwhile (:func:`rag_dedup._gc.gc_paused`: the nodes
        hold no cycles, and its runs would walk the caller's heap again and again), as in
        :meth:`_postprocess_parsed_nodes`; both are synchronous, also under ``aget_nodes_from_documents``.

        Raises:
            TypeError: a node's text is not a ``str`` (the message names the node).
        """
        all_nodes: list[BaseNode] = []
        for node in get_tqdm_iterable(nodes, show_progress, "Parsing nodes"):
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            check_text(text, f"text of node {node.node_id!r}")
            metadata_str = self._get_metadata_str(node) if self.metadata_aware else ""
            spans, chunks = self._split(text, metadata_str)
            if chunks:
                all_nodes.extend(self._build_nodes(node, chunks, spans))
        return all_nodes

    def _build_nodes(self, node: BaseNode, chunks: list[str], spans: list[Span]) -> list[BaseNode]:
        """The chunks of ``node`` as nodes: exact offsets, and the SOURCE relationship and metadata
        that ``SentenceSplitter``'s nodes end up with after ``NodeParser._postprocess_parsed_nodes``
        (SOURCE is the input's own source if it has one, else the input; metadata a copy of the
        input's)."""
        id_func = self.id_func
        if id_func is default_id_func:  # no id_func given: ids from the document id and the span
            id_func = _span_ids(node.node_id, spans)
        source = node.source_node or node.as_related_node_info()
        metadata = dict(node.metadata) if self.include_metadata else {}
        if isinstance(node, ImageDocument):  # image chunks keep LlamaIndex's own builder
            images: list[BaseNode] = list(build_nodes_from_splits(chunks, node, id_func=id_func))
            for child, (s, e) in zip(images, spans):
                child.relationships[NodeRelationship.SOURCE] = source
                child.metadata = dict(metadata)
                child.start_char_idx, child.end_char_idx = s, e  # type: ignore[attr-defined]
            return images
        # Every value comes from the validated input node or is built with the field's exact type:
        # built without validation, behind one door (rag_dedup.llama_index._nodes).
        return list(build_text_nodes(node, chunks, spans, id_func, source, metadata))

    @gc_paused()
    def _postprocess_parsed_nodes(self, nodes: list[BaseNode], parent_doc_map: dict[str, Document]) -> list[BaseNode]:
        """Link consecutive chunks of the same source with PREVIOUS/NEXT, as the base class does.

        The rest of the base class's pass is done exactly in :meth:`_build_nodes`: it would re-derive
        offsets with ``str.find`` from the previous chunk's start, which lands on an earlier copy of
        repeated text.
        """
        if not self.include_prev_next_rel or len(nodes) < 2:
            return nodes
        sources = [None if src is None else src.node_id for src in (n.source_node for n in nodes)]
        infos: dict[int, RelatedNodeInfo] = {}

        def info(i: int) -> RelatedNodeInfo:
            if i not in infos:
                infos[i] = related_node_info(nodes[i])
            return infos[i]

        for i in range(len(nodes) - 1):
            if sources[i] is not None and sources[i] == sources[i + 1]:
                nodes[i + 1].relationships[NodeRelationship.PREVIOUS] = info(i)
                nodes[i].relationships[NodeRelationship.NEXT] = info(i + 1)
        return nodes


def _span_ids(doc_id: str, spans: Sequence[Span]) -> Callable[[int, BaseNode], str]:
    """An ``id_func`` giving chunk ``i`` the id uuid5(namespace, "<doc id>\\x1f<start>\\x1f<end>")."""
    prefix = _ID_NAMESPACE.bytes + f"{doc_id}\x1f".encode("utf-8", "surrogatepass")
    ids = [_uuid5(prefix + f"{s}\x1f{e}".encode()) for s, e in spans]

    def span_id(i: int, _doc: BaseNode) -> str:
        return ids[i]

    return span_id


def _uuid5(namespace_and_name: bytes) -> str:
    """``str(uuid.uuid5(namespace, name))`` from the namespace's bytes and the name's, formatted
    directly (uuid.UUID's constructor is most of the cost of uuid5; the tests hold the two equal)."""
    digest = bytearray(hashlib.sha1(namespace_and_name).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
