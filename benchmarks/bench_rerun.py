"""What a refused optimistic batch costs to run again, this tree beside a baseline tree, in one run.

Run: ``python benchmarks/bench_rerun.py --baseline-tree DIR [--stored 5000] [--batch 1024] [--rounds 3]
[--url redis://host:port/db]``

One staged conflict, on real chunks (``realtext.planted_chunks``, 20% planted near-duplicates, in a
fixed shuffled order): a namespace holds ``--stored`` chunks; a ``DedupIndex`` adds a batch of
``--batch`` more, and between that batch's reads and its commit (failure injection on its optimistic
commit) a second ``DedupIndex`` on the same namespace adds another ``--batch`` chunks, which write
buckets (and digests, components) that the first batch read. The first batch is refused and runs
again; its second attempt commits. Reported, for each tree (a fresh process each, the trees
alternately, ``--rounds`` times; the least of each figure): the worker CPU (``process_time``) of the
first attempt's storage phase and of the second's, the Jaccard pairs each computed (the compiled
kernel's or the numpy bound's calls), and the CPU of the refused commit (its check of what the batch
read against what the other commit wrote). The lower the second attempt's share of the first, the
less a conflict costs two workers. Without ``--url`` a private ``redis-server`` is started.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def measure(url: str, stored: int, size: int) -> dict[str, Any]:
    """One staged conflict with the tree ``rag_dedup`` is imported from (see the module docstring)."""
    import rag_dedup.index as index_module
    from rag_dedup import DedupIndex
    from rag_dedup.storage.redis.storage import RedisStorage

    sys.path.insert(0, str(HERE))
    from realtext import planted_chunks, warm_up

    items, _, _ = planted_chunks(stored + 2 * size)
    random.Random(1).shuffle(items)
    base, mine, theirs = items[:stored], items[stored : stored + size], items[stored + size :]
    warm_up(DedupIndex, items)  # loads the compiled kernels: not measured
    pairs = [0]
    for name in ("pair_jaccard", "jaccard_upper_bounds"):  # every computed pair goes through one of them
        original = getattr(index_module, name)

        def counted(sets: Any, left: Any, right: Any, original: Any = original) -> Any:
            pairs[0] += len(left)
            return original(sets, left, right)

        setattr(index_module, name, counted)
    namespace = f"bench-rerun-{uuid.uuid4().hex[:8]}"
    index, other = DedupIndex(storage=url, namespace=namespace), DedupIndex(storage=url, namespace=namespace)
    index.add_many(base)
    storage = index.storage
    overlay = storage._overlay  # type: ignore[attr-defined]
    commit = overlay.commit_optimistic
    commits: list[float] = []

    def commit_after_the_other(batch: Any, *prefix: bytes) -> str:  # key layout 3's commit took the bucket prefix too
        if not commits:
            other.add_many(theirs)  # lands between the batch's reads and its commit
        cpu = time.process_time()
        try:
            return commit(batch, *prefix)
        finally:
            commits.append(time.process_time() - cpu)

    overlay.commit_optimistic = commit_after_the_other
    attempts: list[tuple[float, int]] = []
    run_batch = RedisStorage.run_batch

    def timed(self: Any, body: Any) -> None:
        def attempt() -> None:
            pairs[0] = 0
            cpu = time.process_time()
            body()
            attempts.append((time.process_time() - cpu, pairs[0]))

        run_batch(self, attempt)

    storage.run_batch = timed.__get__(storage)  # type: ignore[method-assign]
    index.add_many(mine)
    conflicts, fallbacks = storage.conflicts, storage.fallbacks  # type: ignore[attr-defined]
    index.drop()
    if (conflicts, fallbacks, len(attempts)) != (1, 0, 2):
        raise RuntimeError(f"the staged conflict did not happen as planned: {conflicts} conflicts, {fallbacks} fallbacks")
    return {
        "first": attempts[0][0],
        "again": attempts[1][0],
        "first_pairs": attempts[0][1],
        "again_pairs": attempts[1][1],
        "refused_commit": commits[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-tree", required=True, help="a directory holding the baseline's rag_dedup package")
    parser.add_argument("--stored", type=int, default=5000, help="chunks in the namespace before the batch (default 5000)")
    parser.add_argument("--batch", type=int, default=1024, help="chunks of the batch, and of the other worker's (default 1024)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the trees alternately; the least of each figure is kept")
    parser.add_argument("--url", help="an existing Redis server to use")
    args = parser.parse_args()
    if not (Path(args.baseline_tree) / "rag_dedup").is_dir():
        sys.exit(f"--baseline-tree {args.baseline_tree}: no rag_dedup package there")
    sys.path.insert(0, str(HERE))
    from bench_redis import run_child, start_server

    with tempfile.TemporaryDirectory() as tmp:
        proc, url = (None, args.url) if args.url else start_server(tmp)
        try:
            load = os.getloadavg()[0]
            runs: dict[str, list[dict[str, Any]]] = {"base": [], "this": []}
            for _ in range(max(1, args.rounds)):
                runs["base"].append(run_child(Path(args.baseline_tree), "bench_rerun", url, args.stored, args.batch))
                runs["this"].append(run_child(REPO, "bench_rerun", url, args.stored, args.batch))
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait()
    best = {tree: {k: min(r[k] for r in rs) for k in rs[0]} for tree, rs in runs.items()}
    base, this = best["base"], best["this"]
    print(f"bench_rerun: one staged conflict, a batch of {args.batch:,} chunks onto {args.stored:,}; least of {args.rounds} round(s)")
    rows = [
        ("first attempt's storage phase, worker CPU (ms)", base["first"] * 1e3, this["first"] * 1e3, "{:.1f}"),
        ("second attempt's storage phase, worker CPU (ms)", base["again"] * 1e3, this["again"] * 1e3, "{:.1f}"),
        ("second attempt / first", base["again"] / base["first"], this["again"] / this["first"], "{:.2f}"),
        ("pairs computed, first attempt", base["first_pairs"], this["first_pairs"], "{:,.0f}"),
        ("pairs computed, second attempt", base["again_pairs"], this["again_pairs"], "{:,.0f}"),
        ("refused commit (its check), worker CPU (ms)", base["refused_commit"] * 1e3, this["refused_commit"] * 1e3, "{:.1f}"),
    ]
    print(f"{'figure':<50} {'baseline':>10} {'this tree':>10} {'this / baseline':>16}")
    for name, b, t, fmt in rows:
        print(f"{name:<50} {fmt.format(b):>10} {fmt.format(t):>10} {t / b if b else float('nan'):>15.2f}x")
    print(f"baseline tree: {args.baseline_tree}; load average {load:.2f} (1 min) before, {os.getloadavg()[0]:.2f} after, on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
