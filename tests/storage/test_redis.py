"""RedisStorage against a real redis-server: the Storage contract, atomic batches, sharing between processes.

The reference is MemoryStorage: the same operations, and the same DedupIndex scenario on the shipped
corpus (paragraphs of tests/data/corpus: Debian copyright files and licence texts, full of real exact
and near duplicates), must give the same answers value for value.
"""

from __future__ import annotations

import multiprocessing
import pickle
import random
import re
import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_dedup import (
    CorruptIndexError,
    DedupIndex,
    IndexMismatchError,
    InvalidTextError,
    MemoryStorage,
    RedisConfigurationError,
    RedisUnavailable,
)
from rag_dedup.storage.redis import connection
from rag_dedup.storage.base import EMPTY_GROUP, ItemRecord, Storage
from rag_dedup.storage.redis import RedisStorage
from rag_dedup.shingles import shingle_hashes_many

CORPUS = Path(__file__).parents[1] / "data" / "corpus"


def corpus_items() -> list[dict[str, Any]]:
    """Paragraphs (12 words or more) of the shipped corpus, keyed by file and position, source = file."""
    items = []
    for path in sorted(CORPUS.rglob("*.txt")):
        name = f"{path.parent.name}/{path.name}"
        text = path.read_text(encoding="utf-8")
        n = 0
        for m in re.finditer(r"\S(?:.|\n(?!\s*\n))*", text):
            if len(m.group(0).split()) >= 12:
                items.append({"key": f"{name}#{n:04d}", "text": m.group(0), "source": name})
                n += 1
    return items


ITEMS = corpus_items()


def state(index: DedupIndex) -> dict[str, Any]:
    """Everything observable about an index: every key's Match, and each cluster (representative first)."""
    keys = sorted(index.storage.iter_keys())
    clusters = {rep: (members[0], sorted(members[1:])) for rep, members in index.clusters(include_singletons=False)}
    return {"matches": {m.key: m for m in index.matches(keys)}, "clusters": clusters, "len": len(index)}


@pytest.fixture
def namespace() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def _namespace_keys(url: str, namespace: str) -> list[bytes]:
    client = redis.Redis.from_url(url)
    try:
        return sorted(client.scan_iter(match=f"{namespace}:*"))
    finally:
        client.close()


# --- the Storage contract, method by method ------------------------------------------------------


def exercise(s: Storage) -> list[Any]:
    """Call every Storage method in a fixed sequence; return what each read saw."""
    rng = np.random.default_rng(5)
    shingles = [np.unique(rng.integers(0, 2**32, size=n, dtype=np.uint32)) for n in (5, 40, 1)]
    bands = rng.integers(0, 2**63, size=(4, 3), dtype=np.uint64) * np.uint64(2)
    bands[1, 0] = bands[0, 0]  # groups 0 and 1 share a bucket; row 3 is never filed
    digests = [bytes([i]) * 16 for i in range(4)]
    seen: list[Any] = [s.load_meta()]
    s.save_meta({"format": "x", "n": [1.5, "é"]})
    seen.append(s.load_meta())
    seen.append(s.find_groups(digests))
    gids = s.create_groups(digests[:3], shingles, bands[:3])
    seen += [gids, s.find_groups(digests), [sh.tolist() for sh in s.group_shingles(gids)], s.query_bands(bands)]
    records = {
        "k1": ItemRecord(gids[0], 10, "s1", 0.5, None),
        "k2": ItemRecord(gids[0], 12, "s1", 0.0, 3.25),
        "k3": ItemRecord(gids[1], 7, None, 1.0, 1.0e9),
        "k\u00e9\U0001f600": ItemRecord(EMPTY_GROUP, 0, "s2", 0.0, None),
        "k4": ItemRecord(gids[2], 1, "s2", -2.5, 0.1),
    }
    s.put_items(records)
    seen += [s.get_items(["k1", "unknown", "k\u00e9\U0001f600", "k4"]), s.item_count(), sorted(s.iter_keys())]
    seen += [sorted(s.keys_of_source(src)) for src in ("s1", "s2", "none")]
    seen.append([sorted(ks) for ks in s.group_items(gids)])
    seen.append(s.component_members(gids))
    s.set_components([{gids[0], gids[1]}])
    seen.append(s.component_members(gids))
    s.set_components([{gids[0], gids[1], gids[2]}])
    seen.append(s.component_members(gids))
    s.set_components([[gids[0]], [gids[1], gids[2]]])
    seen.append(s.component_members(gids))
    s.set_clusters(["k1", "k2", "k3"], [("k2", [("k2", 1.0), ("k1", 1.0), ("k3", 0.8125)])])
    seen += [s.get_clusters(["k1", "k2", "k3", "k4"]), s.cluster_members(["k2", "k1"]), sorted(s.iter_clusters())]
    s.set_clusters(["k1", "k2", "k3"], [("k3", [("k3", 1.0), ("k2", 0.8125)]), ("k1", [("k1", 1.0)])])
    seen += [s.get_clusters(["k1", "k2", "k3"]), s.cluster_members(["k2", "k3"]), sorted(s.iter_clusters())]
    s.delete_items({"k4": records["k4"], "k1": records["k1"]})
    seen += [s.get_items(["k4", "k1", "k2"]), s.item_count(), [sorted(ks) for ks in s.group_items(gids)]]
    seen += [sorted(s.keys_of_source("s2")), sorted(s.keys_of_source("s1"))]
    s.delete_group(gids[2], bands[2:3])
    seen += [s.find_groups(digests), s.query_bands(bands), s.component_members(gids[:2])]
    try:
        s.group_shingles([gids[2]])
        seen.append("no error")
    except CorruptIndexError:  # a group named but not stored
        seen.append("CorruptIndexError")
    s.drop()
    seen += [s.load_meta(), s.item_count(), sorted(s.iter_keys()), s.find_groups(digests), s.query_bands(bands)]
    seen += [sorted(s.iter_clusters()), s.get_clusters(["k2"])]
    return seen


@pytest.mark.parametrize(
    "in_one_batch",
    [
        pytest.param(False, id="every-write-its-own-batch"),
        pytest.param(True, id="all-in-one-locked-batch"),
    ],
)
def test_every_storage_method_answers_like_memory(redis_url, namespace, in_one_batch):
    """Every method, write then read, gives MemoryStorage's answers; inside one lock the reads see the
    batch's own pending writes (the overlay), outside it they see Redis."""
    expected = exercise(MemoryStorage())
    storage = RedisStorage(redis_url, namespace=namespace)
    if in_one_batch:
        with storage.lock():
            got = exercise(storage)
    else:
        got = exercise(storage)
    assert got == expected
    # drop() left nothing behind, not even the lock, but the two counters (they only grow: a batch that
    # started before the drop must not find, after it, the count it started from, and no group id is
    # handed out twice in a namespace)
    assert _namespace_keys(redis_url, namespace) == [f"{namespace}:commits".encode(), f"{namespace}:next-group-id".encode()]


def test_storage_is_shared_and_writes_are_not_pickled(redis_url, namespace):
    """Values in Redis are JSON, decimal ids and raw little-endian integers; none is a pickle."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(ITEMS[:40])
    client = redis.Redis.from_url(redis_url)
    pickles = []
    for key in client.scan_iter(match=f"{namespace}:*"):
        kind = client.type(key)
        values = (
            [client.get(key)] if kind == b"string"
            else list(client.hgetall(key).values()) if kind == b"hash"
            else client.lrange(key, 0, -1) if kind == b"list"
            else list(client.smembers(key))
        )  # fmt: skip
        pickles += [key for v in values if v.startswith(b"\x80") and v[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")]
    client.close()
    assert pickles == []
    assert index.shared is True


# --- the index on Redis against the index in memory, on the real corpus --------------------------


def scenario(index: DedupIndex, batch: int) -> list[Any]:
    """Add, query, remove and re-add on the corpus; record the state after each step."""
    first, second = ITEMS[0::2], ITEMS[1::2]
    for i in range(0, len(first), batch):
        index.add_many(first[i : i + batch])
    seen: list[Any] = [state(index)]
    for item in second[:20]:
        index.add(item["key"], item["text"], source=item["source"], authority=1.0, first_seen=1_700_000_000.0)
    index.add_many(second[20:])
    seen.append(state(index))
    seen.append([index.query(item["text"]) for item in ITEMS[::50]])
    big = max(index.clusters(include_singletons=False), key=lambda c: (len(c[1]), c[0]))
    removed = [big[0], big[1][-1], *[k for k in sorted(index.storage.iter_keys())[::97]]]
    removed = list(dict.fromkeys(removed))
    for key in removed:
        index.remove(key)
    seen.append(state(index))
    by_key = {item["key"]: item for item in ITEMS}
    index.add_many([by_key[k] for k in removed])
    seen.append(state(index))
    seen.append({src: sorted(index.keys_of_source(src)) for src in sorted({i["source"] for i in ITEMS})[::7]})
    return seen


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param(61, id="batches-of-61"),
        pytest.param(100_000, id="one-batch"),
    ],
)
def test_index_on_redis_equals_index_in_memory(redis_url, namespace, batch):
    """The same scenario on the real corpus gives the same Match for every key, value for value."""
    expected = scenario(DedupIndex(threshold=0.8), batch)
    got = scenario(DedupIndex(threshold=0.8, storage=redis_url, namespace=namespace), batch)
    assert any(m.kind == "near" for m in expected[1]["matches"].values())  # the corpus has near duplicates
    assert any(m.kind == "exact" for m in expected[1]["matches"].values())
    for step, (g, e) in enumerate(zip(got, expected)):
        assert g == e, f"step {step} differs"


def test_reopened_index_sees_the_same_data(redis_url, namespace):
    index = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(ITEMS[:300])
    again = DedupIndex(storage=redis_url, namespace=namespace)
    assert state(again) == state(index)


def test_other_parameters_on_a_used_namespace_are_refused(redis_url, namespace):
    DedupIndex(threshold=0.8, storage=redis_url, namespace=namespace)
    with pytest.raises(IndexMismatchError, match=rf"RedisStorage\('redis://127.0.0.1:\d+/0', namespace='{namespace}'\)"):
        DedupIndex(threshold=0.9, storage=redis_url, namespace=namespace)


def test_a_batch_costs_a_few_round_trips_not_one_per_chunk_or_band(redis_url, namespace):
    """Regression guard: a round trip per band key (21 x 500 here) or per chunk (500) instead of one
    pipelined request per storage call."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(ITEMS[:100])
    before = index.storage.round_trips
    index.add_many(ITEMS[100:600])
    assert index.storage.round_trips - before < 100


def test_buckets_are_a_band_log_that_each_worker_mirrors_not_keys(redis_url, namespace):
    """Key layout 4: no bucket is a key or field in Redis (layout 3's 4,096 bucket hashes were most of the
    server's time); each commit that files groups appends one band-log entry, and a process that opens
    the namespace later rebuilds the same buckets from the log."""
    from rag_dedup.storage.redis import mirror

    index = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(ITEMS[:1000])
    names = [k.decode() for k in _namespace_keys(redis_url, namespace)]
    assert not [k for k in names if k.startswith(f"{namespace}:buckets")]
    client = redis.Redis.from_url(redis_url)
    entries = client.lrange(f"{namespace}:band-log", 0, -1)
    groups = client.hlen(f"{namespace}:groups")
    client.close()
    parsed = [mirror.parse(raw) for raw in entries]
    filed = np.concatenate([gids for _, _, _, gids in parsed])
    assert len(filed) == 21 * groups and len(set(filed.tolist())) == groups  # every group under its 21 band keys
    assert [int(prefix[:-1]) for prefix, *_ in parsed] == sorted(int(prefix[:-1]) for prefix, *_ in parsed)
    assert len(names) < 2 * 1000  # one key per group and source at most
    keys = np.concatenate([keys for _, _, keys, _ in parsed]).reshape(-1, 21)[:50]
    later = DedupIndex(storage=redis_url, namespace=namespace)  # a fresh mirror, from the whole log
    first, second = index.storage.query_band_pairs(keys), later.storage.query_band_pairs(keys)
    assert all(np.array_equal(a, b) for a, b in zip(first, second)) and len(first[0]) >= 50


def test_a_worker_files_its_own_commits_in_its_mirror_without_reading_them_back(redis_url, namespace, monkeypatch):
    """A commit applies its own band-log entry to the worker's mirror when the mirror holds every entry
    before it (the RPUSH's reply says so): the next batch's sync reads nothing back, and the buckets
    are those of a fresh mirror rebuilt from the whole log. With another worker's entry in between,
    the next sync reads both."""
    from rag_dedup.storage.redis.mirror import BandMirror

    index = DedupIndex(storage=redis_url, namespace=namespace)
    read_back: list[int] = []
    apply = BandMirror.apply

    def spy(self: Any, reply: Any, corrupt: Any) -> bool:
        if self is index.storage._overlay.mirror:  # type: ignore[attr-defined]
            read_back.append(len(reply) - 2)
        return apply(self, reply, corrupt)

    monkeypatch.setattr(BandMirror, "apply", spy)
    for lo in range(0, 600, 150):
        index.add_many(ITEMS[lo : lo + 150])
    client = redis.Redis.from_url(redis_url)
    logged = client.llen(f"{namespace}:band-log")
    assert logged == 4 and index.storage._overlay.mirror.applied == logged  # type: ignore[attr-defined]
    assert sum(read_back) == 0  # its own four entries: none read back
    other = DedupIndex(storage=redis_url, namespace=namespace)
    other.add_many(ITEMS[600:700])
    index.add_many(ITEMS[700:800])  # its sync reads the other's entry; its own is then the next one again
    assert sum(read_back) == 1 and index.storage._overlay.mirror.applied == client.llen(f"{namespace}:band-log") == 6  # type: ignore[attr-defined]
    client.close()
    keys = index._band_keys(shingle_hashes_many([item["text"] for item in ITEMS[:800]]))
    fresh = DedupIndex(storage=redis_url, namespace=namespace)  # a mirror rebuilt from the whole log
    mine, rebuilt = index.storage.query_band_pairs(keys), fresh.storage.query_band_pairs(keys)
    assert all(np.array_equal(a, b) for a, b in zip(mine, rebuilt)) and set(mine[0].tolist()) == set(range(800))  # each finds its own group


def test_pending_writes_are_invisible_to_others_until_the_batch_commits(redis_url, namespace):
    writer = RedisStorage(redis_url, namespace=namespace)
    reader = RedisStorage(redis_url, namespace=namespace)
    record = ItemRecord(EMPTY_GROUP, 5, "doc", 0.0, None)
    with writer.lock():
        writer.put_items({"k": record})
        assert writer.get_items(["k"]) == [record]
        assert reader.get_items(["k"]) == [None]
        assert reader.item_count() == 0
    assert reader.get_items(["k"]) == [record]
    assert reader.keys_of_source("doc") == ["k"]


def test_a_batch_that_raises_leaves_nothing_behind(redis_url, namespace):
    """Regression guard: a failed batch must not leave half its groups, buckets or items in Redis."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(ITEMS[:100])
    before = state(index)
    keys_before = _namespace_keys(redis_url, namespace)
    original = index.storage.set_clusters

    def failing(*args: Any, **kwargs: Any) -> None:
        original(*args, **kwargs)
        raise RuntimeError("injected failure after the last write of the batch")

    index.storage.set_clusters = failing  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="injected"):
        index.add_many(ITEMS[100:300])
    del index.storage.set_clusters
    assert _namespace_keys(redis_url, namespace) == keys_before
    assert state(index) == before
    index.add_many(ITEMS[100:300])  # the retry starts clean
    reference = DedupIndex()
    reference.add_many(ITEMS[:300])
    assert state(index) == state(reference)


def test_adding_an_identical_item_again_is_a_no_op(redis_url, namespace):
    index = DedupIndex(storage=redis_url, namespace=namespace)
    first = index.add_many(ITEMS[:50])
    again = index.add_many(ITEMS[:50])
    assert again == first
    with pytest.raises(ValueError, match="already in the index"):
        index.add(ITEMS[0]["key"], ITEMS[1]["text"], source=ITEMS[0]["source"])


@pytest.mark.parametrize(
    "one_storage",
    [
        pytest.param(True, id="one-storage-shared-by-threads"),
        pytest.param(False, id="a-storage-per-thread"),
    ],
)
def test_the_lock_excludes_other_writers(redis_url, namespace, one_storage):
    """Read-modify-write under the lock from four threads loses no update."""
    shared = RedisStorage(redis_url, namespace=namespace)
    shared.save_meta({"n": 0})

    def work() -> None:
        storage = shared if one_storage else RedisStorage(redis_url, namespace=namespace)
        for _ in range(15):
            with storage.lock():
                n = storage.load_meta()["n"]  # type: ignore[index]
                storage.save_meta({"n": n + 1})

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert shared.load_meta() == {"n": 60}


def test_the_lock_is_reentrant_and_commits_once(redis_url, namespace):
    storage = RedisStorage(redis_url, namespace=namespace)
    other = RedisStorage(redis_url, namespace=namespace)
    with storage.lock():
        storage.save_meta({"a": 1})
        with storage.lock():
            storage.save_meta({"a": 2})
        assert other.load_meta() is None
        assert storage.load_meta() == {"a": 2}
    assert other.load_meta() == {"a": 2}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sets(st.integers(0, 9), min_size=1, max_size=5), max_size=3), min_size=1, max_size=6))
def test_components_follow_memory_semantics(redis_url, calls):
    """Any sequence of set_components calls leaves the same components as MemoryStorage, and no
    orphaned component record in Redis."""
    namespace = f"test-{uuid.uuid4().hex[:8]}"
    memory, storage = MemoryStorage(), RedisStorage(redis_url, namespace=namespace)
    for components in calls:
        memory.set_components(components)
        storage.set_components(components)
        assert storage.component_members(list(range(10))) == memory.component_members(list(range(10)))
    client = redis.Redis.from_url(redis_url)
    referenced = set(client.hvals(f"{namespace}:component-of"))
    stored = {k.rsplit(b":", 1)[1] for k in client.scan_iter(match=f"{namespace}:component:*")}
    client.close()
    assert stored == referenced
    storage.drop()


# --- namespaces, drop, configuration --------------------------------------------------------------


def test_namespaces_are_separate_and_drop_removes_only_its_own(redis_url):
    """Regression guard: drop() of namespace 'x*' must not take 'xy' with it (SCAN patterns are escaped)."""
    a = DedupIndex(storage=redis_url, namespace="x*")
    b = DedupIndex(storage=redis_url, namespace="xy")
    a.add_many(ITEMS[:40])
    b.add_many(ITEMS[40:100])
    assert len(a) == 40 and len(b) == 60
    assert ITEMS[0]["key"] in a and ITEMS[0]["key"] not in b
    expected_b = state(b)
    a.drop()
    # an empty index: only its commit counter, layout and parameters
    assert _namespace_keys(redis_url, "x\\*") == [b"x*:commits", b"x*:format", b"x*:meta", b"x*:next-group-id"]
    assert len(a) == 0 and ITEMS[0]["key"] not in a
    assert state(b) == expected_b
    a.add_many(ITEMS[:40])  # usable again after drop
    assert len(a) == 40


@pytest.mark.parametrize(
    ("keys", "held"),
    [
        pytest.param({"meta": b'{"b": 21}', "next_gid": b"7", "cof": None}, r"key layout 1 \(written by an older rag-dedup", id="layout-1"),
        pytest.param({"next_gid": b"7", "comp": None}, r"key layout 1", id="layout-1-without-meta"),
        pytest.param({"meta": b'{"b": 21}', "format": b"rag-dedup-redis 2"}, r"b'rag-dedup-redis 2'", id="layout-2"),
        pytest.param({"meta": b'{"b": 21}', "format": b"rag-dedup-redis 3"}, r"b'rag-dedup-redis 3'", id="layout-3"),
        pytest.param({"meta": b'{"b": 21}', "format": b"rag-dedup-redis 5"}, r"b'rag-dedup-redis 5'", id="a-newer-layout"),
    ],
)
def test_a_namespace_in_another_key_layout_is_refused_with_what_to_do(redis_url, namespace, keys, held):
    """The key layout changed (readable names in layout 2, the commit log in 3, the band log in 4): an old namespace must not
    be read as an empty or a damaged one, and drop() still clears it."""
    client = redis.Redis.from_url(redis_url)
    for name, value in keys.items():
        if value is None:
            client.hset(f"{namespace}:{name}", "1", "x")
        else:
            client.set(f"{namespace}:{name}", value)
    with pytest.raises(CorruptIndexError, match=held + r".*reads key layout 4 only.*drop\(\)"):
        DedupIndex(storage=redis_url, namespace=namespace)
    RedisStorage(redis_url, namespace=namespace).drop()
    assert _namespace_keys(redis_url, namespace) == [f"{namespace}:commits".encode()]
    index = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(ITEMS[:10])
    assert client.get(f"{namespace}:format") == b"rag-dedup-redis 4"
    client.close()


def test_pickled_index_talks_to_the_same_data(redis_url, namespace):
    """A copy carries the configuration only and reconnects, as IngestionPipeline workers need."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(ITEMS[:100])
    blob = pickle.dumps(index)
    assert ITEMS[0]["text"][:40].encode() not in blob
    copy = pickle.loads(blob)
    assert copy.storage is not index.storage
    assert state(copy) == state(index)
    copy.add_many(ITEMS[100:150])
    assert ITEMS[120]["key"] in index
    assert state(copy) == state(index)


def test_password_urls_work_and_a_wrong_password_is_named_without_it(redis_server_factory):
    server = redis_server_factory(password="s3cret-pw")
    index = DedupIndex(storage=server.url, namespace="pw")
    index.add_many(ITEMS[:20])
    assert len(DedupIndex(storage=server.url, namespace="pw")) == 20
    wrong = server.url.replace("s3cret-pw", "wrong-pw")
    with pytest.raises(RedisUnavailable, match=r"redis://:\*\*\*@127\.0\.0\.1:\d+/0 refused the credentials") as info:
        DedupIndex(storage=wrong, namespace="pw")
    assert "wrong-pw" not in str(info.value) and "s3cret" not in str(info.value)
    assert "s3cret-pw" not in repr(index.storage)


def test_tls_urls_work_and_an_untrusted_certificate_is_a_clear_error(redis_server_factory):
    server = redis_server_factory(tls=True, password="tls-pw")
    assert server.url.startswith("rediss://")
    index = DedupIndex(storage=server.url, namespace="tls")
    index.add_many(ITEMS[:20])
    assert len(DedupIndex(storage=server.url, namespace="tls")) == 20
    untrusted = server.url.split("?")[0]
    with pytest.raises(RedisUnavailable, match=r"rediss://:\*\*\*@127\.0\.0\.1:\d+/0 .*certificate.*ssl_ca_certs") as info:
        DedupIndex(storage=untrusted, namespace="tls")
    assert "tls-pw" not in str(info.value)


def test_a_url_with_the_wrong_tls_scheme_gets_a_hint_naming_the_other(redis_server, redis_server_factory):
    tls = redis_server_factory(tls=True)
    plain_to_tls = tls.url.split("?")[0].replace("rediss://", "redis://")
    with pytest.raises(RedisUnavailable, match=r"closed the connection without a reply.*use rediss://"):
        DedupIndex(storage=plain_to_tls, namespace="tls")
    tls_to_plain = redis_server.url.replace("redis://", "rediss://")
    with pytest.raises(RedisUnavailable, match=r"does not answer on that port.*never answers its handshake \(for a plain server use redis://"):
        DedupIndex(storage=RedisStorage(tls_to_plain, namespace="tls", socket_timeout=1))


def test_rediss_to_a_plain_port_ends_at_connect_timeout_even_without_a_socket_timeout(redis_server):
    """A TLS handshake with a port without TLS is never answered. redis-py 8.2 bounds it by
    connect_timeout (1.03 s measured here with socket_timeout None or 3); a client that bounded it by
    socket_timeout only would hang for ever with None. The thread's 60 s join guards against that hang
    (no duration is asserted)."""
    tls_to_plain = redis_server.url.replace("redis://", "rediss://")
    raised: list[BaseException] = []

    def open_it() -> None:
        try:
            RedisStorage(tls_to_plain, namespace="tls", connect_timeout=1, socket_timeout=None)
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            raised.append(e)

    opener = threading.Thread(target=open_it, daemon=True)
    opener.start()
    opener.join(60)
    assert not opener.is_alive(), "the open still waits for a TLS handshake the plain port never answers"
    assert len(raised) == 1 and isinstance(raised[0], RedisUnavailable), raised
    assert "never answers its handshake (for a plain server use redis://" in str(raised[0])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        pytest.param({"url": 6379}, TypeError, "url must be a str", id="url-not-str"),
        pytest.param({"url": "http://localhost"}, ValueError, "must start with redis://", id="url-scheme"),
        pytest.param({"namespace": "a:b"}, ValueError, r"without ':'", id="namespace-colon"),
        pytest.param({"namespace": ""}, ValueError, "non-empty", id="namespace-empty"),
        pytest.param({"namespace": 3}, TypeError, "namespace must be a str", id="namespace-not-str"),
        pytest.param({"lock_timeout": -1}, ValueError, r"lock_timeout \(-1\)", id="lock-timeout-negative"),
        pytest.param({"lock_wait": "5"}, TypeError, "lock_wait must be a number", id="lock-wait-str"),
        pytest.param({"allow_eviction": "yes"}, TypeError, "allow_eviction must be True or False", id="allow-eviction-str"),
        pytest.param({"url": "redis://localhost:6379/notanint"}, ValueError, r"names the database 'notanint'", id="db-not-int"),
        pytest.param({"url": "redis://:pa#ss@localhost:6379/0"}, ValueError, r"'redis://:\*\*\*@localhost:6379/0' contains '#'.*%23", id="hash-in-password"),
    ],
)
def test_bad_arguments_are_refused(redis_url, kwargs, error, message):
    args = {"url": redis_url, "namespace": "ok", **kwargs}
    with pytest.raises(error, match=message):
        RedisStorage(args.pop("url"), **args)


def _with(url: str, *, db: str | None = None, query: str | None = None) -> str:
    """``url`` (the test server's, TCP or unix socket) with another database or a query parameter."""
    if url.startswith("unix://"):
        base = url.split("?")[0]
        return f"{base}?db={db}" if db is not None else f"{base}?{query}"
    base = url.rsplit("/", 1)[0]
    return f"{base}/{db}" if db is not None else f"{base}/0?{query}"


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        pytest.param(lambda u: _with(u, db="99"), RedisConfigurationError, "DB index is out of range", id="db-out-of-range"),
        pytest.param(lambda u: _with(u, query="foo=bar"), ValueError, "not a Redis URL redis-py can use.*foo", id="unknown-parameter"),
        pytest.param(lambda u: "redis://127.0.0.1:abc/0", ValueError, r"'redis://127.0.0.1:abc/0' is not a Redis URL.*[Pp]ort", id="bad-port"),
    ],
)
def test_urls_the_server_or_redis_py_refuses_are_named_clearly(redis_url, make, error, message):
    """Regression: these came out as redis-py's own ResponseError / TypeError / ValueError, 9-17 frames deep."""
    with pytest.raises(error, match=message):
        RedisStorage(make(redis_url), namespace="ok")


def test_a_namespace_that_is_not_valid_unicode_is_refused(redis_url):
    with pytest.raises(InvalidTextError, match="namespace"):
        RedisStorage(redis_url, namespace="a\udce9")


def test_missing_redis_package_gives_the_pip_hint(monkeypatch, redis_url):
    monkeypatch.setattr(connection, "redis_py", None)
    with pytest.raises(ImportError, match=r"pip install rag-dedup\[redis\]"):
        DedupIndex(storage=redis_url)


# --- several processes ----------------------------------------------------------------------------


def _add_in_small_batches(index: DedupIndex, items: list[dict[str, Any]], start: Any, batch: int) -> None:
    """Worker process: wait for the start signal, then add ``items`` in small batches."""
    if not start.wait(60):
        raise RuntimeError("no start signal")
    for i in range(0, len(items), batch):
        index.add_many(items[i : i + batch])


@pytest.mark.parametrize("workers", [pytest.param(2, id="2-processes"), pytest.param(3, id="3-processes")])
def test_processes_adding_interleaved_parts_agree_with_one_process(redis_url, namespace, workers):
    """Workers adding interleaved parts of the corpus at the same time (spawned processes, small
    batches, so their batches alternate) end with exactly the partition, representatives and
    similarities of one in-memory index that added everything."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [
        ctx.Process(target=_add_in_small_batches, args=(index, ITEMS[w::workers], start, 16)) for w in range(workers)
    ]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * workers
    reference = DedupIndex()
    reference.add_many(ITEMS)
    assert state(index) == state(reference)


def test_dedup_transform_with_two_pipeline_workers_finds_duplicates_across_their_batches(redis_url, namespace):
    """IngestionPipeline(num_workers=2) pickles the transform, and with it the Redis-backed index, into
    two spawned processes; together they build the index that one in-memory run builds, and they find
    the duplicates whose copies went to different workers.

    The nodes are the corpus paragraphs, made in this process: a chunker in the pipeline would be
    pickled into the workers too, which is the chunker's business and tested there. The pipeline
    splits its input nodes between the workers wherever the split falls, so one document's chunks may
    reach both: replace_documents=False, as the transform documents for chunks fed in pieces.
    """
    from llama_index.core.ingestion import IngestionPipeline
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

    from rag_dedup.llama_index.transform import DedupTransform

    def nodes() -> list[TextNode]:
        return [
            TextNode(
                id_=item["key"],
                text=item["text"],
                relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=item["source"])},
            )
            for item in ITEMS
        ]

    index = DedupIndex(storage=redis_url, namespace=namespace)
    transform = DedupTransform(index=index, replace_documents=False)
    out = IngestionPipeline(transformations=[transform]).run(nodes=nodes(), num_workers=2)
    reference = DedupTransform(replace_documents=False)
    IngestionPipeline(transformations=[reference]).run(nodes=nodes())
    keys = sorted(n.node_id for n in out)
    assert keys == sorted(item["key"] for item in ITEMS)
    matches = index.matches(keys)
    assert matches == reference.index.matches(keys)
    first_worker = {item["key"] for item in ITEMS[: len(ITEMS) // 2]}  # the pipeline splits its input in order
    across = [m for m in matches if m.duplicate_of and (m.key in first_worker) != (m.duplicate_of in first_worker)]
    assert len(across) > 10


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        pytest.param("redis://h:6379/0?password=S3cret", "redis://h:6379/0?password=***", id="query-password"),
        pytest.param("redis://u:S3cret@h:6379/0", "redis://u:***@h:6379/0", id="user-password"),
        pytest.param("redis://:S3#cret@h/0", "redis://:***@h/0", id="hash"),
        pytest.param("redis://:S3/c@ret@h/0", "redis://:***@h/0", id="slash-and-at"),
        pytest.param("rediss://h/0?ssl_ca_certs=/ca.pem&Password=S3cret", "rediss://h/0?ssl_ca_certs=/ca.pem&Password=***", id="later-parameter"),
    ],
)
def test_redaction_hides_every_form_of_password(url: str, shown: str) -> None:
    """Guards issue 17 item 8: a password in the query string, or holding '#', reached messages and repr()."""
    assert connection.redact(url) == shown


def test_a_query_string_password_never_reaches_messages_or_repr(redis_server_factory):
    server = redis_server_factory(password="S3cret")
    url = f"redis://127.0.0.1:{server.port}/0?password=S3cret"
    storage = RedisStorage(url, namespace="qs")
    assert "S3cret" not in repr(storage) and "S3cret" not in repr(DedupIndex(storage=storage))
    server.kill()
    with pytest.raises(RedisUnavailable) as info:
        RedisStorage(url, namespace="qs")
    assert "S3cret" not in str(info.value) and "password=***" in str(info.value)


def test_threads_sharing_one_index_share_its_bucket_mirror_and_agree_with_one_process(redis_url, namespace):
    """Key layout 4: the threads of a process share one mirror of the buckets (brought up to date under a
    lock, and only forward); four threads adding near-duplicates and copies of each other's texts at once,
    in batches that conflict, still end in the partition of one in-memory index. (A race on the mirror
    itself is rare under the GIL: this guards the batches' agreement, not the lock.)"""
    from tests.corpus import chunks, edited

    base = [{"key": k, "text": t} for k, t in chunks()[:160]]
    items = base + [{"key": f"{d['key']}-near", "text": edited(d["text"], 0.01, seed=i)} for i, d in enumerate(base[:80])]
    items += [{"key": f"{d['key']}-copy", "text": d["text"]} for d in base[80:120]]
    order = random.Random(3).sample(items, len(items))
    index = DedupIndex(storage=redis_url, namespace=namespace)
    errors: list[BaseException] = []

    def work(part: list[dict[str, Any]]) -> None:
        try:
            for lo in range(0, len(part), 16):
                index.add_many(part[lo : lo + 16])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(order[w::4],)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    memory = DedupIndex()
    memory.add_many(items)
    keys = sorted(d["key"] for d in items)
    assert [(m.key, m.representative, m.similarity) for m in index.matches(keys)] == [
        (m.key, m.representative, m.similarity) for m in memory.matches(keys)
    ]
