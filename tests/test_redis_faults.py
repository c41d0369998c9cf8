"""Faults of a Redis-backed index, against real redis-server processes that the tests stop and restart.

What must hold: a server that cannot be reached is named (never its password); a connection lost in
the middle of a batch reaches the caller as an exception (never a silent "unique" verdict), leaves
nothing of the batch in Redis, and the retry after a restart is idempotent; a restart with
persistence keeps the index intact; a lock left by a crashed worker expires, and a lost lock refuses
the commit. The kill points are placed by failure injection (a wrapped storage method or pipeline
``execute``); the server is really killed there.
"""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from rag_dedup import DedupIndex, LockLost, LockTimeout, RagDedupError, RedisUnavailable
from rag_dedup.storage.base import EMPTY_GROUP, ItemRecord
from rag_dedup.storage.redis import RedisStorage

CORPUS = Path(__file__).parent / "data" / "corpus"
NAMESPACE = "faults"


def corpus_items() -> list[dict[str, Any]]:
    """Paragraphs (12 words or more) of the shipped corpus, keyed by file and position, source = file."""
    items = []
    for path in sorted(CORPUS.rglob("*.txt")):
        name = f"{path.parent.name}/{path.name}"
        n = 0
        for m in re.finditer(r"\S(?:.|\n(?!\s*\n))*", path.read_text(encoding="utf-8")):
            if len(m.group(0).split()) >= 12:
                items.append({"key": f"{name}#{n:04d}", "text": m.group(0), "source": name})
                n += 1
    return items


ITEMS = corpus_items()[:500]
FIRST, SECOND = ITEMS[0::2], ITEMS[1::2]


def state(index: DedupIndex) -> dict[str, Any]:
    keys = sorted(index.storage.iter_keys())
    clusters = {rep: (members[0], sorted(members[1:])) for rep, members in index.clusters(include_singletons=False)}
    return {"matches": {m.key: m for m in index.matches(keys)}, "clusters": clusters, "len": len(index)}


def reference_state(items: list[dict[str, Any]]) -> dict[str, Any]:
    index = DedupIndex()
    index.add_many(items)
    return state(index)


def snapshot(url: str, namespace: str) -> dict[bytes, Any]:
    """Every key of the namespace with its value, except the group-id counter and the lock."""
    client = redis.Redis.from_url(url)
    out: dict[bytes, Any] = {}
    try:
        for key in client.scan_iter(match=f"{namespace}:*"):
            if key in (f"{namespace}:next_gid".encode(), f"{namespace}:lock".encode()):
                continue
            kind = client.type(key)
            if kind == b"string":
                out[key] = client.get(key)
            elif kind == b"hash":
                out[key] = client.hgetall(key)
            else:
                out[key] = client.smembers(key)
    finally:
        client.close()
    return out


def open_index(url: str, **options: Any) -> DedupIndex:
    return DedupIndex(storage=RedisStorage(url, namespace=NAMESPACE, **options))


def test_unreachable_server_at_start_is_named_without_its_password():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    url = f"redis://:hunter2@127.0.0.1:{port}/3"
    with pytest.raises(ConnectionError, match=rf"cannot reach Redis at redis://:\*\*\*@127\.0\.0\.1:{port}/3") as info:
        DedupIndex(storage=url)
    assert "hunter2" not in str(info.value)
    assert isinstance(info.value, RagDedupError)


def _kill_before(storage: RedisStorage, server: Any, method: str) -> None:
    original = getattr(storage, method)

    def kill_then_call(*args: Any, **kwargs: Any) -> Any:
        server.kill()
        return original(*args, **kwargs)

    setattr(storage, method, kill_then_call)


@pytest.mark.parametrize(
    ("method", "message"),
    [
        pytest.param("find_groups", "nothing of it was recorded", id="killed-at-the-first-read"),
        pytest.param("query_bands", "nothing of it was recorded", id="killed-at-the-candidate-lookup"),
        pytest.param("set_clusters", "nothing of it was recorded", id="killed-at-the-last-write"),
    ],
)
def test_connection_lost_mid_batch_records_nothing_and_the_retry_is_clean(redis_server_factory, method, message):
    """Regression guard: a batch cut off half way left its groups and buckets in Redis, or returned
    'unique' verdicts for texts it never compared."""
    server = redis_server_factory(appendonly=True)
    index = open_index(server.url)
    index.add_many(FIRST)
    before = snapshot(server.url, NAMESPACE)
    _kill_before(index.storage, server, method)
    with pytest.raises(RedisUnavailable, match=message):
        index.add_many(SECOND)
    delattr(index.storage, method)
    server.start()  # same port, same directory: the append-only file is replayed
    assert snapshot(server.url, NAMESPACE) == before
    index.add_many(SECOND)  # the same process retries: its stale lock is released, not waited out
    assert state(index) == reference_state(ITEMS)


def test_server_killed_at_commit_records_nothing(redis_server_factory, monkeypatch):
    server = redis_server_factory(appendonly=True)
    index = open_index(server.url)
    index.add_many(FIRST)
    before = snapshot(server.url, NAMESPACE)
    original = redis.client.Pipeline.execute

    def kill_then_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.transaction or self.explicit_transaction:
            server.kill()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", kill_then_execute)
    with pytest.raises(RedisUnavailable, match="committing a batch"):
        index.add(SECOND[0]["key"], SECOND[0]["text"])
    monkeypatch.setattr(redis.client.Pipeline, "execute", original)
    server.start()
    assert snapshot(server.url, NAMESPACE) == before
    index.add_many(SECOND)
    assert state(index) == reference_state(ITEMS)


def test_reply_lost_after_commit_then_retry_is_idempotent(redis_server_factory, monkeypatch):
    """The EXEC was applied but its reply never arrived: the caller hears of it, and the retried
    batch (the same items again) changes nothing and raises nothing."""
    server = redis_server_factory(appendonly=True)
    index = open_index(server.url)
    index.add_many(FIRST)
    original = redis.client.Pipeline.execute

    def execute_then_lose_reply(self: Any, *args: Any, **kwargs: Any) -> Any:
        committing = self.explicit_transaction  # execute() resets it
        result = original(self, *args, **kwargs)
        if committing:
            server.kill()
            raise redis.ConnectionError("injected: connection closed before the reply was read")
        return result

    monkeypatch.setattr(redis.client.Pipeline, "execute", execute_then_lose_reply)
    with pytest.raises(RedisUnavailable, match="may or may not have been recorded"):
        index.add_many(SECOND)
    monkeypatch.setattr(redis.client.Pipeline, "execute", original)
    server.start()
    assert state(index) == reference_state(ITEMS)  # it was recorded, all of it
    index.add_many(SECOND)
    assert state(index) == reference_state(ITEMS)


def test_reads_while_the_server_is_down_raise(redis_server_factory):
    server = redis_server_factory()
    index = open_index(server.url)
    index.add_many(FIRST[:20])
    server.kill()
    with pytest.raises(RedisUnavailable, match=r"redis://127\.0\.0\.1:\d+/0 while reading"):
        index.match(FIRST[0]["key"])
    with pytest.raises(RedisUnavailable):
        index.add(SECOND[0]["key"], SECOND[0]["text"])


@pytest.mark.parametrize(
    "how",
    [pytest.param("shutdown", id="clean-shutdown"), pytest.param("kill", id="crash-sigkill")],
)
def test_restart_with_persistence_keeps_the_index_intact(redis_server_factory, how):
    server = redis_server_factory(appendonly=True)
    index = open_index(server.url)
    index.add_many(FIRST)
    index.remove(FIRST[3]["key"])
    before = state(index)
    if how == "kill":
        server.kill()
    else:
        server.stop(save=True)
    server.start()
    assert state(open_index(server.url)) == before
    assert state(index) == before  # the old connection pool reconnects by itself
    index.add(FIRST[3]["key"], FIRST[3]["text"], source=FIRST[3]["source"])
    index.add_many(SECOND)  # group ids continue after the restart: no collision with stored ones
    assert state(index) == reference_state(ITEMS)


# --- the lock ------------------------------------------------------------------------------------


def test_lock_of_a_crashed_worker_expires_and_work_resumes(redis_url):
    client = redis.Redis.from_url(redis_url)
    client.set(f"{NAMESPACE}:lock", b"token-of-a-dead-worker", px=800)
    client.close()
    index = open_index(redis_url, lock_wait=30)
    index.add_many(FIRST[:30])
    assert len(index) == 30


def test_lock_held_too_long_raises_a_clear_timeout(redis_url):
    client = redis.Redis.from_url(redis_url)
    index = open_index(redis_url, lock_wait=0.3)
    client.set(f"{NAMESPACE}:lock", b"token-of-a-busy-worker", px=60_000)
    with pytest.raises(LockTimeout, match=r"write lock of namespace 'faults' .* within lock_wait=0\.3 s"):
        index.add_many(FIRST[:5])
    assert client.get(f"{NAMESPACE}:lock") == b"token-of-a-busy-worker"
    client.close()
    assert len(index) == 0


def test_a_lost_lock_refuses_the_commit(redis_url):
    """Regression guard: a worker that stalled past lock_timeout committed over the next holder's batch."""
    storage = RedisStorage(redis_url, namespace=NAMESPACE)
    client = redis.Redis.from_url(redis_url)
    with pytest.raises(LockLost, match="was not recorded"), storage.lock():
        storage.put_items({"k": ItemRecord(EMPTY_GROUP, 1, None, 0.0, None)})
        client.set(f"{NAMESPACE}:lock", b"the-next-holder", px=60_000)  # ours expired; another took it
    assert client.get(f"{NAMESPACE}:lock") == b"the-next-holder"
    client.close()
    assert storage.get_items(["k"]) == [None]


def test_the_lock_is_renewed_while_a_batch_works(redis_url):
    storage = RedisStorage(redis_url, namespace=NAMESPACE, lock_timeout=1.0)
    with storage.lock():
        storage.put_items({"k": ItemRecord(EMPTY_GROUP, 1, None, 0.0, None)})
        time.sleep(2.5)  # longer than lock_timeout: only the renewals keep the lock alive
    assert storage.get_items(["k"]) == [ItemRecord(EMPTY_GROUP, 1, None, 0.0, None)]
    assert storage.renewals >= 2
