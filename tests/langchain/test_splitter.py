"""``SentenceChunker`` as a LangChain ``TextSplitter``: exact offsets, and the LlamaIndex chunker's cut plan."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core", reason='the LangChain adapter needs pip install "rag-dedup[langchain]"')

from tests.corpus import documents as corpus_files
from langchain_core.documents import Document

from rag_dedup.langchain import SentenceChunker


def test_splitter_offsets_are_exact_and_match_the_llama_index_chunker() -> None:
    from llama_index.core import Document as LlamaDocument

    from rag_dedup.llama_index.chunking import SentenceChunker as LlamaChunker

    path, text = next(iter(corpus_files().items()))
    split = SentenceChunker(add_start_index=True).split_documents([Document(text, metadata={"source": path})])
    assert all(text[d.metadata["start_index"] : d.metadata["start_index"] + len(d.page_content)] == d.page_content for d in split)
    assert all(d.metadata["source"] == path for d in split)
    nodes = LlamaChunker().get_nodes_from_documents([LlamaDocument(text=text)])
    assert [d.page_content for d in split] == [n.text for n in nodes]  # one engine, one cut plan
