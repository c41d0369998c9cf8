"""Optimistic batches on Redis: read and computed without the lock, committed only if nothing they read changed.

What must hold: a batch with nothing in its way never takes the lock; a commit that lands between a
batch's reads and its commit, and wrote something the batch read (an exact copy or a near-duplicate of
one of its texts, by an optimistic batch or one under the lock), makes the batch run again on fresh
values, so that the result is exactly that of one in-memory index holding everything; one that wrote
nothing the batch read does not; a batch refused again and again ends under the lock; and a worker
that dies between its reads and its commit leaves nothing (no half commit, no lock to wait out).
Conflicts are forced by failure injection: a hook on the batch's commit lets another worker commit first.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import uuid
from collections import Counter
from typing import Any

import numpy as np
import pytest
import redis

from rag_dedup import DedupIndex
from rag_dedup.storage.bookkeeping import Table
from rag_dedup.storage.redis import RedisStorage
from rag_dedup.storage.redis.overlay import LOG_BYTES, LOG_KEEP, LOG_KEEP_MAX, WATCH_TRIES, log_keep
from rag_dedup.storage.redis.storage import OPTIMISTIC_ATTEMPTS
from tests.corpus import chunks, edited

BASE = [{"key": k, "text": t} for k, t in chunks()[:120]]
BATCH = [{"key": k, "text": t} for k, t in chunks()[120:180]]
TARGET = BATCH[7]  # the text of the batch that the other worker copies


def state(index: DedupIndex) -> dict[str, Any]:
    keys = sorted(index.storage.iter_keys())
    clusters = {rep: (members[0], sorted(members[1:])) for rep, members in index.clusters(include_singletons=False)}
    return {"matches": {m.key: m for m in index.matches(keys)}, "clusters": clusters, "len": len(index)}


def reference(items: list[dict[str, Any]]) -> dict[str, Any]:
    index = DedupIndex()
    index.add_many(items)
    return state(index)


def copy_of_target(kind: str, n: int) -> dict[str, Any]:
    """The other worker's item: an exact copy of TARGET, or a near-duplicate (one word in ~100 replaced)."""
    text = TARGET["text"] if kind == "exact" else edited(TARGET["text"], 0.01, seed=n)
    return {"key": f"other-{kind}-{n}", "text": text}


def unrelated(n: int) -> dict[str, Any]:
    """A text that shares no shingle with the corpus (made-up words)."""
    rng = random.Random(n)
    return {"key": f"unrelated-{n}", "text": " ".join("".join(rng.choices("qxzjvk", k=9)) for _ in range(120))}


@pytest.fixture
def namespace() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def before_each_commit(index: DedupIndex, action: Any) -> list[int]:
    """Run ``action(n)`` (n = 0, 1, ...) just before each optimistic commit of ``index``: between the
    batch's reads and its commit. Returns the list of n run so far."""
    overlay = index.storage._overlay  # type: ignore[attr-defined]
    original = overlay.commit_optimistic
    done: list[int] = []

    def hooked(batch: Any) -> str:
        n = len(done)
        done.append(n)
        action(n)
        return original(batch)

    overlay.commit_optimistic = hooked
    return done


def test_a_batch_with_nothing_in_its_way_never_takes_the_lock(redis_url, namespace, monkeypatch):
    index = DedupIndex(storage=redis_url, namespace=namespace)
    storage = index.storage
    assert isinstance(storage, RedisStorage)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the lock was taken")

    monkeypatch.setattr(storage._lock, "acquire", refuse)
    index.add_many(BASE)
    index.add_many(BATCH)
    assert (storage.conflicts, storage.fallbacks) == (0, 0)
    assert state(index) == reference(BASE + BATCH)


@pytest.mark.parametrize("kind", [pytest.param("exact", id="an-exact-copy"), pytest.param("near", id="a-near-duplicate")])
@pytest.mark.parametrize("locked", [pytest.param(False, id="optimistic-other"), pytest.param(True, id="other-under-the-lock")])
def test_a_conflicting_commit_between_read_and_commit_makes_the_batch_run_again(redis_url, namespace, kind, locked):
    """Regression guard for the optimistic commit: had the batch committed what it computed before the
    other worker's copy landed, the copy and its original would be two groups of one digest, or two
    'unique' texts, and the partition would not be that of one index holding both."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    other = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    copies: list[dict[str, Any]] = []

    def other_commits(n: int) -> None:
        if n == 0:
            copies.append(copy_of_target(kind, n))
            if locked:
                with other.storage.lock():
                    other.add_many(copies[-1:])
            else:
                other.add_many(copies[-1:])

    before_each_commit(index, other_commits)
    index.add_many(BATCH)
    expected = reference(BASE + copies + BATCH)
    assert expected["matches"][copies[0]["key"]].cluster_id == expected["matches"][TARGET["key"]].cluster_id
    assert state(index) == expected
    assert (index.storage.conflicts, index.storage.fallbacks) == (1, 0)
    # What refused it is named: the copy's digest, or the buckets it shares with its original.
    hits = index.storage.refusal_hits
    assert hits.get("digests", 0) == (1 if kind == "exact" else 0)
    assert hits.get("bands", 0) == 1
    assert "unchecked" not in hits


def test_an_attempt_refused_at_its_commit_is_counted_with_the_cpu_it_took(redis_url, namespace):
    """The counters that say what conflicts cost (``bench_redis.py`` prints them): an attempt refused by
    its commit's check counts as a conflict, not one refused before its commit, and its CPU is counted."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    other = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    storage = index.storage
    assert isinstance(storage, RedisStorage)
    assert (storage.refused_before_commit, storage.refused_cpu) == (0, 0.0)
    before_each_commit(index, lambda n: other.add_many([copy_of_target("exact", n)]) if n == 0 else None)
    index.add_many(BATCH)
    assert (storage.conflicts, storage.refused_before_commit) == (1, 0)
    assert storage.refused_cpu > 0.0
    assert state(index) == reference([*BASE, copy_of_target("exact", 0), *BATCH])


def test_an_attempt_refused_at_a_read_stops_there_and_is_counted_as_such(redis_url, namespace, monkeypatch):
    """A read that finds a newer commit checks the attempt at once: when that commit wrote what the
    attempt read (here an exact copy of one of its texts, committed between the attempt's first read
    and its next), the attempt is refused at that read, before its commit, and run again."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    other = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    storage = index.storage
    assert isinstance(storage, RedisStorage)
    commits: list[int] = []
    original = storage._overlay.commit_optimistic  # type: ignore[attr-defined]
    get_items = storage.get_items
    reads: list[int] = []

    def counted(batch: Any) -> str:
        commits.append(1)
        return original(batch)

    def other_first(keys: Any) -> Any:
        reads.append(1)
        if len(reads) == 1:  # the first attempt's read of its keys' records, after it read its digests
            other.add_many([copy_of_target("exact", 0)])
        return get_items(keys)

    storage._overlay.commit_optimistic = counted  # type: ignore[attr-defined]
    monkeypatch.setattr(storage, "get_items", other_first)
    index.add_many(BATCH)
    assert (storage.conflicts, storage.refused_before_commit, storage.fallbacks) == (1, 1, 0)
    assert len(commits) == 1  # the refused attempt never reached its commit
    assert storage.refused_cpu > 0.0
    assert state(index) == reference([*BASE, copy_of_target("exact", 0), *BATCH])


def test_a_commit_that_wrote_nothing_the_batch_read_does_not_make_it_run_again(redis_url, namespace):
    index = DedupIndex(storage=redis_url, namespace=namespace)
    other = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    before_each_commit(index, lambda n: other.add_many([unrelated(n)]) if n == 0 else None)
    index.add_many(BATCH)
    assert (index.storage.conflicts, index.storage.fallbacks) == (0, 0)
    assert state(index) == reference([*BASE, unrelated(0), *BATCH])


def test_a_batch_refused_every_time_ends_under_the_lock(redis_url, namespace):
    """Bounded retries: another worker copying the batch's text before each of its optimistic commits
    cannot keep it from committing (no livelock); the last attempt runs under the lock."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    other = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    copies: list[dict[str, Any]] = []

    def other_commits(n: int) -> None:
        copies.append(copy_of_target("exact" if n % 2 else "near", n))
        other.add_many(copies[-1:])

    done = before_each_commit(index, other_commits)
    index.add_many(BATCH)
    assert len(done) == OPTIMISTIC_ATTEMPTS
    assert (index.storage.conflicts, index.storage.fallbacks) == (OPTIMISTIC_ATTEMPTS, 1)
    assert state(index) == reference(BASE + copies + BATCH)


def test_an_optimistic_commit_waits_while_another_worker_holds_the_lock(redis_url, namespace):
    index = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    client = redis.Redis.from_url(redis_url)
    before_each_commit(index, lambda n: client.set(f"{namespace}:lock", b"a-busy-worker", px=300) if n == 0 else None)
    index.add_many(BATCH)
    client.close()
    assert index.storage.lock_wait_seconds > 0
    assert (index.storage.conflicts, index.storage.fallbacks) == (0, 0)
    assert state(index) == reference(BASE + BATCH)


def _die_before_commit(url: str, namespace: str, items: list[dict[str, Any]]) -> None:
    """Worker process: read and compute a batch, then die (no exception, no cleanup) just before its commit."""
    index = DedupIndex(storage=url, namespace=namespace)
    index.storage._overlay.commit_optimistic = lambda *args: os._exit(17)  # type: ignore[attr-defined]
    index.add_many(items)


def _namespace(url: str, namespace: str) -> dict[bytes, Any]:
    """Every key of the namespace and its value, but the group-id counter (the dead batch took ids)."""
    client = redis.Redis.from_url(url)
    out: dict[bytes, Any] = {}
    for key in client.scan_iter(match=f"{namespace}:*"):
        if key == f"{namespace}:next-group-id".encode():
            continue
        kind = client.type(key)
        out[key] = (
            client.get(key) if kind == b"string"
            else client.hgetall(key) if kind == b"hash"
            else client.lrange(key, 0, -1) if kind == b"list"
            else client.smembers(key)
        )  # fmt: skip
    client.close()
    return out


def test_a_worker_that_dies_between_its_reads_and_its_commit_leaves_nothing(redis_url, namespace):
    index = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    before = _namespace(redis_url, namespace)
    proc = multiprocessing.get_context("spawn").Process(target=_die_before_commit, args=(redis_url, namespace, BATCH))
    proc.start()
    proc.join(120)
    assert proc.exitcode == 17
    assert _namespace(redis_url, namespace) == before  # nothing of its batch, and no lock left behind
    index.add_many(BATCH)
    assert (index.storage.conflicts, index.storage.fallbacks) == (0, 0)
    assert state(index) == reference(BASE + BATCH)


def test_a_batch_run_again_gets_only_the_other_commits_bucket_changes(redis_url, namespace, monkeypatch):
    """Key layout 4: a batch's bucket lookups are answered by the worker's mirror, which each attempt's
    start brings up to date; the second attempt of a batch refused by a near-duplicate reads one band-log
    entry (the other commit's), not the batch's ~1,200 buckets again, and finds the other commit's
    group in them: the result is still exactly the one-process partition."""
    from rag_dedup.storage.redis.mirror import BandMirror

    index = DedupIndex(storage=redis_url, namespace=namespace)
    other = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    done = before_each_commit(index, lambda n: other.add_many([copy_of_target("near", n)]) if n == 0 else None)
    applied: list[tuple[int, int]] = []  # (attempt, band-log entries applied) for each mirror update
    apply = BandMirror.apply

    def spy(self: Any, reply: Any, corrupt: Any) -> bool:
        if self is index.storage._overlay.mirror:  # type: ignore[attr-defined]  (not the other worker's)
            applied.append((len(done), len(reply) - 2))
        return apply(self, reply, corrupt)

    monkeypatch.setattr(BandMirror, "apply", spy)
    index.add_many(BATCH)
    assert (index.storage.conflicts, index.storage.fallbacks) == (1, 0)
    assert [n for attempt, n in applied if attempt == 1] == [1]  # the other commit's entry, once
    assert state(index) == reference([*BASE, copy_of_target("near", 0), *BATCH])


def _clustered(monkeypatch: Any, done: list[int]) -> list[tuple[int, frozenset[str]]]:
    """(attempt, the component's keys) for every component the index clusters from now on."""
    import rag_dedup.index as index_module

    seen: list[tuple[int, frozenset[str]]] = []
    original = index_module.cluster_component

    def spy(members: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append((len(done), frozenset(m.key for m, _ in members)))
        return original(members, *args, **kwargs)

    def spy_many(components: Any, *args: Any, **kwargs: Any) -> Any:
        seen.extend((len(done), frozenset(m.key for m, _ in members)) for members in components)
        return original_many(components, *args, **kwargs)

    original_many = index_module.cluster_components
    monkeypatch.setattr(index_module, "cluster_component", spy)
    monkeypatch.setattr(index_module, "cluster_components", spy_many)
    return seen


def test_a_batch_run_again_keeps_its_group_ids_and_reclusters_only_what_changed(redis_url, namespace, monkeypatch):
    """Redo only what conflicts, for the work: the second attempt of a batch refused by a near-duplicate
    of one of its texts gives each new text the group id the first attempt gave it (the id counter
    has no gap), and clusters again only the component the near-duplicate joined (every other one is
    reused from the first attempt: same members, same records); the result is exactly the one-process
    partition, the near-duplicate in its original's cluster."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    other = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    # Near-duplicates of stored texts: components of stored and new groups, clustered in each attempt.
    near = [{"key": f"near-{i}", "text": edited(b["text"], 0.01, seed=100 + i)} for i, b in enumerate(BASE[:20])]
    copy = copy_of_target("near", 0)
    done = before_each_commit(index, lambda n: other.add_many([copy]) if n == 0 else None)
    seen = _clustered(monkeypatch, done)
    index.add_many(BATCH + near)
    assert (index.storage.conflicts, index.storage.fallbacks) == (1, 0)
    first = [keys for attempt, keys in seen if attempt == 0]
    again = [keys for attempt, keys in seen if attempt == 1]
    assert len(first) >= 10
    assert again and all(TARGET["key"] in keys and copy["key"] in keys for keys in again)
    client = redis.Redis.from_url(redis_url)
    assert int(client.get(f"{namespace}:next-group-id")) == client.hlen(f"{namespace}:groups")
    expected = reference(BASE + [copy] + BATCH + near)
    assert expected["matches"][copy["key"]].cluster_id == expected["matches"][TARGET["key"]].cluster_id
    assert state(index) == expected


def test_a_batch_run_again_reports_what_it_displaced_as_of_the_commit_it_follows(redis_url, namespace):
    """Another worker makes a longer copy of a stored text, which takes over its cluster, between the
    batch's reads and its commit; the batch adds a near-duplicate of the same text. Its second attempt
    commits after the other's, so the Matches it returns (``displaced`` included) are those of adding
    the batch after the other's text: the representative the first attempt saw (the stored text
    itself) was no longer the representative when the batch committed, and displaced nothing."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    other = DedupIndex(storage=redis_url, namespace=namespace)
    target = dict(BASE[3], key="a-target")
    base = [target, *BASE[4:40]]
    longer = {"key": "c-longer", "text": target["text"] + " " + BASE[50]["text"].split(" ", 8)[0]}
    batch = [{"key": "b-near", "text": edited(target["text"], 0.01, seed=2)}, *BATCH[:20]]
    index.add_many(base)
    before_each_commit(index, lambda n: other.add_many([longer]) if n == 0 else None)
    got = index.add_many(batch)
    assert (index.storage.conflicts, index.storage.fallbacks) == (1, 0)
    serial = DedupIndex()
    serial.add_many([*base, longer])
    expected = serial.add_many(batch)
    assert expected[0].cluster_id == "c-longer" and expected[0].displaced is None  # the case this test is about
    assert got == expected
    assert state(index) == state(serial)


def test_a_batch_run_again_after_a_drop_takes_new_group_ids(redis_url, namespace):
    """Another worker drops the namespace and indexes more texts than the batch between its reads and
    its commit: the ids the batch's first attempt took may now name the other's groups, so its second
    attempt must not reuse them (a gap in the commit log says a drop may have happened)."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    other = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    others = BASE + [unrelated(n) for n in range(150)]

    def drop_and_refill(n: int) -> None:
        if n == 0:
            other.drop()
            other.add_many(others)

    before_each_commit(index, drop_and_refill)
    index.add_many(BATCH)
    assert index.storage.conflicts >= 1
    client = redis.Redis.from_url(redis_url)
    assert client.hlen(f"{namespace}:groups") == len(reference(others + BATCH)["matches"])  # no id shared by two groups
    assert state(index) == reference(others + BATCH)


def _pairs_computed(monkeypatch: Any, done: list[int]) -> list[tuple[int, int]]:
    """(attempt, pairs) for every block of pairs whose Jaccard the index computes from now on (the compiled
    kernel, or the numpy path's bound, which every computed pair goes through)."""
    import rag_dedup.index as index_module

    seen: list[tuple[int, int]] = []
    for name in ("pair_jaccard", "jaccard_upper_bounds"):
        original = getattr(index_module, name)

        def spy(sets: Any, left: Any, right: Any, original: Any = original) -> Any:
            seen.append((len(done), len(left)))
            return original(sets, left, right)

        monkeypatch.setattr(index_module, name, spy)
    return seen


def _encoded(monkeypatch: Any, done: list[int], others: list[bool]) -> dict[int, Counter[Table]]:
    """attempt -> how many item records and groups the storages encode in it from now on, but while ``others``."""
    from rag_dedup.storage.redis import keys

    seen: dict[int, Counter[Table]] = {0: Counter(), 1: Counter()}
    for table in (Table.ITEMS, Table.GROUPS):
        field, encode, decode = keys.CODECS[table]

        def spy(value: Any, encode: Any = encode, table: Table = table) -> bytes:
            if not others:
                seen.setdefault(len(done), Counter())[table] += 1
            return encode(value)

        monkeypatch.setitem(keys.CODECS, table, (field, spy, decode))
    return seen


@pytest.mark.parametrize("path", ["compiled", "numpy"])
def test_a_batch_run_again_verifies_only_the_pairs_no_earlier_attempt_verified(redis_url, namespace, monkeypatch, request, path):
    """Redo only what conflicts, for the verification: a batch of near-duplicates of stored texts is
    refused because another worker committed a near-duplicate of one of its texts between its reads
    and its commit; its second attempt computes the Jaccard only of pairs the first did not (those
    of the other worker's new group), not again the ~20 pairs of the first, reads no stored group's
    shingles again, and encodes none of its item records and groups again (they did not change); the
    result is exactly the one-process partition. On the compiled path and on the numpy reference path."""
    if path == "numpy":
        request.getfixturevalue("reference_kernels")
    index = DedupIndex(storage=redis_url, namespace=namespace)
    other = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    near = [{"key": f"near-{i}", "text": edited(b["text"], 0.01, seed=100 + i)} for i, b in enumerate(BASE[:20])]
    copy = copy_of_target("near", 0)
    others: list[bool] = []  # non-empty while the other index adds its copy (what it encodes is not counted)

    def other_commits(n: int) -> None:
        if n == 0:
            others.append(True)
            other.add_many([copy])
            others.clear()

    done = before_each_commit(index, other_commits)
    computed = _pairs_computed(monkeypatch, done)
    read: list[tuple[int, int]] = []  # (attempt, groups) for each read of stored groups' shingles
    group_shingles = index.storage.group_shingles

    def spy(gids: Any) -> Any:
        read.append((len(done), len(gids)))
        return group_shingles(gids)

    monkeypatch.setattr(index.storage, "group_shingles", spy)
    encoded = _encoded(monkeypatch, done, others)
    index.add_many(BATCH + near)
    assert (index.storage.conflicts, index.storage.fallbacks) == (1, 0)
    # The same records and groups (each text keeps its group id): encoded once, by the first attempt.
    assert encoded[0][Table.ITEMS] == len(BATCH + near) and encoded[0][Table.GROUPS] >= len(near)
    assert not encoded[1]
    first = sum(n for attempt, n in computed if attempt == 0)
    again = sum(n for attempt, n in computed if attempt == 1)
    assert first >= len(near)  # each near-duplicate against its original, at least
    assert 0 < again <= 3  # the other's near-duplicate against TARGET (and what else it shares a bucket with)
    assert sum(n for attempt, n in read if attempt == 1) <= again  # only the other's new group(s)
    expected = reference(BASE + [copy] + BATCH + near)
    assert expected["matches"][copy["key"]].cluster_id == expected["matches"][TARGET["key"]].cluster_id
    assert state(index) == expected


def test_a_batch_checked_again_fingerprints_only_what_it_read_since(redis_url, namespace, monkeypatch):
    """The check of an optimistic batch (at each commit attempt, and at the start of its next attempt)
    compares the fingerprints of everything it read with what the commits since wrote: those of the
    names an earlier check of the batch saw are kept, and only new reads are fingerprinted; a write
    of something read is still found."""
    from rag_dedup.storage.redis import overlay as overlay_module
    from rag_dedup.storage.redis.overlay import Batch

    overlay = RedisStorage(redis_url, namespace=namespace)._overlay
    prints = overlay_module._prints

    def log_entry(*names: bytes) -> bytes:
        return np.sort(prints(list(names))).astype(">u8").tobytes()

    counted: list[int] = []
    monkeypatch.setattr(overlay_module, "_prints", lambda names: counted.append(len(names)) or prints(names))
    batch = Batch(token=None)
    batch.seen_hashes[b"h"] = {b"a": b"1", b"b": None}
    assert not overlay._check(batch, True, [log_entry(b"other\0x")])
    batch.seen_hashes[b"h"][b"c"] = b"2"
    assert not overlay._check(batch, True, [log_entry(b"other\0y")])
    assert overlay._check(batch, True, [log_entry(b"h\0a")])  # another commit wrote field a of h
    assert counted == [2, 1] and batch.seen_hashes[b"h"] == {b"b": None, b"c": b"2"}


def after_first_read(index: DedupIndex, action: Any) -> list[str]:
    """Run ``action()`` once, just after the first read (``Overlay.fetch``) of ``index``'s first
    optimistic batch has returned: in the middle of the batch, before the reads that follow. Returns
    the outcome of each of the batch's commits (``commit_optimistic``) as they come."""
    overlay = index.storage._overlay  # type: ignore[attr-defined]
    fetch, commit = overlay.fetch, overlay.commit_optimistic
    done: list[int] = []
    outcomes: list[str] = []

    def hooked_fetch(*args: Any, **kwargs: Any) -> Any:
        out = fetch(*args, **kwargs)
        if not done and overlay.batch is not None and overlay.batch.token is None:
            done.append(1)
            action()
        return out

    def hooked_commit(batch: Any) -> str:
        outcomes.append(commit(batch))
        return outcomes[-1]

    overlay.fetch, overlay.commit_optimistic = hooked_fetch, hooked_commit
    return outcomes


@pytest.mark.parametrize(
    "kind, outcomes",
    [
        pytest.param("exact", ["committed"], id="an-exact-copy-stops-it-at-its-next-read"),
        pytest.param("near", ["conflict", "committed"], id="a-near-duplicate-refuses-it-at-its-commit"),
    ],
)
def test_a_commit_in_the_middle_of_a_batch_that_wrote_what_it_read_refuses_it(redis_url, namespace, kind, outcomes):
    """A commit that lands in the middle of a batch and wrote what the batch had read (the digest of an
    exact copy) refuses it at its next read (Overlay.fetch reads the commit count first): the first
    attempt never gets to its commit. A near-duplicate filed in buckets the batch reads only later
    (from the mirror, as of the batch's start) is caught at its commit, which checks from the start
    (the regression guard: a check that moved the batch's start forward would miss it). Either way
    the second attempt gives the one-process partition."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    other = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    copy = copy_of_target(kind, 0)
    seen = after_first_read(index, lambda: other.add_many([copy]))
    index.add_many(BATCH)
    assert seen == outcomes
    assert (index.storage.conflicts, index.storage.fallbacks) == (1, 0)
    expected = reference(BASE + [copy] + BATCH)
    assert expected["matches"][copy["key"]].cluster_id == expected["matches"][TARGET["key"]].cluster_id
    assert state(index) == expected


def test_a_commit_in_the_middle_that_wrote_nothing_the_batch_read_is_checked_once(redis_url, namespace, monkeypatch):
    """A commit in the middle of a batch that wrote nothing it had read is checked at the batch's next
    read (once, however many reads follow), and the batch goes on; its commit checks it again, with
    the buckets read since (a mirror as of the batch's start)."""
    from rag_dedup.storage.redis.overlay import Overlay

    index = DedupIndex(storage=redis_url, namespace=namespace)
    other = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    entries_checked: list[int] = []
    check = Overlay._check

    def spy(self: Any, batch: Any, covered: bool, entries: Any) -> bool:
        if self is index.storage._overlay:  # type: ignore[attr-defined]
            entries_checked.append(len(entries))
        return check(self, batch, covered, entries)

    monkeypatch.setattr(Overlay, "_check", spy)
    outcomes = after_first_read(index, lambda: other.add_many([unrelated(0)]))
    index.add_many(BATCH)
    assert outcomes == ["committed"]
    assert (index.storage.conflicts, index.storage.fallbacks) == (0, 0)
    assert entries_checked == [1, 1]  # the other commit: at the next read, and at the commit
    assert state(index) == reference(BASE + [unrelated(0)] + BATCH)


def test_a_batch_behind_more_small_commits_than_log_keep_is_still_checked_and_commits(redis_url, namespace):
    """Beside a worker that adds one text at a time (a commit each), a batch is many commits behind at
    its commit. Each small commit trims the commit log to more entries than LOG_KEEP (log_keep), so the
    batch can still be checked against them all: 3 * LOG_KEEP unrelated one-text commits land between
    its reads and its commit, and it commits at its first attempt (with LOG_KEEP entries kept it could
    not be checked: the gap made it run again, then under the lock)."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    other = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    singles = [unrelated(100 + n) for n in range(3 * LOG_KEEP)]

    def others_add(n: int) -> None:
        if n == 0:
            for item in singles:
                other.add(item["key"], item["text"])

    before_each_commit(index, others_add)
    index.add_many(BATCH)
    assert (index.storage.conflicts, index.storage.fallbacks) == (0, 0)
    assert state(index) == reference([*BASE, *singles, *BATCH])
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.llen(f"{namespace}:commit-log".encode()) > LOG_KEEP
    finally:
        client.close()


@pytest.mark.parametrize("entry", [1, 100, 8 * 1024, LOG_BYTES, 10 * LOG_BYTES])
def test_the_commit_log_keeps_more_small_entries_within_its_bounds(entry):
    keep = log_keep(entry)
    assert LOG_KEEP <= keep <= LOG_KEEP_MAX
    assert keep == LOG_KEEP or keep * entry <= LOG_BYTES


def test_a_commit_that_keeps_losing_the_race_to_exec_commits_under_the_lock(redis_url, namespace, monkeypatch):
    """Failure injection: another worker's commit lands between the batch's check and its EXEC at every
    try (as one add() after another does beside a large batch, whose EXEC takes milliseconds to send).
    Nothing the batch read was written, so it is not run again: it commits under the lock, at once,
    with the one-process answer; and the other worker's commits are all kept."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    other = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    overlay = index.storage._overlay  # type: ignore[attr-defined]
    original = overlay._queue_writes
    landed: list[dict[str, Any]] = []

    def queue_after_another_commit(pipe: Any, batch: Any, number: int) -> Any:
        if batch.token is None:  # the optimistic EXEC (not the one under the lock): the other commits first
            landed.append(unrelated(200 + len(landed)))
            other.add(landed[-1]["key"], landed[-1]["text"])
        return original(pipe, batch, number)

    monkeypatch.setattr(overlay, "_queue_writes", queue_after_another_commit)
    index.add_many(BATCH)
    assert len(landed) == WATCH_TRIES
    assert (index.storage.conflicts, index.storage.fallbacks) == (0, 0)
    assert state(index) == reference([*BASE, *landed, *BATCH])


def test_add_on_a_shared_store_commits_optimistically_without_the_lock(redis_url, namespace, monkeypatch):
    """add() on Redis is a batch of one: no lock taken when nothing is in its way (the lock costs a
    round trip and a renewal thread), and the same Match and state as in memory."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    storage = index.storage

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the lock was taken")

    monkeypatch.setattr(storage._lock, "acquire", refuse)
    memory = DedupIndex()
    memory.add_many(BASE)
    for item in [*BATCH[:20], copy_of_target("exact", 0), copy_of_target("near", 1), BATCH[3]]:
        assert index.add(item["key"], item["text"]) == memory.add(item["key"], item["text"])
    assert (storage.conflicts, storage.fallbacks) == (0, 0)
    assert state(index) == state(memory)


def test_add_run_again_after_a_conflict_returns_the_match_as_of_its_commit(redis_url, namespace):
    """add() refused by another worker's near-duplicate of its text, committed between its reads and
    its commit: it runs again and returns the Match (cluster, representative, displaced) that the
    serial in-memory order gives."""
    index = DedupIndex(storage=redis_url, namespace=namespace)
    other = DedupIndex(storage=redis_url, namespace=namespace)
    index.add_many(BASE)
    near = copy_of_target("near", 7)
    before_each_commit(index, lambda n: other.add(near["key"], near["text"]) if n == 0 else None)
    got = index.add(TARGET["key"], TARGET["text"])
    memory = DedupIndex()
    memory.add_many([*BASE, near])
    assert got == memory.add(TARGET["key"], TARGET["text"])
    assert got.cluster_id == memory.match(near["key"]).cluster_id
    assert (index.storage.conflicts, index.storage.fallbacks) == (1, 0)
    assert state(index) == state(memory)
