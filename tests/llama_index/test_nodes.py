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


def test_the_postprocessors_span_reads_a_stored_signature_and_binds_the_same_arguments() -> None:
    """The instrumentation span around DedupPostprocessor._postprocess_nodes calls inspect.signature at
    every call: the method carries its signature (so it is not rebuilt each time), the very one inspect
    computes, and a real span handler still sees one span per call with the caller's arguments bound."""
    import inspect

    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler
    from llama_index.core.schema import NodeWithScore, TextNode

    from rag_dedup.llama_index.postprocessor import DedupPostprocessor

    method = DedupPostprocessor.__dict__["_postprocess_nodes"]
    function = method.__wrapped__  # the span's wrapper (DispatcherSpanMixin) around the method
    assert "__signature__" in function.__dict__
    del function.__signature__
    try:
        computed = inspect.signature(function)
    finally:
        _nodes.presigned(function)
    assert function.__signature__ == computed
    bound_method = function.__get__(DedupPostprocessor())
    assert inspect.signature(bound_method) == computed.replace(parameters=list(computed.parameters.values())[1:])

    seen: list[inspect.BoundArguments] = []

    class Spy(SimpleSpanHandler):
        def new_span(self, id_: str, bound_args: inspect.BoundArguments, *args: object, **kwargs: object):  # type: ignore[override]
            if id_.startswith("DedupPostprocessor._postprocess_nodes-"):
                seen.append(bound_args)
            return super().new_span(id_, bound_args, *args, **kwargs)

    dispatcher = get_dispatcher(DedupPostprocessor.__module__)
    handler = Spy()
    dispatcher.add_span_handler(handler)
    try:
        texts = ["the quick brown fox jumps over the lazy dog", "a licence grants permission to copy", "a licence grants permission to copy"]
        nodes = [NodeWithScore(node=TextNode(text=t, id_=str(i)), score=1.0) for i, t in enumerate(texts)]
        kept = DedupPostprocessor().postprocess_nodes(nodes)
    finally:
        dispatcher.span_handlers.remove(handler)
    assert [n.node_id for n in kept] == ["0", "1"]
    assert len(seen) == 1 and seen[0].arguments["nodes"] is nodes and seen[0].arguments["query_bundle"] is None
