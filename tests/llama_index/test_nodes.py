"""The door to pydantic's and LlamaIndex's internals for building chunk nodes (rag_dedup.llama_index._nodes):
it fails loudly when an upgrade removes what it relies on. (The nodes it builds are held equal to
``TextNode(**node.model_dump())`` and their JSON round trip in tests/llama_index/test_chunking.py.)
"""

from __future__ import annotations

import pytest
from llama_index.core import Document
from llama_index.core.node_parser.interface import NodeParser

from rag_dedup.llama_index import _nodes
from rag_dedup.llama_index.chunking import SentenceChunker


def test_the_node_door_names_what_an_upgrade_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(NodeParser, _nodes.POSTPROCESS_HOOK)
    with pytest.raises(ImportError, match=r"NodeParser._postprocess_parsed_nodes"):
        _nodes._check()


def test_the_postprocess_hook_is_the_one_get_nodes_from_documents_calls() -> None:
    """If LlamaIndex stopped calling the hook SentenceChunker overrides, its own pass would re-find
    each chunk with str.find and put a repeated paragraph's second copy at the first one's offset."""
    paragraph = "The same paragraph appears twice in this document. It has two sentences."
    text = "\n\n".join([paragraph, "Something else in between, long enough to be its own chunk.", paragraph])
    calls: list[int] = []
    original = SentenceChunker._postprocess_parsed_nodes

    def spy(self: SentenceChunker, nodes: list, parent_doc_map: dict) -> list:
        calls.append(len(nodes))
        return original(self, nodes, parent_doc_map)

    chunker = SentenceChunker(chunk_size=24, chunk_overlap=4)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SentenceChunker, _nodes.POSTPROCESS_HOOK, spy)
        nodes = chunker.get_nodes_from_documents([Document(text=text, id_="d")])
    assert calls == [len(nodes)]
    assert [text[n.start_char_idx : n.end_char_idx] for n in nodes] == [n.text for n in nodes]
    copies = [n.start_char_idx for n in nodes if n.text.startswith("The same paragraph")]
    assert copies == [0, text.rindex(paragraph)]
