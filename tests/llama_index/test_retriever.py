"""DistinctRetriever over a real BM25 retriever on the shipped corpus: k distinct passages, refilled."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest
from llama_index.core import Document, SummaryIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.schema import IndexNode, NodeWithScore, QueryBundle, TextNode
from llama_index.retrievers.bm25 import BM25Retriever

from rag_dedup.llama_index.chunking import SentenceChunker
from rag_dedup.llama_index.postprocessor import DedupPostprocessor
from rag_dedup.llama_index.retriever import DistinctRetriever
from rag_dedup.shingles import shingle_hashes
from rag_dedup.similarity import jaccard
from rag_dedup.llama_index.transform import DedupTransform
from tests.adapter_corpus import QUERIES

CORPUS = Path(__file__).parents[1] / "data" / "corpus"


def distinct_evidence_ratio(nodes: list[NodeWithScore], k: int = 10, threshold: float = 0.8) -> float:
    """Size of the greedy set of the first k passages with pairwise Jaccard < threshold, divided by k."""
    kept: list = []
    for n in nodes[:k]:
        s = shingle_hashes(n.node.get_content())
        if all(jaccard(s, t) < threshold for t in kept):
            kept.append(s)
    return len(kept) / k


@pytest.fixture(scope="module")
def documents() -> list[Document]:
    return [
        Document(text=p.read_text(encoding="utf-8", errors="replace"), id_=p.relative_to(CORPUS).as_posix())
        for p in sorted(CORPUS.rglob("*.txt"))
    ]


@pytest.fixture(scope="module")
def chunks(documents) -> list[TextNode]:
    return SentenceChunker().get_nodes_from_documents(documents)  # type: ignore[return-value]


def bm25(nodes, k: int = 10) -> BM25Retriever:
    return BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=k)


def test_distinct_retriever_top_10_is_distinct_evidence(chunks):
    baseline = bm25(chunks, 10)
    overfetch = bm25(chunks, 30)
    postprocessor = DedupPostprocessor(top_n=10)
    distinct = DistinctRetriever(bm25(chunks, 10), top_k=10)

    ratios = {"baseline": [], "postprocessor_3x": [], "distinct_retriever": []}
    for query in QUERIES:
        ratios["baseline"].append(distinct_evidence_ratio(baseline.retrieve(query)))
        ratios["postprocessor_3x"].append(
            distinct_evidence_ratio(postprocessor.postprocess_nodes(overfetch.retrieve(query)))
        )
        got = distinct.retrieve(query)
        assert len(got) == 10
        ratios["distinct_retriever"].append(distinct_evidence_ratio(got))
    mean = {name: sum(r) / len(r) for name, r in ratios.items()}

    assert mean["distinct_retriever"] >= 0.98, mean
    assert mean["baseline"] < 0.98, mean  # the corpus does put duplicates into the plain top 10
    assert mean["distinct_retriever"] >= mean["postprocessor_3x"] >= mean["baseline"], mean


def test_no_two_passages_are_near_duplicates_even_across_ingest_clusters(chunks):
    """Regression: trusting ingest clusters alone let two members of different clusters (a cluster is split
    around its representative, so a chain A~B~C ends in two clusters) through as distinct passages."""
    stamped = DedupTransform()([n.model_copy(deep=True) for n in chunks])
    retriever = DistinctRetriever(bm25(stamped, 10), top_k=10)
    for query in QUERIES:
        sets = [shingle_hashes(n.node.get_content()) for n in retriever.retrieve(query)]
        assert max(jaccard(a, b) for a, b in itertools.combinations(sets, 2)) < 0.8, query


def test_refills_when_three_times_over_fetch_is_not_enough(documents):
    """Regression: collapsing a fixed over-fetch returns fewer than top_k when copies crowd the top."""
    licences = [d for d in documents if d.id_.startswith("licenses/")]
    mirrors = [Document(text=d.text, id_=f"{d.id_}#mirror{m}") for d in licences for m in range(4)]
    nodes = SentenceChunker().get_nodes_from_documents(licences + mirrors)
    query = "THIS SOFTWARE IS PROVIDED AS IS WITHOUT WARRANTY; IN NO EVENT SHALL THE COPYRIGHT HOLDER BE LIABLE"

    collapsed_overfetch = DedupPostprocessor(top_n=10).postprocess_nodes(bm25(nodes, 30).retrieve(query))
    retriever = DistinctRetriever(bm25(nodes, 10), top_k=10)
    got = retriever.retrieve(query)

    assert len(collapsed_overfetch) < 10
    assert len(got) == 10 and distinct_evidence_ratio(got) == 1.0
    assert retriever.last_fetches[0] == 30 and len(retriever.last_fetches) > 1
    assert retriever.retriever.similarity_top_k == 10  # restored


def test_stops_when_the_corpus_runs_out(distinct_texts_small):
    nodes = [TextNode(text=t, id_=f"n{i}") for i, t in enumerate(distinct_texts_small)]
    retriever = DistinctRetriever(bm25(nodes, 3), top_k=10)
    got = retriever.retrieve("copyright license software")
    assert sorted(n.node.text for n in got) == sorted(set(distinct_texts_small))
    assert retriever.last_fetches == [len(nodes)]  # capped at the corpus size, fetched once


@pytest.fixture()
def distinct_texts_small(chunks) -> list[str]:
    a, b, c = chunks[0].text, chunks[40].text, chunks[80].text
    return [a, a, b, c, c]


def test_async_path_returns_what_the_sync_path_returns(chunks):
    retriever = DistinctRetriever(bm25(chunks, 10), top_k=10)
    for query in QUERIES[:3]:
        sync = [(n.node_id, n.score) for n in retriever.retrieve(query)]
        async_ = [(n.node_id, n.score) for n in asyncio.run(retriever.aretrieve(query))]
        assert async_ == sync


class FixedListRetriever(BaseRetriever):
    """A retriever without similarity_top_k: returns its nodes, best first (a real, minimal retriever)."""

    def __init__(self, nodes: list[TextNode]) -> None:
        self.nodes = nodes
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [NodeWithScore(node=n, score=float(len(self.nodes) - i)) for i, n in enumerate(self.nodes)]


def test_a_retriever_without_top_k_is_fetched_once_and_collapsed(chunks):
    nodes = [TextNode(text=chunks[i // 2].text, id_=f"n{i}") for i in range(8)]  # four passages, twice each
    retriever = DistinctRetriever(FixedListRetriever(nodes), top_k=3)
    got = retriever.retrieve("anything")
    assert [n.node_id for n in got] == ["n0", "n2", "n4"]
    assert len(retriever.last_fetches) == 1


class FailingRetriever(BM25Retriever):
    """Failure injection: a BM25 retriever whose retrieval raises."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        raise ConnectionError("backend went away")


def test_top_k_of_the_wrapped_retriever_is_restored_after_a_failure(chunks):
    """Regression: an exception during the over-fetch must not leave the wrapped retriever at the larger k."""
    inner = FailingRetriever(nodes=chunks[:50], similarity_top_k=7)
    retriever = DistinctRetriever(inner, top_k=5)
    with pytest.raises(ConnectionError):
        retriever.retrieve("copyright")
    assert inner.similarity_top_k == 7


def test_query_engine_over_the_distinct_retriever(chunks):
    engine = RetrieverQueryEngine.from_args(DistinctRetriever(bm25(chunks, 10), top_k=10), llm=MockLLM(max_tokens=32))
    response = engine.query(QUERIES[1])
    sources = response.source_nodes
    assert len(sources) == 10
    sets = [shingle_hashes(n.node.get_content()) for n in sources]
    assert max(jaccard(a, b) for a, b in itertools.combinations(sets, 2)) < 0.8


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        pytest.param({"top_k": 0}, ValueError, id="top-k-zero"),
        pytest.param({"top_k": 2.5}, TypeError, id="top-k-float"),
        pytest.param({"fetch_factor": 0.5}, ValueError, id="fetch-factor-below-one"),
        pytest.param({"fetch_factor": float("inf")}, ValueError, id="fetch-factor-infinite"),
        pytest.param({"fetch_factor": float("nan")}, ValueError, id="fetch-factor-nan"),
        pytest.param({"top_k": 10, "max_fetch": 5}, ValueError, id="max-fetch-below-top-k"),
        pytest.param(
            {"postprocessor": DedupPostprocessor(), "threshold": 0.9}, ValueError, id="postprocessor-and-threshold"
        ),
        pytest.param({"postprocessor": "dedup"}, TypeError, id="postprocessor-type"),
    ],
)
def test_bad_arguments_are_refused(chunks, kwargs, error):
    with pytest.raises(error, match="|".join(kwargs)):
        DistinctRetriever(bm25(chunks[:20], 5), **kwargs)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        pytest.param(0, ValueError, r"top_k \(0\) must be at least 1", id="zero"),
        pytest.param(2.5, TypeError, "top_k must be int", id="float"),
        pytest.param(5000, ValueError, r"top_k \(5000\) must be at most max_fetch \(1000\)", id="above-max-fetch"),
    ],
)
def test_a_top_k_set_later_is_checked_as_at_construction(chunks, value, error, message):
    """Regression: top_k = 0 then returned [] silently, and 2.5 failed later with a message naming top_n."""
    retriever = DistinctRetriever(bm25(chunks[:20], 5), top_k=3)
    with pytest.raises(error, match=message):
        retriever.top_k = value
    assert retriever.top_k == 3
    retriever.top_k = 4
    assert len(retriever.retrieve(QUERIES[0])) == 4


def test_wrapping_something_that_is_not_a_retriever_is_refused():
    with pytest.raises(TypeError, match="BaseRetriever"):
        DistinctRetriever(["not", "a", "retriever"], top_k=3)  # type: ignore[arg-type]


# --- issue 16 items 11-12 and issue 17 item 10, with LlamaIndex's own classes ---------------------


def test_concurrent_aretrieve_works_in_one_event_loop_after_another(chunks):
    """Regression (issue 16, item 11): the asyncio.Lock was bound to the first event loop, so a second
    asyncio.run doing concurrent aretrieve raised "... bound to a different event loop"."""
    retriever = DistinctRetriever(bm25(chunks, 10), top_k=5)

    async def many() -> list[list[str]]:
        results = await asyncio.gather(*(retriever.aretrieve(q) for q in QUERIES[:4]))
        return [[n.node_id for n in r] for r in results]

    expected = [[n.node_id for n in retriever.retrieve(q)] for q in QUERIES[:4]]
    assert asyncio.run(many()) == expected
    assert asyncio.run(many()) == expected


def test_inside_query_fusion_retriever_with_use_async_twice(chunks):
    """Regression (issue 16, item 11): inside QueryFusionRetriever(use_async=True) the bound lock
    surfaced as "Detected nested async" on the second query."""
    fusion = QueryFusionRetriever(
        [DistinctRetriever(bm25(chunks, 10), top_k=5), DistinctRetriever(bm25(chunks[::2], 10), top_k=5)],
        llm=MockLLM(max_tokens=8),
        num_queries=1,
        use_async=True,
        similarity_top_k=8,
    )
    for query in QUERIES[:2]:
        got = fusion.retrieve(query)
        assert 5 <= len(got) <= 8


def test_object_map_and_objects_are_accepted_like_every_base_retriever(chunks):
    """Regression (issue 16, item 12): object_map= / objects= were refused."""
    target = bm25(chunks[:40], 5)
    link = IndexNode(text="see the other retriever", index_id="other", obj=target)
    retriever = DistinctRetriever(bm25(chunks, 10), top_k=3, object_map={"other": target}, objects=[link])
    assert retriever.object_map["other"] is target
    assert len(retriever.retrieve(QUERIES[0])) == 3


def licence_mirrors(documents) -> list[TextNode]:
    """The licences and four mirrors of each (copies crowd every top)."""
    licences = [d for d in documents if d.id_.startswith("licenses/")]
    mirrors = [Document(text=d.text, id_=f"{d.id_}#mirror{m}") for d in licences for m in range(4)]
    return SentenceChunker().get_nodes_from_documents(licences + mirrors)  # type: ignore[return-value]


def test_over_a_fusion_retriever_the_children_are_fetched_deeper(documents):
    """Regression: a QueryFusionRetriever's similarity_top_k only caps the fused list (each child searches
    to its own depth), so raising it fetched nothing more, and the short page read as the corpus's end."""
    nodes = licence_mirrors(documents)
    query = "THIS SOFTWARE IS PROVIDED AS IS WITHOUT WARRANTY; IN NO EVENT SHALL THE COPYRIGHT HOLDER BE LIABLE"
    children = [bm25(nodes, 4), bm25(nodes[::-1], 4)]
    fusion = QueryFusionRetriever(children, llm=MockLLM(max_tokens=8), num_queries=1, use_async=False, similarity_top_k=4)
    retriever = DistinctRetriever(fusion, top_k=10)
    got = retriever.retrieve(query)
    assert len(got) == 10 and distinct_evidence_ratio(got) == 1.0
    assert len(retriever.last_fetches) > 1
    assert [c.similarity_top_k for c in children] == [4, 4] and fusion.similarity_top_k == 4  # restored


class _Linked(BaseRetriever):
    """What an IndexNode points at: the same passage under two ids."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(text=self.text, id_=f"copy{i}"), score=1.0 - i / 10) for i in range(2)]


@pytest.mark.parametrize("run", ["sync", "async"])
def test_what_index_nodes_bring_is_collapsed_and_counted(chunks, run):
    """Regression: BaseRetriever.retrieve expands IndexNodes after _retrieve, so the passages they brought
    were never collapsed: two copies of one passage came back, and more than top_k nodes."""
    linked = _Linked(chunks[0].text)
    link = IndexNode(text=chunks[200].text, index_id="linked", id_="link")
    retriever = DistinctRetriever(bm25([link, *chunks[1:40]], 10), top_k=3, objects=[IndexNode(text=link.text, index_id="linked", obj=linked)])
    query = " ".join(chunks[200].text.split()[:20])
    got = retriever.retrieve(query) if run == "sync" else asyncio.run(retriever.aretrieve(query))
    ids = [n.node_id for n in got]
    assert len(got) == 3 and "copy0" in ids and "copy1" not in ids and "link" not in ids
    assert distinct_evidence_ratio(got, 3) == 1.0


def test_an_empty_text_node_takes_no_top_k_place(chunks):
    """Regression (issue 17, item 10): empty nodes came back in place of distinct passages."""
    empties = [TextNode(text=" ", id_=f"empty{i}") for i in range(6)]
    index = SummaryIndex([*empties, *[n.model_copy() for n in chunks[:40]]])
    plain = index.as_retriever().retrieve(QUERIES[0])
    assert [n.node_id for n in plain[:6]] == [n.node_id for n in empties]  # they do come first
    got = DistinctRetriever(index.as_retriever(), top_k=4).retrieve(QUERIES[0])
    assert sum(1 for n in got if n.node.get_content().strip()) == 4


class _Counting(_Linked):
    """A linked retriever that counts how often it is entered."""

    def __init__(self, text: str) -> None:
        self.calls = 0
        super().__init__(text)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.calls += 1
        return super()._retrieve(query_bundle)


@pytest.mark.parametrize("run", ["sync", "async"])
def test_an_index_node_is_expanded_once_per_query_however_deep_the_fetches(documents, run):
    """Each deeper fetch brings the IndexNodes of the one before again: entering what they point at (a
    retriever, a query engine: an LLM call) again gives the same nodes, at the same cost."""
    licences = [d for d in documents if d.id_.startswith("licenses/")]
    mirrors = [Document(text=d.text, id_=f"{d.id_}#mirror{m}") for d in licences for m in range(4)]
    nodes = SentenceChunker().get_nodes_from_documents(licences + mirrors)
    query = "THIS SOFTWARE IS PROVIDED AS IS WITHOUT WARRANTY; IN NO EVENT SHALL THE COPYRIGHT HOLDER BE LIABLE"
    top = bm25(nodes, 1).retrieve(query)[0].node
    linked = _Counting("A passage found only through the link, about something else entirely: the weather in May.")
    link = IndexNode(text=top.get_content(), index_id="linked", id_="link")
    retriever = DistinctRetriever(bm25([link, *nodes], 10), top_k=10, objects=[IndexNode(text=link.text, index_id="linked", obj=linked)])
    got = retriever.retrieve(query) if run == "sync" else asyncio.run(retriever.aretrieve(query))
    assert len(retriever.last_fetches) > 1 and linked.calls == 1
    ids = [n.node_id for n in got]
    assert len(got) == 10 and "copy0" in ids and "copy1" not in ids and "link" not in ids
    assert distinct_evidence_ratio(got) == 1.0
    # What LlamaIndex's own expansion of the last fetch gives, collapsed: the same nodes and scores.
    with retriever._top_k_set(retriever.last_fetches[-1]):
        last = retriever.retriever.retrieve(query)
    expected, _ = retriever._collapse(retriever._handle_recursive_retrieval(QueryBundle(query), last))
    assert [(n.node_id, n.score) for n in got] == [(n.node_id, n.score) for n in expected]


def test_a_linked_node_takes_the_score_of_its_index_node_in_each_fetch(chunks):
    """A node behind an IndexNode comes back with the IndexNode's score, as BaseRetriever gives it."""
    target = TextNode(text=chunks[0].text, id_="target")
    link = IndexNode(text=chunks[200].text, index_id="t", id_="link")
    retriever = DistinctRetriever(bm25([link, *chunks[1:40]], 10), top_k=3, objects=[IndexNode(text=link.text, index_id="t", obj=target)])
    query = " ".join(chunks[200].text.split()[:20])
    got = retriever.retrieve(query)
    score = {n.node_id: n.score for n in bm25([link, *chunks[1:40]], 10).retrieve(query)}["link"]
    assert [(n.node_id, n.score) for n in got if n.node_id == "target"] == [("target", score)]
