"""Spark engine benchmark: local[1] vs local[2] vs one-process DedupIndex.add_many, on real text.

Run: ``python benchmarks/bench_spark.py [--sizes 50000,200000] [--masters local[1],local[2]] [--repeats 3,1]``

For each size, ``realtext.planted_chunks`` gives that many 180-word chunks of real text, 20% of them
planted near-duplicates (a few percent of words edited), the base chunks drawn from one pool (the
largest size's) so that every size has the same mix of sources, written once as one Parquet file. Then, side by side
in one run:

* each Spark master runs ``python -m``-style in its own process (its own JVM): read the Parquet,
  :func:`rag_dedup.spark.dedup_job`, :func:`rag_dedup.spark.write_result`; wall time of the job (the
  JVM's start is timed apart), peak RSS of the Python driver and of the JVM (``VmHWM``; in local
  mode the JVM is driver and executor at once), and bytes shuffled (the sum of every stage's
  shuffle write, from Spark's REST API), per chunk;
* the baseline, ``DedupIndex().add_many(items)`` in one process (its own, for its RSS);
* equality: every item's (cluster_id, representative, duplicate_of, similarity, kind, cluster_size)
  from each Spark run against the baseline's ``matches``;
* the largest LSH bucket (groups sharing one band key) and the largest component (groups).

Each master runs ``--repeats`` times per size, the order of the masters alternating between rounds
(the machine's load is printed beside each run), and the ratios use the medians. CPU seconds of the
process tree (driver, JVM, Python workers) are printed too: on a machine shared with other work,
local[2] over local[1] in CPU is the parallel overhead, which wall time mixes with the load.

Printed: one line per run, then the ratios: local[2] over local[1], local[2] over DedupIndex, and
the per-chunk cost growth from the smallest size to the largest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(REPO)]  # this checkout's rag_dedup, also on the executors


#: The Match fields compared, Spark row against DedupIndex.matches, on every size.
_COMPARED = ("cluster_id", "representative", "duplicate_of", "similarity", "kind", "cluster_size")


def _fields(m: object) -> list[object]:
    return [getattr(m, f) for f in _COMPARED]


def _jvm_peak_kb() -> int:
    """VmHWM of this process's java children (the pyspark gateway JVM), in kB."""
    me = str(os.getpid())
    peak = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[1] != me:
                continue
            status = (stat.parent / "status").read_text()
        except OSError:
            continue
        if "java" not in (stat.parent / "comm").read_text():
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]))
    return peak


def _own_peak_mb() -> float:
    """This process's peak RSS (VmHWM) in MB; unlike ru_maxrss it does not count the parent's pages before exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _tree_cpu_s() -> float:
    """CPU seconds of this process and all its descendants (the JVM and its Python workers), reaped ones included."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[str, list[tuple[str, list[str]]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(fields[1], []).append((stat.parent.name, fields))
    own = os.times()
    total = own.user + own.system + own.children_user + own.children_system
    todo = [str(os.getpid())]
    while todo:
        for pid, fields in children.get(todo.pop(), []):
            total += sum(int(x) for x in fields[11:15]) / tick  # utime, stime, cutime, cstime
            todo.append(pid)
    return total


def _shuffled_bytes(spark: object) -> int:
    sc = spark.sparkContext  # type: ignore[attr-defined]
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages?status=complete"
    with urllib.request.urlopen(url, timeout=30) as response:
        stages = json.load(response)
    return sum(int(s.get("shuffleWriteBytes", 0)) for s in stages)


def worker(parquet: str, out: str, master: str) -> dict[str, float]:
    """One Spark run in this process; returns its measurements."""
    from rag_dedup.spark import dedup_job, session, write_result

    t0 = time.perf_counter()
    spark = session(master, spark__ui__enabled="true", spark__ui__port="0", spark__driver__memory="2g")
    t1 = time.perf_counter()
    c1 = _tree_cpu_s()
    df = spark.read.parquet(parquet)
    manifest = write_result(dedup_job(df), out)
    t2 = time.perf_counter()
    c2 = _tree_cpu_s()
    shuffled = _shuffled_bytes(spark)
    jvm = _jvm_peak_kb()
    spark.stop()
    return {
        "startup_s": t1 - t0,
        "job_s": t2 - t1,
        "cpu_s": c2 - c1,
        "items": manifest["items"],
        "shuffled_bytes": shuffled,
        "driver_rss_mb": _own_peak_mb(),
        "jvm_rss_mb": jvm / 1024,
    }


def baseline(parquet: str, answers: str) -> dict[str, float]:
    """DedupIndex.add_many on the same chunks in this process; writes its answers as JSON lines."""
    import pyarrow.parquet as pq

    from rag_dedup import DedupIndex

    table = pq.read_table(parquet)
    items = list(zip(table.column("key").to_pylist(), table.column("text").to_pylist()))
    del table
    t0 = time.perf_counter()
    c0 = time.process_time()
    index = DedupIndex()
    matches = index.add_many(items)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    with open(answers, "w", encoding="utf-8") as f:
        for m in matches:
            f.write(json.dumps([m.key, *_fields(m)]) + "\n")
    return {"job_s": elapsed, "cpu_s": cpu, "items": len(items), "driver_rss_mb": _own_peak_mb()}


def _equal(result: Path, answers: Path) -> tuple[bool, int]:
    import pyarrow.parquet as pq

    t = pq.read_table(result / "items", columns=["key", *_COMPARED])
    got = {r[0]: list(r[1:]) for r in zip(*(t.column(c).to_pylist() for c in t.column_names))}
    differ = 0
    with open(answers, encoding="utf-8") as f:
        for line in f:
            key, *want = json.loads(line)
            differ += got.pop(key, None) != want
    return differ == 0 and not got, differ + len(got)


def _largest(result: Path) -> tuple[int, int]:
    """(largest bucket, largest component), both in groups."""
    import numpy as np
    import pyarrow.parquet as pq

    g = pq.read_table(result / "groups", columns=["bands", "component"])
    flat = g.column("bands").combine_chunks().flatten().to_numpy()
    bucket = int(np.unique(flat, return_counts=True)[1].max()) if len(flat) else 0
    comps = [c for c in g.column("component").to_pylist() if c is not None]
    component = int(np.unique(comps, return_counts=True)[1].max()) if comps else 1
    return bucket, component


def _run(args: list[str]) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, cwd=REPO, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="50000,200000")
    p.add_argument("--masters", default="local[1],local[2]")
    p.add_argument("--repeats", default="3,1", help="runs of each master per size (one number, or one per size)")
    p.add_argument("--worker", nargs=3, metavar=("PARQUET", "OUT", "MASTER"), help=argparse.SUPPRESS)
    p.add_argument("--baseline", nargs=2, metavar=("PARQUET", "ANSWERS"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(worker(*a.worker)))
        return
    if a.baseline:
        print(json.dumps(baseline(*a.baseline)))
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    from realtext import planted_chunks

    sizes = [int(s) for s in a.sizes.split(",")]
    masters = a.masters.split(",")
    repeats = [int(r) for r in a.repeats.split(",")]
    repeats = repeats * len(sizes) if len(repeats) == 1 else repeats
    if len(repeats) != len(sizes):
        raise SystemExit(f"--repeats: {len(repeats)} numbers for {len(sizes)} sizes")
    # Every size draws its base chunks from the same pool (the largest size's), so per-chunk costs compare.
    pool = int(max(sizes) * 0.8)
    per_chunk: dict[str, list[float]] = {m: [] for m in ["DedupIndex.add_many", *masters]}
    print(
        f"bench_spark: sizes {sizes}, masters {masters}, repeats {repeats} (alternating order, median), baseline "
        f"DedupIndex.add_many (one process); cores {os.cpu_count()}; base chunks drawn from the first {pool:,}"
    )
    for n, rounds in zip(sizes, repeats):
        items, _, origin = planted_chunks(n, pool=pool)
        with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
            root = Path(tmp)
            parquet = root / "chunks.parquet"
            pq.write_table(pa.table({"key": [k for k, _ in items], "text": [t for _, t in items]}), parquet)
            del items
            print(f"n={n:,}: {origin}")
            load = os.getloadavg()[0]
            base = _run(["--baseline", str(parquet), str(root / "answers.jsonl")])
            per_chunk["DedupIndex.add_many"].append(base["job_s"] / n)
            print(
                f"  DedupIndex.add_many: {base['job_s']:.1f} s, {base['job_s'] / n * 1e6:.0f} us/chunk, CPU {base['cpu_s']:.1f} s, "
                f"peak RSS {base['driver_rss_mb']:.0f} MB (load {load:.1f})"
            )
            runs: dict[str, list[dict[str, float]]] = {m: [] for m in masters}
            for rnd in range(rounds):
                for master in masters if rnd % 2 == 0 else masters[::-1]:
                    out = root / ("out-" + master.replace("[", "-").replace("]", ""))  # no glob characters in a Spark path
                    load = os.getloadavg()[0]
                    r = _run(["--worker", str(parquet), str(out), master])
                    same, differ = _equal(out, root / "answers.jsonl")
                    bucket, component = _largest(out)
                    shutil.rmtree(out)
                    runs[master].append(r)
                    print(
                        f"  spark {master} #{rnd + 1}: job {r['job_s']:.1f} s ({r['job_s'] / n * 1e6:.0f} us/chunk; JVM start "
                        f"{r['startup_s']:.1f} s), CPU {r['cpu_s']:.1f} s (driver + JVM + Python workers), load {load:.1f}, "
                        f"peak RSS driver {r['driver_rss_mb']:.0f} MB + JVM {r['jvm_rss_mb']:.0f} MB, "
                        f"shuffled {r['shuffled_bytes'] / n:.0f} B/chunk, largest bucket {bucket} groups, "
                        f"largest component {component} groups, equal to DedupIndex: {same} ({differ} differ)"
                    )
            job = {m: _median([r["job_s"] for r in runs[m]]) for m in masters}
            for master in masters:
                per_chunk[master].append(job[master] / n)
            if len(masters) >= 2:
                one, two = masters[0], masters[1]
                cpu = {m: _median([r["cpu_s"] for r in runs[m]]) for m in (one, two)}
                print(
                    f"  median of {rounds}: {one} {job[one]:.1f} s, {two} {job[two]:.1f} s; speed-up {two} over {one}: "
                    f"{job[one] / job[two]:.2f}x (CPU {two} / {one}: {cpu[two] / cpu[one]:.2f}x); "
                    f"{two} over DedupIndex.add_many: {job[two] / base['job_s']:.2f}x the time"
                )
    if len(sizes) > 1:
        for name, costs in per_chunk.items():
            print(f"per-chunk cost growth {sizes[0]:,} -> {sizes[-1]:,}, {name}: {costs[-1] / costs[0]:.2f}x")


if __name__ == "__main__":
    main()
