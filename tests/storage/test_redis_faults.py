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
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from rag_dedup import (
    CorruptIndexError,
    DedupIndex,
    LockLost,
    LockTimeout,
    NamespaceLost,
    RagDedupError,
    RedisConfigurationError,
    RedisUnavailable,
)
from rag_dedup.storage.base import EMPTY_GROUP, ItemRecord
from rag_dedup.storage.redis import RedisStorage
from rag_dedup.storage.redis.lock import NamespaceLock

CORPUS = Path(__file__).parents[1] / "data" / "corpus"
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
            if key in (f"{namespace}:next-group-id".encode(), f"{namespace}:lock".encode()):
                continue
            kind = client.type(key)
            if kind == b"string":
                out[key] = client.get(key)
            elif kind == b"hash":
                out[key] = client.hgetall(key)
            elif kind == b"list":
                out[key] = client.lrange(key, 0, -1)
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
        pytest.param("query_band_pairs", "nothing of it was recorded", id="killed-at-the-candidate-lookup"),
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


@pytest.mark.parametrize("locked", [pytest.param(False, id="optimistic"), pytest.param(True, id="under-the-lock")])
def test_a_commit_that_fails_on_a_key_of_another_type_says_the_namespace_is_damaged(redis_url, locked):
    """Regression: a key of another type where the commit writes without reading (a source's set) failed one
    command of the EXEC; Redis applied the others, and the caller got redis-py's raw ResponseError."""
    index = open_index(redis_url)
    index.add_many(FIRST[:10])
    client = redis.Redis.from_url(redis_url)
    client.set(f"{NAMESPACE}:source:garbage", b"not a set")
    client.close()
    items = [{**item, "key": f"new-{i}", "source": "garbage"} for i, item in enumerate(FIRST[10:12])]
    with pytest.raises(CorruptIndexError, match=r"faults:source:garbage.*WRONGTYPE.*does not roll one back.*drop\(\) it"):
        if locked:
            with index.storage.lock():
                index.add_many(items)
        else:
            index.add_many(items)


@pytest.mark.parametrize("margin", [0, 10_000, 200_000])
def test_a_server_out_of_memory_is_not_reported_as_a_damaged_namespace(redis_url, margin):
    """Regression (review): every error of a commit's EXEC was reported as a damaged namespace to drop;
    a server out of memory refuses the commands as they are queued and discards the whole transaction."""
    index = open_index(redis_url)
    index.add_many(FIRST[:10])
    client = redis.Redis.from_url(redis_url)
    before = snapshot(redis_url, NAMESPACE)
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + margin)
    try:
        # Wherever the server refuses (the group-id counter, a read script, the commit), the same error.
        with pytest.raises(RedisConfigurationError, match=r"out of memory .*nothing of this batch was recorded"):
            index.add_many(FIRST[10:300])
    finally:
        client.config_set("maxmemory", 0)
        client.close()
    assert snapshot(redis_url, NAMESPACE) == before  # nothing of the batch was recorded


@pytest.mark.parametrize(
    "stuck",
    [
        pytest.param(lambda c: c.set(f"{NAMESPACE}:lock", b"set by hand"), id="no-expiry"),
        pytest.param(lambda c: c.sadd(f"{NAMESPACE}:lock", b"x"), id="a-set"),
    ],
)
def test_a_lock_key_that_never_expires_is_named_at_once_not_waited_for(redis_url, stuck):
    """Regression: a lock key without an expiry (not one of ours) made every open wait lock_wait, then
    blamed a busy worker whose lock would expire within lock_timeout, which this one never does."""
    client = redis.Redis.from_url(redis_url)
    stuck(client)
    with pytest.raises(CorruptIndexError, match=r"faults:lock\) has no expiry.*delete that key"):
        open_index(redis_url, lock_wait=30).add_many(FIRST[:5])  # (a LockTimeout after 30 s, were it waited for)
    client.close()


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


class ManualClock:
    """Time that moves only when the test says so (:class:`~rag_dedup.storage.redis.lock.Clock`).

    The renewal thread waits in :meth:`wait`; :meth:`advance` moves time on and returns once that
    thread has acted on it, back waiting (or gone), so the test sees each renewal happen without sleeping.
    """

    def __init__(self) -> None:
        self.t = 0.0
        self.entered = 0  # how many times a waiter has started waiting
        self.deadline: float | None = None  # the waiting waiter's
        self.cond = threading.Condition()

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        with self.cond:
            self.t += seconds

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        with self.cond:
            self.deadline = deadline = self.t + seconds
            self.entered += 1
            self.cond.notify_all()
            while self.t < deadline and not stop.is_set():
                self.cond.wait(0.01)  # stop.set() does not notify: look again soon
            self.deadline = None
            return stop.is_set()

    def advance(self, seconds: float, thread: threading.Thread) -> None:
        with self.cond:
            self._until(lambda: self.deadline is not None or not thread.is_alive())
            entered = self.entered
            self.t += seconds
            self.cond.notify_all()
            if self.deadline is not None and self.t < self.deadline:
                return  # not due yet: the waiter goes on waiting
            self._until(lambda: self.entered > entered or not thread.is_alive())

    def _until(self, done: Any) -> None:
        for _ in range(1000):  # 10 s at most
            if done():
                return
            self.cond.wait(0.01)
        raise AssertionError("the renewal thread did not act on the clock")


def _lock(url: str, clock: ManualClock, timeout: float = 30.0) -> tuple[NamespaceLock, redis.Redis]:
    client = redis.Redis.from_url(url)
    return NamespaceLock(client, f"{NAMESPACE}:lock".encode(), namespace=NAMESPACE, url=url, timeout=timeout, wait=1.0, clock=clock), client


def test_the_lock_is_renewed_to_its_full_lifetime_every_third_of_it(redis_url):
    """Guards the renewal thread: without it a batch working longer than lock_timeout loses its lock."""
    clock = ManualClock()
    lock, client = _lock(redis_url, clock)
    hold, _ = lock.acquire()
    assert hold.renewer is not None
    try:
        client.pexpire(lock.key, 500)  # as if 29.5 of its 30 seconds had passed
        clock.advance(9.9, hold.renewer)  # not yet a third of 30 s
        assert lock.renewals == 0 and client.pttl(lock.key) <= 500
        clock.advance(0.1, hold.renewer)
        assert lock.renewals == 1 and client.pttl(lock.key) > 20_000
        clock.advance(10.0, hold.renewer)
        assert lock.renewals == 2
    finally:
        hold.end()
        lock.release(hold.token)
    assert client.get(lock.key) is None
    client.close()


def test_a_renewal_never_extends_the_next_holders_lock(redis_url):
    """Regression guard: renewing without comparing the token would keep a lock that another worker holds alive."""
    clock = ManualClock()
    lock, client = _lock(redis_url, clock)
    hold, _ = lock.acquire()
    assert hold.renewer is not None
    client.set(lock.key, b"the-next-holder", px=60_000)  # ours expired; another took it
    clock.advance(10.0, hold.renewer)
    hold.renewer.join(timeout=10)
    assert not hold.renewer.is_alive()  # it saw the lock lost and stopped
    assert client.get(lock.key) == b"the-next-holder" and client.pttl(lock.key) > 30_000
    lock.release(hold.token)
    assert client.get(lock.key) == b"the-next-holder"  # the release compares the token too
    client.close()


def test_a_batch_that_outlives_lock_timeout_commits_because_it_was_renewed(redis_url):
    storage = RedisStorage(redis_url, namespace=NAMESPACE, lock_timeout=1.0)
    storage.clock = clock = ManualClock()
    client = redis.Redis.from_url(redis_url)
    with storage.lock():
        storage.put_items({"k": ItemRecord(EMPTY_GROUP, 1, None, 0.0, None)})
        (renewer,) = [t for t in threading.enumerate() if t.name == "rag-dedup-lock"]
        client.pexpire(f"{NAMESPACE}:lock", 50)  # as if almost all of lock_timeout had passed
        clock.advance(0.34, renewer)
        time.sleep(0.1)  # beyond the 50 ms: only the renewal keeps the lock alive now
    client.close()
    assert storage.get_items(["k"]) == [ItemRecord(EMPTY_GROUP, 1, None, 0.0, None)]
    assert storage.renewals == 1


def test_a_waiter_gives_up_after_lock_wait_on_its_clock(redis_url):
    """The wait is measured on the lock's clock (here: each poll's sleep moves it), not counted in polls."""
    clock = ManualClock()
    lock, client = _lock(redis_url, clock)
    client.set(lock.key, b"token-of-a-busy-worker", px=60_000)
    with pytest.raises(LockTimeout, match=r"within lock_wait=1 s"):
        lock.acquire()
    assert 1.0 <= clock.t < 1.01
    client.close()


# --- state loss (issue 17 item 4) ------------------------------------------------------------------
def configure(url: str, **settings: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        for name, value in settings.items():
            client.config_set(name.replace("_", "-"), value)
    finally:
        client.close()


def test_a_server_that_may_evict_keys_is_refused_unless_allowed(redis_server_factory):
    """Guards issue 17 item 4: under allkeys-lru 147,603 keys were evicted and 9,727 of 20,000 rows came out wrong."""
    server = redis_server_factory()
    configure(server.url, maxmemory="2mb", maxmemory_policy="allkeys-lru")
    with pytest.raises(RedisConfigurationError, match=r"maxmemory-policy 'allkeys-lru'.*noeviction.*allow_eviction=True"):
        open_index(server.url)
    index = open_index(server.url, allow_eviction=True)
    index.add_many(FIRST[:50])
    assert len(index) == 50
    configure(server.url, maxmemory_policy="noeviction")
    assert len(open_index(server.url)) == 50


def test_a_restart_without_persistence_fails_the_next_batch_and_read(redis_server_factory):
    """Guards issue 17 item 4: after a restart without AOF all workers exited 0 with 12,288 of 20,000 items gone."""
    server = redis_server_factory(appendonly=False)
    index = open_index(server.url)
    index.add_many(FIRST)
    server.restart()
    with pytest.raises(NamespaceLost, match=r"lost its parameters \(key meta\).*restarted without persistence"):
        index.add_many(SECOND)
    with pytest.raises(NamespaceLost):
        index.match(FIRST[0]["key"])
    with pytest.raises(NamespaceLost):
        index.query(FIRST[0]["text"])
    for scan in (lambda: list(index.clusters()), lambda: list(index.clusters(include_singletons=False))):
        with pytest.raises(NamespaceLost):  # a scan answered [] (an empty index) in place of the lost one
            scan()
    assert snapshot(server.url, NAMESPACE) == {}  # the failed batch wrote nothing


@pytest.mark.parametrize(
    ("lost", "message"),
    [
        pytest.param("meta", r"lost its parameters \(key meta\)", id="meta"),
        pytest.param("next-group-id", r"lost its group-id counter \(key next-group-id\) while it holds groups", id="counter"),
    ],
)
def test_a_namespace_that_lost_its_meta_or_counter_fails_the_batch_loudly(redis_url, lost, message):
    """Guards issue 17 item 4: a lost group-id counter made group ids repeat; nothing of the failing batch is written."""
    index = open_index(redis_url)
    index.add_many(FIRST)
    client = redis.Redis.from_url(redis_url)
    client.delete(f"{NAMESPACE}:{lost}")
    client.close()
    before = snapshot(redis_url, NAMESPACE)
    with pytest.raises(NamespaceLost, match=message):
        index.add_many(SECOND)
    assert snapshot(redis_url, NAMESPACE) == before
    if lost == "meta":
        with pytest.raises(NamespaceLost, match="still holds data"):
            open_index(redis_url)  # a new worker does not take the remains for a new namespace


# --- hostile stored values (issue 17 item 5) --------------------------------------------------------
def _first_group(client: redis.Redis) -> bytes:
    return sorted(client.hkeys(f"{NAMESPACE}:groups"), key=int)[0]


def _first_digest(client: redis.Redis) -> bytes:
    packed = client.hget(f"{NAMESPACE}:groups", _first_group(client))
    return packed[1 : 1 + packed[0]]


def _band_log_entry(client: redis.Redis, damage: bytes) -> None:
    """A commit's band-log entry (the LSH buckets it changed) followed by ``damage``: the next batch's mirror update reads it."""
    last = client.lindex(f"{NAMESPACE}:band-log", -1)
    client.rpush(f"{NAMESPACE}:band-log", b"999999:" + last[last.index(b":") + 1 :] + damage)


HOSTILE = [
    pytest.param(lambda c: c.hset(f"{NAMESPACE}:items", FIRST[0]["key"], b"\xff\xfe"), r":items\[.*\] holds b'\\xff\\xfe'", id="item-not-utf8"),
    pytest.param(lambda c: c.hset(f"{NAMESPACE}:items", FIRST[0]["key"], b"[" * 100000), r":items\[.*\] holds", id="item-deeply-nested"),
    pytest.param(lambda c: c.hset(f"{NAMESPACE}:items", FIRST[0]["key"], b"[1e999, 5, null, 0, null]"), r":items\[", id="item-overflow"),
    pytest.param(lambda c: c.hset(f"{NAMESPACE}:items", FIRST[0]["key"], b"[0, 5, 7, 0, null]"), r"source is not a string", id="item-source-int"),
    pytest.param(lambda c: c.hset(f"{NAMESPACE}:items", FIRST[0]["key"], b'{"a": 1}'), r"not a list of 5 values", id="item-object"),
    pytest.param(lambda c: c.hset(f"{NAMESPACE}:cluster-of", FIRST[0]["key"], b'["x", "0.9"]'), r":cluster-of\[.*similarity is not a finite number", id="cluster-entry"),
    pytest.param(lambda c: c.hset(f"{NAMESPACE}:groups", _first_group(c), b""), r":groups\[0\] holds b''", id="group-empty"),
    pytest.param(lambda c: c.hset(f"{NAMESPACE}:groups", _first_group(c), b"\x10abc"), r":groups\[0\]", id="group-short"),
    pytest.param(lambda c: _band_log_entry(c, b"12abc"), r":band-log\[\d+\] holds .*not the header and", id="band-log-entry"),
    pytest.param(lambda c: c.rpush(f"{NAMESPACE}:band-log", b"no commit number"), r":band-log\[\d+\] holds .*no commit number", id="band-log-no-number"),
    pytest.param(lambda c: c.set(f"{NAMESPACE}:next-group-id", b"many"), r":next-group-id cannot be read", id="counter-not-int"),
    pytest.param(lambda c: (c.delete(f"{NAMESPACE}:items"), c.set(f"{NAMESPACE}:items", b"x")), r":items cannot be read", id="wrong-type"),
    pytest.param(lambda c: c.hset(f"{NAMESPACE}:digests", _first_digest(c), b" 7"), r":digests\[.*\] holds b' 7'", id="digest-id-spaces"),
    # Regression: a commit count that is not a number made the state script's reply come back empty (IndexError).
    pytest.param(lambda c: c.set(f"{NAMESPACE}:commits", b"abc"), r":commits holds b'abc'.*not a count", id="commits-not-a-number"),
]


@pytest.mark.parametrize(("damage", "message"), HOSTILE)
def test_hostile_values_raise_a_corrupt_index_error_naming_the_key(redis_url, damage, message):
    """Guards issue 17 item 5: 54 of 296 hostile-value runs raised raw UnicodeDecodeError, ValueError,
    RecursionError or OverflowError without naming the key."""
    index = open_index(redis_url)
    index.add_many(FIRST[:100])
    client = redis.Redis.from_url(redis_url)
    damage(client)
    client.close()
    keys = [item["key"] for item in FIRST[:100]]
    raised: list[BaseException] = []
    for call in (
        lambda: index.matches(keys),
        lambda: [index.query(item["text"]) for item in FIRST[:100]],
        lambda: index.add_many(FIRST[:100] + [{"key": "new", "text": FIRST[0]["text"] + " again", "source": "x"}]),
        lambda: list(index.clusters()),
    ):
        try:
            call()
        except CorruptIndexError as exc:
            raised.append(exc)
    assert raised, "no call noticed the damage"
    assert any(re.search(message, str(exc)) for exc in raised), [str(e) for e in raised]
    assert all("drop() it" in str(exc) for exc in raised)


def test_a_lock_key_that_lost_its_expiry_after_open_is_named_at_once_not_waited_for(redis_url):
    """Regression: the lock key set without an expiry while an index is open made the next batch's
    optimistic commit wait the whole lock_wait (seeing the lock held), then blame a busy worker."""
    index = open_index(redis_url, lock_wait=30)
    index.add_many(FIRST[:5])
    client = redis.Redis.from_url(redis_url)
    client.set(f"{NAMESPACE}:lock", b"set by hand")
    before = snapshot(redis_url, NAMESPACE)
    with pytest.raises(CorruptIndexError, match=r"faults:lock\) has no expiry.*delete that key"):
        index.add_many(FIRST[5:10])  # (a LockTimeout after 30 s, were it waited for)
    assert snapshot(redis_url, NAMESPACE) == before  # nothing of the batch was recorded
    client.close()


@pytest.mark.parametrize("counter", ["next-group-id", "commits"])
def test_a_damaged_counter_is_mended_by_the_drop_its_error_advises(redis_url, counter):
    """A counter that is not a count said "drop() it and index again", but drop() kept the counters: the
    error came back after the drop (and a damaged commits counter made drop() itself fail)."""
    index = open_index(redis_url)
    index.add_many(FIRST[:20])
    client = redis.Redis.from_url(redis_url)
    client.set(f"{NAMESPACE}:{counter}", b"abc")
    with pytest.raises(CorruptIndexError, match="drop\\(\\) it and index again"):
        open_index(redis_url).add_many(FIRST[20:30])
    # The namespace's own drop: a DedupIndex cannot open a namespace whose commits counter is damaged.
    RedisStorage(redis_url, namespace=NAMESPACE).drop()
    again = open_index(redis_url)
    again.add_many(FIRST[:30])
    assert len(again) == 30 and state(again) == reference_state(FIRST[:30])
    client.close()
