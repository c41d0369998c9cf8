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


def test_from_tiktoken_encoder_counts_in_that_encoding() -> None:
    from rag_dedup.chunking.bundled import default_tokenizer

    default_tokenizer()  # cl100k_base, from llama-index-core's bundled cache: tiktoken keeps it loaded
    _, text = next(iter(corpus_files().items()))
    made = SentenceChunker.from_tiktoken_encoder(encoding_name="cl100k_base", chunk_size=64, chunk_overlap=8, add_start_index=True)
    assert isinstance(made, SentenceChunker)
    assert made.split_text(text) == SentenceChunker(chunk_size=64, chunk_overlap=8).split_text(text)
    docs = made.create_documents([text])
    assert all(text[d.metadata["start_index"] :].startswith(d.page_content) for d in docs)
    # LangChain's tiktoken counting, not the default tokenizer: special tokens refused unless allowed.
    special = "An end marker <|endoftext|> inside the text. Another sentence."
    with pytest.raises(ValueError, match="special token"):
        made.split_text(special)
    allowed = SentenceChunker.from_tiktoken_encoder(encoding_name="cl100k_base", allowed_special="all", chunk_size=64, chunk_overlap=8)
    assert allowed.split_text(special) == [special]


def test_length_function_sizes_chunks_in_characters() -> None:
    _, text = next(iter(corpus_files().items()))
    chunks = SentenceChunker(chunk_size=400, chunk_overlap=80, length_function=len).split_text(text)
    assert len(chunks) > 3
    assert max(len(c) for c in chunks) <= 400
    assert all(c in text for c in chunks)


def test_length_function_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="not both"):
        SentenceChunker(tokenizer=str.split, length_function=len)
    with pytest.raises(TypeError, match="length_function must be callable"):
        SentenceChunker(length_function=400)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must return a size"):
        SentenceChunker(length_function=lambda s: "many").split_text("One sentence. Another one.")  # type: ignore[arg-type,return-value]
