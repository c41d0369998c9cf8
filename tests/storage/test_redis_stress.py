"""Several worker processes writing one Redis namespace at once end with the one-process answer.

Three spawned workers, each with its own ``DedupIndex(storage=url, namespace=ns)``, start together
and write real text at the same time: the corpus in windows of 40, 60 and 120 words (the copyright
files restate the same licence paragraphs, so real exact and near duplicates abound), near-duplicates
of those windows (``edited``) and exact copies of them, each in another worker's list at about the
same position as its original (true conflicts, and digest races), and the planted families of
tests/data/families with their members dealt round the workers. Optimistic batches are computed
without the lock and committed only if nothing they read was written meanwhile; whatever the
interleaving, the namespace must end exactly as one in-memory index given the final set of items in
one process: the same keys, every key's Match (cluster, representative, similarity, kind, size), the
same clusters and sources, and the same groups and components, with no key, group, bucket, cluster
entry or component list left over from a refused or half-applied batch.

Nothing here forces an interleaving (no sleeps, no hooks): the workers do enough work that they
overlap, and what each saw (its conflicts, fallbacks and time span) is printed beside the result,
never asserted on. The in-memory reference is itself built in two orders and must not depend on it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import random
import time
import traceback
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag_dedup import DedupIndex
from rag_dedup.shingles import canonical_digest
from rag_dedup.storage.base import EMPTY_GROUP
from tests.corpus import chunks, edited

WORKERS = 3
SEED = 21
#: Items per add_many call: each worker runs through all of them, from its own starting point.
SIZES = (1, 7, 64, 300, 1500)
#: Seconds a worker waits for the start signal, and the test for the workers (then it fails, naming them).
START_WAIT = 60.0
DEADLINE = 120.0
FAMILIES = Path(__file__).parents[1] / "data" / "families"

Item = dict[str, Any]
#: An operation of a worker: ("add_many", [items]), ("add", item), ("remove", key) or ("update", [items], [keys]).
Op = tuple[Any, ...]


# --- the items ------------------------------------------------------------------------------------
def windows() -> list[Item]:
    """The corpus in windows of 40, 60 and 120 words (each window of one size apart from its
    neighbours; windows of different sizes overlap, which makes candidates that fail verification)."""
    out = []
    for words in (40, 60, 120):
        for key, text in chunks(words, words):
            out.append({"key": f"w{words}/{key}", "text": text, "source": key.split("#")[0]})
    return out


def families() -> list[list[Item]]:
    """The planted families (tests/data/README.md): a dense clique of Apache notices and a looser GFDL family."""
    out = []
    for path in sorted(FAMILIES.glob("*.json")):
        members = json.loads(path.read_text(encoding="utf-8"))
        out.append([{"key": f"family/{path.stem}/{j:02d}", "text": m["text"], "source": m["source"]} for j, m in enumerate(members)])
    return out


def lanes() -> list[list[Item]]:
    """Each worker's items, in order. Window i goes to worker i % 3; a near-duplicate of every second
    window (about 2% of its words replaced) to the next worker and an exact copy of every fifth to the
    one after, at about the position of the original in its worker's list; family member j to worker
    j % 3, the members of one family at the same share of each worker's list."""
    out: list[list[Item]] = [[] for _ in range(WORKERS)]
    for i, item in enumerate(windows()):
        w = i % WORKERS
        out[w].append(item)
        if i % 2 == 0:
            near = edited(item["text"], 0.02, seed=SEED * 100_000 + i)
            out[(w + 1) % WORKERS].append({"key": f"near/{i:05d}", "text": near, "source": item["source"]})
        if i % 5 == 0:
            out[(w + 2) % WORKERS].append({"key": f"copy/{i:05d}", "text": item["text"], "source": "copies"})
    for family in families():
        steps = -(-len(family) // WORKERS) + 1
        for j, member in enumerate(family):
            lane = out[j % WORKERS]
            lane.insert((j // WORKERS + 1) * len(lane) // steps, member)
    return out


def in_calls(items: Sequence[Item], start: int) -> list[list[Item]]:
    """``items`` cut into add_many calls of SIZES in turn, from SIZES[start] (the last call takes the rest)."""
    calls, at, n = [], 0, start
    while at < len(items):
        size = SIZES[n % len(SIZES)]
        calls.append(list(items[at : at + size]))
        at += size
        n += 1
    return calls


# --- the scenarios: each worker's operations ------------------------------------------------------
def mixed_batches() -> list[list[Op]]:
    """add_many with every size of SIZES in each worker, each starting at another size."""
    return [[("add_many", call) for call in in_calls(lane, w)] for w, lane in enumerate(lanes())]


def identical_re_adds() -> list[list[Op]]:
    """As mixed_batches, and beside the new items of each call, identical copies of items that the
    next worker has at about the same point or earlier in its list (it may have added them already,
    or be adding them at the same time) and of items this worker added in an earlier call: no-ops by
    contract, whichever commit gets there first. Every seventh call re-adds one item with add()."""
    rng = random.Random(SEED)
    all_lanes = lanes()
    ops: list[list[Op]] = []
    for w, lane in enumerate(all_lanes):
        other = all_lanes[(w + 1) % WORKERS]
        mine: list[Op] = []
        done = 0
        for n, call in enumerate(in_calls(lane, w)):
            done += len(call)
            theirs = rng.sample(other[: min(len(other), done + 50)], k=min(8, len(call) + 2))
            own = rng.sample(lane[: done - len(call)], k=min(3, done - len(call)))
            batch = [*call, *theirs, *own]
            rng.shuffle(batch)
            batch = list({item["key"]: item for item in batch}.values())  # a key once per call
            mine.append(("add_many", batch))
            if n % 7 == 6:
                mine.append(("add", rng.choice(theirs)))
        ops.append(mine)
    return ops


def one_at_a_time() -> list[list[Op]]:
    """Worker 0 calls add() for every sixth item of its list, one at a time (each a small commit under
    the lock); the others add their whole lists with add_many of mixed sizes meanwhile. The near-
    duplicates and copies of worker 0's items are spread along the others' lists."""
    all_lanes = lanes()
    ops: list[list[Op]] = [[("add", item) for item in all_lanes[0][::6]]]
    for w in range(1, WORKERS):
        ops.append([("add_many", call) for call in in_calls(all_lanes[w], w)])
    return ops


def removes_and_updates() -> list[list[Op]]:
    """Worker 0 adds its list with add_many of mixed sizes and, after each call, removes and updates
    keys of its own that it added before (remove(), update() with replaced texts and a remove list):
    near-duplicates, copies and family members first, whose clusters hold the other workers' items,
    and replacements that make a key an exact copy or a near-duplicate of another worker's item (or
    a text of its own). The other workers add their lists meanwhile; nobody else touches worker 0's
    keys, so the final set of items is the same whatever the interleaving."""
    rng = random.Random(SEED + 4)
    all_lanes = lanes()
    others = [item for lane in all_lanes[1:] for item in lane]
    ops: list[list[Op]] = [[]]
    mine: list[str] = []  # worker 0's keys in the index, in the order added
    by_key = {item["key"]: item for item in all_lanes[0]}
    for n, call in enumerate(in_calls(all_lanes[0], 1)):
        ops[0].append(("add_many", call))
        mine.extend(item["key"] for item in call)
        if len(mine) < 20:
            continue
        pool = [k for k in mine if not k.startswith("w")] or mine  # near-duplicates, copies, family members
        gone = rng.sample(pool, k=min(2, len(pool)))
        for key in gone:
            ops[0].append(("remove", key))
            mine.remove(key)
        kind = n % 3
        target = rng.choice(others)
        if kind == 0:
            text = target["text"]  # an exact copy of another worker's item
        elif kind == 1:
            text = edited(target["text"], 0.02, seed=SEED + n)  # a near-duplicate of one
        else:
            text = edited(by_key[rng.choice(mine)]["text"], 0.3, seed=SEED + n)  # a text of its own
        replaced = rng.choice(mine)
        new = {**by_key[replaced], "text": text}
        by_key[replaced] = new
        dropped = rng.choice([k for k in mine if k != replaced])
        ops[0].append(("update", [new], [dropped]))
        mine.remove(dropped)
    for w in range(1, WORKERS):
        ops.append([("add_many", call) for call in in_calls(all_lanes[w], w)])
    return ops


def near_duplicates_in_small_batches() -> list[list[Op]]:
    """The 120-word windows, each with a near-duplicate in the next worker at the same position, in
    add_many calls of 1 and 7 items: two workers often add a text and its near-duplicate in batches
    that overlap and share nothing else, so that only the buckets each read tell them apart."""
    out: list[list[Item]] = [[] for _ in range(WORKERS)]
    for i, item in enumerate(w for w in windows() if w["key"].startswith("w120/")):
        out[i % WORKERS].append(item)
        near = edited(item["text"], 0.02, seed=SEED * 100_000 + i)
        out[(i + 1) % WORKERS].append({"key": f"near/{i:05d}", "text": near, "source": item["source"]})
    ops = []
    for lane in out:
        calls, at = [], 0
        while at < len(lane):
            size = 1 if len(calls) % 2 else 7
            calls.append(("add_many", lane[at : at + size]))
            at += size
        ops.append(calls)
    return ops


SCENARIOS = {
    "mixed-batches": mixed_batches,
    "identical-re-adds": identical_re_adds,
    "add-one-at-a-time-beside-batches": one_at_a_time,
    "removes-and-updates-beside-adds": removes_and_updates,
    "near-duplicates-in-small-batches": near_duplicates_in_small_batches,
}


def final_items(ops: Iterable[Sequence[Op]]) -> dict[str, Item]:
    """The items an index holds after every worker's operations, in any interleaving: the workers'
    keys are their own but for identical re-adds, and removes and updates are of the remover's keys."""
    out: dict[str, Item] = {}

    def put(item: Item) -> None:
        old = out.setdefault(item["key"], item)
        assert old == item, f"the plan adds {item['key']!r} twice with different items"

    for worker in ops:
        for op in worker:
            if op[0] == "add_many":
                for item in op[1]:
                    put(item)
            elif op[0] == "add":
                put(op[1])
            elif op[0] == "remove":
                del out[op[1]]
            else:
                for key in op[2]:
                    del out[key]
                for item in op[1]:
                    out[item["key"]] = item
    return out


# --- the workers ----------------------------------------------------------------------------------
def _warm_up() -> None:
    """Load the compiled kernels (from numba's cache) before the start, so that the workers start
    working at the same moment."""
    few = [{"key": k, "text": t} for k, t in chunks()[:40]]
    index = DedupIndex()
    index.add_many(few)
    index.add("warm-up", edited(few[0]["text"], 0.02, seed=1))


def _run(w: int, url: str, namespace: str, scenario: str, start: Any, out: Any) -> dict[str, Any]:
    """Worker ``w``'s part of ``scenario``: make its operations (seeded: the ones the test expects),
    open the namespace, say it is ready, wait for the start, run them; what its storage counted and
    when it ran."""
    ops = SCENARIOS[scenario]()[w]
    index = DedupIndex(storage=url, namespace=namespace)
    out.put(("ready", w, None))
    if not start.wait(START_WAIT):
        raise RuntimeError(f"worker {w}: no start signal in {START_WAIT} s")
    began = time.monotonic()
    for op in ops:
        if op[0] == "add_many":
            index.add_many(op[1])
        elif op[0] == "add":
            item = op[1]
            index.add(item["key"], item["text"], source=item.get("source"))
        elif op[0] == "remove":
            index.remove(op[1])
        else:
            index.update(op[1], remove=op[2])
    ended = time.monotonic()
    storage = index.storage
    report = {
        "calls": len(ops),
        "conflicts": storage.conflicts,  # type: ignore[attr-defined]
        "fallbacks": storage.fallbacks,  # type: ignore[attr-defined]
        "lock_wait": storage.lock_wait_seconds,  # type: ignore[attr-defined]
        "began": began,
        "ended": ended,
    }
    index.close()
    return report


def _worker(w: int, commands: Any, start: Any, out: Any) -> None:
    """Worker process ``w``: load the kernels, then run each scenario sent on ``commands`` (``None``:
    stop) and report it; on an error, send back its traceback and exit. Exits too when the test
    process is gone (nobody would send it anything)."""
    parent = os.getppid()
    try:
        _warm_up()
        out.put(("up", w, None))
        while True:
            try:
                job = commands.get(timeout=1.0)
            except queue.Empty:
                if os.getppid() != parent:
                    return
                continue
            if job is None:
                return
            out.put(("done", w, _run(w, *job, start, out)))
    except BaseException:
        out.put(("error", w, traceback.format_exc()))
        raise


class Workers:
    """WORKERS spawned processes, started once for the module (they import rag-dedup and load its
    kernels once) and given one scenario at a time. A run that fails leaves none of them running:
    the next run starts new ones."""

    def __init__(self) -> None:
        self.procs: list[Any] = []

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.start, self.out = ctx.Event(), ctx.Queue()
        self.commands = [ctx.Queue() for _ in range(WORKERS)]
        self.procs = [
            ctx.Process(target=_worker, args=(w, self.commands[w], self.start, self.out), daemon=True) for w in range(WORKERS)
        ]
        for p in self.procs:
            p.start()
        self._collect("up")

    def _collect(self, kind: str) -> dict[int, Any]:
        """Wait for message ``kind`` from every worker, within DEADLINE; their payloads.
        Fails with a worker's traceback when it raises, or naming the workers that neither answered
        nor died in time, or that died without a word; then stops them all (never a hang)."""
        got: dict[int, Any] = {}
        deadline = time.monotonic() + DEADLINE
        try:
            while len(got) < len(self.procs):
                if time.monotonic() > deadline:
                    waiting = [w for w in range(len(self.procs)) if w not in got]
                    pytest.fail(f"workers {waiting} sent no {kind!r} in {DEADLINE} s")
                try:
                    message, w, payload = self.out.get(timeout=0.5)
                except queue.Empty:
                    dead = [(w, p.exitcode) for w, p in enumerate(self.procs) if w not in got and p.exitcode is not None]
                    if not dead:
                        continue
                    try:  # its last message may still be on its way
                        message, w, payload = self.out.get(timeout=2.0)
                    except queue.Empty:
                        pytest.fail(f"workers (number, exit code) {dead} exited without sending {kind!r}")
                if message == "error":
                    pytest.fail(f"worker {w} raised:\n{payload}")
                assert message == kind, f"worker {w} sent {message!r} while {kind!r} was awaited"
                got[w] = payload
        except BaseException:
            self.stop()
            raise
        return got

    def run(self, url: str, namespace: str, scenario: str) -> list[dict[str, Any]]:
        """Run ``scenario`` in every worker, released together once all are ready; their reports."""
        if not self.procs:
            self._start()
        self.start.clear()
        for commands in self.commands:
            commands.put((url, namespace, scenario))
        self._collect("ready")
        self.start.set()
        reports = self._collect("done")
        return [reports[w] for w in range(WORKERS)]

    def stop(self) -> None:
        """Ask the workers to stop, and end those that do not within a few seconds."""
        procs, self.procs = self.procs, []
        for p, commands in zip(procs, self.commands):
            if p.is_alive():
                commands.put(None)
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
                p.join(5)


def describe(reports: Sequence[dict[str, Any]]) -> str:
    """What each worker saw: calls, conflicts, fallbacks, lock wait, when it ran (from the first start)."""
    t0 = min(r["began"] for r in reports)
    lines = [
        f"worker {w}: {r['calls']} calls, conflicts={r['conflicts']}, fallbacks={r['fallbacks']}, "
        f"lock wait {r['lock_wait']:.2f} s, ran {r['began'] - t0:.2f}-{r['ended'] - t0:.2f} s"
        for w, r in enumerate(reports)
    ]
    together = min(r["ended"] for r in reports) - max(r["began"] for r in reports)
    lines.append(f"all {len(reports)} workers running at once for {max(0.0, together):.2f} s")
    return "\n".join(lines)


# --- what is compared -----------------------------------------------------------------------------
def state(index: DedupIndex) -> dict[str, Any]:
    """Everything observable: the keys, every key's Match, every cluster (representative first, then
    the members in key order), the keys of every source."""
    keys = sorted(index.storage.iter_keys())
    sources = {}
    for rec_source in sorted({r.source for r in index.storage.get_items(keys) if r is not None and r.source is not None}):
        sources[rec_source] = sorted(index.keys_of_source(rec_source))
    return {
        "keys": keys,
        "matches": {m.key: m for m in index.matches(keys)},
        "clusters": dict(index.clusters(include_singletons=True)),
        "sources": sources,
        "len": len(index),
    }


def structure(index: DedupIndex, items: dict[str, Item]) -> dict[str, Any]:
    """The storage's groups and components, named by their keys (group ids differ between stores):
    each key's group (the keys sharing its canonical text), found again by its digest; each group's
    shingles; the components as sets of groups. Asserts that every group is in the buckets of its band
    keys and that the buckets hold no group that is gone."""
    st = index.storage
    keys = sorted(st.iter_keys())
    records = st.get_items(keys)
    gids = sorted({r.gid for r in records if r is not None and r.gid != EMPTY_GROUP})
    keys_of = {g: frozenset(ks) for g, ks in zip(gids, st.group_items(gids))}
    digests = [canonical_digest(items[k]["text"]) for k in keys]
    found = st.find_groups([d for d in digests if d is not None])
    by_digest = iter(found)
    group_of = {}
    for key, rec, d in zip(keys, records, digests):
        assert rec is not None
        assert (EMPTY_GROUP if d is None else next(by_digest)) == rec.gid, f"{key!r}: its digest names another group"
        group_of[key] = None if rec.gid == EMPTY_GROUP else keys_of[rec.gid]
        assert group_of[key] is None or key in group_of[key], f"{key!r} is not in its group's items"
    shingles = st.group_shingles(gids)
    band_keys = index._band_keys(shingles)
    rows, in_buckets = st.query_band_pairs(band_keys)
    filed = set(zip(rows.tolist(), in_buckets.tolist()))
    missing = [sorted(keys_of[g]) for i, g in enumerate(gids) if (i, g) not in filed]
    assert not missing, f"groups missing from the buckets of their own band keys: {missing[:5]}"
    stale = sorted(set(in_buckets.tolist()) - set(gids))
    assert not stale, f"the buckets hold group ids that name no stored group: {stale[:10]}"
    components = {frozenset(keys_of[g] for g in comp) for comp in st.component_members(gids)}
    return {
        "group_of": group_of,
        "shingles": {keys_of[g]: np.asarray(sh, dtype=np.uint64).tobytes() for g, sh in zip(gids, shingles)},
        "components": components,
    }


def reference(items: dict[str, Item], order: str) -> DedupIndex:
    """An in-memory index given ``items`` in one process: ``sorted`` in one add_many call in key
    order, or ``shuffled`` (fixed seed) in calls of SIZES and single add()s."""
    index = DedupIndex()
    listed = [items[k] for k in sorted(items)]
    if order == "sorted":
        index.add_many(listed)
        return index
    random.Random(SEED).shuffle(listed)
    for n, call in enumerate(in_calls(listed, 2)):
        if n % 4 == 3:
            for item in call[:20]:
                index.add(item["key"], item["text"], source=item.get("source"))
            call = call[20:]
        index.add_many(call)
    return index


def differences(got: dict[str, Any], expected: dict[str, Any], limit: int = 12) -> str:
    """The first differences between two states: by key for matches, by cluster for clusters."""
    lines = []
    for part in ("keys", "len"):
        if got[part] != expected[part]:
            g, e = got[part], expected[part]
            if part == "keys":
                g, e = sorted(set(g) - set(e)), sorted(set(e) - set(g))
                lines.append(f"keys only in Redis: {g[:limit]}; only in memory: {e[:limit]}")
            else:
                lines.append(f"len: {g} against {e}")
    for part in ("matches", "clusters", "sources"):
        g, e = got[part], expected[part]
        differ = sorted(k for k in set(g) | set(e) if g.get(k) != e.get(k))
        if differ:
            lines.append(f"{part}: {len(differ)} differ, first: " + "; ".join(f"{k!r}: {g.get(k)} against {e.get(k)}" for k in differ[:limit]))
    return "\n".join(lines)


def structure_differences(got: dict[str, Any], expected: dict[str, Any], limit: int = 8) -> str:
    """The first keys whose group differs, and the components only one side has (by their keys)."""
    lines = []
    mine, theirs = got["group_of"], expected["group_of"]
    differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    if differ:
        shown = "; ".join(f"{k!r}: {sorted(mine.get(k) or [])} against {sorted(theirs.get(k) or [])}" for k in differ[:limit])
        lines.append(f"groups: {len(differ)} keys differ, first: {shown}")
    if got["shingles"] != expected["shingles"]:
        lines.append("the shingles of some groups differ")

    def named(components: set[frozenset[frozenset[str]]]) -> set[tuple[str, ...]]:
        return {tuple(sorted(k for group in comp for k in group)) for comp in components}

    only_got = named(got["components"]) - named(expected["components"])
    only_expected = named(expected["components"]) - named(got["components"])
    if only_got or only_expected:
        lines.append(f"components only in Redis: {sorted(only_got)[:limit]}; only in memory: {sorted(only_expected)[:limit]}")
    return "\n".join(lines)


def raw_counts(url: str, namespace: str) -> dict[str, int]:
    """How many of each kind of key and hash field the namespace holds: what a refused, lost or
    half-applied batch would leave behind (or short) without the API showing it."""
    import redis

    client = redis.Redis.from_url(url)
    p = f"{namespace}:"

    def keys(pattern: str) -> int:
        return sum(1 for _ in client.scan_iter(match=p + pattern, count=1000))

    try:
        return {
            "lock": int(client.exists(p + "lock")),
            "items": client.hlen(p + "items"),
            "groups": client.hlen(p + "groups"),
            "digests": client.hlen(p + "digests"),
            "group-item sets": keys("group-items:*"),
            "source sets": keys("source:*"),
            "cluster-of": client.hlen(p + "cluster-of"),
            "clusters": client.hlen(p + "clusters"),
            "component-of": client.hlen(p + "component-of"),
            "component lists": keys("component:*"),
            "component lists pointed at": len(set(client.hvals(p + "component-of"))),
        }
    finally:
        client.close()


def counts_needed(expected: dict[str, Any]) -> dict[str, int]:
    """:func:`raw_counts` of a namespace holding exactly the ``expected`` state: no lock held; a group,
    a digest and an item set per group; a set per source; a cluster entry per key in a cluster of two
    or more and a list per such cluster; a component entry per group in a component of two or more
    and a list per such component."""
    groups = len(expected["structure"]["shingles"])
    clustered = [members for members in expected["clusters"].values() if len(members) > 1]
    joined = [comp for comp in expected["structure"]["components"] if len(comp) > 1]
    return {
        "lock": 0,
        "items": len(expected["keys"]),
        "groups": groups,
        "digests": groups,
        "group-item sets": groups,
        "source sets": len(expected["sources"]),
        "cluster-of": sum(len(m) for m in clustered),
        "clusters": len(clustered),
        "component-of": sum(len(comp) for comp in joined),
        "component lists": len(joined),
        "component lists pointed at": len(joined),
    }


@pytest.fixture
def namespace() -> str:
    return f"stress-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def workers() -> Iterable[Workers]:
    pool = Workers()
    yield pool
    pool.stop()


@pytest.mark.parametrize("scenario", [pytest.param(name, id=name) for name in SCENARIOS])
def test_workers_writing_at_once_end_with_the_one_process_answer(redis_url, namespace, workers, scenario):
    """Regression guard for the optimistic protocol under real concurrency: a batch committed on
    values another worker changed meanwhile (a lost item, a copy made a group of its own digest, a
    near-duplicate missed, a representative of a cluster that changed), or a commit applied in part,
    makes the namespace differ from the one-process index of the same items."""
    ops = SCENARIOS[scenario]()
    items = final_items(ops)
    DedupIndex(storage=redis_url, namespace=namespace).close()  # the namespace exists before the workers open it
    reports = workers.run(redis_url, namespace, scenario)
    seen = describe(reports)
    print(f"\n[{scenario}] {len(items)} items\n{seen}")
    for r in reports:
        assert isinstance(r["conflicts"], int) and isinstance(r["fallbacks"], int), seen

    serial = reference(items, "sorted")
    expected = {**state(serial), "structure": structure(serial, items)}
    shuffled = reference(items, "shuffled")
    again = {**state(shuffled), "structure": structure(shuffled, items)}
    assert again == expected, "the in-memory answer depends on insertion order:\n" + differences(again, expected)
    assert expected["keys"] == sorted(items)
    assert any(m.kind == "exact" for m in expected["matches"].values())  # the items hold real duplicates
    assert any(m.kind == "near" and m.duplicate_of for m in expected["matches"].values())

    index = DedupIndex(storage=redis_url, namespace=namespace)
    got = state(index)
    assert got == {k: v for k, v in expected.items() if k != "structure"}, f"{seen}\n{differences(got, expected)}"
    layout = structure(index, items)
    assert layout == expected["structure"], f"{seen}\n{structure_differences(layout, expected['structure'])}"
    assert raw_counts(redis_url, namespace) == counts_needed(expected), seen
