"""SentenceChunker against LlamaIndex's own contract for node parsers (issue 16, items 1-3), with
LlamaIndex's real classes beside SentenceSplitter: metadata in the chunk budget, ``Settings``
assignments in any order, and the CHUNKING callback event of ``split_text``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from llama_index.core import Document, Settings
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.callbacks.schema import EventPayload
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import MetadataMode
from llama_index.core.utils import get_tokenizer

from rag_dedup.llama_index.chunking import SentenceChunker

CORPUS = Path(__file__).parents[1] / "data" / "corpus"
TOKENIZER = get_tokenizer()
TEXT = (CORPUS / "licenses" / "GPL-3.txt").read_text(encoding="utf-8")[:20000]
# A 120-word metadata field (about 150 tokens): real words from the corpus.
METADATA = {"summary": " ".join((CORPUS / "licenses" / "MPL-2.0.txt").read_text(encoding="utf-8").split()[:120])}


def _tokens(text: str) -> int:
    return len(TOKENIZER(text))


@pytest.fixture
def settings() -> Iterator[type[Settings]]:
    """LlamaIndex's global Settings, restored after the test."""
    saved = Settings._node_parser
    try:
        yield Settings
    finally:
        Settings._node_parser = saved


# ---------------------------------------------------------------------------- 1. metadata


@pytest.mark.parametrize("parser", [pytest.param(SentenceChunker, id="SentenceChunker"), pytest.param(SentenceSplitter, id="SentenceSplitter")])
def test_metadata_is_counted_in_the_chunk_budget_by_default(parser: type) -> None:
    """Issue 16.1: with a 200-word metadata field the embed text of a chunk reached 392 tokens at
    chunk_size=256 (SentenceSplitter: 245)."""
    nodes = parser(chunk_size=256, chunk_overlap=64).get_nodes_from_documents([Document(text=TEXT, metadata=METADATA)])
    assert len(nodes) > 5
    assert max(_tokens(n.get_content(metadata_mode=MetadataMode.EMBED)) for n in nodes) <= 256 + 4  # +4: the template's separators


def test_split_text_metadata_aware_uses_its_metadata_like_sentence_splitter() -> None:
    chunker = SentenceChunker(chunk_size=256, chunk_overlap=64)
    metadata_str = Document(text="", metadata=METADATA).get_metadata_str()
    budget = 256 - _tokens(metadata_str)
    aware = chunker.split_text_metadata_aware(TEXT, metadata_str)
    assert max(_tokens(c) for c in aware) <= budget < max(_tokens(c) for c in chunker.split_text(TEXT))
    many = chunker.split_texts_metadata_aware([TEXT, TEXT[:3000]], [metadata_str, metadata_str])
    assert many == aware + chunker.split_text_metadata_aware(TEXT[:3000], metadata_str)  # flat, as the base class gives


@pytest.mark.parametrize("parser", [pytest.param(SentenceChunker, id="SentenceChunker"), pytest.param(SentenceSplitter, id="SentenceSplitter")])
def test_metadata_longer_than_the_chunk_size_raises_like_sentence_splitter(parser: type) -> None:
    doc = Document(text=TEXT[:2000], metadata=METADATA)
    with pytest.raises(ValueError, match=r"Metadata length \(\d+\) is longer than chunk size \(128\)"):
        parser(chunk_size=128, chunk_overlap=16).get_nodes_from_documents([doc])


def test_metadata_aware_false_counts_the_text_only() -> None:
    nodes = SentenceChunker(metadata_aware=False).get_nodes_from_documents([Document(text=TEXT, metadata=METADATA)])
    assert max(_tokens(n.text) for n in nodes) > 256 - _tokens(nodes[0].get_metadata_str())


# ---------------------------------------------------------------------------- 2. Settings


def test_settings_chunk_size_below_the_overlap_takes_the_overlap_along(settings: type[Settings]) -> None:
    """Issue 16.2: ``Settings.node_parser = SentenceChunker(); Settings.chunk_size = 50`` raised
    (chunk_overlap 64 >= 50); SentenceSplitter accepts it."""
    settings.node_parser = SentenceChunker()
    with pytest.warns(UserWarning, match=r"chunk_overlap lowered to 12"):
        settings.chunk_size = 50
    assert (settings.chunk_size, settings.chunk_overlap) == (50, 12)
    nodes = IngestionPipeline(transformations=[settings.node_parser]).run(documents=[Document(text=TEXT[:6000], id_="gpl")])
    assert len(nodes) > 10
    assert all(_tokens(n.get_content(metadata_mode=MetadataMode.EMBED)) <= 50 for n in nodes)


@pytest.mark.parametrize("order", [pytest.param(("chunk_size", "chunk_overlap"), id="size-first"), pytest.param(("chunk_overlap", "chunk_size"), id="overlap-first")])
def test_settings_size_and_overlap_in_either_order(settings: type[Settings], order: tuple[str, str]) -> None:
    settings.node_parser = SentenceChunker()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in order:
            setattr(settings, name, {"chunk_size": 50, "chunk_overlap": 10}[name])
    assert (settings.node_parser.chunk_size, settings.node_parser.chunk_overlap) == (50, 10)
    splitter = SentenceSplitter()
    settings.node_parser = splitter
    for name in order:
        setattr(settings, name, {"chunk_size": 50, "chunk_overlap": 10}[name])
    assert (splitter.chunk_size, splitter.chunk_overlap) == (50, 10)


def test_an_overlap_not_below_the_size_is_refused_loudly(settings: type[Settings]) -> None:
    """A deliberate difference: SentenceSplitter takes chunk_overlap >= chunk_size silently."""
    settings.node_parser = SentenceChunker()
    with pytest.raises(ValueError, match=r"chunk_overlap \(300\) must be smaller than chunk_size \(256\)"):
        settings.chunk_overlap = 300
    assert settings.chunk_overlap == 64


# ---------------------------------------------------------------------------- 3. callbacks


@pytest.mark.parametrize("parser", [pytest.param(SentenceChunker, id="SentenceChunker"), pytest.param(SentenceSplitter, id="SentenceSplitter")])
def test_split_text_emits_a_chunking_event(parser: type) -> None:
    """Issue 16.3: ``split_text()`` called directly emitted no CBEventType.CHUNKING event."""
    handler = LlamaDebugHandler()
    splitter = parser(chunk_size=128, chunk_overlap=16, callback_manager=CallbackManager([handler]))
    chunks = splitter.split_text(TEXT[:5000])
    pairs = handler.get_event_pairs(CBEventType.CHUNKING)
    assert len(pairs) == 1
    start, end = pairs[0]
    assert start.payload[EventPayload.CHUNKS] == [TEXT[:5000]]
    assert end.payload[EventPayload.CHUNKS] == chunks


def test_parsing_documents_emits_one_chunking_event_per_document() -> None:
    handler = LlamaDebugHandler()
    chunker = SentenceChunker(callback_manager=CallbackManager([handler]))
    nodes = chunker.get_nodes_from_documents([Document(text=TEXT[:4000]), Document(text=TEXT[4000:9000])])
    pairs = handler.get_event_pairs(CBEventType.CHUNKING)
    assert len(pairs) == 2
    assert sum(len(end.payload[EventPayload.CHUNKS]) for _, end in pairs) == len(nodes)


# ---------------------------------------------------------------------------- the command's --chunk-target


def test_the_command_takes_a_chunk_target(capsys: pytest.CaptureFixture[str]) -> None:
    from rag_dedup.app.cli import main
    from rag_dedup.app.corpus import chunk_corpus, read_corpus

    corpus = read_corpus(CORPUS / "licenses")
    default = chunk_corpus(corpus, SentenceChunker(chunk_size=256, chunk_overlap=64))
    small = chunk_corpus(corpus, SentenceChunker(chunk_size=256, chunk_overlap=64, chunk_target=48))
    assert len(small) > len(default)  # more, smaller chunks (a target under the overlap moves only the bodies)
    fewer = chunk_corpus(corpus, SentenceChunker(chunk_size=256, chunk_overlap=64, chunk_target=192))
    assert len(fewer) < 0.95 * len(default)
    assert main(["scan", str(CORPUS / "licenses"), "--chunk-target", "300"]) == 2
    assert "chunk_target (300) must not exceed chunk_size (256)" in capsys.readouterr().err
