"""Streaming ingest (issue 14): ``add()`` one chunk at a time, ``add_many`` on blocks of 10 and of 1,000,
beside the rensa loop and the datasketch recipe, with process RSS per indexed chunk.

Run: ``python benchmarks/bench_stream.py [--sizes 20000] [--rounds 2] [--baseline-tree DIR]``

The chunks are those of ``bench_index.py`` section 3 (real 180-word chunks from this machine, ~20%
planted near-duplicates, light edits), shuffled with a fixed seed so that the duplicates arrive
mixed into the stream, as documents do. Each size samples its base chunks from the first ``0.8 n``
distinct chunks of the machine's text (``--same-pool``: from the largest size's), so sizes differ in
their sources too; the header of each size prints the share of each kind of source. At 160k the
pool reaches the man pages, on this machine 16,631 of them Google Cloud SDK reference pages, whose
generated flag and paging boilerplate puts hundreds of chunks that are not near-duplicates into one
LSH bucket: real text (generated docs repeat themselves), but a structure the 20k set (package docs
only) does not have. The column *pairs/chunk* is the number of candidate pairs add_many's blocks of
1,000 verified with their exact Jaccard, a chunk: the cost that grows with the index on such text
(each new chunk meets more boilerplate relatives), where the rensa loop only queries. Every row runs in a fresh Python process (``--worker``) that
loads the chunks, then measures:

* time: CPU seconds of the build (``time.process_time``: the machine is shared, and CPU time of one
  single-threaded process is steadier than wall time), best of ``--rounds`` processes per row, the
  rounds interleaved over the rows;
* memory: process RSS from ``/proc/self/status``. Before the build the peak (VmHWM) is reset
  (``/proc/self/clear_refs``); *peak* is VmHWM after the build minus VmRSS before it, *retained* is
  VmRSS after the build (and a collection) minus VmRSS before it, both per indexed chunk. This counts
  numpy's buffers and the allocator's real footprint, which tracemalloc does not see.

Baselines in the same run: **rensa** (``RMinHash`` + ``RMinHashLSH``, 16 bands, query then insert each
chunk, shingles built in Python from :func:`~rag_dedup.canonical`, as issue 14 measured it) and the
**datasketch recipe** of ``bench_index.py`` (MinHash per chunk, MinHashLSH query, verify by estimate,
insert). With ``--baseline-tree DIR`` (a checkout of another rag-dedup commit) the rag-dedup rows run
from that tree too, in the same rounds; with ``--reference-kernels``, this tree's rag-dedup rows run
once more on the numpy reference path (``RAG_DEDUP_KERNELS=reference``) instead of the compiled kernels
of :mod:`rag_dedup.compiled`. Every worker warms up before it is timed (imports, first numpy calls,
and the compiled kernels, which numba compiles or loads from its cache on their first call). The rag-dedup rows must end in the same partition (checked:
a digest of every key's representative).

``--split`` adds, per tree, where one ``add()`` spends its CPU: after a warm-up (a batch and ten ``add()`` calls
into another index), an index of ``n - 800`` chunks is built with ``add_many``, 400 more are added one at a time with each stage timed (``process_time`` around the
named functions, a function called inside another counted once, in the outer; the rest of ``add`` by difference), and 400 more counting the numpy functions and
methods called per ``add()`` (``sys.setprofile``; array operators and indexing are not counted, they
make no call event).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# (row name, mode, block size)
ROWS = [
    ("rag-dedup add() one at a time", "add", 1),
    ("rag-dedup add_many, blocks of 10", "add_many", 10),
    ("rag-dedup add_many, blocks of 1,000", "add_many", 1000),
    ("rensa loop (RMinHash + RMinHashLSH)", "rensa", 1),
    ("datasketch recipe", "recipe", 1),
]


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    return out


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def worker(mode: str, block: int, data: str) -> dict[str, object]:
    """Build one index from the chunks at ``data`` (a JSON list of [key, text]); return time, RSS and the partition digest."""
    with open(data, encoding="utf-8") as f:
        items: list[tuple[str, str]] = [(k, t) for k, t in json.load(f)]
    sys.path.insert(0, str(HERE))
    from rag_dedup import DedupIndex, canonical

    if mode == "rensa":
        import rensa

        def shingles(text: str, n: int = 5) -> list[str]:
            words = canonical(text).split()
            if len(words) < n:
                return [" ".join(words)] if words else []
            return [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]

    elif mode == "recipe":
        from bench_index import recipe
    # Warm up outside the measurement: lazy imports (datasketch, scipy), numpy's first calls, tables,
    # and the compiled kernels (numba compiles or loads each on its first call: the batch path of add_many,
    # add()'s one-text path, and the near-duplicate paths of both run here).
    warm = [(f"warm-{key}", text) for key, text in items[:410]]
    if mode in ("add", "add_many"):
        warm_index = DedupIndex(threshold=0.8)
        # Two batches (more than add_many places one at a time, and large enough to be filed straight
        # into the band table's runs: the second merges into the first's).
        warm_index.add_many(warm[:200])
        warm_index.add_many(warm[200:400])
        for key, text in warm[400:]:
            warm_index.add(key, text)
        for key, text in warm[:3]:  # near-duplicates one at a time
            warm_index.add(key + "-again", text + " again")
        warm_index.add_many([(key + "-few", text + " again") for key, text in warm[3:6]])  # a few, one at a time
        del warm_index
    elif mode == "rensa":
        rensa.RMinHashLSH(threshold=0.8, num_perm=128, num_bands=16).insert(0, rensa.RMinHash(num_perm=128, seed=1))
    else:
        recipe(warm[:50])
    del warm
    gc.collect()
    before = _status()["VmRSS"]
    _reset_peak()
    t0, w0 = time.process_time(), time.perf_counter()
    digest = ""
    if mode in ("add", "add_many"):
        index = DedupIndex(threshold=0.8)
        # Counted on the batch path only (add_many of at most 64 places its items one at a time).
        pairs = _count_verified_pairs() if mode == "add_many" and block > 64 else None
        if mode == "add":
            add = index.add
            for key, text in items:
                add(key, text)
        else:
            for lo in range(0, len(items), block):
                index.add_many(items[lo : lo + block])
        cpu, wall = time.process_time() - t0, time.perf_counter() - w0
        reps = sorted((m.key, m.representative) for m in index.matches([k for k, _ in items]))
        digest = hashlib.sha256(json.dumps(reps).encode()).hexdigest()[:16]
        built: object = index
        verified = pairs[0] if pairs else None
    elif mode == "rensa":
        lsh = rensa.RMinHashLSH(threshold=0.8, num_perm=128, num_bands=16)
        sketches = []
        for i, (_, text) in enumerate(items):
            m = rensa.RMinHash(num_perm=128, seed=1)
            m.update(shingles(text))
            lsh.query(m)
            lsh.insert(i, m)
            sketches.append(m)  # kept, as an index keeps what it needs to answer later
        cpu, wall = time.process_time() - t0, time.perf_counter() - w0
        built = (lsh, sketches)
    else:
        built = recipe(items)
        cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    if mode not in ("add", "add_many"):
        verified = None
    peak = _status()["VmHWM"]
    gc.collect()
    retained = _status()["VmRSS"]
    del built
    return {"cpu": cpu, "wall": wall, "peak": peak - before, "retained": retained - before, "digest": digest, "n": len(items),
            "verified": verified}


def _count_verified_pairs() -> list[int] | None:
    """Count the candidate pairs add_many verifies (exact Jaccard), by wrapping the compiled kernel it calls
    once a block of pairs (``rag_dedup.index.pair_jaccard``); None on a tree or path without it."""
    from rag_dedup import compiled
    import rag_dedup.index as index_module

    plain = getattr(index_module, "pair_jaccard", None)
    if plain is None or not compiled.COMPILED:
        return None
    count = [0]

    def counted(sets: object, left: list[int], right: list[int]) -> object:
        count[0] += len(left)
        return plain(sets, left, right)

    index_module.pair_jaccard = counted
    return count


# (stage, where to find the function: "index" = rag_dedup.index, "DedupIndex", "storage" = the storage class)
SPLIT_STAGES = [
    ("shingling", "index", "shingles_and_digests"),
    ("shingling, signature and band keys", "index", "shingles_digest_and_keys"),  # add()'s one call (DedupIndex._add_one)
    ("signature and band keys", "DedupIndex", "_band_keys"),
    ("bucket lookup", "DedupIndex", "_lookup_few"),
    ("bucket lookup", "DedupIndex", "_lookup_buckets"),
    ("bucket lookup", "index", "_buckets"),
    ("bucket lookup", "storage", "query_bands"),  # add()'s one row (DedupIndex._add_one)
    ("creating the group", "storage", "create_groups"),
    # add()'s one storage call for a new key with a new text (Storage.add_new_item): its bucket lookup,
    # the new group and its band entries, and its item record together (a tree without it: the three above)
    ("lookup, group and item record in one call", "storage", "add_new_item"),
    ("item records", "storage", "put_items"),
    ("verification and reclustering", "index", "_jaccard_to"),  # add()'s candidates, verified at once
    ("verification and reclustering", "DedupIndex", "_link_and_recluster"),
    ("verification and reclustering", "DedupIndex", "_cluster_component"),  # add()'s near-duplicates (_place_one)
    ("verification and reclustering", "DedupIndex", "_cluster_pair"),  # add()'s near-duplicate of one group
    ("verification and reclustering", "DedupIndex", "_store_clusters"),
    ("the returned Match", "DedupIndex", "_matches"),
]


def split_worker(data: str) -> dict[str, object]:
    """Where ``add()`` spends its CPU, by stage, and the numpy calls it makes (see the module docstring)."""
    import collections

    import numpy as np

    import rag_dedup.index as index_module
    from rag_dedup import DedupIndex

    with open(data, encoding="utf-8") as f:
        items: list[tuple[str, str]] = [(k, t) for k, t in json.load(f)]
    # Warm up: the compiled kernels of add_many and of add()'s one-text and near-duplicate paths load
    # (or compile) before the timing.
    warm = DedupIndex(threshold=0.8)
    warm.add_many([(f"warm-{key}", text) for key, text in items[:40]])  # a batch (more than add_many places one at a time)
    for key, text in items[40:50]:
        warm.add(f"warm-{key}", text)
    for key, text in items[:3]:
        warm.add(f"warm-{key}-again", text + " again")
    del warm
    index = DedupIndex(threshold=0.8)
    for lo in range(0, len(items) - 800, 1000):
        index.add_many(items[lo : min(lo + 1000, len(items) - 800)])
    spent: collections.Counter[str] = collections.Counter()
    homes = {"index": index_module, "DedupIndex": DedupIndex, "storage": type(index.storage)}
    depth = [0]  # a stage called inside another (_cluster_component in _link_and_recluster) counts once, in the outer
    for stage, home, name in SPLIT_STAGES:
        target = homes[home]
        if not hasattr(target, name):
            continue  # a stage the other tree does not have
        plain = getattr(target, name)

        def timed(*args: object, _plain: object = plain, _stage: str = stage, **kwargs: object) -> object:
            if depth[0]:
                return _plain(*args, **kwargs)  # type: ignore[operator]
            depth[0] += 1
            t = time.process_time()
            try:
                return _plain(*args, **kwargs)  # type: ignore[operator]
            finally:
                spent[_stage] += time.process_time() - t
                depth[0] -= 1

        setattr(target, name, timed)
    timing, counting = items[-800:-400], items[-400:]
    t0 = time.process_time()
    for key, text in timing:
        index.add(key, text)
    total = time.process_time() - t0
    timed_stages = dict(spent)  # the counting pass below runs the timers too
    calls: collections.Counter[str] = collections.Counter()

    def count(frame: object, event: str, arg: object) -> None:
        if event == "c_call":
            owner = getattr(arg, "__self__", None)
            if (getattr(arg, "__module__", None) or "").startswith("numpy") or type(owner).__module__.startswith("numpy"):
                calls[getattr(arg, "__qualname__", getattr(arg, "__name__", "?"))] += 1
        elif event == "call" and "/numpy/" in frame.f_code.co_filename:  # type: ignore[attr-defined]
            calls["(numpy Python-level functions)"] += 1

    del np
    sys.setprofile(count)
    for key, text in counting:
        index.add(key, text)
    sys.setprofile(None)
    n = len(timing)
    wrappers = calls.pop("(numpy Python-level functions)", 0)
    return {
        "indexed": len(items) - 800,
        "total_us": total / n * 1e6,
        "stages_us": {stage: v / n * 1e6 for stage, v in timed_stages.items()},
        "numpy_calls": sum(calls.values()) / len(counting),
        "numpy_wrappers": wrappers / len(counting),
        "top_calls": [(name, c / len(counting)) for name, c in calls.most_common(6)],
    }


def print_split(label: str, r: dict[str, object]) -> None:
    total = float(r["total_us"])  # type: ignore[arg-type]
    stages: dict[str, float] = r["stages_us"]  # type: ignore[assignment]
    rest = total - sum(stages.values())
    parts = [*sorted(stages.items(), key=lambda kv: -kv[1]), ("the rest of add", rest)]
    print(f"   add() split{label}, 400 adds into an index of {int(r['indexed']):,} (CPU): {total:.1f} us = "  # type: ignore[call-overload]
          + ", ".join(f"{name} {us:.1f} ({us / total:.0%})" for name, us in parts))
    top = ", ".join(f"{name} {c:.1f}" for name, c in r["top_calls"])  # type: ignore[attr-defined]
    print(f"     numpy functions and methods per add() {float(r['numpy_calls']):.1f} ({top}); numpy Python-level"  # type: ignore[arg-type]
          f" functions {float(r['numpy_wrappers']):.1f}")  # type: ignore[arg-type]


def run_row(tree: Path, mode: str, block: int, data: str, kernels: str = "compiled") -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(tree), RAG_DEDUP_KERNELS=kernels)
    cmd = [sys.executable, str(HERE / "bench_stream.py"), "--worker", mode, "--block", str(block), "--data", data]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20000", help="index sizes, comma-separated (one fresh process per row and size)")
    parser.add_argument("--rounds", type=int, default=2, help="processes per row; the best CPU time is kept")
    parser.add_argument("--recipe-max", type=int, default=40000, help="largest size to run the slow recipe on")
    parser.add_argument("--baseline-tree", type=Path, help="another rag-dedup checkout whose rag-dedup rows run too")
    parser.add_argument(
        "--same-pool", action="store_true",
        help="every size samples its base chunks from the largest size's pool (the same mix of sources at every size)",
    )  # fmt: skip
    parser.add_argument("--split", action="store_true", help="also print where one add() spends its CPU, per tree")
    parser.add_argument(
        "--reference-kernels", action="store_true",
        help="also run this tree's rag-dedup rows on the numpy reference path (RAG_DEDUP_KERNELS=reference)",
    )  # fmt: skip
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--block", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "split":
        print(json.dumps(split_worker(args.data)))
        return
    if args.worker:
        print(json.dumps(worker(args.worker, args.block, args.data)))
        return
    sys.path.insert(0, str(HERE))
    from realtext import planted_chunks

    trees = [("", ROOT, "compiled")]
    if args.reference_kernels:
        trees.append((" [numpy reference]", ROOT, "reference"))
    if args.baseline_tree:
        trees.append((f" [{args.baseline_tree.name}]", args.baseline_tree.resolve(), "compiled"))
    sizes = [int(s) for s in args.sizes.split(",")]
    for n in sizes:
        pool = int((max(sizes) if args.same_pool else n) * 0.8)
        items, _, origin = planted_chunks(n, seed=5, pool=pool, distinct=True, max_rate=0.025)
        random.Random(14).shuffle(items)
        print(f"\n{n:,} chunks: base chunks sampled from the first {pool:,} distinct 180-word chunks of {origin}")
        rows = [(name + label, mode, block, tree, kernels) for name, mode, block in ROWS for label, tree, kernels in trees
                if (mode in ("add", "add_many") or not label) and (mode != "recipe" or n <= args.recipe_max)]
        best: dict[str, dict[str, object]] = {}
        with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as f:
            json.dump(items, f, ensure_ascii=False)
            f.flush()
            for _ in range(args.rounds):
                for name, mode, block, tree, kernels in rows:
                    got = run_row(tree, mode, block, f.name, kernels)
                    if name not in best:
                        best[name] = got  # memory from the first process of each row
                    best[name]["cpu"] = min(best[name]["cpu"], got["cpu"])  # type: ignore[type-var]
                    best[name]["wall"] = min(best[name]["wall"], got["wall"])  # type: ignore[type-var]
            splits = [(label, run_row(tree, "split", 1, f.name, kernels)) for label, tree, kernels in trees] if args.split else []
        _print(n, best, args.rounds)
        for label, r in splits:
            print_split(label, r)


def _print(n: int, best: dict[str, dict[str, object]], rounds: int) -> None:
    us = {name: float(r["cpu"]) / n * 1e6 for name, r in best.items()}  # type: ignore[arg-type]
    rensa = us.get(ROWS[3][0])
    recipe = us.get(ROWS[4][0])
    print(f"\n== streaming ingest, {n:,} real 180-word chunks (~20% planted near-duplicates, shuffled), threshold 0.8,"
          f" 128 permutations; one fresh process per row, CPU time best of {rounds}")
    print(f"   {'path':<56} {'us/chunk':>9} {'wall us':>8} {'rensa/this':>10} {'recipe/this':>11} {'peak RSS B':>11} {'retained B':>11}"
          f" {'pairs/chunk':>11}")
    for name, r in best.items():
        cost = us[name]
        ratio_r = f"{rensa / cost:>9.2f}x" if rensa else f"{'-':>10}"
        ratio_d = f"{recipe / cost:>10.2f}x" if recipe else f"{'-':>11}"
        wall = float(r["wall"]) / n * 1e6  # type: ignore[arg-type]
        print(f"   {name:<56} {cost:>9.1f} {wall:>8.1f} {ratio_r} {ratio_d} {int(r['peak']) / n:>11,.0f} {int(r['retained']) / n:>11,.0f}"  # type: ignore[call-overload]
              + (f" {int(r['verified']) / n:>11.2f}" if r.get("verified") is not None else f" {'-':>11}"))  # type: ignore[call-overload]
    for label in sorted({name[len(ROWS[0][0]):] for name in best if name.startswith(ROWS[0][0])}):
        ten, thousand = us.get(ROWS[1][0] + label), us.get(ROWS[2][0] + label)
        if ten and thousand:
            print(f"   add_many blocks of 10 / blocks of 1,000{label}: {ten / thousand:.2f}x the cost a chunk (goal <= 1.5)")
    labels = sorted({name[len(ROWS[0][0]):] for name in best if name.startswith(ROWS[0][0])} - {""})
    for label in labels:  # the same path in this tree against another tree or the reference kernels
        ratios = [f"{name[len('rag-dedup '):]} {us[name + label] / us[name]:.2f}x" for name, mode, _ in ROWS
                  if mode in ("add", "add_many") and name in us and name + label in us]
        print(f"   {label.strip(' []')} / this tree, per path (speed-up): " + ", ".join(ratios))
    digests = {name: r["digest"] for name, r in best.items() if r["digest"]}
    same = len(set(digests.values())) == 1
    print(f"   rag-dedup rows end in the same partition: {same}" + ("" if same else f" {digests}"))
    print("   goals (rensa/this = speed-up): add() >= 1.0x rensa; blocks of 1,000 >= 1.5x rensa and >= 8x the recipe;"
          " peak RSS <= 2,048 B a chunk")


if __name__ == "__main__":
    main()
