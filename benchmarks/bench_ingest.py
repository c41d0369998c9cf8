"""Ingest throughput: IngestionPipeline([SentenceChunker, DedupTransform]) vs IngestionPipeline([SentenceSplitter]).

The same real documents go through both pipelines, without embeddings and without the cache:
the Debian copyright files under /usr/share/doc/*/copyright (those of at most --max-kb KB) and the licence
texts under /usr/share/common-licenses, as found on this machine (the shipped tests/data/corpus when
those are missing). Both chunkers use 256-token chunks with 64 tokens of overlap. Goal (issue 17): the
dedup pipeline at least 1.5x the throughput of the plain SentenceSplitter pipeline.

How it is timed, so that one slow spell of this shared machine does not decide the ratio (single
runs of 3-5 s swing by 20-30%):

* a warm-up first: every pipeline runs once, untimed, on the first 40 documents (imports, tokenizer
  tables, numba's kernels loading from their cache);
* ``--rounds`` rounds, each running every pipeline once, in turn (the order rotates from round to
  round), each run measured in wall time and in CPU time (``time.process_time``, this process only:
  the pipelines are single-threaded);
* per pipeline the median and the spread (min-max) over the rounds; the throughput ratio is given
  per round (the two runs of one round share the machine's state) as median and min-max, in wall
  and in CPU time.

With ``--baseline-tree DIR`` (a checkout of another commit, e.g. ``git archive 446aa61 | tar -x -C DIR``)
the baseline's SentenceChunker and DedupTransform (imported beside this checkout's with
:mod:`baseline`) run as a third pipeline in the same rounds, and the stages are timed for both trees.

Beside each pipeline: the cyclic garbage collector's runs (young/middle/full generation) during its
last round's run; the full ones walk the whole heap. Also printed, per tree: the two stages of the dedup pipeline timed separately in the same kind of
rounds (SentenceChunker alone, then DedupTransform on its nodes, split into the DedupIndex's update and
the transform's own work, CPU time), and what dedup found.

Run: python benchmarks/bench_ingest.py [--max-kb 64] [--rounds 7] [--baseline-tree DIR]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from llama_index.core import Document
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter

import rag_dedup.index
import rag_dedup.llama_index.chunking
import rag_dedup.llama_index.transform

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from baseline import baseline_label, import_baseline  # noqa: E402

WARM_DOCS = 40


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


class Tree:
    """One rag-dedup checkout's SentenceChunker, DedupTransform and DedupIndex (this one or a baseline)."""

    def __init__(self, label: str, chunking: ModuleType, transform: ModuleType, index: ModuleType) -> None:
        self.label = label
        self.chunker = chunking.SentenceChunker
        self.transform = transform.DedupTransform
        self.index = index.DedupIndex

    def pipeline(self, docs: list[Document]) -> tuple[list[Any], Any]:
        """The dedup pipeline on copies of ``docs``: its nodes and its transform."""
        transform = self.transform()
        pipe = IngestionPipeline(
            transformations=[self.chunker(chunk_size=256, chunk_overlap=64), transform], disable_cache=True
        )
        return pipe.run(documents=[d.model_copy() for d in docs]), transform

    def chunk(self, docs: list[Document]) -> list[Any]:
        return self.chunker(chunk_size=256, chunk_overlap=64).get_nodes_from_documents(docs)

    def transform_stage(self, chunks: list[Any]) -> tuple[float, float]:
        """CPU seconds of DedupTransform on copies of ``chunks``, and of its DedupIndex.update calls."""
        index = self.index()
        update, in_index = index.update, [0.0]

        def timed_update(items: object, remove: object = (), update: Any = update) -> object:
            start = time.process_time()
            try:
                return update(items, remove=remove)
            finally:
                in_index[0] += time.process_time() - start

        index.update = timed_update  # type: ignore[method-assign]
        fresh = [n.model_copy() for n in chunks]
        start = time.process_time()
        self.transform(index=index)(fresh)
        return time.process_time() - start, in_index[0]


def splitter_pipeline(docs: list[Document]) -> list[Any]:
    pipe = IngestionPipeline(transformations=[SentenceSplitter(chunk_size=256, chunk_overlap=64)], disable_cache=True)
    return pipe.run(documents=[d.model_copy() for d in docs])


def measure(fn: Callable[[], object]) -> tuple[float, float, object, tuple[int, ...]]:
    """Wall and CPU seconds of one call of ``fn`` (after a collection, so that no run pays for the
    garbage of the one before), its result, and the cyclic collector's runs during it per
    generation (young, middle, full)."""
    gc.collect()
    before = [g["collections"] for g in gc.get_stats()]
    w0, c0 = time.perf_counter(), time.process_time()
    result = fn()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return wall, cpu, result, tuple(g["collections"] - b for g, b in zip(gc.get_stats(), before))


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """``median (min-max)`` of ``values``."""
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-kb", type=int, default=64, help="skip copyright files larger than this (default 64)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds of every pipeline (default 7)")
    parser.add_argument("--stage-rounds", type=int, default=3, help="interleaved rounds of the stage timings (default 3)")
    parser.add_argument("--baseline-tree", type=Path, help="another rag-dedup checkout whose dedup pipeline runs too")
    args = parser.parse_args()

    docs, where = load_documents(args.max_kb)
    mb = sum(len(d.text.encode("utf-8")) for d in docs) / 1e6
    print(f"documents: {len(docs)} from {where}, {mb:.2f} MB")
    trees = [Tree("this tree", rag_dedup.llama_index.chunking, rag_dedup.llama_index.transform, rag_dedup.index)]
    if args.baseline_tree:
        names = ("rag_dedup.llama_index.chunking", "rag_dedup.llama_index.transform", "rag_dedup.index")
        base = import_baseline(args.baseline_tree, *names)
        trees.append(Tree(f"baseline {baseline_label(args.baseline_tree)}", *(base[n] for n in names)))
        print(f"baseline: {trees[1].label}, run in the same rounds, in this process")

    pipelines: list[tuple[str, Callable[[list[Document]], object]]] = [("[SentenceSplitter(256, 64)]", splitter_pipeline)]
    for tree in trees:
        pipelines.append((f"[SentenceChunker(256, 64), DedupTransform()] {tree.label}", tree.pipeline))
    for _, run in pipelines:  # warm-up, untimed
        run(docs[:WARM_DOCS])
    wall: dict[str, list[float]] = {name: [] for name, _ in pipelines}
    cpu: dict[str, list[float]] = {name: [] for name, _ in pipelines}
    out: dict[str, object] = {}
    collections: dict[str, tuple[int, ...]] = {}
    for r in range(args.rounds):
        for k in range(len(pipelines)):
            name, run = pipelines[(k + r) % len(pipelines)]
            w, c, out[name], collections[name] = measure(lambda run=run: run(docs))
            wall[name].append(w)
            cpu[name].append(c)
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
    print(f"\n{args.rounds} interleaved rounds (load average {' '.join(load)}); median (min-max) over the rounds")
    print(f"{'pipeline':<64s}{'wall s':>19s}{'CPU s':>19s}{'MB/s (CPU)':>11s}{'nodes':>7s}  gc runs, last round")
    for name, _ in pipelines:
        result = out[name]
        nodes = result[0] if isinstance(result, tuple) else result
        print(f"{name:<64s}{spread(wall[name]):>19s}{spread(cpu[name]):>19s}{mb / statistics.median(cpu[name]):>11.2f}"
              f"{len(nodes):>7d}  {'/'.join(map(str, collections[name]))}")  # type: ignore[arg-type]
    split = pipelines[0][0]
    for name, _ in pipelines[1:]:
        by_wall = [s / d for s, d in zip(wall[split], wall[name])]
        by_cpu = [s / d for s, d in zip(cpu[split], cpu[name])]
        verdict = "met" if statistics.median(by_cpu) >= 1.5 else "NOT met"
        print(f"throughput ratio, dedup pipeline / SentenceSplitter pipeline, {name.split('] ', 1)[1]}: "
              f"CPU {spread(by_cpu)}x, wall {spread(by_wall)}x, per round (goal >= 1.5x: {verdict})")
    if len(pipelines) > 2:
        this, other = pipelines[1][0], pipelines[2][0]
        print(f"baseline / this tree, dedup pipeline (speed-up): CPU {spread([b / a for a, b in zip(cpu[this], cpu[other])])}x, "
              f"wall {spread([b / a for a, b in zip(wall[this], wall[other])])}x, per round")

    # The stages, per tree, in interleaved rounds (CPU time).
    chunk_cpu: dict[str, list[float]] = {t.label: [] for t in trees}
    transform_cpu: dict[str, list[float]] = {t.label: [] for t in trees}
    update_cpu: dict[str, list[float]] = {t.label: [] for t in trees}
    chunks: dict[str, list[Any]] = {}
    for r in range(args.stage_rounds):
        for tree in trees[r % len(trees) :] + trees[: r % len(trees)]:
            _, c, got, _ = measure(lambda tree=tree: tree.chunk(docs))
            chunk_cpu[tree.label].append(c)
            chunks[tree.label] = got  # type: ignore[assignment]
            gc.collect()
            t_transform, t_update = tree.transform_stage(chunks[tree.label])
            transform_cpu[tree.label].append(t_transform)
            update_cpu[tree.label].append(t_update)
    print(f"\nstages (CPU s, median (min-max) of {args.stage_rounds} interleaved rounds):")
    for tree in trees:
        own = [t - u for t, u in zip(transform_cpu[tree.label], update_cpu[tree.label])]
        print(f"  {tree.label}: SentenceChunker {spread(chunk_cpu[tree.label])} | DedupTransform "
              f"{spread(transform_cpu[tree.label])} (DedupIndex.update {spread(update_cpu[tree.label])}, "
              f"the transform's own work {spread(own)})")
    partitions = []
    for name, _ in pipelines[1:]:
        nodes, transform = out[name]  # type: ignore[misc]
        partitions.append(sorted(sorted(members) for _, members in transform.index.clusters(include_singletons=False)))
        counts = transform.counts
        print(f"dedup found ({name.split('] ', 1)[1]}): {counts['exact']} exact and {counts['near']} near duplicates "
              f"among {len(nodes)} chunks ({(counts['exact'] + counts['near']) / max(1, len(nodes)):.1%})")
    if len(partitions) > 1:
        print(f"the trees' indexes hold the same clusters: {all(p == partitions[0] for p in partitions)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
