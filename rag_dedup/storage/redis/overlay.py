"""A batch's pending writes and read cache over Redis, and its commit in one ``MULTI``/``EXEC``.

Inside a batch, writes go to a local overlay (:class:`Batch`) that every read consults, so the batch
sees its own pending writes; what it reads from Redis is kept, so a second read of the same thing
costs no round trip. If the batch raises for any reason, the overlay is thrown away: nothing of it
reaches Redis. Reads outside a batch go straight to Redis (one pipelined round trip each) and see
committed batches only. A batch runs in one of two modes:

* **Optimistic** (:meth:`Overlay.begin`, :meth:`Overlay.commit_optimistic`): no lock. The batch notes
  the namespace's commit count when it starts, and everything it reads is kept (the read set). Every
  commit appends to ``ns:commit-log`` the fingerprints of what it wrote (:func:`write_prints`). The
  commit, in one ``MULTI``/``EXEC`` guarded by ``WATCH`` on ``ns:commits`` and the lock, goes through
  only if no commit since the start wrote anything the batch read, and the lock is free; else it is
  refused, and what the others wrote is dropped from the read cache so that the batch can be run
  again on fresh values (the rest of its reads are kept: still valid). Why that gives what running
  the batches one at a time gives: the batch is a deterministic function of the values it read; none
  of them changed between its start and its commit, so it would have read and written exactly the same
  had it run, alone, just before its commit. Each of its reads also reads the commit count, first: a
  commit since its start that wrote something it read refuses it there (:class:`Refused`), the check
  its commit would make, made early, so that it does not finish a computation its commit would throw
  away (:meth:`Overlay._recheck`).
* **Under the lock** (:class:`Overlay.commit`): the namespace lock is held, nobody else commits, and
  the commit is guarded by ``WATCH`` on the lock key and deletes it. If the lock was lost meanwhile (it
  expired, or the connection dropped), ``EXEC`` does nothing and the batch raises.

The LSH buckets are not read from Redis: :attr:`Overlay.mirror` (see
:mod:`~rag_dedup.storage.redis.mirror`) holds them in this process, and is brought up to date in the
script that reads the commit count when a batch starts (:meth:`Overlay.begin`), so that it holds them
as of that commit; a batch's commit appends its bucket changes to the band log. The read set still
names the band keys looked up, and the write set those filed or taken out, so that the optimistic
check covers the buckets as before. The mirror is one per :class:`Overlay`, shared by its threads
under a lock; it only moves forward, so a batch may see buckets newer than its start (which its check
then counts as a conflict), never older.

:class:`Overlay` works on raw keys, hash fields, set members and strings (bytes); what they mean is
the business of :mod:`rag_dedup.storage.redis.keys` and the storage.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rag_dedup.errors import CorruptIndexError, LockLost, NamespaceLost, RedisConfigurationError
from rag_dedup.storage.redis import scripts
from rag_dedup.storage.redis.connection import CONNECTION_ERRORS, ResponseError, WatchError, unavailable
from rag_dedup.storage.redis.mirror import BandMirror, entry

__all__ = ["Batch", "Overlay", "Refused", "write_prints"]

#: Fields or commands per request part: keeps each command's argument list and reply moderate.
CHUNK = 4096
SCAN_COUNT = 1000
#: Commits whose write sets ``ns:commit-log`` keeps at least. A batch that started more commits ago
#: than the log holds cannot be checked and runs again. Two or three workers adding batches are a
#: commit or two behind at their commit; an entry is ~8 bytes a write (~220 KB for a batch of 1,024
#: new chunks), so such a log stays ~2 MB.
LOG_KEEP = 8
#: A commit trims the log to its last ``log_keep(len(entry))`` entries: more than LOG_KEEP, up to
#: LOG_KEEP_MAX, when its own entry is small (~100 bytes for one ``add()``), so that a batch beside a
#: worker adding one text at a time (a commit each, dozens during one batch) can still be checked.
#: The log's k-th oldest entry, for k > LOG_KEEP, kept the k - 1 before it when it trimmed the log, so
#: it is at most LOG_BYTES / k bytes: those entries add up to at most LOG_BYTES * ln(LOG_KEEP_MAX /
#: LOG_KEEP) (~1.3 MB) beside the LOG_KEEP oldest (as large as batches make them, as before).
LOG_KEEP_MAX = 1024
LOG_BYTES = 1 << 18
#: Band-log entries a COMMITS_SINCE call returns at most (an entry is a commit's bucket changes, ~250 KB
#: for a batch of 1,024 new chunks): a worker that joins a large namespace reads its log in parts.
BAND_ENTRIES_MAX = 64
#: Times an optimistic commit is tried when another commit lands between its check and its EXEC
#: (each try checks only the new commits), before it reports ``"contended"``: beside a worker that
#: commits often (one ``add()`` after another), a large batch, whose EXEC takes milliseconds to send,
#: may lose that race every time; it then commits under the lock instead (RedisStorage._commit_when_free).
WATCH_TRIES = 1


class Refused(Exception):
    """Raised by a read inside an optimistic batch that found another commit wrote what the batch had
    read: the attempt stops there (its values no longer fit together), to be run again
    (:meth:`RedisStorage.run_batch <rag_dedup.storage.redis.storage.RedisStorage.run_batch>` catches it)."""


def log_keep(entry_bytes: int) -> int:
    """How many entries the commit log keeps after a commit whose own entry is ``entry_bytes`` long:
    ``LOG_BYTES // entry_bytes``, at least LOG_KEEP and at most LOG_KEEP_MAX (see there for the bound
    on the log's size this gives)."""
    return max(LOG_KEEP, min(LOG_KEEP_MAX, LOG_BYTES // max(1, entry_bytes)))


def _prints(names: Sequence[bytes]) -> np.ndarray:
    """Fingerprints (64 bits of BLAKE2b) of names: ``key`` for a set or string, ``key\\0field`` for a hash field."""
    if not names:
        return np.empty(0, dtype=np.uint64)
    blob = b"".join(hashlib.blake2b(n, digest_size=8).digest() for n in names)
    return np.frombuffer(blob, dtype="<u8").astype(np.uint64)


def _prints_kept(names: Sequence[bytes], kept: dict[bytes, int]) -> np.ndarray:
    """:func:`_prints` of names, those already in ``kept`` taken from there (the others added to it)."""
    missing = [n for n in names if n not in kept]
    if missing:
        found = _prints(missing)
        kept.update(zip(missing, found.tolist()))
        if len(missing) == len(names):
            return found
    return np.fromiter((kept[n] for n in names), dtype=np.uint64, count=len(names))


def _among(values: np.ndarray, written: np.ndarray) -> np.ndarray:
    """Which ``values`` are in ``written`` (sorted): a binary search each (np.isin sorts or hashes
    both arrays, several times slower at these sizes)."""
    if not len(values) or not len(written):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(written, values), len(written) - 1)
    return written[at] == values


def _is_out_of_memory(exc: BaseException) -> bool:
    """Whether a Redis error is the server refusing a write at its ``maxmemory`` (OOM)."""
    text = str(exc)
    return "OOM" in text or "maxmemory" in text


def _field_names(table: Mapping[bytes, Mapping[bytes, Any]]) -> list[bytes]:
    return [key + b"\0" + f for key, fields in table.items() for f in fields]


def write_prints(batch: Batch) -> np.ndarray:
    """What the batch writes, as fingerprints: its hash fields, set and string keys, and band keys.

    A band key stands for its bucket as it is (the band keys a batch reads and writes are the same
    numbers). Two different things with one fingerprint only make a batch run again needlessly.
    """
    filed, _ = batch.filed_pairs()
    return np.concatenate(
        [
            _prints(_field_names(batch.hashes)),
            _prints([*batch.sets, *batch.cleared, *batch.strings]),
            filed.astype(np.uint64),
            np.fromiter(batch.unfiled, dtype=np.uint64, count=len(batch.unfiled)),
        ]
    )


@dataclass
class Batch:
    """The pending writes of one batch, and what it read."""

    token: bytes | None  # the lock's, for a batch under the lock; None for an optimistic one
    depth: int = 1
    #: The namespace's commit count that what this batch read is checked from (optimistic only).
    commits: int = -1
    #: The last commit count a read of it found and checked it against (:meth:`Overlay._recheck`).
    rechecked: int = -1
    read_all: bool = False  # it read something the read set cannot name (a scan, a count): any commit conflicts
    #: A check found commits since it started that the log no longer holds (a drop logs none): what
    #: this attempt handed out (group ids) may belong to a namespace that is gone.
    gap: bool = False
    read_bands: list[np.ndarray] = field(default_factory=list)  # band keys whose buckets it read (in the mirror)
    dropped: bool = False  # drop() was called: Redis holds nothing of the namespace for this batch
    strings: dict[bytes, bytes | None] = field(default_factory=dict)  # None: deleted
    hashes: dict[bytes, dict[bytes, bytes | None]] = field(default_factory=dict)  # None: field deleted
    sets: dict[bytes, dict[bytes, bool]] = field(default_factory=dict)  # member -> present
    cleared: set[bytes] = field(default_factory=set)  # sets deleted (or created empty) in this batch
    # Buckets: groups filed (flat band-key and group-id arrays, appended per call) and taken out
    # (band key -> group ids). At commit the removals go first, then the additions.
    filed_keys: list[np.ndarray] = field(default_factory=list)
    filed_gids: list[np.ndarray] = field(default_factory=list)
    unfiled: dict[int, set[int]] = field(default_factory=dict)
    _filed_index: dict[int, set[int]] | None = None
    # What this batch read from Redis: read once. Under the lock nothing can change it; an
    # optimistic batch's commit checks that nothing changed it.
    seen_strings: dict[bytes, bytes | None] = field(default_factory=dict)
    seen_hashes: dict[bytes, dict[bytes, bytes | None]] = field(default_factory=dict)
    seen_sets: dict[bytes, set[bytes]] = field(default_factory=dict)
    #: The fingerprints of what it read (name -> print, see :func:`_prints`), kept for the checks of
    #: its attempts: each checks everything read so far, mostly the same names.
    read_prints: dict[bytes, int] = field(default_factory=dict)

    def hash_of(self, key: bytes) -> dict[bytes, bytes | None]:
        return self.hashes.setdefault(key, {})

    def set_of(self, key: bytes) -> dict[bytes, bool]:
        return self.sets.setdefault(key, {})

    def clear_set(self, key: bytes) -> None:
        self.cleared.add(key)
        self.sets.pop(key, None)

    def drop_all(self) -> None:
        """Forget every pending write and everything read: the namespace is deleted at commit."""
        self.dropped = True
        tables = (self.strings, self.hashes, self.sets, self.unfiled, self.seen_strings, self.seen_hashes, self.seen_sets)
        for table in tables:
            table.clear()
        self.cleared.clear()
        self.filed_keys.clear()
        self.filed_gids.clear()
        self._filed_index = None

    def file(self, gids: Sequence[int], band_keys: np.ndarray) -> None:
        """File group ``gids[i]`` under every band key of row ``band_keys[i]``."""
        keys = np.ascontiguousarray(band_keys, dtype=np.uint64).reshape(-1)
        gid_array = np.repeat(np.asarray(gids, dtype=np.uint64), band_keys.shape[1])
        if self.unfiled:
            for k, g in zip(keys.tolist(), gid_array.tolist()):
                gone = self.unfiled.get(k)
                if gone:
                    gone.discard(g)
        self.filed_keys.append(keys)
        self.filed_gids.append(gid_array)
        self._filed_index = None

    def unfile(self, gid: int, band_keys: Sequence[int]) -> None:
        """Take group ``gid`` out of the buckets ``band_keys``."""
        for k in band_keys:
            self.unfiled.setdefault(k, set()).add(gid)
        for i, (keys, gids) in enumerate(zip(self.filed_keys, self.filed_gids)):
            hit = (gids == gid) & np.isin(keys, np.asarray(band_keys, dtype=np.uint64))
            if hit.any():
                self.filed_keys[i], self.filed_gids[i] = keys[~hit], gids[~hit]
                self._filed_index = None

    def filed_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        if not self.filed_keys:
            return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint64)
        return np.concatenate(self.filed_keys), np.concatenate(self.filed_gids)

    def filed_index(self) -> dict[int, set[int]]:
        """Band key -> group ids filed in this batch (built when a read needs it)."""
        if self._filed_index is None:
            index: dict[int, set[int]] = {}
            keys, gids = self.filed_pairs()
            for k, g in zip(keys.tolist(), gids.tolist()):
                index.setdefault(k, set()).add(g)
            self._filed_index = index
        return self._filed_index


class Overlay:
    """Reads through the open batch of the calling thread, pipelined; the commit of a batch.

    Args:
        client: A redis-py client.
        name: How the storage shows itself in messages (its repr, without a password).
        url: The server's URL (shown without its password).
        prefix: The namespace's key prefix (for messages, and drop's SCAN).
        lock_key: The lock's key (kept by drop; WATCHed and deleted by the commit).
        guard: The key that a read outside a batch asks about once the namespace is known to hold an
            index (``ns:meta``): a namespace that lost it is not read as an empty one.
        commits_key, log_key: The commit counter (kept by drop) and the commit log (written by commits).
        counter_key, groups_key: The group-id counter (kept by drop) and the groups' hash (a batch checks
            at its start that the counter is there while groups are).
    """

    def __init__(
        self,
        client: Any,
        *,
        name: str,
        url: str,
        prefix: bytes,
        lock_key: bytes,
        guard: bytes,
        commits_key: bytes,
        log_key: bytes,
        counter_key: bytes,
        groups_key: bytes,
        band_log_key: bytes,
    ) -> None:
        self.client, self.name, self.url = client, name, url
        self.prefix, self.lock_key, self.guard = prefix, lock_key, guard
        self.commits_key, self.log_key = commits_key, log_key
        self.counter_key = counter_key
        self.band_log_key = band_log_key
        self._state_keys = [commits_key, log_key, lock_key, guard, counter_key, groups_key, band_log_key]
        #: This process's copy of the namespace's LSH buckets (see :mod:`~rag_dedup.storage.redis.mirror`).
        self.mirror = BandMirror()
        self._mirror_lock = threading.RLock()
        #: Set once the namespace was seen holding an index: reads then check ``guard``.
        self.known = False
        #: Round trips made by reads and commits.
        self.round_trips = 0
        #: Of the checks that refused a batch, how many found each kind of thing it read written by
        #: another commit (see :meth:`_count_hits`).
        self.refusal_hits: Counter[str] = Counter()
        self._local = threading.local()

    # --- the batch of this thread --------------------------------------------------------------
    @property
    def batch(self) -> Batch | None:
        return getattr(self._local, "batch", None)

    @batch.setter
    def batch(self, batch: Batch | None) -> None:
        self._local.batch = batch

    def open_batch(self) -> Batch:
        """The open batch (writes happen only inside one)."""
        batch = self.batch
        if batch is None:  # pragma: no cover - every write runs inside lock()
            raise RuntimeError("RedisStorage writes happen inside lock()")
        return batch

    # --- errors --------------------------------------------------------------------------------
    def unavailable(self, exc: BaseException, what: str) -> Exception:
        return unavailable(self.url, exc, what)

    def lost(self, what: str) -> NamespaceLost:
        return NamespaceLost(
            f"{self.name} lost {what}: the server restarted without persistence, was flushed, or evicted keys. "
            "Nothing of this batch was written; the index in this namespace is incomplete: drop() it and index "
            "again, and run Redis with appendonly yes and maxmemory-policy noeviction"
        )

    def corrupt(self, key: bytes, raw: object, exc: BaseException) -> CorruptIndexError:
        shown = raw[:80] if isinstance(raw, bytes) else raw
        return CorruptIndexError(
            f"{self.name}: {key.decode('utf-8', 'backslashreplace')} holds {shown!r}, which is not what rag-dedup "
            f"stores there ({str(exc)[:120]}); the namespace is damaged: drop() it and index again"
        )

    def failed_in_part(self, batch: Batch, exc: BaseException) -> CorruptIndexError:
        """A commit's ``EXEC`` in which a command failed on a stored key of another type (``WRONGTYPE``):
        Redis applied the transaction's other commands (it never rolls one back). Other errors (a server
        out of memory refuses the commands as they are queued, and discards the transaction) are not this. The key is found by asking the type
        of every key the batch wrote (one round trip, on this path only)."""
        expected = [(k, b"hash") for k in batch.hashes] + [(k, b"set") for k in batch.sets]
        expected += [(k, b"string") for k in batch.strings] + [(k, b"list") for k in (self.log_key, self.band_log_key)]
        culprit = "a key it wrote"
        try:
            with self.client.pipeline(transaction=False) as pipe:
                for key, _ in expected:
                    pipe.type(key)
                found = pipe.execute()
            wrong = next((k for (k, want), got in zip(expected, found) if got not in (want, want.decode(), b"none", "none")), None)
            if wrong is not None:
                culprit = wrong.decode("utf-8", "backslashreplace")
        except (*CONNECTION_ERRORS, ResponseError):
            pass
        return CorruptIndexError(
            f"{self.name}: a commit failed on {culprit}, which holds what rag-dedup does not store there "
            f"({str(exc)[:200]}); Redis applied the rest of the transaction (it does not roll one back), so the "
            "namespace is damaged: drop() it and index again"
        )

    def out_of_memory(self, exc: BaseException) -> RedisConfigurationError:
        """The server refused a write: it is at its ``maxmemory`` (with ``noeviction``, as rag-dedup
        requires). It refuses the commands as they come, and an ``EXEC`` discards the whole transaction,
        so nothing of the batch was recorded."""
        return RedisConfigurationError(
            f"{self.name}: Redis at {self.url} is out of memory ({str(exc)[:160]}); nothing of this batch was "
            "recorded: raise the server's maxmemory (CONFIG SET maxmemory ...) or free memory, then retry"
        )

    def wrong_type(self, args: Sequence[Any], exc: BaseException) -> CorruptIndexError | RedisConfigurationError:
        """A command failed on a stored key (a key of another type, a non-integer counter); or the server
        is out of memory (:meth:`out_of_memory`), which is no damage."""
        if _is_out_of_memory(exc):
            return self.out_of_memory(exc)
        key = next((a for a in args[1:] if isinstance(a, bytes) and a.startswith(self.prefix)), None)
        where = key.decode("utf-8", "backslashreplace") if key is not None else f"a {args[0]} command"
        return CorruptIndexError(
            f"{self.name}: {where} cannot be read as rag-dedup stores it ({exc}); the namespace is damaged: drop() it "
            "and index again"
        )

    # --- reading -------------------------------------------------------------------------------
    def pipeline(self, build: Callable[[Any], None], *, tracked: bool = False) -> list[Any]:
        """Run the commands that ``build`` queues in one round trip; translate connection errors.

        ``tracked``: the caller notes what it reads in the open batch's read set; otherwise an
        optimistic batch counts as having read everything (any commit before its own conflicts).
        """
        pipe = self.client.pipeline(transaction=False)
        build(pipe)
        if len(pipe) == 0:
            return []
        if not tracked and self.batch is not None and self.batch.token is None:
            self.batch.read_all = True
        # A read outside a batch also asks whether the namespace still has its parameters (a batch
        # checked that when it took the lock), so that a lost index is not read as an empty one.
        guard = self.known and self.batch is None
        if guard:
            pipe.exists(self.guard)
        commands = [args for args, _ in pipe.command_stack]
        try:
            self.round_trips += 1
            replies = pipe.execute(raise_on_error=False)
        except CONNECTION_ERRORS as exc:
            what = "in the middle of a batch; nothing of it was recorded, retry it" if self.batch else "while reading"
            raise self.unavailable(exc, what) from exc
        finally:
            pipe.reset()
        for args, reply in zip(commands, replies):
            if isinstance(reply, ResponseError):
                raise self.wrong_type(args, reply)
        if guard and not replies.pop():
            raise self.lost("its parameters (key meta)")
        return replies

    def call(self, what: str, command: str, *args: Any) -> Any:
        """One command outside a pipeline (INCRBY inside a batch), with errors translated."""
        try:
            self.round_trips += 1
            return getattr(self.client, command.lower())(*args)
        except CONNECTION_ERRORS as exc:
            raise self.unavailable(exc, what) from exc
        except ResponseError as exc:
            raise self.wrong_type((command, *args), exc) from None

    def fetch(
        self,
        hashes: Mapping[bytes, Sequence[bytes]] = {},
        sets: Sequence[bytes] = (),
        strings: Sequence[bytes] = (),
    ) -> tuple[dict[tuple[bytes, bytes], bytes | None], dict[bytes, set[bytes]], dict[bytes, bytes | None]]:
        """Read hash fields, whole sets and strings from Redis in one round trip.

        Inside a batch the answers are also kept (the batch holds the lock, so Redis cannot change
        under it): a later read of the same thing is served without a round trip.

        Inside an optimistic batch the round trip also reads the commit count, first. When others
        committed since the batch started (and it was not checked against them yet), they are
        checked now, the answers just read included (:meth:`_recheck`): a batch that another commit
        refuses stops at its next read rather than at its commit.

        Raises:
            Refused: Inside an optimistic batch, another commit wrote something the batch read.
        """
        parts = [(key, part) for key, fields in hashes.items() for part in _chunks(list(fields))]
        sets, strings = list(sets), list(strings)
        batch = self.batch
        optimistic = batch is not None and batch.token is None and not batch.dropped

        def build(p: Any) -> None:
            if optimistic:  # first: what the rest reads is as of this count or later
                p.get(self.commits_key)
            for key, part in parts:
                p.hmget(key, part)
            for key in sets:
                p.smembers(key)
            for key in strings:
                p.get(key)

        replies = iter(self.pipeline(build, tracked=True))
        commits = next(replies) if optimistic else None
        fields_out = {(key, f): v for key, part in parts for f, v in zip(part, next(replies))}
        sets_out = {key: next(replies) for key in sets}
        strings_out = {key: next(replies) for key in strings}
        if batch is not None:
            for (key, f), v in fields_out.items():
                batch.seen_hashes.setdefault(key, {})[f] = v
            for key, members in sets_out.items():
                batch.seen_sets[key] = set(members)
            batch.seen_strings.update(strings_out)
        if optimistic and (commits or b"0") not in (b"%d" % batch.commits, b"%d" % batch.rechecked):  # type: ignore[union-attr]
            self._recheck(batch)  # type: ignore[arg-type]
        return fields_out, sets_out, strings_out

    def _recheck(self, batch: Batch) -> None:
        """Check the optimistic ``batch`` (one round trip) after a read found commits it was not checked
        against: the check its commit makes, made early. Refusing it now is what its commit would do
        (what it read stays read); going on changes nothing: its commit still checks every commit
        since its start (the buckets it reads after this point are the mirror's as of its start, so
        the check cannot start later).

        Raises:
            Refused: One of them wrote something the batch read (its read cache then holds what is
                still valid, and ``batch.commits`` says from where, for the next attempt).
        """
        now, _, _, _, _, covered, entries = self._since(batch.commits, False)
        if self._check(batch, covered, entries):
            batch.commits = now
            raise Refused(f"{self.name}: another commit wrote what this batch read")
        batch.rechecked = now

    def unseen(self, key: bytes, fields: Sequence[bytes]) -> list[bytes]:
        """The fields of hash ``key`` that the open batch neither wrote nor read (all outside a batch)."""
        batch = self.batch
        if batch is None:
            return list(fields)
        pending, seen = batch.hashes.get(key, {}), batch.seen_hashes.get(key, {})
        return [f for f in fields if f not in pending and f not in seen]

    def hmget(self, key: bytes, fields: Sequence[bytes]) -> list[bytes | None]:
        """``HMGET`` that sees the open batch's pending writes."""
        batch = self.batch
        out: list[bytes | None] = [None] * len(fields)
        if batch is None:
            todo = list(range(len(fields)))
        else:
            pending = batch.hashes.get(key, {})
            seen = batch.seen_hashes.get(key, {})
            todo = []
            for i, f in enumerate(fields):
                if f in pending:
                    out[i] = pending[f]
                elif batch.dropped:
                    continue
                elif f in seen:
                    out[i] = seen[f]
                else:
                    todo.append(i)
        if todo:
            found, _, _ = self.fetch(hashes={key: list(dict.fromkeys(fields[i] for i in todo))})
            for i in todo:
                out[i] = found[(key, fields[i])]
        return out

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """``GET`` of each key (one round trip), through the open batch."""
        batch = self.batch
        out: list[bytes | None] = [None] * len(keys)
        todo = []
        for i, k in enumerate(keys):
            if batch is None:
                todo.append(i)
            elif k in batch.strings:
                out[i] = batch.strings[k]
            elif batch.dropped:
                continue
            elif k in batch.seen_strings:
                out[i] = batch.seen_strings[k]
            else:
                todo.append(i)
        if todo:
            _, _, found = self.fetch(strings=list(dict.fromkeys(keys[i] for i in todo)))
            for i in todo:
                out[i] = found[keys[i]]
        return out

    def smembers_many(self, keys: Sequence[bytes]) -> list[set[bytes]]:
        """``SMEMBERS`` of each key (one round trip), with the open batch's pending writes applied."""
        batch = self.batch
        out: list[set[bytes]] = [set() for _ in keys]
        todo = []
        for i, k in enumerate(keys):
            if batch is None:
                todo.append(i)
            elif batch.dropped or k in batch.cleared:
                continue
            elif k in batch.seen_sets:
                out[i] = set(batch.seen_sets[k])
            else:
                todo.append(i)
        if todo:
            _, found, _ = self.fetch(sets=list(dict.fromkeys(keys[i] for i in todo)))
            for i in todo:
                out[i] = set(found[keys[i]])
        if batch is not None and batch.sets:
            for i, k in enumerate(keys):
                pending = batch.sets.get(k)
                if pending:
                    current = out[i]
                    for m, present in pending.items():
                        if present:
                            current.add(m)
                        else:
                            current.discard(m)
        return out

    def unread_sets(self, keys: Sequence[bytes]) -> list[bytes]:
        """The set keys that the open batch neither cleared nor read."""
        batch = self.batch
        if batch is None:
            return list(keys)
        return [k for k in keys if k not in batch.cleared and k not in batch.seen_sets]

    def hscan(self, key: bytes) -> dict[bytes, bytes]:
        """A whole hash (by HSCAN, so a large one does not block the server), with pending writes."""
        batch = self.batch
        found: dict[bytes, bytes] = {}
        if batch is not None and batch.token is None:
            batch.read_all = True
        if batch is None or not batch.dropped:
            cursor = 0
            try:
                while True:
                    self.round_trips += 1
                    cursor, part = self.client.hscan(key, cursor, count=SCAN_COUNT)
                    found.update(part)
                    if cursor == 0:
                        break
                # As pipeline()'s guard: a scan outside a batch asks whether the namespace still has its
                # parameters, so that a flushed index is not read as an empty one.
                if self.known and batch is None:
                    self.round_trips += 1
                    if not self.client.exists(self.guard):
                        raise self.lost("its parameters (key meta)")
            except CONNECTION_ERRORS as exc:
                raise self.unavailable(exc, "while reading") from exc
            except ResponseError as exc:
                raise self.wrong_type(("HSCAN", key), exc) from None
        if batch is not None:
            for f, v in batch.hashes.get(key, {}).items():
                if v is None:
                    found.pop(f, None)
                else:
                    found[f] = v
        return found

    def hash_size(self, key: bytes) -> int:
        """``HLEN`` of ``key`` with the open batch's pending writes counted."""
        batch = self.batch
        pending = {} if batch is None else batch.hashes.get(key, {})
        if batch is not None and batch.dropped:
            return sum(v is not None for v in pending.values())
        fields = list(pending)
        replies = self.pipeline(lambda p: (p.hlen(key), *(p.hexists(key, f) for f in fields)))
        count = int(replies[0])
        for f, stored in zip(fields, replies[1:]):
            count += (pending[f] is not None) - bool(stored)
        return count

    # --- committing ----------------------------------------------------------------------------
    def _queue_writes(self, pipe: Any, batch: Batch, number: int) -> tuple[int, tuple[np.ndarray, ...]] | None:
        """Queue the batch's writes, and its entries in the commit log and the band log, into the
        transaction ``pipe``; ``number`` is the commit count this commit makes (the count its WATCH
        holds, plus one: the band-log entry is written behind it).

        Returns, when the batch changed buckets, where the band-log RPUSH is in the transaction and
        the entry's arrays (the pairs taken out, the pairs filed), for :meth:`_mirror_own`.
        """
        for key, fields in batch.hashes.items():
            gone = [f for f, v in fields.items() if v is None]
            kept = {f: v for f, v in fields.items() if v is not None}
            for part in _chunks(gone):
                pipe.hdel(key, *part)
            for part in _chunks(list(kept.items())):
                pipe.hset(key, mapping=dict(part))
        for part in _chunks(list(batch.cleared)):
            pipe.delete(*part)
        # Set writes are (key, member) pairs, most of them one member for each of many keys:
        # one script call per few thousand pairs instead of one command each.
        gone = [(k, m) for k, ms in batch.sets.items() if k not in batch.cleared for m, p in ms.items() if not p]
        added = [(k, m) for k, ms in batch.sets.items() for m, p in ms.items() if p]
        for script, pairs in ((scripts.SREM_PAIRS, gone), (scripts.SADD_PAIRS, added)):
            for part in _chunks(pairs):
                pipe.eval(script, len(part), *(k for k, _ in part), *(m for _, m in part))
        # Strings (most of them components' member lists) in one MSET and one DEL a few thousand keys.
        for part in _chunks([k for k, v in batch.strings.items() if v is None]):
            pipe.delete(*part)
        for part in _chunks([(k, v) for k, v in batch.strings.items() if v is not None]):
            pipe.mset(dict(part))
        # The log: a dropped namespace's commit logs nothing (drop deleted the log, so the gap tells
        # every batch that started before it that it cannot be checked); nor does a batch that
        # wrote nothing (nobody can have read something it changed).
        prints = write_prints(batch)
        band_at: int | None = None
        if batch.dropped or len(prints):
            pipe.incr(self.commits_key)
            unfiled = [(k, g) for k, gs in batch.unfiled.items() for g in gs]
            filed_keys, filed_gids = batch.filed_pairs()
            if unfiled or len(filed_keys):
                arrays = (
                    np.array([k for k, _ in unfiled], dtype=np.uint64),
                    np.array([g for _, g in unfiled], dtype=np.uint64),
                    filed_keys,
                    filed_gids,
                )
                band_at = len(pipe)
                pipe.rpush(self.band_log_key, b"%d:" % number + entry(*arrays))
        if len(prints) and not batch.dropped:
            logged = np.sort(prints).astype(">u8").tobytes()  # sorted: it starts with 0 bytes
            pipe.rpush(self.log_key, logged)
            pipe.ltrim(self.log_key, -log_keep(len(logged)), -1)
        return None if band_at is None else (band_at, arrays)

    def _mirror_own(self, queued: tuple[int, tuple[np.ndarray, ...]] | None, replies: list[Any], number: int) -> None:
        """After a commit, apply its own band-log entry to the mirror (not read back at the next sync),
        when the mirror holds every entry before it: the RPUSH's reply (the log's new length) says
        that it is the next one. Else the next sync reads it with the others."""
        if queued is None:
            return
        at, (_, removed_gids, filed_keys, filed_gids) = queued
        with self._mirror_lock:
            if self.mirror.applied == int(replies[at]) - 1:
                self.mirror.add(b"%d:" % number, removed_gids.astype(np.int64), filed_keys, filed_gids.astype(np.int64))

    def commit(self, batch: Batch, lost_message: Callable[[], str]) -> None:
        """Write the overlay of a batch under the lock in one MULTI/EXEC, only if the lock is still ours;
        the EXEC releases it.

        Raises:
            LockLost: The lock is no longer ours (``lost_message()`` says why).
            RedisUnavailable: The connection dropped before or during the commit.
        """
        sent = False
        try:
            with self.client.pipeline(transaction=True) as pipe:
                self.round_trips += 2
                pipe.watch(self.lock_key, self.commits_key)
                token, count = pipe.mget(self.lock_key, self.commits_key)
                if token != batch.token:
                    raise LockLost(lost_message())
                number = _count(count, self.commits_key, self.corrupt) + 1
                if batch.dropped:
                    self._unlink_namespace()
                pipe.multi()
                queued = self._queue_writes(pipe, batch, number)
                pipe.delete(self.lock_key)
                self.round_trips += 1
                sent = True
                try:
                    replies = pipe.execute()
                except ResponseError as exc:
                    if "WRONGTYPE" not in str(exc):
                        raise self.out_of_memory(exc) if _is_out_of_memory(exc) else exc  # the transaction was discarded
                    raise self.failed_in_part(batch, exc) from None
                self._mirror_own(queued, replies, number)
        except WatchError as exc:
            if isinstance(exc.__context__, CONNECTION_ERRORS):
                raise self.unavailable(exc, "while committing a batch; nothing of it was recorded, retry it") from exc
            raise LockLost(lost_message()) from exc
        except CONNECTION_ERRORS as exc:
            raise self._commit_unavailable(exc, sent) from exc

    def _commit_unavailable(self, exc: BaseException, sent: bool) -> Exception:
        if not sent:
            return self.unavailable(exc, "before committing a batch; nothing of it was recorded, retry it")
        return self.unavailable(
            exc, "while committing a batch; it may or may not have been recorded: retry it (a retry is idempotent)"
        )

    # --- optimistic batches --------------------------------------------------------------------
    def _state(self, reply: list[Any]) -> tuple[int, int, bool, bool, bool, bool, list[bytes]]:
        """A COMMITS_SINCE reply, without its band-log part (:meth:`_since` applies that); the second
        field is the lock's PTTL (-2: free, -1: held and never to expire, else ms to its expiry)."""
        now, lock_ttl, has_meta, has_counter, has_groups, covered, _, *entries = reply
        return int(now), int(lock_ttl), bool(has_meta), bool(has_counter), bool(has_groups), bool(covered), entries

    def _corrupt_band_entry(self, number: int, raw: object, exc: BaseException) -> CorruptIndexError:
        return self.corrupt(self.band_log_key + b"[%d]" % number, raw, exc)

    def _since(self, since: int, sync: bool) -> tuple[int, int, bool, bool, bool, bool, list[bytes]]:
        """Where the namespace stands (``scripts.COMMITS_SINCE``, one round trip), with the commit-log
        entries since commit ``since`` (-1: none); with ``sync``, the mirror brought up to date too, in
        the same script, so that it holds the buckets as of the commit count returned (a log of more than
        ``BAND_ENTRIES_MAX`` new entries takes a round trip for each part, the last one's state
        returned). The caller holds ``_mirror_lock`` when ``sync``."""
        keys = self._state_keys
        while True:
            have, prefix = self.mirror.request() if sync else (-1, b"")
            (reply,) = self.pipeline(
                lambda p: p.eval(scripts.COMMITS_SINCE, len(keys), *keys, since, have, prefix, BAND_ENTRIES_MAX), tracked=True
            )
            if len(reply) < 7:  # the script's tonumber() of the commit count gave nil: the reply list ends there
                raw = self.client.get(self.commits_key)
                raise self.corrupt(self.commits_key, raw, ValueError("not a count"))
            band = reply[6]
            if not band or not self.mirror.apply(band, self._corrupt_band_entry):
                return self._state(reply)

    def sync(self) -> None:
        """Bring the mirror up to date (one round trip): before reading buckets outside a batch, and under the lock."""
        with self._mirror_lock:
            self._since(-1, True)

    def query_mirror(self, rows: np.ndarray, *, sync: bool) -> tuple[np.ndarray, np.ndarray]:
        """``BandTable.query_pairs`` of the mirror (brought up to date first with ``sync``)."""
        with self._mirror_lock:
            if sync:
                self.sync()
            return self.mirror.table.query_pairs(rows)

    def begin(self, carried: Batch | None = None) -> Batch:
        """Start an optimistic batch (one round trip), with what ``carried`` (an earlier attempt of the
        same batch, refused) read and nobody has written since.

        Raises:
            NamespaceLost: The namespace lost its parameters, or its group-id counter while it holds groups.
            RedisUnavailable: The connection dropped.
        """
        since = -1 if carried is None else carried.commits
        with self._mirror_lock:
            now, _, has_meta, has_counter, has_groups, covered, entries = self._since(since, True)
        if self.known and not has_meta:
            raise self.lost("its parameters (key meta)")
        if has_groups and not has_counter:
            raise self.lost("its group-id counter (key next-group-id) while it holds groups")
        batch = Batch(token=None, commits=now)
        if carried is not None:
            self._check(carried, covered, entries)  # drops from its cache what was written since
            _take_cache(carried, batch)
        return batch

    def carry(self, carried: Batch, batch: Batch) -> None:
        """Give ``batch`` (under the lock, so nobody commits meanwhile) what the refused attempt
        ``carried`` read and nobody has written since (one round trip)."""
        self.validate(carried)  # drops from its cache what was written since it last looked
        _take_cache(carried, batch)

    def _check(self, batch: Batch, covered: bool, entries: Sequence[bytes]) -> bool:
        """Whether the commits of ``entries`` wrote something the batch read (``covered``: the log
        held them all); if they did, what they wrote is dropped from the batch's read cache (its next
        attempt reads it again; its buckets are the mirror's, which that attempt's start updates)."""
        if covered and not entries:
            return False
        if not covered or batch.read_all or any(len(e) % 8 for e in entries):
            batch.gap = batch.gap or not covered
            for table in (batch.seen_hashes, batch.seen_sets, batch.seen_strings):
                table.clear()
            self.refusal_hits["unchecked"] += 1
            return True
        written = np.sort(np.concatenate([np.frombuffer(e, dtype=">u8") for e in entries]).astype(np.uint64))
        kept = batch.read_prints
        hash_hits = _among(_prints_kept(_field_names(batch.seen_hashes), kept), written)
        set_hits = _among(_prints_kept(list(batch.seen_sets), kept), written)
        string_hits = _among(_prints_kept(list(batch.seen_strings), kept), written)
        band_hits = _among(np.concatenate(batch.read_bands) if batch.read_bands else np.empty(0, dtype=np.uint64), written)
        if not (hash_hits.any() or set_hits.any() or string_hits.any() or band_hits.any()):
            return False
        hash_keys = [key for key, fields in batch.seen_hashes.items() for _ in fields]
        self._count_hits(
            [hash_keys[i] for i in np.flatnonzero(hash_hits).tolist()]
            + [k for table, hits in ((batch.seen_sets, set_hits), (batch.seen_strings, string_hits)) for k, hit in zip(table, hits.tolist()) if hit],
            band_hits.any(),
        )
        if hash_hits.any():
            pairs = [(key, f) for key, fields in batch.seen_hashes.items() for f in fields]
            for i in np.flatnonzero(hash_hits).tolist():
                key, f = pairs[i]
                del batch.seen_hashes[key][f]
        for table, hits in ((batch.seen_sets, set_hits), (batch.seen_strings, string_hits)):
            names = list(table)
            for i in np.flatnonzero(hits).tolist():
                del table[names[i]]
        return True

    def _count_hits(self, keys: Sequence[bytes], bands: bool) -> None:
        """Count one refusing check in :attr:`refusal_hits`: once for each kind of key among ``keys`` (the
        keys it read that the other commits wrote; a key's kind is its name after the namespace prefix
        and before any ``:``, e.g. ``digests``, ``component-of``, ``group-items``), and once under
        ``bands`` when they changed buckets it looked up. (A check that could not compare write sets
        counts under ``unchecked``.)"""
        kinds = {key[len(self.prefix) :].split(b":", 1)[0].decode("utf-8", "replace") for key in keys}
        if bands:
            kinds.add("bands")
        self.refusal_hits.update(kinds)

    def validate(self, batch: Batch) -> bool:
        """Whether what the optimistic ``batch`` read is still what Redis holds (one round trip); when it
        is not, the batch's read cache is brought up to date for its next attempt (see :meth:`_check`)."""
        now, _, _, _, _, covered, entries = self._since(batch.commits, False)
        if self._check(batch, covered, entries):
            batch.commits = now
            return False
        return True

    def commit_optimistic(self, batch: Batch) -> str:
        """Commit an optimistic batch if nothing it read was written since it started, and the lock is free.

        Returns ``"committed"``; ``"conflict"`` when a commit since its start wrote something it read
        (the batch's read cache then holds only what is still valid, and ``batch.commits`` says from
        which commit on: run it again with :meth:`begin`); ``"locked"`` when a batch holds the lock
        (wait, and commit again: the check will include that batch's writes); ``"locked for ever"`` when
        the lock's key has no expiry (no holder of ours sets one so: waiting would not free it); ``"contended"`` when
        nothing it read was written but other commits kept landing between its check and its EXEC,
        WATCH_TRIES times (commit it under the lock: :meth:`validate`, then :meth:`commit`).

        Raises:
            NamespaceLost: The namespace lost its parameters since this object saw them.
            RedisUnavailable: The connection dropped before or during the commit.
        """
        if not batch.hashes and not batch.sets and not batch.cleared and not batch.strings and not batch.unfiled and not batch.filed_keys:
            return "committed"  # it wrote nothing: there is nothing to check or commit
        keys = self._state_keys
        sent = False
        try:
            with self.client.pipeline(transaction=True) as pipe:
                for _ in range(WATCH_TRIES):
                    self.round_trips += 2
                    pipe.watch(self.commits_key, self.lock_key)
                    reply = pipe.eval(scripts.COMMITS_SINCE, len(keys), *keys, batch.commits, -1, b"", 0)
                    now, lock_ttl, has_meta, _, _, covered, entries = self._state(reply)
                    if self.known and not has_meta:
                        pipe.reset()
                        raise self.lost("its parameters (key meta)")
                    if lock_ttl != -2:
                        pipe.reset()
                        return "locked" if lock_ttl != -1 else "locked for ever"
                    if self._check(batch, covered, entries):
                        pipe.reset()
                        batch.commits = now
                        return "conflict"
                    batch.commits = now  # checked up to here: a retry checks only the commits after it
                    pipe.multi()
                    queued = self._queue_writes(pipe, batch, now + 1)
                    self.round_trips += 1
                    sent = True
                    try:
                        replies = pipe.execute()
                    except WatchError as exc:
                        if isinstance(exc.__context__, CONNECTION_ERRORS):
                            raise self.unavailable(exc, "while committing a batch; nothing of it was recorded, retry it") from exc
                        sent = False
                        continue  # another commit (or the lock) came in between: check it
                    except ResponseError as exc:
                        if "WRONGTYPE" not in str(exc):
                            raise self.out_of_memory(exc) if _is_out_of_memory(exc) else exc  # the transaction was discarded
                        raise self.failed_in_part(batch, exc) from None
                    self._mirror_own(queued, replies, now + 1)
                    return "committed"
                return "contended"
        except CONNECTION_ERRORS as exc:
            raise self._commit_unavailable(exc, sent) from exc

    def _unlink_namespace(self) -> None:
        """Delete every key of the namespace but the lock and the two counters (SCAN and UNLINK in
        batches). Both only grow: a batch that started before the drop never takes a commit count after
        it for its own, and a group id is never handed out again in the namespace, so that what another
        worker keeps by group id (``DedupIndex``'s kept families, an attempt's memo) can never be taken
        for a group made after the drop."""
        pattern = _glob_escape(self.prefix) + b"*"
        try:
            doomed: list[bytes] = []
            cursor = 0
            while True:
                self.round_trips += 1
                cursor, keys = self.client.scan(cursor, match=pattern, count=SCAN_COUNT)
                doomed.extend(k for k in keys if k not in (self.lock_key, self.commits_key, self.counter_key))
                if len(doomed) >= SCAN_COUNT:
                    self.round_trips += 1
                    self.client.unlink(*doomed)
                    doomed = []
                if cursor == 0:
                    break
            if doomed:
                self.round_trips += 1
                self.client.unlink(*doomed)
        except CONNECTION_ERRORS as exc:
            raise self.unavailable(exc, "while dropping the namespace; drop() again to finish") from exc


def _count(raw: bytes | None, key: bytes, corrupt: Callable[[bytes, object, BaseException], CorruptIndexError]) -> int:
    """The commit count as stored (missing: 0)."""
    if raw is None:
        return 0
    if not raw.isdigit():
        raise corrupt(key, raw, ValueError("not a count"))
    return int(raw)


def _take_cache(old: Batch, new: Batch) -> None:
    new.seen_hashes, new.seen_sets, new.seen_strings = old.seen_hashes, old.seen_sets, old.seen_strings
    new.read_prints = old.read_prints


def _chunks(values: list[Any]) -> list[list[Any]]:
    return [values[i : i + CHUNK] for i in range(0, len(values), CHUNK)]


def _glob_escape(raw: bytes) -> bytes:
    out = bytearray()
    for byte in raw:
        if byte in b"*?[]\\":
            out += b"\\"
        out.append(byte)
    return bytes(out)
