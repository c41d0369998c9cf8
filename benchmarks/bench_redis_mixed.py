"""Two Redis workers of different kinds on one namespace, this tree beside a named baseline, in one run:
one adds texts one at a time with ``add()`` (an upload handler, a queue consumer), the other ingests a
corpus with ``add_many`` (a bulk job), at the same time.

Run: ``python benchmarks/bench_redis_mixed.py [--many 10000] [--one 2000] [--baseline REV | --baseline-tree DIR]
[--rounds N] [--url redis://host:port/db]``

The baseline is a commit of this repository (default ``HEAD``), exported with ``git archive``; each
tree is measured in a fresh process of its own (which spawns the two workers), the trees alternately
in each round, on the same texts and server. Without ``--url`` a private ``redis-server`` is started
(as ``bench_redis.py`` does). Two mixes of real text (``realtext``):

* ``one corpus``: ``--many + --one`` chunks of ``realtext.planted_chunks`` (20% planted
  near-duplicates) in a fixed shuffled order, the first ``--one`` to the ``add()`` worker: the two
  workers add members of the same families at the same time;
* ``other files``: the ``add()`` worker's texts are chunks of the words that come after the bulk
  corpus's in ``realtext.machine_words`` (other files of the machine), so that the two share
  only what those files share (licence texts, boilerplate).

For each tree and mix: the ``add()`` worker's CPU and round trips per call and its wall time; the
``add_many`` worker's chunks per second (its own wall time), its CPU per chunk, its optimistic
attempts run again ("conflicts") and its batches that ended under the lock ("fallbacks"); the seconds
both waited for the lock; and whether the final clusters equal those of one in-memory index holding
every text. Times and CPU are the least of the rounds; the counters are the last round's.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MIXES = ("one corpus", "other files")


def texts(mix: str, many: int, one: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(the ``add()`` worker's items, the ``add_many`` worker's items) of a mix (see the module docstring)."""
    sys.path.insert(0, str(HERE))
    from realtext import machine_words, planted_chunks

    if mix == "one corpus":
        items, _, _ = planted_chunks(many + one)
        random.Random(1).shuffle(items)
        return items[:one], items[one:]
    bulk, _, _ = planted_chunks(many)
    random.Random(1).shuffle(bulk)
    used = (many - int(many * 0.2)) * 180  # the words planted_chunks read for its base chunks
    words, _ = machine_words(used + one * 180)
    tail = words[used:]
    return [(f"u{i:07d}", " ".join(tail[i * 180 : (i + 1) * 180])) for i in range(len(tail) // 180)], bulk


def worker(url: str, namespace: str, items: list[tuple[str, str]], one_at_a_time: bool, ready: Any, start: Any, results: Any) -> None:
    """Warm up (the compiled kernels), signal, wait for the start, add, report."""
    from rag_dedup import DedupIndex
    from realtext import warm_up

    index = DedupIndex(storage=url, namespace=namespace)
    warm_up(DedupIndex, items)
    ready.set()
    start.wait()
    storage = index.storage
    trips = storage.round_trips
    t0, cpu = time.monotonic(), time.process_time()
    if one_at_a_time:
        for key, text in items:
            index.add(key, text)
    else:
        index.add_many(items)
    wall, cpu = time.monotonic() - t0, time.process_time() - cpu
    results.put(
        (
            one_at_a_time,
            wall,
            cpu,
            storage.round_trips - trips,
            getattr(storage, "conflicts", 0),
            getattr(storage, "fallbacks", 0),
            storage.lock_wait_seconds,
        )
    )


def measure(url: str, mix: str, many: int, one: int, tag: str) -> dict[str, Any]:
    """Every figure of one tree (the one ``rag_dedup`` is imported from) on one mix."""
    from rag_dedup import DedupIndex

    sys.path.insert(0, str(HERE))
    from bench_redis import partition

    ones, bulk = texts(mix, many, one)
    namespace = f"bench-redis-mixed-{tag}"
    DedupIndex(storage=url, namespace=namespace).drop()
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    readies = [ctx.Event(), ctx.Event()]
    procs = [
        ctx.Process(target=worker, args=(url, namespace, part, flag, ready, start, results))
        for part, flag, ready in ((ones, True, readies[0]), (bulk, False, readies[1]))
    ]
    for p in procs:
        p.start()
    for r in readies:
        r.wait()
    start.set()
    reports = {r[0]: r for r in (results.get() for _ in procs)}
    for p in procs:
        p.join()
        if p.exitcode != 0:
            sys.exit(f"a worker failed with exit code {p.exitcode}")
    memory = DedupIndex()
    memory.add_many(ones + bulk)
    keys = [k for k, _ in ones + bulk]
    shared = DedupIndex(storage=url, namespace=namespace)
    same = partition(shared, keys) == partition(memory, keys)
    shared.drop()
    one_r, bulk_r = reports[True], reports[False]
    return {
        "one_wall": one_r[1],
        "one_cpu": one_r[2] / len(ones),
        "one_trips": one_r[3] / len(ones),
        "bulk_rate": len(bulk) / bulk_r[1],
        "bulk_cpu": bulk_r[2] / len(bulk),
        "conflicts": bulk_r[4],
        "fallbacks": bulk_r[5],
        "one_conflicts": one_r[4],
        "waited": one_r[6] + bulk_r[6],
        "same": same,
        "n_one": len(ones),
        "n_bulk": len(bulk),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--many", type=int, default=10_000, help="chunks of the add_many worker (default 10000)")
    parser.add_argument("--one", type=int, default=2_000, help="texts of the add() worker (default 2000)")
    parser.add_argument("--baseline", default="HEAD", help="the baseline commit (default HEAD)")
    parser.add_argument("--baseline-tree", help="a directory holding the baseline's rag_dedup package, instead of --baseline")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, the trees alternately (default 2)")
    parser.add_argument("--url", help="an existing Redis server to use (namespaces bench-redis-mixed-* of it are dropped)")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from bench_redis import export_tree, run_child, start_server

    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline_tree:
            tree, name = Path(args.baseline_tree), args.baseline_tree
        else:
            name = subprocess.run(
                ["git", "-C", str(REPO), "rev-parse", "--short", args.baseline], capture_output=True, text=True, check=True
            ).stdout.strip()
            tree = export_tree(name, Path(tmp))
        proc, url = (None, args.url) if args.url else start_server(tmp)
        load = os.getloadavg()[0]
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        try:
            for _ in range(max(1, args.rounds)):
                for mix in MIXES:
                    for side, package in (("base", tree), ("this", REPO)):
                        runs.setdefault((mix, side), []).append(run_child(package, "bench_redis_mixed", url, mix, args.many, args.one, side))
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait()
        load_after = os.getloadavg()[1]
    least = ("one_wall", "one_cpu", "one_trips", "bulk_cpu", "waited")
    print(f"bench_redis_mixed: one add() worker beside one add_many worker on one Redis namespace; least of {args.rounds} round(s)")
    print(f"{'figure':<62} {'baseline ' + name:>18} {'this tree':>12} {'this / baseline':>16}")
    for mix in MIXES:
        b, t = ({k: (min if k in least else max)(r[k] for r in runs[(mix, side)]) for k in runs[(mix, side)][0]} for side in ("base", "this"))
        for k in ("conflicts", "fallbacks", "one_conflicts", "same"):
            b[k], t[k] = runs[(mix, "base")][-1][k], runs[(mix, "this")][-1][k]
        print(f"mix '{mix}': {t['n_one']:,} texts by add(), {t['n_bulk']:,} chunks by add_many")
        rows = [
            ("add(): CPU per call (us)", b["one_cpu"] * 1e6, t["one_cpu"] * 1e6, "{:,.0f}"),
            ("add(): round trips per call", b["one_trips"], t["one_trips"], "{:.2f}"),
            ("add(): the worker's wall time (s)", b["one_wall"], t["one_wall"], "{:.2f}"),
            ("add_many beside it (chunks/s, its own wall time; most of rounds)", b["bulk_rate"], t["bulk_rate"], "{:,.0f}"),
            ("add_many: CPU per chunk (us)", b["bulk_cpu"] * 1e6, t["bulk_cpu"] * 1e6, "{:.0f}"),
            ("add_many: attempts run again (conflicts)", b["conflicts"], t["conflicts"], "{:.0f}"),
            ("add_many: batches that ended under the lock (fallbacks)", b["fallbacks"], t["fallbacks"], "{:.0f}"),
            ("add(): calls run again (conflicts)", b["one_conflicts"], t["one_conflicts"], "{:.0f}"),
            ("seconds the two waited for the lock", b["waited"], t["waited"], "{:.2f}"),
        ]
        for label, x, y, fmt in rows:
            ratio = f"{y / x:.2f}x" if x else "-"
            print(f"  {label:<60} {fmt.format(x):>18} {fmt.format(y):>12} {ratio:>16}")
        print(f"  {'same clusters as one in-memory index':<60} {str(b['same']):>18} {str(t['same']):>12}")
    print(f"load average: {load:.2f} (1 min) before the runs, {load_after:.2f} (5 min) after; {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
