"""Real near-duplicate families: does the cluster rule keep them together, and what does a big one cost?

Run: ``python benchmarks/bench_families.py [--quick] [--family-sizes 500,5000,20000] [--baseline TREE] [--family-only]``

1. **Real families.** Paragraphs (split at blank lines and Debian's `` .`` lines, >= 10 words) of
   ``/usr/share/doc/*/copyright``, ``/usr/share/common-licenses/*``, and the ``*.dist-info`` METADATA
   and licence files of the Python installations on this machine (this venv, ``~/.pyenv/versions``):
   one licence rewrapped, re-indented, with other holders and years, in hundreds of copies. Ground
   truth: the exact Jaccard of the 5-word shingle sets of *every* pair of distinct canonical texts that
   shares a shingle (a sparse matrix product of the text-by-shingle incidence matrix, no sampling).
   Counted over distinct canonical texts (groups; exact copies are trivially together). Both rules run
   in one process on the same items through ``DedupIndex(threshold=0.8)`` (drift floor 0.7): the rule
   before issue 11 (``old_rule.split_component``, kept for this benchmark only) and the package's
   ``cluster_component``. Printed: pair recall per band of exact J, the share of members >= the drift
   floor to their representative, pair precision (the share of same-cluster pairs with J >= the floor),
   cluster counts.
2. **Re-written copies.** For every paragraph with a near-duplicate, a re-wrapped copy (the words at
   another line width) and a re-cased one (upper case): same canonical text. Goal: 100% reported
   ``kind="exact"`` and in their original's cluster.
3. **A big family.** One real licence (the MIT licence, from a licence file on this machine) under 500 / 5,000 / 20,000 different copyright lines (real holder names and years from the
   Debian copyright files), each size in a fresh subprocess: the time of ``add_many`` and the peak
   resident memory (VmHWM); then the time of one more ``add`` into the family (incremental cost) and of
   its ``remove``; per-variant cost, memory and the one ``add`` as ratios to the smallest family. With
   ``--baseline TREE``, the same runs with the package of another checkout (``TREE/rag_dedup``, through
   ``PYTHONPATH``) in the same run, its ratios, this tree over it, and whether the final clusters agree.
   Each figure is the best of ``--rounds`` runs (3), the rounds interleaved over the sizes and trees.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import old_rule  # noqa: E402

from rag_dedup import DedupIndex, canonical  # noqa: E402
from rag_dedup.policy import Member  # noqa: E402
from rag_dedup.shingles import shingle_hashes_many  # noqa: E402

THRESHOLD = 0.8
BANDS = ((0.9, 1.01), (0.8, 0.9), (0.7, 0.8))
_PARAGRAPH_BREAK = re.compile(r"\n(?:[ \t]*\.?[ \t]*\n)+")


# --- the corpus -------------------------------------------------------------------------------
def source_paths() -> list[str]:
    paths = sorted(glob.glob("/usr/share/doc/*/copyright")) + sorted(glob.glob("/usr/share/common-licenses/*"))
    sites = [str(Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages")]
    sites += sorted(glob.glob(str(Path.home() / ".pyenv/versions/*/lib/python3*/site-packages")))
    for site in sites:
        for pattern in ("*.dist-info/METADATA", "*.dist-info/LICENSE*", "*.dist-info/licenses/*"):
            paths += sorted(glob.glob(f"{site}/{pattern}"))
    return paths


def paragraphs(limit: int | None) -> list[tuple[str, str]]:
    """``(key, paragraph)`` for every paragraph of >= 10 words of the sources, in path order."""
    items: list[tuple[str, str]] = []
    for path in source_paths():
        try:
            text = Path(path).read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for i, para in enumerate(_PARAGRAPH_BREAK.split(text)):
            if len(para.split()) >= 10:
                items.append((f"{path}#{i}", para))
                if limit is not None and len(items) >= limit:
                    return items
    return items


# --- exact ground truth -----------------------------------------------------------------------
def exact_pairs(sets: list[np.ndarray], least: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair (i < j) of ``sets`` that shares a shingle, with its exact Jaccard, kept when >= ``least``.

    The incidence matrix X (sets x shingles) times its transpose gives |A ∩ B| for every pair that
    shares a shingle; J = |A ∩ B| / (|A| + |B| - |A ∩ B|). Row blocks bound the memory.
    """
    from scipy import sparse

    sizes = np.array([len(s) for s in sets], dtype=np.int64)
    values, inverse = np.unique(np.concatenate(sets), return_inverse=True)
    rows = np.repeat(np.arange(len(sets)), sizes)
    x = sparse.csr_matrix((np.ones(len(rows), dtype=np.int32), (rows, inverse)), shape=(len(sets), len(values)))
    xt = x.T.tocsr()
    out_i, out_j, out_s = [], [], []
    for lo in range(0, len(sets), 2000):
        block = (x[lo : lo + 2000] @ xt).tocoo()
        i, j, inter = block.row + lo, block.col, block.data.astype(np.int64)
        upper = i < j
        i, j, inter = i[upper], j[upper], inter[upper]
        sim = inter / (sizes[i] + sizes[j] - inter)
        keep = sim >= least
        out_i.append(i[keep])
        out_j.append(j[keep])
        out_s.append(sim[keep])
    return np.concatenate(out_i), np.concatenate(out_j), np.concatenate(out_s)


class OldRuleIndex(DedupIndex):
    """DedupIndex with the cluster rule it had before issue 11 (benchmark only)."""

    def _cluster_component(self, gids, shingles):  # type: ignore[no-untyped-def]
        from rag_dedup.similarity import jaccard_many

        storage = self.storage
        keys = [k for ks in storage.group_items(gids) for k in ks]
        members, gid_of = [], {}
        for key, rec in zip(keys, storage.get_items(keys)):
            gid_of[key] = rec.gid
            members.append(Member(key, rec.length, rec.source, rec.authority, rec.first_seen))
        missing = [g for g in gids if g not in shingles]
        shingles.update(zip(missing, storage.group_shingles(missing)))

        def similarities(g, others):  # type: ignore[no-untyped-def]
            return jaccard_many(shingles[g], [shingles[o] for o in others])

        return keys, old_rule.split_component(
            members, lambda m: gid_of[m.key], similarities, self.threshold, self.policy, self.drift_floor
        )

    # The package's shortcuts past _cluster_component (a batch's small components together; add()'s
    # component of two groups) would cluster by the new rule: this index takes every component here.
    def _cluster_components(self, comps, shingles):  # type: ignore[no-untyped-def]
        return [self._cluster_component(comp, shingles) for comp in comps]

    def _cluster_pair(self, a, b, sim):  # type: ignore[no-untyped-def]
        return self._cluster_component([a, b], {})


def measure(name: str, index: DedupIndex, items: list[tuple[str, str]], group_of: dict[str, int], truth, seconds: float) -> None:
    gi, gj, sim = truth
    keys = [k for k, _ in items]
    matches = dict(zip(keys, index.matches(keys)))
    cluster_of_group: dict[int, str] = {}
    for k in keys:
        if group_of[k] >= 0:
            cluster_of_group[group_of[k]] = matches[k].cluster_id
    same = np.array([cluster_of_group[a] == cluster_of_group[b] for a, b in zip(gi.tolist(), gj.tolist())], dtype=bool)
    recall = []
    for lo, hi in BANDS:
        band = (sim >= lo) & (sim < hi)
        recall.append(f"{same[band].mean():.4f} of {int(band.sum()):,}")
    # Members (one per distinct text, representatives' groups excluded) >= floor to their representative.
    floor = index.drift_floor
    member_sims = {}
    for k in keys:
        m = matches[k]
        if m.duplicate_of is not None and group_of[k] != group_of[m.representative]:
            member_sims[group_of[k]] = m.similarity
    near_members = np.array(list(member_sims.values()))
    within = float((near_members >= floor).mean()) if len(near_members) else 1.0
    # Pair precision: same-cluster pairs of distinct texts with J >= floor, over all same-cluster pairs.
    sizes = Counter(cluster_of_group.values())
    same_pairs = sum(n * (n - 1) // 2 for n in sizes.values())
    good = int((same & (sim >= floor)).sum())
    precision = good / same_pairs if same_pairs else 1.0
    multi = sum(1 for n in sizes.values() if n > 1)
    print(
        f"   {name:<9} recall J>=0.9 {recall[0]:<18} 0.8-0.9 {recall[1]:<18} 0.7-0.8 {recall[2]:<18}"
        f" members>=floor {within:.4f} of {len(near_members):,}  pair precision {precision:.4f} of {same_pairs:,}"
        f"  clusters of >1 text {multi:,}  add_many {seconds:.2f}s"
    )


def real_families(limit: int | None) -> None:
    items = paragraphs(limit)
    canon = {k: canonical(t) for k, t in items}
    group_id: dict[str, int] = {}
    group_of = {k: (group_id.setdefault(c, len(group_id)) if c else -1) for k, c in canon.items()}
    texts = sorted(group_id, key=group_id.__getitem__)
    sets = shingle_hashes_many(texts, canonicalized=True)
    t0 = time.perf_counter()
    truth = exact_pairs(sets, 0.7)
    print(f"\n== 1. real families: {len(items):,} paragraphs from {len(source_paths()):,} files, {len(texts):,} distinct canonical texts")
    print(f"   ground truth: {len(truth[0]):,} pairs with exact J >= 0.7 among all pairs sharing a shingle ({time.perf_counter() - t0:.1f}s)")
    print("   goals (new rule): recall >= 0.995 (J >= 0.9), >= 0.97 (0.8-0.9); >= 99.5% of members >= floor 0.7")
    # Re-written copies of every text with a near-duplicate (J >= 0.8 to another).
    in_family = sorted(set(truth[0][truth[2] >= THRESHOLD].tolist()) | set(truth[1][truth[2] >= THRESHOLD].tolist()))
    first_key = {}
    for k, _ in items:
        first_key.setdefault(group_of[k], k)
    text_of = dict(items)
    copies: list[tuple[str, str, str]] = []  # (copy key, copy text, original key)
    for g in in_family:
        orig = first_key[g]
        words = text_of[orig].split()
        wrapped = "\n".join(" ".join(words[i : i + 7]) for i in range(0, len(words), 7))
        for tag, text in (("rewrapped", wrapped), ("recased", text_of[orig].upper())):
            if canonical(text) == canon[orig]:
                copies.append((f"{orig}~{tag}", text, orig))
    copy_items = [(k, t) for k, t, _ in copies]
    for k, _, orig in copies:
        group_of[k] = group_of[orig]
    for name, cls in (("old rule", OldRuleIndex), ("new rule", DedupIndex)):
        index = cls(threshold=THRESHOLD)
        t0 = time.perf_counter()
        index.add_many(items)
        seconds = time.perf_counter() - t0
        measure(name, index, items, group_of, truth, seconds)
        got = index.add_many(copy_items)
        exact = sum(m.kind == "exact" for m in got)
        placed = sum(m.cluster_id == index.match(orig).cluster_id for m, (_, _, orig) in zip(got, copies))
        print(
            f"   {name:<9} re-written copies (same canonical text) of {len(copies):,}: kind='exact' {exact / len(copies):.2%},"
            f" in their original's cluster {placed / len(copies):.2%}"
        )


# --- a big family -----------------------------------------------------------------------------
def holders_and_years() -> tuple[list[str], list[str]]:
    holders, years = set(), set()
    line = re.compile(r"^\s*Copyright:?\s*(?:\([cC]\)\s*)?((?:\d{4}(?:\s*[-,]\s*\d{4})*),?)\s+(.+?)\s*$")
    for path in sorted(glob.glob("/usr/share/doc/*/copyright")):
        try:
            text = Path(path).read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for row in text.splitlines():
            m = line.match(row)
            if m and 2 <= len(m.group(2).split()) <= 8:
                years.add(m.group(1).rstrip(","))
                holders.add(m.group(2))
    return sorted(holders), sorted(years)


def mit_licence() -> str:
    """The first MIT licence in site-packages without its copyright line: grant, condition, disclaimer."""
    site = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    for path in sorted(site.glob("*.dist-info/LICENSE*")):
        paras = _PARAGRAPH_BREAK.split(path.read_text("utf-8", errors="replace"))
        for i, para in enumerate(paras):
            if para.lstrip().startswith("Permission is hereby granted, free of charge"):
                return "\n\n".join(paras[i : i + 3]).strip()
    raise SystemExit("no MIT licence file found in site-packages")


def family(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` distinct copies of the MIT licence, each under another real copyright line."""
    holders, years = holders_and_years()
    grant = mit_licence()
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    while len(out) < n:
        line = f"Copyright (c) {rng.choice(years)} {rng.choice(holders)}"
        if line not in seen:
            seen.add(line)
            out.append((f"variant-{len(out)}", f"{line}\n\n{grant}"))
    return out


def vm_hwm_kb() -> int:
    for row in Path("/proc/self/status").read_text().splitlines():
        if row.startswith("VmHWM:"):
            return int(row.split()[1])
    return -1


def one_family(n: int) -> None:
    """In this (fresh) process: add a family of ``n``, one more variant, and remove it; print one line
    and, last, a ``RESULT`` line of JSON for the parent's ratios."""
    items = family(n + 1)
    # Warm up outside the timing: the compiled kernels load from numba's cache (or compile) on their first
    # call in a process (~0.4 s). The peak RSS below is the process's, numba and LLVM included (~140 MB).
    # The warm-up family takes the same paths (up to 1,000 variants: a component of 512 groups or more
    # keeps its counts in a clusters.Family).
    warm = DedupIndex(threshold=THRESHOLD)
    size = min(n, 1000)
    warm_items = family(size + 1, seed=1)
    warm.add_many(warm_items[:size])
    warm.add(*warm_items[size])
    warm.remove(warm_items[size][0])
    del warm
    index = DedupIndex(threshold=THRESHOLD)
    t0 = time.perf_counter()
    index.add_many(items[:n])
    seconds = time.perf_counter() - t0
    hwm = vm_hwm_kb()
    t0 = time.perf_counter()
    m = index.add(*items[n])
    one = time.perf_counter() - t0
    t0 = time.perf_counter()
    index.remove(items[n][0])
    gone = time.perf_counter() - t0
    clusters = sum(1 for _ in index.clusters())
    print(
        f"   {n:>7,} variants: add_many {seconds:7.2f}s ({seconds / n * 1e6:6.0f} us/variant), peak RSS {hwm / 1024:7.1f} MB,"
        f" {clusters} cluster(s); one more add() {one * 1e3:7.1f} ms (kind {m.kind!r}, cluster of {m.cluster_size:,},"
        f" displaced {m.displaced!r}), its remove() {gone * 1e3:7.1f} ms"
    )
    import rag_dedup

    partition = sorted((rep, sorted(members)) for rep, members in index.clusters())
    print("RESULT " + json.dumps({"n": n, "us": seconds / n * 1e6, "mb": hwm / 1024, "add_ms": one * 1e3, "remove_ms": gone * 1e3,
                                  "clusters": partition, "package": str(Path(rag_dedup.__file__).parent)}))


def big_families(sizes: list[int], baseline: str | None, rounds: int = 3) -> None:
    holders, years = holders_and_years()
    trees = [("this", str(Path(__file__).resolve().parent.parent))]
    if baseline:
        trees.append(("baseline", str(Path(baseline).resolve())))
    print(
        f"\n== 3. one big family: the MIT licence under real copyright lines ({len(holders):,} holders, {len(years):,} year spans),"
        " a fresh process per size and tree; trees: " + ", ".join(f"{name} {path}" for name, path in trees)
    )
    print(f"   each figure the best of {rounds} runs, the rounds interleaved over sizes and trees; the lines are each run's")
    runs: dict[tuple[str, int], list[dict]] = {}
    for _ in range(rounds):
        for n in sizes:
            for name, tree in trees:
                env = {**os.environ, "PYTHONPATH": tree}
                run = subprocess.run([sys.executable, __file__, "--one-family", str(n)], env=env, check=True, capture_output=True, text=True)
                for row in run.stdout.splitlines():
                    if row.startswith("RESULT "):
                        result = json.loads(row[len("RESULT ") :])
                        if not result["package"].startswith(tree):
                            raise SystemExit(f"{name}: imported {result['package']}, not the package of {tree}")
                        runs.setdefault((name, n), []).append(result)
                    else:
                        print(f"   {name:<8}" + row[2:])
    results: dict[str, list[dict]] = {
        name: [
            {**rs[0], **{f: min(r[f] for r in rs) for f in ("us", "mb", "add_ms", "remove_ms")},
             "clusters": all(r["clusters"] == rs[0]["clusters"] for r in rs) and rs[0]["clusters"]}
            for rs in (runs[name, n] for n in sizes)
        ]
        for name, _ in trees
    }
    for name, _ in trees:
        rows = results[name]
        base = rows[0]

        def ratios(field: str, rows: list[dict] = rows, base: dict = base) -> str:
            return " / ".join(f"x{r[field] / base[field]:.2f}" for r in rows)

        print(
            f"   {name:<8} best: " + "; ".join(
                f"{r['n']:,}: {r['us']:.0f} us/variant, {r['mb']:.1f} MB, add() {r['add_ms']:.1f} ms, remove() {r['remove_ms']:.1f} ms" for r in rows
            )
        )
        print(
            f"   {name:<8} baseline the {base['n']:,}-variant family, for families " + " / ".join(f"x{r['n'] / base['n']:g}" for r in rows)
            + f": cost a variant {ratios('us')}, peak RSS {ratios('mb')}, one add() {ratios('add_ms')}, its remove() {ratios('remove_ms')}"
        )
    if baseline:
        this, other = results["this"], results["baseline"]
        print(
            "   this / baseline, same family sizes: add_many "
            + " / ".join(f"{a['us'] / b['us']:.2f}x" for a, b in zip(this, other))
            + ", peak RSS " + " / ".join(f"{a['mb'] / b['mb']:.2f}x" for a, b in zip(this, other))
            + ", one add() " + " / ".join(f"{a['add_ms'] / b['add_ms']:.2f}x" for a, b in zip(this, other))
            + ", its remove() " + " / ".join(f"{a['remove_ms'] / b['remove_ms']:.2f}x" for a, b in zip(this, other))
            + ", same clusters " + " / ".join(str(a["clusters"] == b["clusters"]) for a, b in zip(this, other))
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few thousand paragraphs, small families")
    parser.add_argument("--family-sizes", default="500,5000,20000")
    parser.add_argument("--limit", type=int, default=None, help="at most this many paragraphs")
    parser.add_argument("--one-family", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--baseline", default=None, help="another checkout to run section 3 with too, in the same run")
    parser.add_argument("--family-only", action="store_true", help="run section 3 only")
    parser.add_argument("--rounds", type=int, default=3, help="section 3: best of this many runs")
    args = parser.parse_args()
    if args.one_family is not None:
        one_family(args.one_family)
        return
    if not args.family_only:
        real_families(5000 if args.quick else args.limit)
    big_families([500, 2000] if args.quick else [int(s) for s in args.family_sizes.split(",")], args.baseline, args.rounds)


if __name__ == "__main__":
    main()
