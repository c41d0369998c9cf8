"""DedupIndex on Redis, this tree beside a named baseline commit, in one run: add_many throughput
(in memory, one Redis process, two Redis processes), round trips per chunk, time the write lock was
held, Redis memory per chunk, and whether the clusters equal the in-memory index's.

Run: ``python benchmarks/bench_redis.py [--chunks 20000] [--baseline REV | --baseline-tree DIR] [--rounds N]
[--url redis://host:port/db]``, or ``python benchmarks/bench_redis.py --parsers [--chunks N] [--rounds N]
[--url ...]`` for this tree with and without hiredis (below).

The baseline is a commit of this repository (default: the merge base of ``HEAD`` and ``main``),
exported with ``git archive`` to a temporary directory; each tree is measured in a fresh process of
its own, one after the other, on the same chunks and the same server. Without ``--url`` the benchmark
starts its own ``redis-server`` (Debian package ``redis-server``) on a free loopback port, without
persistence, and stops it at the end. The text is real: chunks of the documentation found on this
machine, 20% of them planted near-duplicates (``realtext.planted_chunks``), in a fixed shuffled order.

Configurations, for each tree, on the same chunks and (for Redis) a fresh namespace:

1. in memory, one process: ``DedupIndex().add_many(chunks)``;
2. Redis, one process: the same call on ``DedupIndex(storage=url)``;
3. Redis, two processes: two spawned workers, each adding every other chunk with ``add_many`` at the
   same time into the same namespace (timed from a common start signal, after imports, to the last
   worker's end). The final clusters are checked against the in-memory index.

"Memory per chunk" is the growth of the server's ``used_memory`` over configuration 2, divided by the
chunks. "Lock held" is the time one process spent inside the storage's write lock (what the second
worker cannot overlap; with optimistic batches, only the batches that fall back to the lock and the
index's opening hold it). "Cores busy" is the CPU time of configuration 2 (the worker's own
``process_time`` plus the server's ``used_cpu_user + used_cpu_sys``) over its wall time: two workers
need twice that, so on a machine of 2 cores the most two processes can give over one is
``2 / cores busy`` (the ceiling printed beside the measured ratio), before any lock is counted. On a 2-core machine the server, the two workers and anything else running
share two cores: read the ratios, not the absolute numbers. "CPU per chunk" (the workers' and the
server's CPU over the chunks) is the figure a loaded machine disturbs least: what a second worker
costs in work (conflicts run again, polling for the lock), whatever the cores it got. The server's
share of it is the serial part: one redis-server thread serves both workers, and while it runs one
worker's script the other waits for its reply, so the less of it a chunk costs, the closer two workers
come to twice one. "Conflicts" are
optimistic attempts refused because another commit wrote what they read, and run again; "fallbacks"
the batches that then ran under the lock (a tree without optimistic batches shows 0). "Refused before
their commit" are the conflicts found at a read (the attempt stopped there), the others at the commit;
"the refused attempts' CPU" is the workers' CPU in attempts that were refused (``RedisStorage.refused_cpu``),
the work conflicts throw away (a tree that does not count them shows 0).

With several ``--rounds`` the table's times are each the least of the rounds, so its ratio may pair one
round's two-process time with another round's one-process time. The rows after it take each round's
two-process run against its own one-process run and give the median over the rounds (each round's
ratio printed below the table), split into its three factors, an identity:

    2 processes / 1 process = cores busy (2 processes) / cores busy (1 process) / (CPU per chunk, 2 / 1)

where cores busy is the CPU of the workers and the server over the wall time. On 2 cores the first
factor is at most 2; what a second worker costs in CPU (conflicts run again, two processes and the
server sharing two cores) is the last. "The workers' ends apart" is the time one worker ran alone at
the end (the other had finished its share), a share of the two-process wall time.

``--parsers``: this tree only, no baseline; the same configurations (and the same check of the
clusters) three times, each in a fresh process of its own and its spawned workers, the three
alternately in each round:

* ``hiredis``: redis-py as it comes, which parses replies with hiredis's C parser (``_HiredisParser``)
  when hiredis is installed, as the ``redis`` extra installs it;
* ``python parser``: the same, but the storage opened with ``parser_class=redis.connection._RESP2Parser``
  (``RedisStorage(url, namespace=..., **options)`` passes it to ``redis.Redis.from_url``): the
  pure-Python reply parser (on a RESP3 connection, redis-py 8's default, redis-py takes its RESP3
  twin ``_RESP3Parser``);
* ``no hiredis``: hiredis hidden from the process and its workers (``sys.modules["hiredis"] = None``
  before redis-py is imported, so ``redis.utils.HIREDIS_AVAILABLE`` is False): what a machine without
  hiredis runs.

Commands are packed as the tree packs them: this one with its own ``connection.LinearPacker`` in all
three (a tree that lets redis-py pack with hiredis when it is there shows ``HiredisRespSerializer`` in
the first two), so here ``python parser`` and ``no hiredis`` run the same code: their difference is
the noise of the measurement.

It prints configurations 2 and 3 of each side by side (chunks/s, CPU per chunk: the workers' and the
server's, 2 processes / 1 process; the least of the rounds, and for CPU per chunk also their median)
with each one's ratio to ``hiredis``, and the parser and packer
the connections of each run used (read from them after the run: a run that did not get the parser
its name says stops the benchmark).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

#: The environment variable that hides hiredis (``--parsers``'s "no hiredis" runs). Read when this module
#: is imported: the measuring process imports it before rag_dedup, and a spawned worker unpickles its
#: target (``worker``, of this module) before its index, so neither has imported redis-py yet.
HIDE_HIREDIS = "BENCH_REDIS_HIDE_HIREDIS"
if os.environ.get(HIDE_HIREDIS) == "1":
    sys.modules["hiredis"] = None  # type: ignore[assignment]  # "import hiredis" raises ImportError

#: ``--parsers``'s runs: name -> (redis-py options given to RedisStorage, hide hiredis). A parser class
#: is named by its module path here, as it is only importable once redis-py is.
PARSERS: dict[str, tuple[dict[str, str], bool]] = {
    "hiredis": ({}, False),
    "python parser": ({"parser_class": "redis.connection._RESP2Parser"}, False),
    "no hiredis": ({}, True),
}


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


def export_tree(rev: str, directory: Path) -> Path:
    """The package of commit ``rev``, extracted under ``directory`` (``git archive``)."""
    archive = directory / "baseline.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), rev, "rag_dedup"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(directory / "baseline", filter="data")
    return directory / "baseline"


# --- one tree, measured in its own process (--child) ---------------------------------------------------
def partition(index: Any, keys: list[str]) -> list[tuple[str, str, float]]:
    return [(m.key, m.representative, m.similarity) for m in index.matches(keys)]


def open_index(url: str, namespace: str, options: dict[str, str]) -> Any:
    """``DedupIndex(storage=url, namespace=namespace)``, or, given redis-py ``options`` (values that are
    dotted names of classes, imported here), ``DedupIndex(storage=RedisStorage(url, namespace, **options))``."""
    import importlib

    from rag_dedup import DedupIndex

    if not options:
        return DedupIndex(storage=url, namespace=namespace)
    from rag_dedup.storage.redis import RedisStorage

    resolved = {}
    for name, dotted in options.items():
        module, _, attribute = dotted.rpartition(".")
        resolved[name] = getattr(importlib.import_module(module), attribute)
    return DedupIndex(storage=RedisStorage(url, namespace=namespace, **resolved))


def wire(storage: Any) -> str:
    """The reply parser and command packer of the storage's idle connections, as ``parser / packer``
    (class names; redis-py's private attributes, which it has had since 4.x)."""
    pool = storage._client.connection_pool
    kinds = {
        (type(c._parser).__name__, type(c._command_packer).__name__)
        for c in list(getattr(pool, "_available_connections", []))
    }
    return ", ".join(sorted(f"{parser} / {packer}" for parser, packer in kinds)) or "no idle connection"


def worker(index: Any, items: list[tuple[str, str]], ready: Any, start: Any, results: Any) -> None:
    """One ingestion worker: warm up, signal readiness, wait for the start, add, report (end time, round trips...).

    The warm-up (``realtext.warm_up``: a private in-memory index of some of the chunks) loads the compiled
    kernels, which a new process pays for on its first call (~0.45 s): the one-process run is timed warm too."""
    from realtext import warm_up

    warm_up(type(index), items)
    ready.set()
    start.wait()
    before = index.storage.round_trips
    cpu = time.process_time()
    index.add_many(items)
    cpu = time.process_time() - cpu
    storage = index.storage
    # conflicts, fallbacks: optimistic attempts run again, batches run under the lock (0 for a tree without them)
    results.put(
        (
            time.monotonic(),
            storage.round_trips - before,
            storage.lock_wait_seconds,
            getattr(storage, "conflicts", 0),
            getattr(storage, "fallbacks", 0),
            cpu,
            wire(storage),
            getattr(storage, "refused_cpu", 0.0),
            getattr(storage, "refused_before_commit", 0),
            getattr(storage, "refusal_hits", None),
        )
    )


def run_workers(
    url: str, namespace: str, items: list[tuple[str, str]], n: int, options: dict[str, str] | None = None
) -> tuple[float, int, float, int, int, float, Any, list[str], list[tuple[float, float]], float, float, int, dict[str, int] | None]:
    """Time ``n`` spawned processes adding interleaved parts of ``items`` into one namespace; the sums of
    their round trips, lock waits, conflicts, fallbacks, and CPU (theirs and the server's); the index;
    each worker's ``wire``; each worker's end (seconds after the start) and CPU, in the order they
    ended; the server's CPU; the sums of the CPU the refused attempts took and of the attempts refused
    before their commit (0 for a tree that does not count them), and the sums of their refusal_hits (what the
    refusing checks found written: None for a tree without them). ``options``: as for ``open_index``."""
    import redis

    index = open_index(url, namespace, options or {})
    index.drop()
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    readies = [ctx.Event() for _ in range(n)]
    procs = [ctx.Process(target=worker, args=(index, items[w::n], readies[w], start, results)) for w in range(n)]
    for p in procs:
        p.start()
    for r in readies:
        r.wait()
    client = redis.Redis.from_url(url)
    server0 = server_cpu(client)
    t0 = time.monotonic()
    start.set()
    reports = [results.get() for _ in procs]
    server = server_cpu(client) - server0
    client.close()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            sys.exit(f"a worker failed with exit code {p.exitcode}")
    sums = [sum(r[i] for r in reports) for i in range(1, 6)]
    wires = sorted(r[6] for r in reports)
    ends = sorted((r[0] - t0, r[5]) for r in reports)
    refused_cpu, early = sum(r[7] for r in reports), sum(r[8] for r in reports)
    hits: dict[str, int] | None = None if any(r[9] is None for r in reports) else {}
    for r in reports if hits is not None else []:
        for kind, count in r[9].items():
            hits[kind] = hits.get(kind, 0) + count
    return (
        max(r[0] for r in reports) - t0,
        sums[0],
        sums[1],
        sums[2],
        sums[3],
        sums[4] + server,
        index,
        wires,
        ends,
        server,
        refused_cpu,
        early,
        None if hits is None else dict(sorted(hits.items())),
    )


def server_cpu(client: Any) -> float:
    """CPU seconds the redis-server process has used (user + system, all its threads: ``INFO cpu``)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def measure(url: str, chunks: int, tag: str, parser: str = "hiredis") -> dict[str, Any]:
    """Every figure of one tree (the one ``rag_dedup`` is imported from); ``parser``, one of PARSERS,
    says how its Redis storage is opened (whether hiredis is hidden is this process's environment)."""
    import redis

    from rag_dedup import DedupIndex

    sys.path.insert(0, str(HERE))
    from realtext import planted_chunks, warm_up

    items, _, _ = planted_chunks(chunks)
    random.Random(1).shuffle(items)
    keys = [k for k, _ in items]
    client = redis.Redis.from_url(url)

    warm_up(DedupIndex, items)  # loads (or, in a fresh tree, compiles) the kernels: not timed
    memory = DedupIndex()
    t0 = time.perf_counter()
    memory.add_many(items)
    t_mem = time.perf_counter() - t0
    expected = partition(memory, keys)

    options = PARSERS[parser][0]
    one = open_index(url, f"bench-redis-{tag}-1", options)
    one.drop()
    held = [0.0]
    storage_type = type(one.storage)
    # The outermost holding of the lock: _locked where the tree has it (lock() and the batches that fall
    # back to the lock after refused optimistic attempts both go through it), else lock().
    held_by = "_locked" if hasattr(storage_type, "_locked") else "lock"
    plain_lock = getattr(storage_type, held_by)

    @contextlib.contextmanager
    def timed_lock(self: Any, *args: Any) -> Any:
        started = time.perf_counter()
        outermost = not getattr(self, "_bench_inside", False)
        self._bench_inside = True
        try:
            with plain_lock(self, *args):
                yield
        finally:
            if outermost:
                self._bench_inside = False
                held[0] += time.perf_counter() - started

    setattr(storage_type, held_by, timed_lock)
    used = client.info("memory")["used_memory"]
    before = one.storage.round_trips
    server0, cpu0 = server_cpu(client), time.process_time()
    t0 = time.perf_counter()
    one.add_many(items)
    t_one = time.perf_counter() - t0
    cpu_one, server_one = time.process_time() - cpu0, server_cpu(client) - server0
    setattr(storage_type, held_by, plain_lock)
    rt_one = one.storage.round_trips - before
    per_chunk = (client.info("memory")["used_memory"] - used) / len(items)
    same_one = partition(one, keys) == expected
    wire_one = wire(one.storage)
    one.drop()

    t_two, rt_two, waited, conflicts, fallbacks, cpu_two, two, wire_two, ends_two, server_two, refused_cpu, early, hits = run_workers(
        url, f"bench-redis-{tag}-2", items, 2, options
    )
    same_two = partition(two, keys) == expected
    two.drop()
    client.close()
    return {
        "chunks": len(items),
        "t_mem": t_mem,
        "t_one": t_one,
        "t_two": t_two,
        "held": held[0],
        "waited": waited,
        "conflicts": conflicts,
        "fallbacks": fallbacks,
        "refused_cpu": refused_cpu,
        "refused_early": early,
        "refusal_hits": hits,
        "cpu_two": cpu_two,
        "server_two": server_two,
        "ends_two": ends_two,
        "cpu_one": cpu_one,
        "server_one": server_one,
        "rt_one": rt_one,
        "rt_two": rt_two,
        "bytes": per_chunk,
        "same_one": same_one,
        "same_two": same_two,
        "parser": parser,
        "hiredis": bool(redis.utils.HIREDIS_AVAILABLE),
        "wire_one": wire_one,
        "wire_two": wire_two,
    }


def run_child(package: Path, module: str, *args: Any, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``<module>.measure(*args)`` (a benchmark module of this folder) in a fresh process whose
    ``rag_dedup`` is the one under ``package``: its JSON result. ``args`` are written with ``repr``;
    ``env``, variables added to the process's environment (which its spawned workers inherit)."""
    code = (
        f"import sys; sys.path.insert(0, {str(package)!r}); sys.path.insert(1, {str(HERE)!r}); "
        f"import json, {module}, rag_dedup; "
        f"assert rag_dedup.__file__.startswith({str(package)!r}), rag_dedup.__file__; "
        f"print(json.dumps({module}.measure({', '.join(map(repr, args))})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=str(package), env={**os.environ, **(env or {})}
    )
    if out.returncode != 0:
        sys.exit(f"measuring {package} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


#: The figures of a round that a busy machine only makes worse: of several rounds, the least is kept.
BEST_OF = ("t_mem", "t_one", "t_two", "held", "waited", "cpu_one", "server_one", "cpu_two")


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One tree's rounds as one: the least of each of BEST_OF, the rest from the first round, and the
    clusters equal to the in-memory index's only if they were in every round."""
    out = dict(runs[0])
    for key in BEST_OF:
        out[key] = min(r[key] for r in runs)
    for key in ("same_one", "same_two"):
        out[key] = all(r[key] for r in runs)
    return out


def round_medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One tree's rounds, each round's 2-process figures against its own 1-process run, and the median
    of each over the rounds (the least times of :func:`best` can pair one lucky round with another).

    The ratio splits into ``busy_two / busy_one / cpu_ratio``: cores kept busy (CPU of the workers and
    the server over the wall time) with two processes and with one, and what a chunk costs in CPU with
    two over one. ``tail``: the time between the two workers' ends, a share of the wall (one worker
    alone then); ``imbalance``: the gap between their CPU, a share of the larger; ``refused``: the CPU
    the workers spent in attempts that were refused, a share of the 2-process CPU (workers and server);
    ``cpu_ratio_kept``: ``cpu_ratio`` without it (the committed attempts' CPU and the server's, over the
    one-process CPU: what two workers cost a chunk beside the work that conflicts throw away).
    """

    def figures(r: dict[str, Any]) -> dict[str, float]:
        (end_a, cpu_a), (end_b, cpu_b) = r["ends_two"][0], r["ends_two"][-1]
        return {
            "ratio": r["t_one"] / r["t_two"],
            "busy_two": r["cpu_two"] / r["t_two"],
            "busy_one": (r["cpu_one"] + r["server_one"]) / r["t_one"],
            "cpu_ratio": r["cpu_two"] / (r["cpu_one"] + r["server_one"]),
            "tail": (end_b - end_a) / r["t_two"],
            "imbalance": abs(cpu_a - cpu_b) / max(cpu_a, cpu_b),
            "refused": r["refused_cpu"] / r["cpu_two"],
            "cpu_ratio_kept": (r["cpu_two"] - r["refused_cpu"]) / (r["cpu_one"] + r["server_one"]),
        }

    each = [figures(r) for r in runs]
    out: dict[str, Any] = {key: statistics.median(f[key] for f in each) for key in each[0]}
    out["ratios"] = [f["ratio"] for f in each]
    return out


#: redis-py's pure-Python reply parsers: it swaps _RESP2Parser for _RESP3Parser on a RESP3 connection
#: (the default protocol of redis-py 8; 2 before).
PURE_PARSERS = ("_RESP2Parser", "_RESP3Parser")


def expected_parsers(parser: str, hiredis: bool) -> set[str]:
    """The reply parsers a ``parser`` run may have used, in a process where hiredis is (not) importable.
    (The packer is the tree's business: this tree packs with LinearPacker either way.)"""
    options, hidden = PARSERS[parser]
    if hiredis and not hidden and "parser_class" not in options:
        return {"_HiredisParser"}
    return set(PURE_PARSERS)


def compare_parsers(url: str, chunks: int, rounds: int) -> None:
    """``--parsers``: this tree's configurations 2 and 3 run as each of PARSERS, printed side by side."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in PARSERS}
    names = list(PARSERS)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # a different one first each round
            env = {HIDE_HIREDIS: "1" if PARSERS[name][1] else "0"}
            result = run_child(REPO, "bench_redis", url, chunks, "parsers", name, env=env)
            want = expected_parsers(name, result["hiredis"])
            got = {result["wire_one"], *result["wire_two"]}
            if len(got) != 1 or {w.split(" / ")[0] for w in got} - want or (PARSERS[name][1] and result["hiredis"]):
                sys.exit(f"the {name!r} run used {sorted(got)}, not one of {sorted(want)}: it did not measure what it says")
            runs[name].append(result)
    best_of = {name: best(results) for name, results in runs.items()}
    base = best_of["hiredis"]
    n = base["chunks"]

    def per(total: float) -> float:
        return total / n * 1e6

    # the least of the rounds can be one lucky round: the median of them beside it; what a second worker
    # costs varies with how many batches conflict: their mean
    median = {
        name: {
            "one": statistics.median(r["cpu_one"] + r["server_one"] for r in results),
            "two": statistics.median(r["cpu_two"] for r in results),
        }
        for name, results in runs.items()
    }
    mean = {
        name: {key: statistics.mean(r[key] for r in results) for key in ("conflicts", "fallbacks")}
        for name, results in runs.items()
    }
    figures: list[tuple[str, Any, str]] = [
        ("add_many on Redis, 1 process (chunks/s)", lambda r: n / r["t_one"], "{:,.0f}"),
        ("add_many on Redis, 2 processes (chunks/s)", lambda r: n / r["t_two"], "{:,.0f}"),
        ("2 processes / 1 process", lambda r: r["t_one"] / r["t_two"], "{:.2f}x"),
        ("CPU per chunk, 1 process (its CPU + server CPU)", lambda r: per(r["cpu_one"] + r["server_one"]), "{:.0f} us"),
        ("  the worker's CPU per chunk, 1 process", lambda r: per(r["cpu_one"]), "{:.0f} us"),
        ("  redis-server's CPU per chunk, 1 process", lambda r: per(r["server_one"]), "{:.0f} us"),
        ("CPU per chunk, 2 processes (their CPU + server CPU)", lambda r: per(r["cpu_two"]), "{:.0f} us"),
        ("CPU per chunk, 1 process, the median of the rounds", lambda r: per(median[r["parser"]]["one"]), "{:.0f} us"),
        ("CPU per chunk, 2 processes, the median of the rounds", lambda r: per(median[r["parser"]]["two"]), "{:.0f} us"),
        ("round trips per chunk, 1 process", lambda r: r["rt_one"] / n, "{:.4f}"),
        ("attempts run again, 2 processes (mean of the rounds)", lambda r: mean[r["parser"]]["conflicts"], "{:.1f}"),
        ("batches fallen back to the lock (mean of the rounds)", lambda r: mean[r["parser"]]["fallbacks"], "{:.1f}"),
    ]
    others = names[1:]
    header = f"{'figure':<55}" + "".join(f"{name:>15}" for name in names)
    header += "".join(f"{name + ' / hiredis':>26}" for name in others)
    print(header)
    for label, value, fmt in figures:
        line = f"{label:<55}" + "".join(f"{fmt.format(value(best_of[name])):>15}" for name in names)
        b = value(base)
        line += "".join(f"{(value(best_of[name]) / b if b else float('nan')):>25.2f}x" for name in others)
        print(line)
    for name in names:
        r = best_of[name]
        print(
            f"{name}: parser / packer {r['wire_one']}; same clusters, representatives and similarities as in "
            f"memory: 1 process {r['same_one']}, 2 processes {r['same_two']}"
        )
    if not base["hiredis"]:
        print("hiredis is not installed here: the 'hiredis' run is redis-py's pure-Python parser too (pip install hiredis)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=20_000, help="chunks to add (default 20000)")
    parser.add_argument("--baseline", default=None, help="the baseline commit (default: git merge-base HEAD main)")
    parser.add_argument("--url", help="an existing Redis server to use (namespaces bench-redis-* of it are dropped)")
    parser.add_argument("--baseline-tree", help="a directory holding the baseline's rag_dedup package, instead of --baseline")
    parser.add_argument(
        "--rounds", type=int, default=1, help="rounds, baseline and this tree alternately; times and CPU are the best of them"
    )
    parser.add_argument(
        "--parsers",
        action="store_true",
        help="this tree only: Redis with hiredis, with redis-py's pure-Python parser, and without hiredis, side by side",
    )
    args = parser.parse_args()
    if args.parsers and (args.baseline or args.baseline_tree):
        parser.error("--parsers measures this tree only: it takes no --baseline or --baseline-tree")
    if args.baseline_tree and not (Path(args.baseline_tree) / "rag_dedup").is_dir():
        sys.exit(f"--baseline-tree {args.baseline_tree}: no rag_dedup package there")
    if args.baseline_tree:  # no git needed: this tree may be an export too
        rev = args.baseline_tree
    elif not args.parsers:
        rev = args.baseline or subprocess.run(
            ["git", "-C", str(REPO), "merge-base", "HEAD", "main"], capture_output=True, text=True, check=True
        ).stdout.strip()
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", rev], capture_output=True, text=True, check=True).stdout.strip()

    with tempfile.TemporaryDirectory() as tmp:
        proc, url = (None, args.url) if args.url else start_server(tmp)
        try:
            import redis

            info = redis.Redis.from_url(url).info("server")
            print(
                f"bench_redis{' --parsers' if args.parsers else ''}: {args.chunks:,} chunks of ~180 words, 20% planted "
                f"near-duplicates; {'this tree; ' if args.parsers else ''}best of {max(1, args.rounds)} round(s), "
                f"the {'parsers' if args.parsers else 'trees'} alternately"
            )
            print(f"server: redis {info['redis_version']} at {url.split('@')[-1]}" + ("" if args.url else " (private, loopback, no persistence)"))
            load = os.getloadavg()[0]
            if args.parsers:
                compare_parsers(url, args.chunks, max(1, args.rounds))
            else:
                tree = Path(args.baseline_tree) if args.baseline_tree else export_tree(rev, Path(tmp))
                rounds: list[tuple[dict[str, Any], dict[str, Any]]] = []
                for _ in range(max(1, args.rounds)):
                    rounds.append(
                        (run_child(tree, "bench_redis", url, args.chunks, "base"), run_child(REPO, "bench_redis", url, args.chunks, "this"))
                    )
                base, this = (best([r[i] for r in rounds]) for i in (0, 1))
                medians = [round_medians([r[i] for r in rounds]) for i in (0, 1)]
            load_after = os.getloadavg()[1]
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait()
    if args.parsers:
        print(f"load average: {load:.2f} (1 min) before the runs, {load_after:.2f} (5 min) after; on {os.cpu_count()} cores")
        return

    n = this["chunks"]

    def busy(r: dict[str, Any]) -> float:
        return float(r["cpu_one"] + r["server_one"]) / float(r["t_one"])

    def cpu_per(r: dict[str, Any], run: str) -> float:
        total = r["cpu_one"] + r["server_one"] if run == "one" else r["cpu_two"]
        return float(total) / n * 1e6

    def server_per(r: dict[str, Any]) -> float:
        return float(r["server_one"]) / n * 1e6

    rows = [
        ("add_many in memory, 1 process (chunks/s)", n / base["t_mem"], n / this["t_mem"], "{:,.0f}"),
        ("add_many on Redis, 1 process (chunks/s)", n / base["t_one"], n / this["t_one"], "{:,.0f}"),
        ("add_many on Redis, 2 processes (chunks/s)", n / base["t_two"], n / this["t_two"], "{:,.0f}"),
        ("2 processes / 1 process (goal >= 1.6)", base["t_one"] / base["t_two"], this["t_one"] / this["t_two"], "{:.2f}x"),
        ("1 Redis process / memory", base["t_mem"] / base["t_one"], this["t_mem"] / this["t_one"], "{:.2f}x"),
        ("cores busy, 1 process: (its CPU + server CPU) / wall", busy(base), busy(this), "{:.2f}"),
        ("  the worker's CPU / wall", base["cpu_one"] / base["t_one"], this["cpu_one"] / this["t_one"], "{:.2f}"),
        ("  redis-server's CPU / wall", base["server_one"] / base["t_one"], this["server_one"] / this["t_one"], "{:.2f}"),
        ("ceiling of 2 processes / 1 on 2 cores: 2 / cores busy", 2 / busy(base), 2 / busy(this), "{:.2f}x"),
        ("CPU per chunk, 1 process (its CPU + server CPU)", cpu_per(base, "one"), cpu_per(this, "one"), "{:.0f} us"),
        ("CPU per chunk, 2 processes (their CPU + server CPU)", cpu_per(base, "two"), cpu_per(this, "two"), "{:.0f} us"),
        ("  redis-server's CPU per chunk, 1 process (the serial part)", server_per(base), server_per(this), "{:.0f} us"),
        ("write lock held, 1 process (share of its time)", base["held"] / base["t_one"], this["held"] / this["t_one"], "{:.0%}"),
        ("lock waits of the 2 workers (s)", base["waited"], this["waited"], "{:.2f}"),
        ("optimistic attempts run again, 2 processes (conflicts)", base["conflicts"], this["conflicts"], "{:,.0f}"),
        ("  of them refused before their commit (at a read)", base["refused_early"], this["refused_early"], "{:,.0f}"),
        ("batches that fell back to the lock, 2 processes", base["fallbacks"], this["fallbacks"], "{:,.0f}"),
        ("round trips per chunk, 1 process", base["rt_one"] / n, this["rt_one"] / n, "{:.4f}"),
        ("round trips per chunk, 2 processes", base["rt_two"] / n, this["rt_two"] / n, "{:.4f}"),
        ("Redis memory per chunk, used_memory (goal <= 2048 B)", base["bytes"], this["bytes"], "{:,.0f} B"),
    ]
    mb, mt = medians
    rows += [
        ("2 processes / 1 process, the median of the rounds' own", mb["ratio"], mt["ratio"], "{:.2f}x"),
        ("  = cores busy, 2 processes (their CPU + server's / wall)", mb["busy_two"], mt["busy_two"], "{:.2f}"),
        ("  / cores busy, 1 process", mb["busy_one"], mt["busy_one"], "{:.2f}"),
        ("  / (CPU per chunk, 2 processes / 1 process)", mb["cpu_ratio"], mt["cpu_ratio"], "{:.3f}"),
        ("  the refused attempts' CPU, share of the 2-process CPU", mb["refused"], mt["refused"], "{:.1%}"),
        ("  CPU per chunk, 2 / 1, without the refused attempts", mb["cpu_ratio_kept"], mt["cpu_ratio_kept"], "{:.3f}"),
        ("the workers' ends apart, share of the 2-process wall", mb["tail"], mt["tail"], "{:.1%}"),
        ("the workers' CPU apart, share of the larger", mb["imbalance"], mt["imbalance"], "{:.1%}"),
    ]
    print(f"{'figure':<55} {'baseline ' + rev:>18} {'this tree':>14} {'this / baseline':>16}")
    for name, b, t, fmt in rows:
        print(f"{name:<55} {fmt.format(b):>18} {fmt.format(t):>14} {t / b if b else float('nan'):>15.2f}x")
    print(
        "2 processes / 1 process in each round: baseline "
        + ", ".join(f"{x:.2f}x" for x in mb["ratios"])
        + "; this tree "
        + ", ".join(f"{x:.2f}x" for x in mt["ratios"])
    )
    for label, i in (("baseline", 0), ("this tree", 1)):
        found = [r[i].get("refusal_hits") for r in rounds]
        if all(f is not None for f in found):  # a tree without RedisStorage.refusal_hits reports none
            print(
                f"what the 2 processes' refusing checks found another commit had written, {label}, each round "
                "(checks that found it; one check may find several kinds): "
                + "; ".join(", ".join(f"{kind} {n}" for kind, n in f.items()) or "none" for f in found)
            )
    print(
        f"load average: {load:.2f} (1 min) before the runs, {load_after:.2f} (5 min) after; on {os.cpu_count()} cores, "
        "cores busy below 1 with a load above the core count means the one-process run waited for a core: "
        "its ceiling is then too high"
    )
    print(
        "same clusters, representatives and similarities as in memory: "
        f"baseline 1 process {base['same_one']}, 2 processes {base['same_two']}; "
        f"this tree 1 process {this['same_one']}, 2 processes {this['same_two']}"
    )


if __name__ == "__main__":
    main()
