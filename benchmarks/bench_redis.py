"""DedupIndex on Redis: add_many throughput against the in-memory index, two worker processes against
one, and network round trips per added chunk, side by side in one run.

Run: ``python benchmarks/bench_redis.py [--chunks 20000] [--url redis://host:port/db]``

Without ``--url`` the benchmark starts its own ``redis-server`` (Debian package ``redis-server``) on a
free loopback port, without persistence, and stops it at the end. The text is real: chunks of the
documentation found on this machine, 20% of them planted near-duplicates (``realtext.planted_chunks``),
in a fixed shuffled order.

Configurations, each on the same chunks and (for Redis) a fresh namespace:

1. in memory, one process: ``DedupIndex().add_many(chunks)`` (the baseline);
2. Redis, one process: the same call on ``DedupIndex(storage=url)``;
3. Redis, two processes: two spawned workers, each adding every other chunk with ``add_many`` at the
   same time into the same namespace (timed from a common start signal, after imports, to the last
   worker's end). The final clusters are checked against the in-memory index.

A batch is hashed outside the lock and written under it, so two workers overlap their hashing while
their storage writes take turns. On a 2-core machine the server, the two workers and anything else
running share two cores: read the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realtext import planted_chunks

from rag_dedup import DedupIndex


def start_server(directory: str) -> tuple[subprocess.Popen[bytes], str]:
    """A private redis-server on a free loopback port, without persistence."""
    import redis

    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is not installed: apt-get install redis-server (or pass --url)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", directory],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    for _ in range(500):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.02)
    client.close()
    return proc, url


def partition(index: DedupIndex, keys: list[str]) -> list[tuple[str, str, float]]:
    return [(m.key, m.representative, m.similarity) for m in index.matches(keys)]


def worker(index: DedupIndex, items: list[tuple[str, str]], ready: Any, start: Any, results: Any) -> None:
    """One ingestion worker: signal readiness, wait for the start, add, report (end time, round trips)."""
    ready.set()
    start.wait()
    before = index.storage.round_trips
    index.add_many(items)
    results.put((time.monotonic(), index.storage.round_trips - before, index.storage.lock_wait_seconds))


def run_workers(url: str, namespace: str, items: list[tuple[str, str]], n: int) -> tuple[float, int, float, DedupIndex]:
    """Time ``n`` spawned processes adding interleaved parts of ``items`` into one namespace."""
    index = DedupIndex(storage=url, namespace=namespace)
    index.drop()
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    readies = [ctx.Event() for _ in range(n)]
    procs = [ctx.Process(target=worker, args=(index, items[w::n], readies[w], start, results)) for w in range(n)]
    for p in procs:
        p.start()
    for r in readies:
        r.wait()
    t0 = time.monotonic()
    start.set()
    reports = [results.get() for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            sys.exit(f"a worker failed with exit code {p.exitcode}")
    return max(r[0] for r in reports) - t0, sum(r[1] for r in reports), sum(r[2] for r in reports), index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=20_000, help="chunks to add (default 20000)")
    parser.add_argument("--url", help="an existing Redis server to use (a namespace of it is dropped)")
    args = parser.parse_args()

    items, planted, origin = planted_chunks(args.chunks)
    random.Random(1).shuffle(items)
    keys = [k for k, _ in items]
    print(f"bench_redis: {len(items):,} chunks of ~180 words, {len(planted):,} planted near-duplicates; text: {origin}")

    with tempfile.TemporaryDirectory() as tmp:
        proc, url = (None, args.url) if args.url else start_server(tmp)
        try:
            import redis

            client = redis.Redis.from_url(url)
            info = client.info("server")
            print(f"server: redis {info['redis_version']} at {url.split('@')[-1]}" + ("" if args.url else " (private, loopback, no persistence)"))

            memory = DedupIndex()
            t0 = time.perf_counter()
            memory.add_many(items)
            t_mem = time.perf_counter() - t0
            expected = partition(memory, keys)

            one = DedupIndex(storage=url, namespace="bench-redis-1")
            one.drop()
            used = client.info("memory")["used_memory"]
            before = one.storage.round_trips
            t0 = time.perf_counter()
            one.add_many(items)
            t_one = time.perf_counter() - t0
            rt_one = one.storage.round_trips - before
            per_chunk = (client.info("memory")["used_memory"] - used) / len(items)
            same_one = partition(one, keys) == expected

            t_two, rt_two, waited, two = run_workers(url, "bench-redis-2", items, 2)
            same_two = partition(two, keys) == expected

            n = len(items)

            def line(name: str, seconds: float, note: str) -> str:
                return f"  {name:<34} {seconds:7.2f} s  {n / seconds:9,.0f} chunks/s  {note}"

            print("add_many, same chunks:")
            print(line("in memory, 1 process", t_mem, "(baseline)"))
            print(line("Redis, 1 process", t_one, f"{t_mem / t_one:.2f}x memory"))
            print(line("Redis, 2 processes (interleaved)", t_two, f"{t_one / t_two:.2f}x one Redis process, {t_mem / t_two:.2f}x memory"))
            print(f"  (the two workers waited {waited:.2f} s in all for each other's write lock)")
            print("round trips per added chunk:")
            print(f"  Redis, 1 process                   {rt_one / n:.4f}  ({rt_one:,} round trips for {n:,} chunks)")
            print(f"  Redis, 2 processes                 {rt_two / n:.4f}  ({rt_two:,} round trips for {n:,} chunks)")
            print(f"Redis memory per indexed chunk (used_memory growth): {per_chunk:,.0f} bytes")
            print(f"same clusters, representatives and similarities as in memory: 1 process {same_one}, 2 processes {same_two}")
            one.drop()
            two.drop()
            client.close()
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait()


if __name__ == "__main__":
    main()
