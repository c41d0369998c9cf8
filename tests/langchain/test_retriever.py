"""``DistinctRetriever`` around a BM25Retriever of the shipped corpus: k distinct passages, sync and async."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langchain_core", reason='the LangChain adapter needs pip install "rag-dedup[langchain]"')

from tests.adapter_corpus import QUERIES, distinct_ratio
from langchain_community.retrievers import BM25Retriever
from langchain_core.documents import Document

from rag_dedup.langchain import DistinctRetriever


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


def test_over_an_mmr_search_the_candidates_are_fetched_deeper_too() -> None:
    """Regression: an MMR search returns at most fetch_k (20 by default) documents, so a deeper fetch came
    back short, read as the corpus's end, and fewer than top_k distinct documents were returned."""
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    from tests.adapter_corpus import paragraphs

    texts = [t for _, t, _ in paragraphs()[:12]]
    assert distinct_ratio(texts, 12) == 1.0
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    store.add_documents([Document(t, metadata={"source": f"mirror{m}"}) for m in range(5) for t in texts])
    mmr = store.as_retriever(search_type="mmr", search_kwargs={"k": 4})
    out = DistinctRetriever(retriever=mmr, top_k=12).invoke("copyright licence")
    assert sorted(d.page_content for d in out) == sorted(texts)
    assert mmr.search_kwargs == {"k": 4}, "the wrapped retriever was modified"


def test_a_max_fetch_below_top_k_is_refused(bm25: BM25Retriever) -> None:
    """Regression: DistinctRetriever(top_k=10, max_fetch=5) was accepted, and could never return 10."""
    with pytest.raises(ValueError, match=r"max_fetch \(5\) must be at least top_k \(10\)"):
        DistinctRetriever(retriever=bm25, top_k=10, max_fetch=5)


def test_blank_documents_take_no_place_of_top_k() -> None:
    """Blank documents pass through but were counted as top_k distinct ones, so the refill stopped and
    four blanks were returned in place of four passages (LlamaIndex's DistinctRetriever skips them)."""
    from tests.adapter_corpus import paragraphs

    texts = [text for _, text, _ in paragraphs()[:10]]
    docs = [Document("", metadata={"i": i}) for i in range(3)] + [Document("  \n")] + [Document(t) for t in texts]
    bm25 = BM25Retriever.from_documents(docs, k=4, preprocess_func=lambda _: ["same"])  # the list in its order
    out = DistinctRetriever(retriever=bm25, top_k=4, fetch_factor=1).invoke("same")
    assert sum(1 for d in out if d.page_content.strip()) == 4, [d.page_content[:20] for d in out]


def test_settings_assigned_after_construction_are_checked_as_at_construction(bm25: BM25Retriever) -> None:
    """`retriever.top_k = 0` was accepted and failed at the next query naming `top_n`; top_k above
    max_fetch and a negative fetch_factor were accepted."""
    retriever = DistinctRetriever(retriever=bm25, top_k=2)
    for name, value, message in (("top_k", 0, r"top_k \(0\) must be at least 1"),
                                 ("top_k", 5000, r"max_fetch \(1000\) must be at least top_k \(5000\)"),
                                 ("fetch_factor", -7, "fetch_factor")):
        with pytest.raises(ValueError, match=message):
            setattr(retriever, name, value)
    assert (retriever.top_k, retriever.fetch_factor) == (2, 3.0)
    for settings in ({"top_k": 5000}, {"top_k": 5, "max_fetch": 3}):  # the default max_fetch is checked too
        with pytest.raises(ValueError, match=r"max_fetch \(\d+\) must be at least top_k"):
            DistinctRetriever(retriever=bm25, **settings)
