"""The collector pause around the LlamaIndex chunker's and transform's per-node work (rag_dedup._gc)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from llama_index.core import Document
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.schema import TextNode

import rag_dedup.llama_index.transform as transform_module
from rag_dedup._gc import gc_paused
from rag_dedup.llama_index.chunking import SentenceChunker
from rag_dedup.llama_index.transform import DedupTransform


@pytest.fixture
def collector_on() -> Iterator[None]:
    """The collector enabled for the test, and as the test found it afterwards."""
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        (gc.enable if was else gc.disable)()


def test_gc_paused_disables_the_collector_and_restores_it_also_on_error(collector_on: None) -> None:
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="boom"):
        with gc_paused():
            raise RuntimeError("boom")
    assert gc.isenabled()


def test_gc_paused_leaves_a_disabled_collector_disabled_also_when_nested(collector_on: None) -> None:
    """A nested pause must not re-enable the collector its caller paused; an already disabled
    collector stays disabled."""
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_the_chunker_builds_its_nodes_with_the_collector_paused_and_restores_it(collector_on: None) -> None:
    """Guards the pause itself: the collector's runs over the caller's heap were a third of the parse time."""
    seen: list[bool] = []

    def id_func(i: int, doc: object) -> str:
        seen.append(gc.isenabled())
        return f"chunk-{i}"

    doc = Document(text="One sentence here. " * 200, id_="d")
    nodes = IngestionPipeline(transformations=[SentenceChunker(chunk_size=64, chunk_overlap=8, id_func=id_func)]).run(
        documents=[doc]
    )
    assert len(nodes) > 1 and seen and not any(seen)
    assert gc.isenabled()


def test_the_transform_works_with_the_collector_paused_and_restores_it_also_on_error(
    collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []
    dedup_text = transform_module.dedup_text

    def spy(node: object) -> object:
        seen.append(gc.isenabled())
        return dedup_text(node)  # type: ignore[arg-type]

    monkeypatch.setattr(transform_module, "dedup_text", spy)
    transform = DedupTransform()
    transform([TextNode(id_="a", text="alpha beta gamma delta"), TextNode(id_="b", text="epsilon zeta eta theta")])
    assert seen and not any(seen)
    assert gc.isenabled()
    with pytest.raises(ValueError):
        transform([TextNode(id_="c", text="one text"), TextNode(id_="c", text="another text")])
    assert gc.isenabled()
