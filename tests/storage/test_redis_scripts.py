"""The band log (key layout 4) and the command packer of the Redis storage, against plain Python references.

A commit appends its bucket changes to ``ns:band-log`` behind its commit number (an RPUSH in its MULTI/EXEC);
COMMITS_SINCE hands a worker's mirror the entries it lacks, at most a given number a call, and all of
them again (reset) when the log is no longer the one the mirror applied (a drop). The mirror must then
hold what filing and taking out every pair in order gives. LinearPacker must send exactly the bytes
redis-py's own packer sends.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import redis
from redis.connection import PythonRespSerializer

from rag_dedup.storage.redis import scripts
from rag_dedup.storage.redis.mirror import BandMirror, entry, parse
from rag_dedup.storage.redis.connection import LinearPacker

COMMITS, LOG = b"test-scripts:commits", b"test-scripts:band-log"
#: COMMITS_SINCE's keys: commits, commit-log, lock, meta, next-group-id, groups, band-log.
STATE_KEYS = [COMMITS, b"test-scripts:commit-log", b"test-scripts:lock", b"test-scripts:meta", b"test-scripts:counter", b"test-scripts:groups", LOG]


def _commit(client: redis.Redis, removed: dict[int, list[int]], filed: dict[int, list[int]]) -> None:
    """One commit's bucket changes as the storage writes them: the count, then the entry (in one MULTI/EXEC)."""
    pairs = [(k, g) for g, ks in removed.items() for k in ks], [(k, g) for g, ks in filed.items() for k in ks]
    arrays = [np.array([x[i] for x in part], dtype=np.uint64) for part in pairs for i in (0, 1)]
    number = int(client.get(COMMITS) or 0) + 1  # what the INCR makes (the storage reads it under WATCH)
    pipe = client.pipeline(transaction=True)
    pipe.incr(COMMITS)
    pipe.rpush(LOG, b"%d:" % number + entry(*arrays))
    pipe.execute()


def _sync(client: redis.Redis, mirror: BandMirror, most: int) -> int:
    """Bring ``mirror`` up to date as the storage does, ``most`` entries a call; the calls it took."""
    calls = 0
    while True:
        have, prefix = mirror.request()
        reply = client.eval(scripts.COMMITS_SINCE, len(STATE_KEYS), *STATE_KEYS, -1, have, prefix, most)
        calls += 1
        if not mirror.apply(reply[6], lambda i, raw, exc: AssertionError(f"entry {i}: {exc}")):
            return calls


def _found(mirror: BandMirror, keys: list[int]) -> dict[int, set[int]]:
    rows, gids = mirror.table.query_pairs(np.array(keys, dtype=np.uint64).reshape(-1, 1))
    out: dict[int, set[int]] = defaultdict(set)
    for r, g in zip(rows.tolist(), gids.tolist()):
        out[keys[r]].add(g)
    return dict(out)


def test_a_band_log_entry_round_trips_and_a_damaged_one_is_refused() -> None:
    raw = b"17:" + entry(np.array([5], dtype=np.uint64), np.array([3]), np.array([2**64 - 1, 9], dtype=np.uint64), np.array([4, 2**32 - 1]))
    prefix, removed, keys, gids = parse(raw)
    assert (prefix, removed.tolist(), keys.tolist(), gids.tolist()) == (b"17:", [3], [2**64 - 1, 9], [4, 2**32 - 1])
    for bad in (raw[:-1], raw[3:], b"x:" + raw[3:], b"17:" + raw[3:7], raw + b"\0" * 12, "17:"):
        with pytest.raises(ValueError):
            parse(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not fit"):
        entry(np.empty(0, dtype=np.uint64), np.empty(0), np.array([1], dtype=np.uint64), np.array([2**32]))


def test_a_mirror_gets_the_entries_it_lacks_in_parts_and_starts_again_after_a_drop(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.delete(COMMITS, LOG)
    rng = np.random.default_rng(7)
    reference: dict[int, set[int]] = defaultdict(set)
    keys = [int(k) for k in rng.integers(0, 2**63, size=40, dtype=np.uint64)]
    mirror = BandMirror()

    def commits(first: int, n: int) -> None:
        for gid in range(first, first + n):
            mine = rng.choice(keys, size=3, replace=False).tolist()
            gone = [g for g in sorted({g for gs in reference.values() for g in gs}) if rng.random() < 0.1][:1]
            removed = {g: [k for k, gs in reference.items() if g in gs] for g in gone}
            _commit(client, removed, {gid: mine})
            for g, ks in removed.items():
                for k in ks:
                    reference[k].discard(g)
            for k in mine:
                reference[k].add(gid)

    commits(0, 7)
    assert _sync(client, mirror, most=3) == 3  # 3 + 3 + 1 entries
    assert _found(mirror, keys) == {k: gs for k, gs in reference.items() if gs}
    commits(7, 2)
    assert _sync(client, mirror, most=3) == 1 and mirror.applied == 9
    assert _found(mirror, keys) == {k: gs for k, gs in reference.items() if gs}
    # A drop deletes the log and keeps the counter; the new log holds more entries than the mirror applied.
    client.delete(LOG)
    reference.clear()
    commits(100, 11)
    assert _sync(client, mirror, most=64) == 1 and mirror.applied == 11
    assert _found(mirror, keys) == {k: gs for k, gs in reference.items() if gs}
    client.delete(COMMITS, LOG)
    client.close()


@pytest.mark.parametrize(
    "args",
    [
        ("SET", b"k", "v"),
        ("CONFIG GET", "maxmemory"),
        (b"SCRIPT LOAD", b"return 1"),
        (b"EVAL", "return 1", 0, 1.5, -3, b"x" * 20_000, memoryview(b"view"), bytearray(b"array"), "\u00e9t\u00e9"),
        ("HSET", b"h", *(b"field-%d" % i for i in range(5000))),
        ("GET", b""),
    ],
    ids=["short", "split-name", "split-bytes-name", "mixed-types", "many-fields", "empty-argument"],
)
def test_linear_packer_sends_the_bytes_redis_py_sends(args: tuple[object, ...]) -> None:
    encode = redis.Redis().connection_pool.get_encoder().encode
    ours = b"".join(LinearPacker(encode).pack(*args))
    theirs = b"".join(bytes(part) for part in PythonRespSerializer(6000, encode).pack(*args))
    assert ours == theirs


def test_linear_packer_refuses_what_redis_py_refuses() -> None:
    encode = redis.Redis().connection_pool.get_encoder().encode
    with pytest.raises(redis.DataError):
        LinearPacker(encode).pack("SET", b"k", None)
