"""Where redis-server's CPU goes while one process runs ``add_many`` on Redis: per command and per script.

Run: ``PYTHONPATH=. python benchmarks/bench_redis_server.py [--chunks 20000] [--tree DIR] [--url redis://...]``

One process (this tree, or the ``rag_dedup`` package under ``--tree``) adds the chunks of
``bench_redis`` (real text, 20% planted near-duplicates, the same shuffled order) into a fresh
namespace. Around it the script reads the server's ``INFO cpu`` (all of its CPU), ``INFO
commandstats`` (microseconds and calls of each command; a command run inside a script is counted
under its own name too, and inside its script's time) and the slow log, set to record every command
(``slowlog-log-slower-than 0``): each ``EVAL`` there is named by its script (the constant of
``rag_dedup.storage.redis.scripts`` whose text it starts with), so the script time splits by script.
Printed per chunk: the server's CPU, what the commands account for, and the rest (reading requests
and writing replies, which no command's time includes), then the table of commands and of scripts.
Without ``--url`` a private ``redis-server`` is started and stopped (as ``bench_redis`` does).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def script_names() -> dict[bytes, str]:
    """The scripts' texts (the first 100 bytes: what the slow log keeps of an argument) -> names."""
    from rag_dedup.storage.redis import scripts

    return {getattr(scripts, n).encode()[:100]: n for n in dir(scripts) if n.isupper() and isinstance(getattr(scripts, n), str)}


def profile(url: str, chunks: int, slow_log: bool = True) -> dict[str, Any]:
    """Run the one-process configuration and return the server's figures (microseconds, calls)."""
    import redis

    from rag_dedup import DedupIndex

    sys.path.insert(0, str(HERE))
    from realtext import planted_chunks, warm_up

    items, _, _ = planted_chunks(chunks)
    random.Random(1).shuffle(items)
    warm_up(DedupIndex, items)  # the kernels, loaded before anything is measured
    client = redis.Redis.from_url(url, socket_timeout=None)
    index = DedupIndex(storage=url, namespace="bench-redis-server")
    index.drop()
    client.config_set("slowlog-log-slower-than", 0 if slow_log else -1)
    client.config_set("slowlog-max-len", 1_000_000)
    client.slowlog_reset()
    client.config_resetstat()
    cpu0 = client.info("cpu")
    used0 = client.info("memory")["used_memory"]
    rt0 = index.storage.round_trips
    index.add_many(items)
    cpu1 = client.info("cpu")
    stats = client.info("commandstats")
    log = client.slowlog_get(1_000_000) if slow_log else []
    client.slowlog_reset()  # the log's own memory is not the index's
    used1 = client.info("memory")["used_memory"]
    client.config_set("slowlog-log-slower-than", 10000)
    server = sum(float(cpu1[k]) - float(cpu0[k]) for k in ("used_cpu_user", "used_cpu_sys")) * 1e6
    names = script_names()
    by_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for entry in log:
        command = entry["command"]
        word = command.split(b" ", 1)[0].lower().decode()
        if word in ("eval", "evalsha"):
            text = command[len(word) + 1 :][:100]
            word = next((n for t, n in names.items() if t.startswith(text) or text.startswith(t)), "eval ?")
        row = by_name[word]
        row[0] += 1
        row[1] += entry["duration"]
        row[2] = max(row[2], entry["duration"])
    index.drop()
    client.close()
    commands = {k[len("cmdstat_") :]: (int(v["calls"]), float(v["usec"])) for k, v in stats.items()}
    return {
        "chunks": len(items),
        "server_us": server,
        "commands": commands,
        "top": dict(by_name),
        "round_trips": index.storage.round_trips - rt0,
        "bytes": (used1 - used0) / len(items),
    }


def report(r: dict[str, Any]) -> None:
    n = r["chunks"]
    skip = ("config|resetstat", "config|set", "slowlog|get", "slowlog|reset", "info")
    top = {k: v for k, v in r["top"].items() if k not in skip}
    inside = sum(us for _, us, _ in top.values())
    print(f"{n:,} chunks, 1 process; round trips per chunk {r['round_trips'] / n:.4f}; used_memory growth {r['bytes']:,.0f} B a chunk")
    print(f"server CPU (INFO cpu) per chunk:                   {r['server_us'] / n:8.1f} us")
    print(f"  in commands and scripts (slow log, top level)    {inside / n:8.1f} us")
    print(f"  the rest (requests read, replies written, ...)   {(r['server_us'] - inside) / n:8.1f} us")
    print(f"{'top-level command or script':<28} {'calls':>8} {'us':>11} {'us/chunk':>9} {'us/call':>9} {'longest':>9}")
    for name, (calls, us, longest) in sorted(top.items(), key=lambda kv: -kv[1][1]):
        print(f"{name:<28} {calls:>8,} {us:>11,.0f} {us / n:>9.2f} {us / max(calls, 1):>9.1f} {longest:>9,.0f}")
    print("commandstats (a command run by a script or EXEC is counted here, and in its caller's time too):")
    print(f"{'command':<28} {'calls':>8} {'us':>11} {'us/chunk':>9} {'us/call':>9}")
    for name, (calls, us) in sorted(r["commands"].items(), key=lambda kv: -kv[1][1]):
        if name not in skip:
            print(f"{name:<28} {calls:>8,} {us:>11,.0f} {us / n:>9.2f} {us / max(calls, 1):>9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--url", help="an existing server (namespace bench-redis-server of it is dropped)")
    parser.add_argument("--tree", help="a directory holding the rag_dedup package to measure (default: this tree)")
    parser.add_argument(
        "--no-slow-log", action="store_true", help="leave the slow log off (for a server run under valgrind, which counts instructions itself)"
    )
    args = parser.parse_args()
    if args.tree:
        sys.path.insert(0, str(Path(args.tree).resolve()))
    import rag_dedup

    sys.path.insert(0, str(HERE))
    from bench_redis import start_server

    print(f"bench_redis_server: rag_dedup from {Path(rag_dedup.__file__).parent}")
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = (None, args.url) if args.url else start_server(tmp)
        try:
            result = profile(url, args.chunks, not args.no_slow_log)
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait()
    report(result)
    import os

    print(f"load average: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
