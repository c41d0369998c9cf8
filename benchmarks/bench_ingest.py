"""Ingest throughput: IngestionPipeline([SentenceChunker, DedupTransform]) vs IngestionPipeline([SentenceSplitter]).

The same real documents go through both pipelines, without embeddings and without the cache:
the Debian copyright files under /usr/share/doc/*/copyright (those of at most --max-kb KB) and the licence
texts under /usr/share/common-licenses, as found on this machine (the shipped tests/data/corpus when
those are missing). Both chunkers use 256-token chunks with 64 tokens of overlap. Goal: the dedup
pipeline at least 1.5x the throughput of the plain SentenceSplitter pipeline.

Also printed: the two stages of the dedup pipeline timed separately (SentenceChunker alone, then
DedupTransform on its nodes, split into the DedupIndex's update and the transform's own work), and
what dedup found.

Run: python benchmarks/bench_ingest.py [--max-kb 64] [--repeat 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from llama_index.core import Document
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter

from rag_dedup.llama_index.chunking import SentenceChunker
from rag_dedup.index import DedupIndex
from rag_dedup.llama_index.transform import DedupTransform

ROOT = Path(__file__).resolve().parent.parent


def load_documents(max_kb: int) -> tuple[list[Document], str]:
    paths = [
        p
        for p in sorted(Path("/usr/share/doc").glob("*/copyright"))
        if p.is_file() and p.stat().st_size <= max_kb * 1024
    ]
    licences = Path("/usr/share/common-licenses")
    if licences.is_dir():
        paths += [p for p in sorted(licences.iterdir()) if p.is_file()]
    where = f"/usr/share/doc/*/copyright (<= {max_kb} KB) and /usr/share/common-licenses"
    if len(paths) < 50:
        paths = sorted((ROOT / "tests" / "data" / "corpus").rglob("*.txt"))
        where = "tests/data/corpus (this machine has few /usr/share/doc copyright files)"
    docs = [Document(text=p.read_text(encoding="utf-8", errors="replace"), id_=str(p)) for p in paths]
    return docs, where


def best_of(repeat: int, fn: Callable[[], object]) -> tuple[float, object]:
    """The fastest of ``repeat`` runs (seconds) and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-kb", type=int, default=64, help="skip copyright files larger than this (default 64)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per pipeline; the fastest counts (default 2)")
    args = parser.parse_args()

    docs, where = load_documents(args.max_kb)
    mb = sum(len(d.text.encode("utf-8")) for d in docs) / 1e6
    print(f"documents: {len(docs)} from {where}, {mb:.2f} MB")

    def splitter_run() -> object:
        pipe = IngestionPipeline(
            transformations=[SentenceSplitter(chunk_size=256, chunk_overlap=64)], disable_cache=True
        )
        return pipe.run(documents=[d.model_copy() for d in docs])

    def dedup_run() -> object:
        transform = DedupTransform()
        pipe = IngestionPipeline(
            transformations=[SentenceChunker(chunk_size=256, chunk_overlap=64), transform], disable_cache=True
        )
        return pipe.run(documents=[d.model_copy() for d in docs]), transform

    t_split, split_nodes = best_of(args.repeat, splitter_run)
    t_dedup, (dedup_nodes, transform) = best_of(args.repeat, dedup_run)  # type: ignore[misc]

    # The stages of the dedup pipeline, separately; the index's update (one per call) is timed inside the transform.
    t_chunk, chunks = best_of(
        args.repeat, lambda: SentenceChunker(chunk_size=256, chunk_overlap=64).get_nodes_from_documents(docs)
    )
    runs: list[tuple[float, float]] = []  # (transform seconds, of which update seconds)
    for _ in range(args.repeat):
        index = DedupIndex()
        update, in_index = index.update, [0.0]

        def timed_update(items: object, remove: object = (), update=update, in_index=in_index) -> object:
            start = time.perf_counter()
            try:
                return update(items, remove=remove)  # type: ignore[arg-type]
            finally:
                in_index[0] += time.perf_counter() - start

        index.update = timed_update  # type: ignore[method-assign]
        fresh = [n.model_copy() for n in chunks]  # type: ignore[union-attr]
        start = time.perf_counter()
        DedupTransform(index=index)(fresh)
        runs.append((time.perf_counter() - start, in_index[0]))
    t_transform, t_index = min(runs)

    counts = transform.counts
    print(f"\n{'pipeline':44s}{'seconds':>9s}{'MB/s':>8s}{'docs/s':>9s}{'nodes':>8s}")
    for label, seconds, count in [
        ("[SentenceSplitter(256, 64)]", t_split, len(split_nodes)),  # type: ignore[arg-type]
        ("[SentenceChunker(256, 64), DedupTransform()]", t_dedup, len(dedup_nodes)),
    ]:
        print(f"{label:44s}{seconds:9.2f}{mb / seconds:8.2f}{len(docs) / seconds:9.1f}{count:8d}")
    ratio = t_split / t_dedup
    verdict = "met" if ratio >= 1.5 else "NOT met"
    print(f"throughput ratio (dedup pipeline / SentenceSplitter pipeline): {ratio:.2f}x (goal >= 1.5x: {verdict})")
    print(
        f"\nstages: SentenceChunker {t_chunk:.2f} s | DedupTransform {t_transform:.2f} s "
        f"(DedupIndex.update {t_index:.2f} s, the transform's own work {t_transform - t_index:.2f} s)"
    )
    print(
        f"dedup found: {counts['exact']} exact and {counts['near']} near duplicates among {len(dedup_nodes)} chunks "
        f"({(counts['exact'] + counts['near']) / max(1, len(dedup_nodes)):.1%})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
