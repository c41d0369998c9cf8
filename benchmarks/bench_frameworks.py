"""One engine, three frameworks: distinct evidence in the top 10, and what the collapse costs, side by side.

Corpus: the shipped real texts (tests/data/corpus: Debian copyright files and licence texts;
examples/data: more of the same), cut by the same chunking core (256 tokens, 64 overlap) through each
framework's own chunker (LlamaIndex ``SentenceChunker`` NodeParser, LangChain ``SentenceChunker``
TextSplitter, Haystack ``SentenceChunker`` component) and stamped by each framework's ingest adapter.
Queries: licence boilerplate that the corpus restates (the set of ``bench_query.py``).

For each framework, with its own BM25 retriever (llama-index-retrievers-bm25; langchain-community's
``BM25Retriever`` over rank-bm25; Haystack's ``InMemoryBM25Retriever``):

* the distinct-evidence ratio of the top 10 (greedy set of passages with pairwise Jaccard < 0.8,
  divided by 10) for the plain top 10, for rag-dedup's collapse of the top 30 to 10, and with refill
  (``DistinctRetriever`` in LlamaIndex and LangChain; in Haystack, which has no retriever wrapper, the
  collapser over a top 100);
* the collapse's own latency on the 30 stamped passages of each query (median of repeated calls),
  beside the BM25 retrieval it follows.

The three BM25s rank differently (tokenisation, BM25 variant), so the plain ratios differ; the
collapse is one core (``rag_dedup.collapse``), so its decisions on the same passages are the same.

Run: python benchmarks/bench_frameworks.py [--repeat N]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
from functools import partial

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

from rag_dedup.similarity import jaccard  # noqa: E402

from bench_query import CORPORA, QUERIES, ROOT, median_us  # noqa: E402  (the same corpus and queries)

THRESHOLD = 0.8


def files() -> list[tuple[str, str]]:
    out = []
    for corpus in CORPORA:
        for path in sorted(p for p in corpus.rglob("*") if p.is_file() and p.name != "README.md"):
            out.append((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8", errors="replace")))
    return out


def ratio(texts: list[str], k: int = 10) -> float:
    kept: list[str] = []
    for text in texts[:k]:
        if all(jaccard(text, other) < THRESHOLD for other in kept):
            kept.append(text)
    return len(kept) / k


def llama_index_rows(corpus: list[tuple[str, str]], repeat: int) -> dict[str, float]:
    from llama_index.core import Document
    from llama_index.retrievers.bm25 import BM25Retriever

    from rag_dedup.llama_index import DedupPostprocessor, DedupTransform, DistinctRetriever, SentenceChunker

    logging.getLogger("llama_index.retrievers.bm25").setLevel(logging.ERROR)
    nodes = SentenceChunker().get_nodes_from_documents([Document(text=t, id_=p) for p, t in corpus])
    stamped = DedupTransform()(nodes)
    top30 = BM25Retriever.from_defaults(nodes=stamped, similarity_top_k=30)
    top10 = BM25Retriever.from_defaults(nodes=stamped, similarity_top_k=10)
    collapse = DedupPostprocessor(top_n=10)
    distinct = DistinctRetriever(BM25Retriever.from_defaults(nodes=stamped, similarity_top_k=10), top_k=10)
    rows: dict[str, list[float]] = {k: [] for k in ("plain", "collapse", "refill", "bm25 us", "collapse us")}
    for query in QUERIES:
        hits = top30.retrieve(query)
        rows["plain"].append(ratio([h.node.get_content() for h in top10.retrieve(query)]))
        rows["collapse"].append(ratio([h.node.get_content() for h in collapse.postprocess_nodes(hits)]))
        rows["refill"].append(ratio([h.node.get_content() for h in distinct.retrieve(query)]))
        rows["bm25 us"].append(median_us(partial(top30.retrieve, query), max(5, repeat // 20)))
        rows["collapse us"].append(median_us(partial(collapse.postprocess_nodes, hits), repeat))
    return {k: statistics.mean(v) if "us" not in k else statistics.median(v) for k, v in rows.items()} | {"chunks": len(nodes)}


def langchain_rows(corpus: list[tuple[str, str]], repeat: int) -> dict[str, float]:
    from langchain_community.retrievers import BM25Retriever
    from langchain_core.documents import Document

    from rag_dedup.langchain import DedupCompressor, DedupDocumentTransformer, DistinctRetriever, SentenceChunker

    split = SentenceChunker().split_documents([Document(t, metadata={"source": p}) for p, t in corpus])
    stamped = list(DedupDocumentTransformer().transform_documents(split))
    top30 = BM25Retriever.from_documents(stamped, k=30)
    top10 = top30.model_copy(update={"k": 10})
    collapse = DedupCompressor(top_n=10)
    distinct = DistinctRetriever(retriever=top10, top_k=10)
    rows: dict[str, list[float]] = {k: [] for k in ("plain", "collapse", "refill", "bm25 us", "collapse us")}
    for query in QUERIES:
        hits = top30.invoke(query)
        rows["plain"].append(ratio([d.page_content for d in top10.invoke(query)]))
        rows["collapse"].append(ratio([d.page_content for d in collapse.compress_documents(hits, query)]))
        rows["refill"].append(ratio([d.page_content for d in distinct.invoke(query)]))
        rows["bm25 us"].append(median_us(partial(top30.invoke, query), max(5, repeat // 20)))
        rows["collapse us"].append(median_us(partial(collapse.compress_documents, hits, query), repeat))
    return {k: statistics.mean(v) if "us" not in k else statistics.median(v) for k, v in rows.items()} | {"chunks": len(split)}


def haystack_rows(corpus: list[tuple[str, str]], repeat: int) -> dict[str, float]:
    from haystack import Document
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from rag_dedup.haystack import DocumentDeduplicator, DuplicateCollapser, SentenceChunker

    chunks = SentenceChunker().run([Document(content=t, meta={"file_path": p}) for p, t in corpus])["documents"]
    store = InMemoryDocumentStore()
    store.write_documents(DocumentDeduplicator().run(chunks)["documents"])
    retriever = InMemoryBM25Retriever(document_store=store)
    collapse = DuplicateCollapser(top_k=10)
    rows: dict[str, list[float]] = {k: [] for k in ("plain", "collapse", "refill", "bm25 us", "collapse us")}
    for query in QUERIES:
        hits = retriever.run(query=query, top_k=30)["documents"]
        deep = retriever.run(query=query, top_k=100)["documents"]
        rows["plain"].append(ratio([d.content or "" for d in retriever.run(query=query, top_k=10)["documents"]]))
        rows["collapse"].append(ratio([d.content or "" for d in collapse.run(hits)["documents"]]))
        rows["refill"].append(ratio([d.content or "" for d in collapse.run(deep)["documents"]]))
        rows["bm25 us"].append(median_us(partial(retriever.run, query=query, top_k=30), max(5, repeat // 20)))
        rows["collapse us"].append(median_us(partial(collapse.run, hits), repeat))
    return {k: statistics.mean(v) if "us" not in k else statistics.median(v) for k, v in rows.items()} | {"chunks": len(chunks)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=200, help="timed collapse calls per query (default 200)")
    args = parser.parse_args()
    corpus = files()
    print(f"corpus: {len(corpus)} files from tests/data/corpus and examples/data; {len(QUERIES)} queries")
    print(
        f"{'framework':12s}{'chunks':>8s}{'plain top10':>13s}{'collapse 30->10':>17s}{'refill':>8s}"
        f"{'BM25 top30':>13s}{'collapse 30':>13s}{'collapse/BM25':>15s}"
    )
    results = {}
    for name, rows in (("LlamaIndex", llama_index_rows), ("LangChain", langchain_rows), ("Haystack", haystack_rows)):
        r = rows(corpus, args.repeat)
        results[name] = r
        print(
            f"{name:12s}{r['chunks']:>8.0f}{r['plain']:>13.3f}{r['collapse']:>17.3f}{r['refill']:>8.3f}"
            f"{r['bm25 us']:>10.0f} us{r['collapse us']:>10.1f} us{r['collapse us'] / r['bm25 us']:>14.3f}x"
        )
    worst = min(r["refill"] for r in results.values())
    slowest = max(r["collapse us"] for r in results.values())
    print(f"refill ratio, worst framework: {worst:.3f} (goal >= 0.98: {'met' if worst >= 0.98 else 'NOT met'})")
    print(f"collapse of 30 stamped passages, slowest framework: {slowest:.1f} us (goal <= 100 us: {'met' if slowest <= 100 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
