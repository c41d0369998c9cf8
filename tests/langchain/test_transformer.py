"""The LangChain adapter with LangChain's real parts: InMemoryVectorStore, the indexing API with
InMemoryRecordManager and SQLRecordManager on SQLite, BM25Retriever, ContextualCompressionRetriever."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

pytest.importorskip("langchain_core", reason='the LangChain adapter needs pip install "rag-dedup[langchain]"')

from tests.adapter_corpus import paragraphs
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.indexing import InMemoryRecordManager, index
from langchain_core.vectorstores import InMemoryVectorStore

from rag_dedup.index import DedupIndex
from rag_dedup.langchain import DedupDocumentTransformer
from rag_dedup.langchain.transformer import document_key
from rag_dedup.stamps import DEDUP_CLUSTER, DEDUP_DUPLICATE_OF


def corpus_documents() -> list[Document]:
    return [Document(page_content=t, metadata={"source": s, "key": k}) for k, t, s in paragraphs()]


def test_tag_mode_stamps_every_document_as_the_index_does_and_leaves_the_input_alone() -> None:
    docs = corpus_documents()
    before = [d.model_copy(deep=True) for d in docs]
    out = DedupDocumentTransformer().transform_documents(docs)
    assert docs == before, "the caller's documents were modified"
    reference = DedupIndex().add_many(
        [{"key": document_key(d), "text": d.page_content, "source": d.metadata["source"]} for d in docs]
    )
    assert [(d.metadata[DEDUP_CLUSTER], d.metadata[DEDUP_DUPLICATE_OF]) for d in out] == [
        (m.cluster_id, m.duplicate_of) for m in reference
    ]
    assert [d.page_content for d in out] == [d.page_content for d in docs]
    assert all(d.metadata["source"] == b.metadata["source"] for d, b in zip(out, before))


def test_drop_mode_keeps_one_copy_and_remembers_the_rest() -> None:
    docs = corpus_documents()
    dedup = DedupDocumentTransformer(mode="drop")
    out = dedup.transform_documents(docs)
    clusters = [d.metadata[DEDUP_CLUSTER] for d in out]
    assert len(clusters) == len(set(clusters)) < len(docs)
    assert len(dedup.index) == len(docs)
    dropped = next(d for d in docs if document_key(d) not in {document_key(o) for o in out})
    assert dedup.index.resolve(document_key(dropped)) in {document_key(o) for o in out} | set(clusters)


def test_document_ids_are_the_keys() -> None:
    (k, t, s), *_ = paragraphs()
    out = DedupDocumentTransformer(mode="drop").transform_documents(
        [Document(t, id="first", metadata={"source": s}), Document(t.upper(), id="second", metadata={"source": "b"})]
    )
    assert [(d.id, d.metadata[DEDUP_DUPLICATE_OF]) for d in out] == [("first", None)]


def test_empty_input_and_documents_without_text() -> None:
    dedup = DedupDocumentTransformer()
    assert dedup.transform_documents([]) == []
    out = dedup.transform_documents([Document(page_content="", metadata={"source": "x"})])
    assert [(d.page_content, d.metadata) for d in out] == [("", {"source": "x"})]
    assert len(dedup.index) == 0


def test_async_transform_matches_sync() -> None:
    docs = corpus_documents()[:200]
    sync = DedupDocumentTransformer().transform_documents(docs)
    result = asyncio.run(DedupDocumentTransformer().atransform_documents(docs))
    assert [d.metadata for d in result] == [d.metadata for d in sync]


def test_not_a_document_is_named() -> None:
    with pytest.raises(TypeError, match=r"documents\[1\] is a str"):
        DedupDocumentTransformer().transform_documents([Document("x"), "y"])  # type: ignore[list-item]


def _record_managers(tmp_path):  # type: ignore[no-untyped-def]
    yield InMemoryRecordManager(namespace="inmemory")
    sql = pytest.importorskip("langchain_classic.indexes", reason="SQLRecordManager ships with langchain-classic")
    manager = sql.SQLRecordManager("sqlite-test", db_url=f"sqlite:///{tmp_path / 'records.db'}")
    manager.create_schema()
    yield manager


@pytest.mark.parametrize("manager_kind", ["in-memory", "sqlite"])
def test_indexing_api_after_the_transformer_writes_one_copy_and_rerun_skips_everything(tmp_path, manager_kind) -> None:  # type: ignore[no-untyped-def]
    managers = list(_record_managers(tmp_path))
    manager = managers[0] if manager_kind == "in-memory" else managers[1]
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    dedup = DedupDocumentTransformer(mode="drop")
    docs = corpus_documents()
    # One batch: LangChain's incremental cleanup deletes and re-adds the documents of a source that
    # spans two of its batches (its own behaviour, with or without rag-dedup).
    kwargs = {"cleanup": "incremental", "source_id_key": "source", "batch_size": len(docs)}
    first = index(dedup.transform_documents(docs), manager, store, **kwargs)
    passed = first["num_added"]
    assert 0 < passed < len(docs)
    assert len(store.store) == passed
    again = index(dedup.transform_documents(docs), manager, store, **kwargs)
    assert again == {"num_added": 0, "num_updated": 0, "num_skipped": passed, "num_deleted": 0}


def test_missing_extra_names_the_pip_command() -> None:
    code = (
        "import sys; sys.modules['langchain_core'] = None\n"
        "try:\n    import rag_dedup.langchain\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 'pip install "rag-dedup[langchain]"' in out


# --- query time and chunking --------------------------------------------------------------------
from tests.adapter_corpus import QUERIES, distinct_ratio, max_pair_similarity  # noqa: E402
from tests.corpus import documents as corpus_files  # noqa: E402
from langchain_classic.retrievers import ContextualCompressionRetriever  # noqa: E402
from langchain_community.retrievers import BM25Retriever  # noqa: E402

from rag_dedup.langchain import DedupCompressor, DistinctRetriever, SentenceChunker  # noqa: E402
from rag_dedup.stamps import DEDUP_COLLAPSED  # noqa: E402


@pytest.fixture(scope="module")
def chunks() -> list[Document]:
    """The shipped corpus split by SentenceChunker and stamped by the transformer (tag mode)."""
    files = [Document(text, metadata={"source": path}) for path, text in corpus_files().items()]
    split = SentenceChunker(add_start_index=True).split_documents(files)
    return list(DedupDocumentTransformer().transform_documents(split))


@pytest.fixture(scope="module")
def bm25(chunks: list[Document]) -> BM25Retriever:
    return BM25Retriever.from_documents(chunks, k=30)


def test_splitter_offsets_are_exact_and_match_the_llama_index_chunker() -> None:
    from llama_index.core import Document as LlamaDocument

    from rag_dedup.llama_index.chunking import SentenceChunker as LlamaChunker

    path, text = next(iter(corpus_files().items()))
    split = SentenceChunker(add_start_index=True).split_documents([Document(text, metadata={"source": path})])
    assert all(text[d.metadata["start_index"] : d.metadata["start_index"] + len(d.page_content)] == d.page_content for d in split)
    assert all(d.metadata["source"] == path for d in split)
    nodes = LlamaChunker().get_nodes_from_documents([LlamaDocument(text=text)])
    assert [d.page_content for d in split] == [n.text for n in nodes]  # one engine, one cut plan


def test_compressor_in_contextual_compression_retriever_keeps_no_duplicates(bm25: BM25Retriever) -> None:
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


def test_distinct_retriever_returns_k_distinct_and_async_agrees(bm25: BM25Retriever) -> None:
    retriever = DistinctRetriever(retriever=bm25.model_copy(update={"k": 10}), top_k=10)
    ratios_plain, ratios = [], []
    for query in QUERIES:
        out = retriever.invoke(query)
        assert len(out) == 10
        ratios.append(distinct_ratio([d.page_content for d in out], 10))
        ratios_plain.append(distinct_ratio([d.page_content for d in bm25.invoke(query)], 10))
        assert [d.page_content for d in asyncio.run(retriever.ainvoke(query))] == [d.page_content for d in out]
    assert min(ratios) == 1.0
    assert sum(ratios_plain) < sum(ratios)
    assert bm25.k == 30, "the wrapped retriever was modified"


def test_distinct_retriever_refuses_what_it_cannot_size() -> None:
    from langchain_core.retrievers import BaseRetriever

    class Fixed(BaseRetriever):
        def _get_relevant_documents(self, query, *, run_manager):  # type: ignore[no-untyped-def]
            return []

    with pytest.raises(ValueError, match="neither search_kwargs nor a k field"):
        DistinctRetriever(retriever=Fixed())
    with pytest.raises(ValueError):
        DistinctRetriever(retriever=BM25Retriever.from_documents([Document("x")]), fetch_factor=float("inf"))


def test_chunk_dedup_store_pipeline_embeds_each_passage_once(chunks: list[Document]) -> None:
    files = [Document(text, metadata={"source": path}) for path, text in corpus_files().items()]
    split = SentenceChunker().split_documents(files)
    kept = DedupDocumentTransformer(mode="drop").transform_documents(split)
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    store.add_documents(list(kept))
    assert len(store.store) == len(kept) < len(split)
    assert len({d.metadata[DEDUP_CLUSTER] for d in kept}) == len(kept)
