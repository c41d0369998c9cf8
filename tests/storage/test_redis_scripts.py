"""The bucket scripts and the command packer of the Redis storage, against plain Python references.

BUCKETS_ADD appends a group id to a bucket per (band key, group id) pair, a bucket hash's pairs in
one HMGET and one HSET (split every 2,000 fields of one hash); BUCKET_LOOKUP answers, for each band
key, the group ids of its bucket as two blobs (a bucket hash's keys, sent together, in one HMGET);
BUCKETS_SET writes the buckets whose values a batch knows whole. They are checked on pairs that
repeat a band key, fill one bucket hash past the split, and append to buckets that already hold ids.
LinearPacker must send exactly the bytes redis-py's own packer sends.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import redis
from redis.connection import PythonRespSerializer

from rag_dedup.storage.redis import scripts
from rag_dedup.storage.redis.connection import LinearPacker

PREFIX = b"test-scripts:buckets:"


def _add(client: redis.Redis, keys: np.ndarray, gids: np.ndarray) -> None:
    for hexes, raw in scripts.pair_blobs(keys, gids, per_blob=3000):
        client.eval(scripts.BUCKETS_ADD, 0, PREFIX, hexes, raw)


def _lookup(client: redis.Redis, keys: np.ndarray) -> dict[int, list[int]]:
    at, gids, bad = scripts.lookup_reply(client.eval(scripts.BUCKET_LOOKUP, 0, PREFIX, scripts.row_blob(keys), scripts.bucket_runs(keys)))
    assert bad is None
    out: dict[int, list[int]] = defaultdict(list)
    for r, g in zip(at.tolist(), gids.tolist()):
        out[r].append(g)
    return {r: sorted(gs) for r, gs in out.items()}


def test_bucket_scripts_match_a_python_reference(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.delete(*client.keys(PREFIX + b"*") or [b"none"])
    rng = np.random.default_rng(7)
    # One bucket hash (the same first 12 bits) with 4,500 distinct fields, past the 2,000 split; other
    # keys spread over many hashes; a few keys repeated within one call and across calls.
    same_hash = (np.uint64(0xABC) << np.uint64(52)) | rng.integers(0, 2**52, 4500, dtype=np.uint64)
    spread = rng.integers(0, 2**64 - 1, 3000, dtype=np.uint64)
    keys = np.concatenate([same_hash, spread, same_hash[:50], spread[:50]])
    gids = rng.integers(0, 2**32 - 1, len(keys), dtype=np.uint64)
    reference: dict[int, list[int]] = defaultdict(list)
    for half in (slice(0, len(keys) // 2), slice(len(keys) // 2, None)):  # the second half appends to the first
        _add(client, keys[half], gids[half])
        for k, g in zip(keys[half].tolist(), gids[half].tolist()):
            reference[k].append(g)
    asked = np.concatenate([np.unique(keys), rng.integers(0, 2**64 - 1, 200, dtype=np.uint64)])  # and empty buckets
    # Sorted (how the storage asks: one HMGET per bucket hash, split every 2,000 fields), and in any
    # other order, with repeats: each key answered at its own place in the blob.
    for order in (asked, rng.permutation(np.concatenate([asked, asked[:100]]))):
        found = _lookup(client, order)
        assert found == {i: sorted(reference[k]) for i, k in enumerate(order.tolist()) if k in reference}
    client.delete(*client.keys(PREFIX + b"*"))


def test_bucket_lookup_reports_a_bucket_that_is_not_whole_ids(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    key = np.array([0x1234567890ABCDEF], dtype=np.uint64)
    hexes = key.astype(">u8").tobytes().hex()
    client.hset(PREFIX + hexes[:3].encode(), hexes[3:].encode(), b"12345")
    _, _, bad = scripts.lookup_reply(client.eval(scripts.BUCKET_LOOKUP, 0, PREFIX, scripts.row_blob(key), scripts.bucket_runs(key)))
    assert bad == b"12345"
    client.delete(PREFIX + hexes[:3].encode())


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


def _buckets(client: redis.Redis, prefix: bytes) -> dict[bytes, dict[bytes, bytes]]:
    return {k[len(prefix) :]: client.hgetall(k) for k in client.keys(prefix + b"*")}


def test_a_commit_sets_the_buckets_it_read_to_what_appending_gives(redis_url: str) -> None:
    """The buckets a batch read (and took nothing out of) are written whole by BUCKETS_SET, the others
    appended to by BUCKETS_ADD: Redis ends up holding what appending every pair gives, byte for byte
    (ids in the order filed, after those stored), for read buckets empty or not, filled by several
    pairs, in one bucket hash past the 2,000-field split, and for a bucket the batch took an id out of."""
    from rag_dedup.storage.redis.overlay import Batch, _bucket_values

    client = redis.Redis.from_url(redis_url)
    ours, theirs = b"test-set:ours:", b"test-set:theirs:"
    rng = np.random.default_rng(11)
    same_hash = (np.uint64(0xDEF) << np.uint64(52)) | rng.integers(0, 2**52, 2600, dtype=np.uint64)
    keys = np.concatenate([same_hash, rng.integers(0, 2**64 - 1, 2000, dtype=np.uint64)])
    stored_keys = keys[::2]
    stored_gids = rng.integers(0, 2**32 - 1, len(stored_keys), dtype=np.uint64)
    for prefix in (ours, theirs):
        for hexes, raw in scripts.pair_blobs(stored_keys, stored_gids):
            client.eval(scripts.BUCKETS_ADD, 0, prefix, hexes, raw)
    batch = Batch(token=None)
    read = keys[: 3 * len(keys) // 4]  # read: stored buckets and empty ones; the last quarter unread
    at, found, _ = scripts.lookup_reply(client.eval(scripts.BUCKET_LOOKUP, 0, ours, scripts.row_blob(np.sort(read)), scripts.bucket_runs(np.sort(read))))
    batch.bucket_replies.append((np.sort(read), at, found))
    # Some buckets receive two ids; one receives 301 (its id count no longer fits the one-byte counts).
    filed = np.concatenate([keys, keys[:300], np.full(300, keys[1])])
    gids = rng.integers(0, 2**32 - 1, len(filed), dtype=np.uint64)
    batch.unfile(int(stored_gids[0]), [int(stored_keys[0])])  # taken out of a read bucket: appended to, not set
    known, (rest_keys, rest_gids) = _bucket_values(batch, filed, gids)
    assert known and 0 < len(rest_keys) < len(filed)
    assert b"4" in {width for _, _, width, _, _ in known}
    assert int(stored_keys[0]) in set(rest_keys.tolist())
    for hexes, counts, width, raw, runs in known:
        client.eval(scripts.BUCKETS_SET, 0, ours, hexes, counts, raw, width, runs)
    for hexes, raw in scripts.pair_blobs(rest_keys, rest_gids):
        client.eval(scripts.BUCKETS_ADD, 0, ours, hexes, raw)
    for hexes, raw in scripts.pair_blobs(filed, gids):
        client.eval(scripts.BUCKETS_ADD, 0, theirs, hexes, raw)
    assert _buckets(client, ours) == _buckets(client, theirs)
    client.delete(*client.keys(b"test-set:*"))


def test_bucket_runs_name_one_hash_each_and_split_long_ones() -> None:
    """A run is a stretch of keys (in the order given) with the same first 12 bits, at most ``most`` long."""
    rng = np.random.default_rng(5)
    keys = np.concatenate(
        [(np.uint64(h) << np.uint64(52)) | rng.integers(0, 2**52, n, dtype=np.uint64) for h, n in ((0x001, 5), (0xFFF, 7), (0x001, 2))]
    )
    assert np.frombuffer(scripts.bucket_runs(keys), dtype="<u2").tolist() == [5, 7, 2]
    assert np.frombuffer(scripts.bucket_runs(keys, most=3), dtype="<u2").tolist() == [3, 2, 3, 3, 1, 2]
    assert scripts.bucket_runs(np.empty(0, dtype=np.uint64)) == b""
