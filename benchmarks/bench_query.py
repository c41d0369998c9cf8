"""Query-time cost of DedupPostprocessor next to the retrieval it follows, and what it buys.

Corpus: the shipped real texts (tests/data/corpus: Debian copyright files and licence texts;
examples/data: more of the same), chunked by SentenceChunker (256 tokens, 64 overlap), ~2k nodes,
ingested once through DedupTransform (stamped) and once without (unstamped). For each query of a set of
licence-boilerplate queries, BM25 (llama-index-retrievers-bm25) returns the top 30; on those same 30
nodes we time:

* the BM25 retrieval itself (the reference: what a query costs anyway);
* DedupPostprocessor on stamped nodes, by default (every decision checked on the texts; goal: under 100
  microseconds; warm: the chunks' shingles remembered from earlier queries; cold: never seen), with the
  index asked for current clusters, and with ``trust_clusters=True`` (stamps taken as proof: the
  pre-issue-11 default, the baseline of the check's cost);
* DedupPostprocessor on unstamped nodes (text compared on the fly: exact Jaccard of 5-gram shingles),
  cold (its shingle cache cleared before every call, the clear timed with it: a query whose chunks it
  has never seen) and warm (the same chunks seen before, as popular chunks are in a live service); the
  cold call's split: without the span, the core's ``decide_columns`` after the clear, and the clear alone;
* a hand-rolled greedy collapse with rensa MinHash (RMinHash, 128 permutations, keep a node unless its
  estimated Jaccard with a kept one is >= 0.8), fed either word tokens (rensa's README usage) or the
  same word 5-grams the postprocessor compares (same work).

Then what the collapse keeps and folds over each real BM25 top 30 (goal: zero kept pairs with
J >= 0.8, zero passages folded into a keeper they share J < 0.5 with), by default and trusted; and the
distinct-evidence ratio of the top 10 (greedy set of passages with pairwise Jaccard < 0.8,
divided by 10) for plain BM25, DedupPostprocessor over a 3x over-fetch, and DistinctRetriever.

With ``--baseline DIR`` (a checkout of the commit to compare with, e.g. ``git worktree add DIR main``),
its DedupPostprocessor is timed on the same nodes, alternately with this checkout's, and its
decisions compared with this checkout's. The public ``postprocess_nodes`` runs inside LlamaIndex's
instrumentation span (``DispatcherSpanMixin`` wraps ``_postprocess_nodes``: ``inspect.signature``,
a uuid4, context copies, the handlers), so the same call is timed without it (the wrapped function,
``__wrapped__``), and, within it, the core's ``Collapser.collapse_columns`` on the same columns, its
column form ``Collapser.decide_columns`` (what the adapter reads: no ``Kept``/``Fold`` tuples; where the
checkout has it) and the shingle matrix it computes: the breakdown of the checked path.

The goal figure is the call as a user makes it (``postprocess_nodes``, span included); beside it, in the
same run, the same call on a pass-through postprocessor of the same base class (``BaseNodePostprocessor``
whose ``_postprocess_nodes`` returns its input: LlamaIndex's own cost, the span and the dispatch), and
the latency rag-dedup adds (the difference). The compiled kernels (``rag_dedup.compiled``, numba) are
compiled or loaded from their cache and warmed up by one untimed call before any timing (every timed
function is called once first); the "numpy reference" rows time the same calls with
``compiled.COMPILED = False``.

Run: python benchmarks/bench_query.py [--repeat N] [--baseline DIR]   (needs rensa: pip install rensa)
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from llama_index.core import Document
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.retrievers.bm25 import BM25Retriever

from baseline import baseline_label, import_baseline
from rag_dedup import compiled
from rag_dedup.llama_index.chunking import SentenceChunker
from rag_dedup.llama_index.postprocessor import DedupPostprocessor
from rag_dedup.llama_index.retriever import DistinctRetriever
from rag_dedup.shingles import shingle_hashes
from rag_dedup.similarity import jaccard
from rag_dedup.llama_index.transform import DedupTransform

ROOT = Path(__file__).resolve().parent.parent
CORPORA = [ROOT / "tests" / "data" / "corpus", ROOT / "examples" / "data"]
# The real query list, shipped once with its provenance (tests read the same file).
QUERIES: list[str] = json.loads((ROOT / "tests" / "data" / "queries.json").read_text(encoding="utf-8"))["queries"]
TOP = 30
THRESHOLD = 0.8
ROWS = [  # (row, label) of the timing table
    ("bm25 top-30", "BM25 retrieve top 30"),
    ("pass-through", "pass-through BaseNodePostprocessor (LlamaIndex's cost)"),
    ("stamped", "DedupPostprocessor, stamped, warm"),
    ("stamped inner", "  the same, without LlamaIndex's instrumentation span"),
    ("stamped core", "  of which the core, Collapser.collapse_columns"),
    ("stamped columns", "  the core in the column form the adapter reads"),
    ("stamped matrix", "  the reference's shingle matrix, TextSimilarity.matrix"),
    ("stamped cold", "DedupPostprocessor, stamped, cold"),
    ("stamped+index", "DedupPostprocessor, stamped+index"),
    ("stamped trusted", "DedupPostprocessor, stamped, trusted"),
    ("trusted inner", "  the same, without LlamaIndex's instrumentation span"),
    ("unstamped cold", "DedupPostprocessor, unstamped, cold"),
    ("unstamped cold inner", "  the same, without LlamaIndex's instrumentation span"),
    ("unstamped cold core", "  of which the core, decide_columns, after the clear"),
    ("cache clear", "  of which the clear of the shingle cache"),
    ("unstamped warm", "DedupPostprocessor, unstamped, warm"),
    ("stamped reference", "DedupPostprocessor, stamped, warm, numpy reference"),
    ("unstamped cold reference", "DedupPostprocessor, unstamped, cold, numpy reference"),
    ("rensa words", "rensa greedy, word tokens"),
    ("rensa 5-grams", "rensa greedy, word 5-grams"),
]


class PassThrough(BaseNodePostprocessor):
    """A postprocessor that returns its input: what ``postprocess_nodes`` costs in LlamaIndex itself."""

    @classmethod
    def class_name(cls) -> str:
        return "PassThrough"

    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        return nodes


def _on_reference(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` run on the numpy reference path (``compiled.COMPILED = False`` for the call)."""

    def run() -> object:
        previous = compiled.COMPILED
        compiled.COMPILED = False
        try:
            return fn()
        finally:
            compiled.COMPILED = previous

    return run


def load_documents() -> list[Document]:
    docs = []
    for corpus in CORPORA:
        for path in sorted(p for p in corpus.rglob("*") if p.is_file() and p.name != "README.md"):
            docs.append(
                Document(text=path.read_text(encoding="utf-8", errors="replace"), id_=str(path.relative_to(ROOT)))
            )
    return docs


def median_us(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of one call, in microseconds (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000.0


def rensa_greedy(texts: list[str], shingled: bool) -> list[int]:
    """The hand-rolled baseline: RMinHash per text, keep a text unless it matches a kept one."""
    from rensa import RMinHash

    kept: list[tuple[int, RMinHash]] = []
    for i, text in enumerate(texts):
        words = text.lower().split()
        tokens = [" ".join(words[j : j + 5]) for j in range(max(1, len(words) - 4))] if shingled else words
        m = RMinHash(num_perm=128, seed=1)
        m.update(tokens)
        if all(m.jaccard(k) < THRESHOLD for _, k in kept):
            kept.append((i, m))
    return [i for i, _ in kept]


def _decisions(kept: list[NodeWithScore]) -> list[tuple[str, object]]:
    """What a collapse decided: the kept node ids and the entries folded into each."""
    return [(n.node_id, n.node.metadata.get("dedup_collapsed")) for n in kept]


def _unspanned(post: Any) -> Callable[[list[NodeWithScore]], object]:
    """``post._postprocess_nodes`` without the instrumentation span LlamaIndex wraps it in."""
    return partial(type(post)._postprocess_nodes.__wrapped__, post)


def distinct_ratio(nodes: list[NodeWithScore], k: int = 10) -> float:
    kept: list = []
    for n in nodes[:k]:
        s = shingle_hashes(n.node.get_content())
        if all(jaccard(s, t) < THRESHOLD for t in kept):
            kept.append(s)
    return len(kept) / k


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=200, help="timed calls per query and method (default 200)")
    parser.add_argument(
        "--baseline", metavar="DIR", help="a checkout of the commit to compare with (e.g. a git worktree of main)"
    )
    args = parser.parse_args()
    logging.getLogger("llama_index.retrievers.bm25").setLevel(logging.ERROR)
    try:
        import rensa  # noqa: F401
    except ImportError:
        print("rensa is needed for the baseline: pip install rensa", file=sys.stderr)
        return 2

    documents = load_documents()
    plain = SentenceChunker(chunk_size=256, chunk_overlap=64).get_nodes_from_documents(documents)
    transform = DedupTransform()
    stamped = transform([n.model_copy(deep=True) for n in plain])
    print(
        f"corpus: {len(documents)} documents from tests/data/corpus and examples/data, {len(stamped)} nodes "
        f"(SentenceChunker 256/64), {transform.counts['exact'] + transform.counts['near']} stamped as duplicates"
    )

    retriever = BM25Retriever.from_defaults(nodes=stamped, similarity_top_k=TOP)
    pp = DedupPostprocessor()
    pp_index = DedupPostprocessor(index=transform.index)
    pp_trusted = DedupPostprocessor(trust_clusters=True)
    pp_reference = DedupPostprocessor()  # its own shingle cache, filled on the reference path
    passthrough = PassThrough()
    print(
        f"kernels: {'compiled (numba ' + __import__('numba').__version__ + ')' if compiled.COMPILED else 'numpy reference only'}; "
        "every timed call is made once, untimed, first (compilation or the kernel cache load, and warm-up)"
    )
    old = None
    if args.baseline:
        modules = import_baseline(args.baseline, "rag_dedup.llama_index.postprocessor", "rag_dedup.llama_index.transform")
        base = modules["rag_dedup.llama_index.postprocessor"]
        base_transform = modules["rag_dedup.llama_index.transform"].DedupTransform()  # its own index class
        base_transform([n.model_copy(deep=True) for n in plain])
        base_index = base_transform.index
        old = {
            "pp": base.DedupPostprocessor(),
            "pp_trusted": base.DedupPostprocessor(trust_clusters=True),
            "pp_index": base.DedupPostprocessor(index=base_index),
        }
        print(f"baseline: {baseline_label(args.baseline)}, timed alternately with this checkout in one process")
    rows: dict[str, list[float]] = {name: [] for name, _ in ROWS}
    base_rows: dict[str, list[float]] = {name: [] for name, _ in ROWS}
    same = 0
    for query in QUERIES:
        hits = retriever.retrieve(query)
        unstamped = [
            NodeWithScore(node=TextNode(text=h.node.get_content(), id_=h.node.node_id), score=h.score) for h in hits
        ]
        texts = [n.node.get_content() for n in unstamped]
        unstamped_columns = ([n.node.node_id for n in unstamped], texts, [n.score for n in unstamped], [None] * len(texts))
        columns = (
            [h.node.node_id for h in hits],
            [h.node.get_content() for h in hits],
            [h.score for h in hits],
            [h.node.metadata.get("dedup_cluster") for h in hits],
        )

        def timed(post: Any) -> dict[str, Callable[[], object]]:
            """The postprocessor's rows for this query (``post`` is a namespace of three postprocessors)."""

            def cold(nodes: list[NodeWithScore] = unstamped) -> object:
                post["pp"].clear_cache()  # a query whose chunks the postprocessor has never seen
                return post["pp"].postprocess_nodes(nodes)

            def stamped_cold(nodes: list[NodeWithScore] = hits) -> object:
                post["pp"].clear_cache()
                return post["pp"].postprocess_nodes(nodes)

            def cold_inner(nodes: list[NodeWithScore] = unstamped) -> object:
                post["pp"].clear_cache()
                return _unspanned(post["pp"])(nodes)

            def cold_core() -> object:
                post["pp"].clear_cache()
                return collapser.decide_columns(*unstamped_columns)

            collapser = post["pp"]._collapser()
            columns_form = (  # Collapser.decide_columns, where the checkout has it (d3968e5 has not)
                {"stamped columns": partial(collapser.decide_columns, *columns)} if hasattr(collapser, "decide_columns") else {}
            )
            return columns_form | {
                "stamped": partial(post["pp"].postprocess_nodes, hits),
                "stamped inner": partial(_unspanned(post["pp"]), hits),
                "stamped core": partial(collapser.collapse_columns, *columns),
                "stamped matrix": partial(collapser.similarity.matrix, columns[1], collapser.ngram, collapser.cache_size),
                "stamped cold": stamped_cold,
                "stamped+index": partial(post["pp_index"].postprocess_nodes, hits),
                "stamped trusted": partial(post["pp_trusted"].postprocess_nodes, hits),
                "trusted inner": partial(_unspanned(post["pp_trusted"]), hits),
                "unstamped cold": cold,
                "unstamped cold inner": cold_inner,
                "unstamped cold core": cold_core,
                "cache clear": post["pp"].clear_cache,
                "unstamped warm": partial(post["pp"].postprocess_nodes, unstamped),
            }

        ours = timed({"pp": pp, "pp_trusted": pp_trusted, "pp_index": pp_index})
        ours["pass-through"] = partial(passthrough.postprocess_nodes, hits)

        def unstamped_cold_reference(nodes: list[NodeWithScore] = unstamped) -> object:
            pp_reference.clear_cache()
            return pp_reference.postprocess_nodes(nodes)

        if compiled.COMPILED:
            ours["stamped reference"] = _on_reference(partial(pp_reference.postprocess_nodes, hits))
            ours["unstamped cold reference"] = _on_reference(unstamped_cold_reference)
        theirs = timed(old) if old is not None else {}
        if old is not None:
            same += _decisions(pp.postprocess_nodes(hits)) == _decisions(old["pp"].postprocess_nodes(hits)) and (
                _decisions(pp_trusted.postprocess_nodes(hits)) == _decisions(old["pp_trusted"].postprocess_nodes(hits))
            )
        rows["bm25 top-30"].append(median_us(partial(retriever.retrieve, query), max(10, args.repeat // 10)))
        for name, fn in ours.items():
            if name in theirs:  # alternately, so that both see the same machine load
                base_rows[name].append(median_us(theirs[name], args.repeat))
            rows[name].append(median_us(fn, args.repeat))
        rows["rensa words"].append(median_us(partial(rensa_greedy, texts, shingled=False), args.repeat))
        rows["rensa 5-grams"].append(median_us(partial(rensa_greedy, texts, shingled=True), args.repeat))

    med = {name: statistics.median(v) for name, v in rows.items() if v}
    base_med = {name: statistics.median(v) for name, v in base_rows.items() if v}
    bm25 = med["bm25 top-30"]
    print(f"\nper query, median over {len(QUERIES)} queries of the median of {args.repeat} calls, {TOP} nodes each:")
    print(f"  {'':52s}{'time':>12s}{'vs BM25':>10s}" + (f"{'baseline':>13s}{'this/base':>11s}" if base_med else ""))
    for name, label in ROWS:
        if name not in med:
            continue
        label = label.replace("BM25 retrieve top 30", f"BM25 retrieve top {TOP} of {len(stamped)}")
        line = f"  {label:52s}{med[name]:>9.1f} us{med[name] / bm25:>9.3f}x"
        if name in base_med:
            line += f"{base_med[name]:>10.1f} us{med[name] / base_med[name]:>10.2f}x"
        print(line)
    passed = med["pass-through"]
    print(f"\nthe call as a user makes it (postprocess_nodes), beside a pass-through BaseNodePostprocessor "
          f"({passed:.1f} us: LlamaIndex's own cost) and the latency rag-dedup adds:")
    for key in ("stamped", "stamped cold", "stamped trusted", "unstamped warm", "unstamped cold"):
        added = med[key] - passed
        print(f"  {key:16s} {med[key]:7.1f} us, added {added:7.1f} us (goal <= 100 us: {'met' if added <= 100 else 'NOT met'}; "
              f"total {'met' if med[key] <= 100 else 'NOT met'})")
    print(f"core (Collapser.collapse_columns, stamped, warm): {med['stamped core']:.1f} us (aim <= 30 us: "
          f"{'met' if med['stamped core'] <= 30 else 'NOT met'})")
    if "stamped reference" in med:
        print(f"compiled kernels / numpy reference: stamped warm {med['stamped'] / med['stamped reference']:.2f}, "
              f"unstamped cold {med['unstamped cold'] / med['unstamped cold reference']:.2f}")
    print(f"LlamaIndex's instrumentation span (postprocess_nodes - the same unwrapped): "
          f"{med['stamped'] - med['stamped inner']:.1f} us checked, {med['stamped trusted'] - med['trusted inner']:.1f} us trusted")
    core, core_name = (med["stamped columns"], "core (decide_columns)") if "stamped columns" in med else (med["stamped core"], "core")
    print(f"checked, warm, breakdown: span {med['stamped'] - med['stamped inner']:.1f} us + adapter (nodes in, copies out) "
          f"{med['stamped inner'] - core:.1f} us + {core_name} {core:.1f} us "
          f"(the reference's shingle matrix alone, TextSimilarity.matrix: {med['stamped matrix']:.1f} us)")
    print(f"unstamped, cold, breakdown: span {med['unstamped cold'] - med['unstamped cold inner']:.1f} us + adapter "
          f"{med['unstamped cold inner'] - med['unstamped cold core']:.1f} us + core (decide_columns, its shingling "
          f"included) {med['unstamped cold core'] - med['cache clear']:.1f} us + the cache clear {med['cache clear']:.1f} us; "
          f"cold - warm: {med['unstamped cold'] - med['unstamped warm']:.1f} us")
    print(f"stamped, checked / trusted = {med['stamped'] / med['stamped trusted']:.2f} (warm), "
          f"{med['stamped cold'] / med['stamped trusted']:.2f} (cold)")
    if old is not None:
        print(f"same kept nodes and dedup_collapsed entries as the baseline (checked and trusted): {same} of {len(QUERIES)} queries")

    print(f"\nover the {len(QUERIES)} BM25 top {TOP}s (stamped nodes), all kept nodes:")
    for name, post in (("default (checked)", pp), ("trust_clusters=True", pp_trusted)):
        dup_pairs = loose_folds = folds = 0
        for query in QUERIES:
            hits = retriever.retrieve(query)
            text_of = {h.node_id: h.node.get_content() for h in hits}
            kept = post.postprocess_nodes(hits)
            sets = [shingle_hashes(n.node.get_content()) for n in kept]
            dup_pairs += sum(jaccard(a, b) >= THRESHOLD for i, a in enumerate(sets) for b in sets[i + 1 :])
            for n, s in zip(kept, sets):
                for c in n.node.metadata.get("dedup_collapsed", []):
                    folds += 1
                    loose_folds += jaccard(s, shingle_hashes(text_of[c["node_id"]])) < 0.5
        print(f"  {name:22s} kept pairs with J >= {THRESHOLD}: {dup_pairs} (goal 0) | "
              f"folded with J < 0.5 to the keeper: {loose_folds} of {folds} (goal 0)")
    for mode in ("cold", "warm"):
        t = med[f"unstamped {mode}"]
        print(
            f"unstamped, {mode}: rensa 5-grams / DedupPostprocessor = {med['rensa 5-grams'] / t:.2f}"
            f" | rensa word tokens / DedupPostprocessor = {med['rensa words'] / t:.2f} (>1: DedupPostprocessor faster)"
        )

    baseline = BM25Retriever.from_defaults(nodes=stamped, similarity_top_k=10)
    distinct = DistinctRetriever(BM25Retriever.from_defaults(nodes=stamped, similarity_top_k=10), top_k=10)
    top10 = DedupPostprocessor(top_n=10)
    ratios = {
        "plain BM25 top 10": [],
        "DedupPostprocessor(top_n=10) over top 30": [],
        "DistinctRetriever(top_k=10)": [],
    }
    for query in QUERIES:
        ratios["plain BM25 top 10"].append(distinct_ratio(baseline.retrieve(query)))
        ratios["DedupPostprocessor(top_n=10) over top 30"].append(
            distinct_ratio(top10.postprocess_nodes(retriever.retrieve(query)))
        )
        ratios["DistinctRetriever(top_k=10)"].append(distinct_ratio(distinct.retrieve(query)))
    print(
        f"\ndistinct-evidence ratio of the top 10 (pairwise Jaccard < {THRESHOLD}), mean over {len(QUERIES)} queries:"
    )
    for name, values in ratios.items():
        print(f"  {name:44s}{sum(values) / len(values):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
