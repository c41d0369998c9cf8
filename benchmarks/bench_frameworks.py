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
collapse is one core (``rag_dedup.collapse``), so its decisions on the same passages are the same. The
"shared top 30" rows show it: LlamaIndex BM25's top 30 of each query (texts, ids, scores, ``dedup_cluster``
stamps, sources), converted to each framework's document type (a LangChain ``Document`` with the score in
``metadata["score"]``, a Haystack ``Document`` with ``score``), go through each framework's collapser
(top 10): the kept ids and the folded ids, reasons and similarities must be identical ("same as
LlamaIndex"), and so the ratios; each one's latency on those passages beside the others'.

The collapse's latency is the call as a user makes it (``postprocess_nodes``, ``compress_documents``,
the component's ``run``), and beside it, in the same run on the same passages, the same call on a
pass-through of the same base class (a ``BaseNodePostprocessor``, a ``BaseDocumentCompressor``, a
``@component`` that return their input: the framework's own cost, e.g. LlamaIndex's instrumentation span);
"added" is the difference, the latency rag-dedup adds (goal: <= 100 us for 30 stamped passages). The
compiled kernels are compiled or loaded from their cache and warmed up by an untimed call before timing.

With ``--baseline DIR`` (a checkout of the commit to compare with), that checkout's collapse object of
each framework is timed on the same passages, alternately with this checkout's, and the decisions (kept
ids, folded entries) compared per query ("same").

Run: python benchmarks/bench_frameworks.py [--repeat N] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import warnings
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

from rag_dedup import compiled  # noqa: E402
from rag_dedup.similarity import jaccard  # noqa: E402

from baseline import baseline_label, import_baseline  # noqa: E402
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


def _base(baseline: str | None, module: str, make: Callable[[ModuleType], Any]) -> Any:
    """The baseline checkout's collapse object (see benchmarks/baseline.py), or None without one."""
    return None if baseline is None else make(import_baseline(baseline, module)[module])


def _empty_rows() -> dict[str, list[float]]:
    return {k: [] for k in ("plain", "collapse", "refill", "bm25 us", "collapse us", "pass us", "base us", "same")}


def passthroughs() -> dict[str, Any]:
    """A pass-through of each framework's base class, called as the collapse is: the framework's own cost."""
    from haystack import Document as HaystackDocument
    from haystack import component
    from langchain_core.documents import BaseDocumentCompressor
    from llama_index.core.postprocessor.types import BaseNodePostprocessor

    class PassThroughPostprocessor(BaseNodePostprocessor):
        @classmethod
        def class_name(cls) -> str:
            return "PassThroughPostprocessor"

        def _postprocess_nodes(self, nodes: list[Any], query_bundle: Any = None) -> list[Any]:
            return nodes

    class PassThroughCompressor(BaseDocumentCompressor):
        def compress_documents(self, documents: Any, query: str, callbacks: Any = None) -> Any:
            return documents

    @component
    class PassThroughComponent:
        @component.output_types(documents=list[HaystackDocument])
        def run(self, documents: list[HaystackDocument], top_k: int | None = None) -> dict[str, list[HaystackDocument]]:
            return {"documents": documents}

    return {
        "LlamaIndex": PassThroughPostprocessor().postprocess_nodes,
        "LangChain": lambda docs, query="": PassThroughCompressor().compress_documents(docs, query),
        "Haystack": PassThroughComponent().run,
    }


def _against(
    rows: dict[str, list[float]], repeat: int, old: Callable[[], Any], new: Callable[[], Any], decided: Callable[[Any], Any]
) -> None:
    """Time the baseline's collapse of this query's passages (before this checkout's, which the caller
    times next: alternately) and record whether both decided alike (kept ids and folded entries)."""
    rows["base us"].append(median_us(old, repeat))
    rows["same"].append(float(decided(old()) == decided(new())))


def _summary(rows: dict[str, list[float]]) -> dict[str, float]:
    """Means of the ratios, medians of the times, the count of queries decided as the baseline did."""
    out = {k: statistics.median(v) if "us" in k else statistics.mean(v) for k, v in rows.items() if v and k != "same"}
    if rows["same"]:
        out["same"] = sum(rows["same"])
    return out


def llama_index_rows(corpus: list[tuple[str, str]], repeat: int, baseline: str | None) -> dict[str, float]:
    from llama_index.core import Document
    from llama_index.retrievers.bm25 import BM25Retriever

    from rag_dedup.llama_index import DedupPostprocessor, DedupTransform, DistinctRetriever, SentenceChunker

    logging.getLogger("llama_index.retrievers.bm25").setLevel(logging.ERROR)
    nodes = SentenceChunker().get_nodes_from_documents([Document(text=t, id_=p) for p, t in corpus])
    stamped = DedupTransform()(nodes)
    top30 = BM25Retriever.from_defaults(nodes=stamped, similarity_top_k=30)
    top10 = BM25Retriever.from_defaults(nodes=stamped, similarity_top_k=10)
    collapse = DedupPostprocessor(top_n=10)
    old = _base(baseline, "rag_dedup.llama_index.postprocessor", lambda m: m.DedupPostprocessor(top_n=10))
    distinct = DistinctRetriever(BM25Retriever.from_defaults(nodes=stamped, similarity_top_k=10), top_k=10)
    rows = _empty_rows()
    shared: list[list[Any]] = []
    for query in QUERIES:
        hits = top30.retrieve(query)
        shared.append(hits)
        if old is not None:
            _against(rows, repeat, partial(old.postprocess_nodes, hits), partial(collapse.postprocess_nodes, hits),
                     lambda out: [(n.node_id, n.node.metadata.get("dedup_collapsed")) for n in out])
        rows["plain"].append(ratio([h.node.get_content() for h in top10.retrieve(query)]))
        rows["collapse"].append(ratio([h.node.get_content() for h in collapse.postprocess_nodes(hits)]))
        rows["refill"].append(ratio([h.node.get_content() for h in distinct.retrieve(query)]))
        rows["bm25 us"].append(median_us(partial(top30.retrieve, query), max(5, repeat // 20)))
        rows["collapse us"].append(median_us(partial(collapse.postprocess_nodes, hits), repeat))
        rows["pass us"].append(median_us(partial(passthroughs()["LlamaIndex"], hits), repeat))
    return _summary(rows) | {"chunks": len(nodes), "shared": shared}  # type: ignore[dict-item]


def langchain_rows(corpus: list[tuple[str, str]], repeat: int, baseline: str | None) -> dict[str, float]:
    with warnings.catch_warnings():  # langchain-community warns on import that it is being sunset (its warning, not ours)
        warnings.filterwarnings("ignore", "`langchain-community` is being sunset", DeprecationWarning)
        from langchain_community.retrievers import BM25Retriever
    from langchain_core.documents import Document

    from rag_dedup.langchain import DedupCompressor, DedupDocumentTransformer, DistinctRetriever, SentenceChunker

    split = SentenceChunker().split_documents([Document(t, metadata={"source": p}) for p, t in corpus])
    stamped = list(DedupDocumentTransformer().transform_documents(split))
    top30 = BM25Retriever.from_documents(stamped, k=30)
    top10 = top30.model_copy(update={"k": 10})
    collapse = DedupCompressor(top_n=10)
    old = _base(baseline, "rag_dedup.langchain.compressor", lambda m: m.DedupCompressor(top_n=10))
    distinct = DistinctRetriever(retriever=top10, top_k=10)
    rows = _empty_rows()
    for query in QUERIES:
        hits = top30.invoke(query)
        if old is not None:
            _against(rows, repeat, partial(old.compress_documents, hits, query),
                     partial(collapse.compress_documents, hits, query),
                     lambda out: [(d.id, d.metadata.get("dedup_collapsed")) for d in out])
        rows["plain"].append(ratio([d.page_content for d in top10.invoke(query)]))
        rows["collapse"].append(ratio([d.page_content for d in collapse.compress_documents(hits, query)]))
        rows["refill"].append(ratio([d.page_content for d in distinct.invoke(query)]))
        rows["bm25 us"].append(median_us(partial(top30.invoke, query), max(5, repeat // 20)))
        rows["collapse us"].append(median_us(partial(collapse.compress_documents, hits, query), repeat))
        rows["pass us"].append(median_us(partial(passthroughs()["LangChain"], hits, query), repeat))
    return _summary(rows) | {"chunks": len(split)}


def haystack_rows(corpus: list[tuple[str, str]], repeat: int, baseline: str | None) -> dict[str, float]:
    from haystack import Document
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from rag_dedup.haystack import DocumentDeduplicator, DuplicateCollapser, SentenceChunker

    chunks = SentenceChunker().run([Document(content=t, meta={"file_path": p}) for p, t in corpus])["documents"]
    store = InMemoryDocumentStore()
    store.write_documents(DocumentDeduplicator().run(chunks)["documents"])
    retriever = InMemoryBM25Retriever(document_store=store)
    collapse = DuplicateCollapser(top_k=10)
    old = _base(baseline, "rag_dedup.haystack.components", lambda m: m.DuplicateCollapser(top_k=10))
    rows = _empty_rows()
    for query in QUERIES:
        hits = retriever.run(query=query, top_k=30)["documents"]
        if old is not None:
            _against(rows, repeat, partial(old.run, hits), partial(collapse.run, hits),
                     lambda out: [(d.id, d.meta.get("dedup_collapsed")) for d in out["documents"]])
        deep = retriever.run(query=query, top_k=100)["documents"]
        rows["plain"].append(ratio([d.content or "" for d in retriever.run(query=query, top_k=10)["documents"]]))
        rows["collapse"].append(ratio([d.content or "" for d in collapse.run(hits)["documents"]]))
        rows["refill"].append(ratio([d.content or "" for d in collapse.run(deep)["documents"]]))
        rows["bm25 us"].append(median_us(partial(retriever.run, query=query, top_k=30), max(5, repeat // 20)))
        rows["collapse us"].append(median_us(partial(collapse.run, hits), repeat))
        rows["pass us"].append(median_us(partial(passthroughs()["Haystack"], hits), repeat))
    return _summary(rows) | {"chunks": len(chunks)}


def _decision(kept: list[tuple[str, list[dict[str, Any]] | None]]) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """A collapse's decision in framework-free terms: each kept id with the (id, reason, similarity) of
    every passage folded into it (LlamaIndex names the id ``node_id``, the others ``id``)."""
    return [
        (key, [(e.get("node_id", e.get("id")), e["reason"], e["similarity"]) for e in entries or []])
        for key, entries in kept
    ]


def shared_rows(shared: list[list[Any]], repeat: int) -> dict[str, dict[str, float]]:
    """LlamaIndex BM25's top 30s through each framework's collapser (see the module docstring)."""
    from haystack import Document as HaystackDocument
    from langchain_core.documents import Document as LangChainDocument

    from rag_dedup.haystack import DuplicateCollapser
    from rag_dedup.langchain import DedupCompressor
    from rag_dedup.llama_index import DedupPostprocessor

    def fields(nws: Any) -> tuple[str, str, float, str | None, str | None]:
        node = nws.node
        return node.node_id, node.get_content(), nws.score, node.metadata.get("dedup_cluster"), node.ref_doc_id

    as_langchain = [
        [LangChainDocument(t, id=k, metadata={"source": src, "score": s, "dedup_cluster": c}) for k, t, s, c, src in map(fields, hits)]
        for hits in shared
    ]
    as_haystack = [
        [HaystackDocument(id=k, content=t, score=s, meta={"file_path": src, "dedup_cluster": c}) for k, t, s, c, src in map(fields, hits)]
        for hits in shared
    ]
    llama, lang, hay = DedupPostprocessor(top_n=10), DedupCompressor(top_n=10), DuplicateCollapser(top_k=10)
    runs = {
        "LlamaIndex": (shared, llama.postprocess_nodes, lambda out: [(n.node_id, n.node.metadata.get("dedup_collapsed")) for n in out], lambda out: [n.node.get_content() for n in out]),
        "LangChain": (as_langchain, lambda docs: lang.compress_documents(docs, ""), lambda out: [(d.id, d.metadata.get("dedup_collapsed")) for d in out], lambda out: [d.page_content for d in out]),
        "Haystack": (as_haystack, lambda docs: hay.run(docs)["documents"], lambda out: [(d.id, d.meta.get("dedup_collapsed")) for d in out], lambda out: [d.content or "" for d in out]),
    }
    reference = [_decision(runs["LlamaIndex"][2](llama.postprocess_nodes(hits))) for hits in shared]
    passing = passthroughs()
    out = {}
    for name, (inputs, collapse, decided, texts) in runs.items():
        results = [collapse(docs) for docs in inputs]
        out[name] = {
            "ratio": statistics.mean(ratio(texts(r)) for r in results),
            "same": sum(_decision(decided(r)) == ref for r, ref in zip(results, reference)),
            "collapse us": statistics.median(median_us(partial(collapse, docs), repeat) for docs in inputs),
            "pass us": statistics.median(median_us(partial(passing[name], docs), repeat) for docs in inputs),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=200, help="timed collapse calls per query (default 200)")
    parser.add_argument(
        "--baseline", metavar="DIR", help="a checkout of the commit to compare with (e.g. a git worktree of main)"
    )
    args = parser.parse_args()
    corpus = files()
    print(f"corpus: {len(corpus)} files from tests/data/corpus and examples/data; {len(QUERIES)} queries")
    print(f"kernels: {'compiled (numba)' if compiled.COMPILED else 'numpy reference only'}, warmed up by an untimed call before each timing")
    if args.baseline:
        print(f"baseline: {baseline_label(args.baseline)}, its collapse timed alternately with this checkout's")
    print(
        f"{'framework':12s}{'chunks':>8s}{'plain top10':>13s}{'collapse 30->10':>17s}{'refill':>8s}"
        f"{'BM25 top30':>13s}{'collapse 30':>13s}{'pass-through':>14s}{'added':>11s}{'collapse/BM25':>15s}"
        + (f"{'baseline':>13s}{'this/base':>11s}{'same':>7s}" if args.baseline else "")
    )
    results = {}
    for name, rows in (("LlamaIndex", llama_index_rows), ("LangChain", langchain_rows), ("Haystack", haystack_rows)):
        r = rows(corpus, args.repeat, args.baseline)
        results[name] = r
        line = (
            f"{name:12s}{r['chunks']:>8.0f}{r['plain']:>13.3f}{r['collapse']:>17.3f}{r['refill']:>8.3f}"
            f"{r['bm25 us']:>10.0f} us{r['collapse us']:>10.1f} us{r['pass us']:>11.1f} us"
            f"{r['collapse us'] - r['pass us']:>8.1f} us{r['collapse us'] / r['bm25 us']:>14.3f}x"
        )
        if "base us" in r:
            line += f"{r['base us']:>10.1f} us{r['collapse us'] / r['base us']:>10.2f}x{r['same']:>4.0f}/{len(QUERIES)}"
        print(line)
    print(f"\nshared top 30 (LlamaIndex BM25's, converted to each framework's documents), collapsed to 10:")
    print(f"{'framework':12s}{'collapse 30->10':>17s}{'same as LlamaIndex':>20s}{'collapse 30':>13s}{'pass-through':>14s}{'added':>11s}")
    shared = shared_rows(results["LlamaIndex"]["shared"], args.repeat)  # type: ignore[arg-type]
    for name, r in shared.items():
        print(f"{name:12s}{r['ratio']:>17.3f}{r['same']:>16.0f}/{len(QUERIES):<3d}{r['collapse us']:>10.1f} us"
              f"{r['pass us']:>11.1f} us{r['collapse us'] - r['pass us']:>8.1f} us")
    worst = min(r["refill"] for r in results.values())
    every = [*results.values(), *shared.values()]
    slowest = max(r["collapse us"] for r in every)
    added = max(r["collapse us"] - r["pass us"] for r in every)
    print(f"refill ratio, worst framework: {worst:.3f} (goal >= 0.98: {'met' if worst >= 0.98 else 'NOT met'})")
    print(f"collapse of 30 stamped passages, slowest framework: {slowest:.1f} us in all, {added:.1f} us added to the "
          f"framework's own cost (goal <= 100 us: added {'met' if added <= 100 else 'NOT met'}, in all {'met' if slowest <= 100 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
