"""``DedupCompressor`` inside LangChain's ContextualCompressionRetriever over a BM25Retriever of the shipped corpus."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core", reason='the LangChain adapter needs pip install "rag-dedup[langchain]"')

from tests.adapter_corpus import QUERIES, max_pair_similarity
from tests.kernels import kernels  # noqa: F401  (a fixture)
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_community.retrievers import BM25Retriever

from rag_dedup.langchain import DedupCompressor
from rag_dedup.langchain.transformer import document_key
from rag_dedup.stamps import DEDUP_COLLAPSED


def test_compressor_in_contextual_compression_retriever_keeps_no_duplicates(bm25: BM25Retriever, kernels: str) -> None:
    retriever = ContextualCompressionRetriever(base_compressor=DedupCompressor(top_n=10), base_retriever=bm25)
    folded_total = 0
    for query in QUERIES:
        plain = bm25.invoke(query)
        out = retriever.invoke(query)
        assert max_pair_similarity([d.page_content for d in out]) < 0.8, query
        keys = {document_key(d) for d in plain}
        folded = [e for d in out for e in d.metadata.get(DEDUP_COLLAPSED, [])]
        assert {e["id"] for e in folded} <= keys and all(e["source"] for e in folded)
        folded_total += len(folded)
        assert all(DEDUP_COLLAPSED not in d.metadata for d in plain), "the retriever's documents were modified"
    assert folded_total > 0


def test_a_second_pass_keeps_the_first_pass_citations(bm25: BM25Retriever) -> None:
    fetched = bm25.invoke(QUERIES[0])
    once = DedupCompressor(threshold=0.95).compress_documents(fetched, QUERIES[0])
    twice = DedupCompressor(threshold=0.5, trust_clusters=False).compress_documents(once, QUERIES[0])
    first = {e["id"] for d in once for e in d.metadata.get(DEDUP_COLLAPSED, [])}
    second = {e["id"] for d in twice for e in d.metadata.get(DEDUP_COLLAPSED, [])}
    assert first and first < second


def test_the_compressors_copies_equal_model_copy_and_leave_the_input_alone() -> None:
    """rag_dedup._pydantic.shallow_copy (the compressor's copy of a keeper) against pydantic's model_copy:
    equal documents, the same fields set, the input unchanged."""
    from langchain_core.documents import Document

    from rag_dedup._pydantic import shallow_copy

    doc = Document("Permission is hereby granted", id="a", metadata={"source": "s", "dedup_cluster": "a"})
    update = {"metadata": {**doc.metadata, DEDUP_COLLAPSED: [{"id": "b"}]}}
    ours, theirs = shallow_copy(doc, update), doc.model_copy(update=update)
    assert ours == theirs and ours.model_dump() == theirs.model_dump() and type(ours) is Document
    assert ours.__pydantic_fields_set__ == theirs.__pydantic_fields_set__
    assert DEDUP_COLLAPSED not in doc.metadata and ours.metadata is not doc.metadata


def test_a_rerankers_relevance_score_is_cited_and_nested_metadata_is_not_shared() -> None:
    """Regression: LangChain's rerankers write metadata["relevance_score"], which the citations left out
    (score None); and the kept copy shared nested metadata with the caller's document."""
    from langchain_core.documents import Document

    from tests.adapter_corpus import paragraphs

    (_, text, _), *_ = paragraphs()
    docs = [
        Document(text, id="1", metadata={"relevance_score": 0.9, "loader": {"page": 1}}),
        Document(text.upper(), id="2", metadata={"relevance_score": 0.7, "loader": {"page": 2}}),
    ]
    (kept,) = DedupCompressor().compress_documents(docs, "q")
    assert [(e["id"], e["score"]) for e in kept.metadata[DEDUP_COLLAPSED]] == [("2", 0.7)]
    kept.metadata["loader"]["page"] = 99
    assert docs[0].metadata["loader"] == {"page": 1}


def test_the_transformers_stamped_copies_share_no_nested_metadata() -> None:
    from langchain_core.documents import Document

    from rag_dedup.langchain import DedupDocumentTransformer
    from tests.adapter_corpus import paragraphs

    (_, text, _), *_ = paragraphs()
    meta = {"source": "a", "loader": {"page": 1}}
    (out,) = DedupDocumentTransformer().transform_documents([Document(text, metadata=meta)])
    out.metadata["loader"]["page"] = 99
    assert meta == {"source": "a", "loader": {"page": 1}}


def test_a_metadata_value_that_cannot_be_copied_is_shared_not_an_error() -> None:
    """Regression (review): detaching nested metadata raised on a value that cannot be deep-copied."""
    import threading

    from langchain_core.documents import Document

    from tests.adapter_corpus import paragraphs

    (_, text, _), *_ = paragraphs()
    lock = threading.Lock()
    docs = [Document(text, id="1", metadata={"lock": lock}), Document(text.upper(), id="2")]
    (kept,) = DedupCompressor().compress_documents(docs, "q")
    assert kept.metadata["lock"] is lock


@pytest.mark.parametrize("merge_overlaps", [False, True])
def test_a_document_retrieved_twice_is_one_document_not_a_copy_of_itself(bm25: BM25Retriever, merge_overlaps: bool) -> None:
    """Two retrievers of an ensemble both bring a document: by its key (its id, else the digest of its
    text and metadata) it is one document, returned once, citing nothing it is not."""
    fetched = bm25.invoke(QUERIES[0])
    doubled = [fetched[0], *fetched[:3], fetched[1].model_copy()]  # equal documents: the same key
    compressor = DedupCompressor(merge_overlaps=merge_overlaps)
    got = compressor.compress_documents(doubled, QUERIES[0])
    assert [document_key(d) for d in got] == [document_key(d) for d in compressor.compress_documents(fetched[:3], QUERIES[0])]
    for d in got:
        assert document_key(d) not in {e["id"] for e in d.metadata.get(DEDUP_COLLAPSED, [])}


def test_a_nan_scored_copy_is_read_last_and_folded_into_the_scored_one() -> None:
    """metadata["score"] NaN was read as no score, so the NaN copy kept the scored one out; the core
    reads a NaN-scored passage last, as LlamaIndex's postprocessor does."""
    from langchain_core.documents import Document

    from tests.adapter_corpus import paragraphs

    text = paragraphs()[0][1]
    out = DedupCompressor().compress_documents([Document(text, metadata={"source": "nan.txt", "score": float("nan")}),
                                                Document(text, metadata={"source": "good.txt", "score": 0.93})], "q")
    assert [(d.metadata["source"], d.metadata["score"]) for d in out] == [("good.txt", 0.93)]
    assert [e["source"] for e in out[0].metadata[DEDUP_COLLAPSED]] == ["nan.txt"]
