"""Shared fixtures of the LangChain tests: the shipped corpus chunked and stamped, and a BM25 retriever over it.

The LangChain imports are inside the fixtures, so that without the extra the tests skip (each test module
calls ``pytest.importorskip``) instead of this file failing to import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from langchain_community.retrievers import BM25Retriever
    from langchain_core.documents import Document


@pytest.fixture(scope="package")
def chunks() -> list[Document]:
    """The shipped corpus split by SentenceChunker and stamped by the transformer (tag mode)."""
    from langchain_core.documents import Document
    from tests.corpus import documents as corpus_files

    from rag_dedup.langchain import DedupDocumentTransformer, SentenceChunker

    files = [Document(text, metadata={"source": path}) for path, text in corpus_files().items()]
    split = SentenceChunker(add_start_index=True).split_documents(files)
    return list(DedupDocumentTransformer().transform_documents(split))


@pytest.fixture(scope="package")
def bm25(chunks: list[Document]) -> BM25Retriever:
    """A BM25Retriever over :func:`chunks` returning 30 documents."""
    from langchain_community.retrievers import BM25Retriever

    return BM25Retriever.from_documents(chunks, k=30)
