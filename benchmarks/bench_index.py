"""DedupIndex benchmark: quality against exact ground truth, signature speed, add_many speed and memory.

Run: ``python benchmarks/bench_index.py [--quick] [--sizes 10000,20000,40000,80000,160000]``
or, for section 4 alone: ``python benchmarks/bench_index.py --fresh-only --baseline /path/to/other/tree``

The largest default size, 160,000, needs 128,000 distinct 180-word chunks of real text (no
near-duplicate among them): on this Debian machine the documentation and man pages give about 105,000,
and the info manuals, Rust books and Python docstrings that ``realtext`` reads after them bring the
pool to about 170,000.

Everything is measured side by side in one run, and printed as ratios (absolute times on a shared
2-core machine mean little):

1. quality: chunks of real text with planted near-duplicates; ground truth is the exact Jaccard of
   5-word shingle sets for *every* pair with J >= 0.7 (an exact all-pairs join with prefix filtering);
   reported: share of pairs with J >= 0.9 and with 0.8 <= J < 0.9 that land in one cluster, and share
   of members whose true Jaccard with their representative is >= 0.7 (no chaining drift);
2. text -> signature: canonicalise, shingle (with the exact digest), MinHash, band keys; rag-dedup's
   compiled kernels and its numpy reference path, in blocks of 64 texts (``add_many``) and one text at
   a time (``add()``), kernels warmed up first, against datasketch ``MinHash.update_batch`` over shingle strings built in Python, and rensa ``RMinHash`` fed the same
   shingle strings (if rensa is installed);
3. add_many: against the seed recipe loop (fresh datasketch MinHash per chunk, MinHashLSH query,
   verify each candidate by its MinHash estimate against the kept sketch, insert), per-item cost from
   the smallest to the largest size, and peak traced memory (tracemalloc, numpy included) per indexed
   chunk, for rag-dedup and for the recipe.
4. add_many per chunk, a fresh process per size and per tree: the same chunks (written once by this
   process) indexed by this tree's package and, with ``--baseline TREE``, by the package of another
   checkout (``TREE/rag_dedup``, imported through ``PYTHONPATH``) in the same run, the runs
   interleaved; printed: best wall time per chunk, the
   per-chunk cost as a ratio to the smallest size (each process warms up on other text first), peak resident memory (VmHWM) and its growth during
   ``add_many`` per chunk, and this tree over the baseline.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realtext import planted_chunks  # noqa: E402

from rag_dedup import DedupIndex, canonical  # noqa: E402
from rag_dedup.minhash import MinHasher  # noqa: E402
from rag_dedup.shingles import shingle_hashes_many  # noqa: E402
from rag_dedup.similarity import jaccard  # noqa: E402


# --- ground truth -----------------------------------------------------------------------------
def all_pairs(sets: list[np.ndarray], t: float) -> list[tuple[int, int, float]]:
    """Every pair (i, j, J) with exact Jaccard J >= t (prefix-filtering similarity join)."""
    nonempty = [i for i, s in enumerate(sets) if len(s)]
    values, counts = np.unique(np.concatenate([sets[i] for i in nonempty]), return_counts=True)
    # Global token order: rarest first (ties by value); a pair with J >= t shares a prefix token.
    order = np.lexsort((values, counts))
    rank_of = np.empty(len(values), dtype=np.int64)
    rank_of[order] = np.arange(len(values))
    tok_list, rec_list = [], []
    for i in nonempty:
        ranks = np.sort(rank_of[np.searchsorted(values, sets[i])])
        p = len(ranks) - math.ceil(t * len(ranks)) + 1
        tok_list.append(ranks[:p])
        rec_list.append(np.full(p, i, dtype=np.int64))
    toks, recs = np.concatenate(tok_list), np.concatenate(rec_list)
    o = np.lexsort((recs, toks))
    toks, recs = toks[o], recs[o]
    bounds = np.flatnonzero(np.diff(toks)) + 1
    candidates: set[tuple[int, int]] = set()
    for group in np.split(recs, bounds):
        if len(group) > 1:
            g = np.unique(group).tolist()
            for a in range(len(g)):
                for b in range(a + 1, len(g)):
                    candidates.add((g[a], g[b]))
    out = []
    for i, j in candidates:
        li, lj = len(sets[i]), len(sets[j])
        if min(li, lj) < t * max(li, lj):
            continue
        s = jaccard(sets[i], sets[j])
        if s >= t:
            out.append((i, j, s))
    return out


def quality(n: int) -> None:
    items, planted, origin = planted_chunks(n, seed=11, max_rate=0.08)
    print(f"\n== 1. quality at threshold 0.8 on {len(items):,} chunks ({len(planted):,} planted near-duplicates)")
    print(f"   text: {origin}")
    keys = [k for k, _ in items]
    sets = shingle_hashes_many([t for _, t in items])
    t0 = time.perf_counter()
    pairs = all_pairs(sets, 0.7)
    print(f"   ground truth: {len(pairs):,} pairs with exact J >= 0.7 ({time.perf_counter() - t0:.1f} s)")
    index = DedupIndex(threshold=0.8)
    index.add_many(items)
    rep = {m.key: m.representative for m in index.matches(keys)}
    pos = {k: i for i, k in enumerate(keys)}
    hi = [rep[keys[i]] == rep[keys[j]] for i, j, s in pairs if s >= 0.9]
    mid = [rep[keys[i]] == rep[keys[j]] for i, j, s in pairs if 0.8 <= s < 0.9]
    members = [k for k in keys if rep[k] != k]
    drift_ok = [jaccard(sets[pos[k]], sets[pos[rep[k]]]) >= 0.7 for k in members]
    below = sum(jaccard(sets[pos[k]], sets[pos[rep[k]]]) < 0.8 for k in members)
    print(f"   pairs J >= 0.9 in one cluster:        {np.mean(hi):.4f}  ({sum(hi):,}/{len(hi):,})  goal >= 0.99")
    print(f"   pairs 0.8 <= J < 0.9 in one cluster:  {np.mean(mid):.4f}  ({sum(mid):,}/{len(mid):,})  goal >= 0.95")
    print(f"   members with J >= 0.7 to their rep:   {np.mean(drift_ok):.4f}  ({sum(drift_ok):,}/{len(members):,})  goal >= 0.99")
    print(f"   members below the threshold (0.8) to their rep: {below}")


# --- text -> signature --------------------------------------------------------------------------
def python_shingles(text: str, n: int = 5) -> list[str]:
    words = canonical(text).split()
    if len(words) < n:
        return [" ".join(words)] if words else []
    return [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]


def signatures_speed(n: int) -> None:
    """Text -> signature, in batches (blocks of 64 texts, as ``add_many`` hashes them) and one text at a
    time (as ``add()``), on the compiled kernels and on the numpy reference path in the same run, beside
    datasketch and rensa. The compiled kernels are warmed up (compiled or loaded from numba's cache)
    before anything is timed. The baseline of the ratios is the compiled batch row."""
    from datasketch import MinHash

    from rag_dedup import compiled, lsh
    from rag_dedup.shingles import shingles_and_digests

    items, _, _ = planted_chunks(n, seed=3)
    texts = [t for _, t in items]
    words = np.mean([len(t.split()) for t in texts])
    print(f"\n== 2. text -> signature, {len(texts):,} real chunks of ~{words:.0f} words, 128 permutations, one core")
    hasher = MinHasher(128)
    b, r = lsh.choose_bands(0.8, 128)

    def batches() -> None:  # what add_many does per block: shingles and digests, signatures, band keys
        for lo in range(0, len(texts), 64):
            sets, _ = shingles_and_digests(texts[lo : lo + 64])
            lsh.band_keys(hasher.signatures(sets), b, r)

    def one_at_a_time() -> None:  # what add() does per text
        for t in texts:
            sets, _ = shingles_and_digests([t])
            lsh.band_keys(hasher.signatures(sets), b, r)

    def datasketch_batch() -> None:
        for t in texts:
            m = MinHash(num_perm=128)
            m.update_batch([s.encode("utf-8") for s in python_shingles(t)])

    timings: dict[str, float] = {}
    chosen = compiled.COMPILED
    paths = [("compiled kernels", True), ("numpy reference", False)] if chosen else [("numpy reference", False)]
    try:
        for label, fast in paths:
            compiled.COMPILED = fast
            batches()  # warm-up: the kernels' first calls, numpy's first calls, lazy tables
            one_at_a_time()
            timings[f"rag-dedup {label}, blocks of 64 (add_many)"] = best_of(batches, 3)
            timings[f"rag-dedup {label}, one text at a time (add)"] = best_of(one_at_a_time, 3)
    finally:
        compiled.COMPILED = chosen
    timings["datasketch update_batch"] = best_of(datasketch_batch, 1)
    try:
        import rensa

        def rensa_text() -> None:
            for t in texts:
                m = rensa.RMinHash(num_perm=128, seed=1)
                m.update(python_shingles(t))
                m.digest()

        shingled = [python_shingles(t) for t in texts]

        def rensa_ready() -> None:
            for s in shingled:
                m = rensa.RMinHash(num_perm=128, seed=1)
                m.update(s)
                m.digest()

        timings["rensa RMinHash, shingles built in Python"] = best_of(rensa_text, 3)
        timings["rensa RMinHash, ready shingles (not from text)"] = best_of(rensa_ready, 3)
    except ImportError:
        print("   (rensa not installed: pip install rensa to show it)")
    base = next(iter(timings.values()))
    print(f"   (the rag-dedup rows include the exact digests and the LSH band keys; 'x' = time / {next(iter(timings))})")
    for name, secs in timings.items():
        print(f"   {name:<52} {len(texts) / secs:>10,.0f} chunks/s {secs / len(texts) * 1e6:>7.1f} us/chunk {secs / base:6.2f}x")


def best_of(fn, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# --- add_many -----------------------------------------------------------------------------------
def recipe(items: list[tuple[str, str]]) -> dict[str, str]:
    """The seed recipe: one datasketch MinHash per chunk, MinHashLSH query, verify each candidate
    with the MinHash estimate (so the sketches are kept), insert; returns duplicate -> first copy."""
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=0.8, num_perm=128)
    sketches: dict[str, MinHash] = {}
    duplicate_of: dict[str, str] = {}
    for key, text in items:
        m = MinHash(num_perm=128)
        m.update_batch([s.encode("utf-8") for s in python_shingles(text)])
        for c in lsh.query(m):
            if sketches[c].jaccard(m) >= 0.8:
                duplicate_of[key] = duplicate_of.get(c, c)
                break
        lsh.insert(key, m)
        sketches[key] = m
    return duplicate_of


def traced_peak(fn) -> int:
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak - base


def add_many_speed(sizes: list[int], recipe_max: int, rounds: int = 3) -> None:
    """Per size: best wall time of ``rounds`` runs of ``add_many`` (of ``rounds - 1`` for the slow
    recipe), the rounds interleaved over all sizes and both sides, so a slow spell of this shared
    machine falls on every row alike instead of on one; then peak traced memory."""
    print(f"\n== 3. add_many, real chunks with ~20% planted near-duplicates, threshold 0.8, 128 permutations")
    print(
        f"   every size samples its base chunks from one pool of {int(max(sizes) * 0.8):,} real chunks that have no"
        " near-duplicate among themselves, so the duplicate share stays the planted one"
    )
    print(
        f"   timing: best of {rounds} runs for rag-dedup and of {rounds - 1} for the recipe, in rounds that"
        " interleave all sizes and both sides"
    )
    pool = int(max(sizes) * 0.8)
    # Light edits (<= 2.5% of words) keep nearly every planted copy above the threshold.
    datasets = [planted_chunks(n, seed=5, pool=pool, distinct=True, max_rate=0.025)[0] for n in sizes]
    ours = [math.inf] * len(sizes)
    theirs = [math.inf] * len(sizes)
    for round_ in range(rounds):
        for i, items in enumerate(datasets):
            ours[i] = min(ours[i], best_of(lambda: DedupIndex(threshold=0.8).add_many(items), 1))
            if sizes[i] <= recipe_max and round_ < rounds - 1:
                theirs[i] = min(theirs[i], best_of(lambda: recipe(items), 1))
    print(f"   {'chunks':>8} {'rag-dedup/s':>12} {'us/chunk':>9} {'recipe/s':>10} {'speed-up':>9} {'peak B/chunk':>13} {'recipe B/chunk':>15}")
    first_cost = None
    shares: list[str] = []
    for n, items, secs, rsecs in zip(sizes, datasets, ours, theirs):
        shares.append(f"{n:,}: {duplicate_share(items):.1%}")
        cost = secs / len(items) * 1e6
        first_cost = first_cost or cost
        peak = traced_peak(lambda: _keep(DedupIndex(threshold=0.8), items)) / len(items)
        if n <= recipe_max:
            rpeak = traced_peak(lambda: recipe(items[: min(n, 20000)])) / min(n, 20000)
            rtxt = f"{len(items) / rsecs:>10,.0f} {rsecs / secs:>8.1f}x {peak:>13,.0f} {rpeak:>15,.0f}"
        else:
            rtxt = f"{'-':>10} {'-':>9} {peak:>13,.0f} {'-':>15}"
        print(f"   {len(items):>8,} {len(items) / secs:>12,.0f} {cost:>9.1f} {rtxt}   (per-chunk cost x{cost / first_cost:.2f} of the smallest)")
    print(f"   share of chunks that are duplicates (not representatives): {'; '.join(shares)}")


def duplicate_share(items: list[tuple[str, str]]) -> float:
    index = DedupIndex(threshold=0.8)
    return sum(m.duplicate_of is not None for m in index.add_many(items)) / len(items)


_KEEP: list[object] = []


def _keep(index: DedupIndex, items: list[tuple[str, str]]) -> None:
    index.add_many(items)
    _KEEP.append(index)  # peak includes the finished index, not just the temporaries
    _KEEP.clear()


def _vm_kb(field: str = "VmHWM") -> int:
    """A memory figure of this process from ``/proc/self/status`` (kB): the peak ``VmHWM`` or the current ``VmRSS``."""
    for row in Path("/proc/self/status").read_text().splitlines():
        if row.startswith(field + ":"):
            return int(row.split()[1])
    return -1


def _reset_peak() -> None:
    """Reset VmHWM to the current RSS (``/proc/self/clear_refs``), so that the peak of loading the chunks
    does not hide the build's."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def one_size(path: str) -> None:
    """In this (fresh) process: ``add_many`` the chunks at ``path`` (a JSON list of [key, text]) once; print a ``RESULT`` line."""
    import rag_dedup

    with open(path, encoding="utf-8") as f:
        items = [(key, text) for key, text in json.load(f)]
    # Warm up first (imports, compiled kernels, caches) on other text, so that the timing is the index's.
    DedupIndex(threshold=0.8).add_many([(f"warm-{i}", f"warm up text number {i} " * 20) for i in range(300)])
    gc.collect()
    _reset_peak()
    before = _vm_kb("VmRSS")
    t0 = time.perf_counter()
    index = DedupIndex(threshold=0.8)
    index.add_many(items)
    seconds = time.perf_counter() - t0
    partition = sorted((rep, sorted(members)) for rep, members in index.clusters(include_singletons=False))
    clusters = hashlib.sha256(json.dumps(partition).encode()).hexdigest()
    print("RESULT " + json.dumps({"n": len(items), "s": seconds, "hwm_kb": _vm_kb(), "start_kb": before,
                                  "clusters": clusters, "package": str(Path(rag_dedup.__file__).parent)}))


def fresh_processes(sizes: list[int], baseline: str | None, rounds: int = 2, data_dir: str | None = None) -> None:
    """Section 4: per-chunk cost of ``add_many`` from the smallest to the largest size, a fresh process
    per size, tree and round (best of ``rounds``), this tree beside ``baseline`` in the same run."""
    trees = [("this", str(Path(__file__).resolve().parent.parent))]
    if baseline:
        trees.append(("baseline", str(Path(baseline).resolve())))
    print(f"\n== 4. add_many per chunk, a fresh process per size and tree, best of {rounds} (interleaved); trees: "
          + ", ".join(f"{name} {path}" for name, path in trees))
    pool = int(max(sizes) * 0.8)
    best: dict[tuple[str, int], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for n in sizes:
            # With --data-dir, the chunks are written there once and read back by later runs.
            if data_dir:
                os.makedirs(data_dir, exist_ok=True)
            paths.append(os.path.join(data_dir or tmp, f"planted-{n}-of-{pool}.json"))
            if not os.path.exists(paths[-1]):
                items = planted_chunks(n, seed=5, pool=pool, distinct=True, max_rate=0.025)[0]
                with open(paths[-1], "w", encoding="utf-8") as f:
                    json.dump(items, f, ensure_ascii=False)
        for _ in range(rounds):
            for n, path in zip(sizes, paths):
                for name, tree in trees:
                    env = {**os.environ, "PYTHONPATH": tree}
                    run = subprocess.run([sys.executable, __file__, "--one-size", path], env=env, capture_output=True, text=True)
                    if run.returncode:
                        raise SystemExit(f"{name} at {n:,} chunks failed:\n{run.stderr}")
                    row = json.loads(next(r for r in run.stdout.splitlines() if r.startswith("RESULT "))[7:])
                    if not row["package"].startswith(tree):
                        raise SystemExit(f"{name}: imported {row['package']}, not the package of {tree}")
                    if (name, n) not in best or row["s"] < best[name, n]["s"]:
                        best[name, n] = row
    print(f"   {'chunks':>8} " + " ".join(f"{name + ' us/chunk':>18} {'x smallest':>10} {'peak RSS':>12} {'B/chunk':>9}" for name, _ in trees)
          + ("   this / baseline (time, RSS), same partition" if baseline else ""))
    for n in sizes:
        cells = []
        for name, _ in trees:
            r = best[name, n]
            cost = r["s"] / n * 1e6
            first = best[name, sizes[0]]["s"] / sizes[0] * 1e6
            cells.append(f"{cost:>18.1f} {cost / first:>9.2f}x {r['hwm_kb'] / 1024:>9,.1f} MB {(r['hwm_kb'] - r['start_kb']) * 1024 / n:>9,.0f}")
        line = f"   {n:>8,} " + " ".join(cells)
        if baseline:
            a, b = best["this", n], best["baseline", n]
            line += f"   {a['s'] / b['s']:.2f}x, {a['hwm_kb'] / b['hwm_kb']:.2f}x, {a['clusters'] == b['clusters']}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--sizes", default="10000,20000,40000,80000,160000", help="add_many sizes")
    parser.add_argument("--recipe-max", type=int, default=40000, help="largest size to run the slow recipe on")
    parser.add_argument("--quality-n", type=int, default=20000)
    parser.add_argument("--baseline", default=None, help="another checkout to run section 4 with, in the same run")
    parser.add_argument("--fresh-only", action="store_true", help="run section 4 only")
    parser.add_argument("--signatures-only", action="store_true", help="run section 2 only")
    parser.add_argument("--data-dir", default=None, help="keep section 4's chunks here and reuse them")
    parser.add_argument("--one-size", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_size is not None:
        one_size(args.one_size)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.quick:
        sizes, args.quality_n, args.recipe_max = [2000, 4000], 4000, 4000
    if args.signatures_only:
        signatures_speed(4000 if args.quick else 8000)
        return
    if not args.fresh_only:
        quality(args.quality_n)
        signatures_speed(4000 if args.quick else 8000)
        add_many_speed(sizes, args.recipe_max)
    fresh_processes(sizes, args.baseline, data_dir=args.data_dir)


if __name__ == "__main__":
    main()
