"""RedisStorage: the storage tables of :mod:`rag_dedup.storage.bookkeeping` in Redis.

Each primitive is a read through the open batch (:mod:`~rag_dedup.storage.redis.overlay`, one
pipelined round trip at most) or a write into it; values are encoded and decoded by
:mod:`~rag_dedup.storage.redis.keys`, which also names every key.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from rag_dedup.errors import CorruptIndexError, NamespaceLost, RedisUnavailable
from rag_dedup.storage.base import ItemRecord
from rag_dedup.storage.bookkeeping import Bookkeeping, Table
from rag_dedup.storage.redis import connection, keys
from rag_dedup.storage.redis.connection import check_seconds, check_url, redact
from rag_dedup.storage.redis.keys import BAD_VALUE, CODECS, FORMAT, LAYOUT_VERSION, OLD_LAYOUT_KEYS, Layout
from rag_dedup.storage.redis.lock import Clock, NamespaceLock
from rag_dedup.storage.redis.overlay import Batch, Overlay, Refused
from rag_dedup.surrogates import check_unicode

__all__ = ["OPTIMISTIC_ATTEMPTS", "RedisStorage"]

#: Optimistic attempts of a batch before it runs under the lock (see :meth:`RedisStorage.run_batch`).
#: The second reads only what others wrote meanwhile, so it is short; if it is refused too, the
#: third runs under the lock (as short: it starts from what the second read).
OPTIMISTIC_ATTEMPTS = 2

T = TypeVar("T")


def _same_record(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Whether two item records encode alike: equal, field by field of one type (``1 == 1.0``, which encode apart)."""
    return a == b and list(map(type, a)) == list(map(type, b))


def _same_group(a: tuple[bytes, np.ndarray], b: tuple[bytes, np.ndarray]) -> bool:
    """Whether two groups encode alike: one digest, and one shingle array (the same object)."""
    return a[1] is b[1] and a[0] == b[0]


#: Tables whose values the attempts of one :meth:`RedisStorage.run_batch` encode once each (see
#: ``RedisStorage._encoded``), and how to tell that a value is the one encoded before: the bulk of a
#: batch's writes, a record per new text and a group per new digest.
ENCODED_ONCE: dict[Table, Callable[[Any, Any], bool]] = {Table.ITEMS: _same_record, Table.GROUPS: _same_group}


class RedisStorage(Bookkeeping):
    """DedupIndex storage in Redis, shared by every process that opens the same URL and namespace.

    Args:
        url: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` for TLS, or ``unix://``.
        namespace: Prefix of every key (no ``:``); two indexes on one server need two namespaces.
        lock_timeout: Seconds the write lock lives without renewal. A holder renews it every third of
            this while it works, so it only runs out when the holder died or stalled; other workers
            then take over after at most this long.
        lock_wait: Seconds to wait for the lock before raising :class:`~rag_dedup.errors.LockTimeout`.
        connect_timeout: Seconds to wait for a TCP connection.
        socket_timeout: Seconds to wait for a reply before the connection counts as lost.
        allow_eviction: Accept a server whose ``maxmemory-policy`` is not ``noeviction``. By default such
            a server is refused: it may evict the index's keys when memory runs short, and an index
            with evicted keys gives wrong answers. (A lost namespace is still detected, see below.)
        **options: Passed to ``redis.Redis.from_url`` (for example ``ssl_ca_certs`` for ``rediss://``).

    Raises:
        ImportError: redis-py is not installed (``pip install rag-dedup[redis]``).
        TypeError, ValueError: A bad argument (the message says which and how to fix it).
        RedisUnavailable: The server cannot be reached (the message names the URL, not the password).
        RedisConfigurationError: The server may evict keys, and ``allow_eviction`` is False.

    A namespace that held an index and lost its parameters or its group counter (a restart without
    persistence, a flush, eviction) raises :class:`~rag_dedup.errors.NamespaceLost` at the next batch or
    read, instead of answering from what is left. A namespace written in another key layout (an older
    rag-dedup) raises :class:`~rag_dedup.errors.CorruptIndexError` when its parameters are read.

    Example (needs a server; the tests start one)::

        storage = RedisStorage("redis://localhost:6379/0", namespace="docs")
        index = DedupIndex(storage=storage)
        index = DedupIndex(storage="redis://localhost:6379/0", namespace="docs")  # the same
    """

    shared = True

    def __init__(
        self,
        url: str,
        namespace: str = "rag-dedup",
        *,
        lock_timeout: float = 30.0,
        lock_wait: float = 120.0,
        connect_timeout: float = 5.0,
        socket_timeout: float | None = 30.0,
        allow_eviction: bool = False,
        **options: Any,
    ) -> None:
        connection.require_redis()
        check_url(url)
        if not isinstance(allow_eviction, bool):
            raise TypeError(f"allow_eviction must be True or False, got {type(allow_eviction).__name__}")
        if not isinstance(namespace, str):
            raise TypeError(f"namespace must be a str, got {type(namespace).__name__}")
        if not namespace or ":" in namespace:
            raise ValueError(
                f"namespace ({namespace!r}) must be a non-empty string without ':' (':' separates the "
                "namespace from the key names); use '-' or '/' instead, e.g. 'team-corpus'"
            )
        check_unicode(namespace, "namespace")
        for name, value in (("lock_timeout", lock_timeout), ("lock_wait", lock_wait), ("connect_timeout", connect_timeout)):
            check_seconds(name, value)
        if socket_timeout is not None:
            check_seconds("socket_timeout", socket_timeout)
        if lock_timeout < 0.1:
            raise ValueError(f"lock_timeout ({lock_timeout}) must be at least 0.1 s; 30 s is a safe default")
        self.url = url
        self.namespace = namespace
        self.lock_timeout = float(lock_timeout)
        self.lock_wait = float(lock_wait)
        self.connect_timeout = float(connect_timeout)
        self.socket_timeout = None if socket_timeout is None else float(socket_timeout)
        self.allow_eviction = allow_eviction
        self.options = dict(options)
        self.keys = Layout(namespace)
        self._client = connection.connect(
            url,
            connect_timeout=self.connect_timeout,
            socket_timeout=self.socket_timeout,
            allow_eviction=allow_eviction,
            options=self.options,
        )
        self._connect_round_trips = 1 if allow_eviction else 2
        k = self.keys
        self._overlay = Overlay(
            self._client,
            name=repr(self),
            url=url,
            prefix=k.prefix,
            lock_key=k.lock,
            guard=k.meta,
            commits_key=k.commits,
            log_key=k.log,
            counter_key=k.counter,
            groups_key=k.hashes[Table.GROUPS],
            band_log_key=k.band_log,
        )
        #: Optimistic attempts refused because another commit wrote what they read (each was run again).
        self.conflicts = 0
        #: Of :attr:`conflicts`, the attempts refused before their commit: at a read that found newer
        #: commits and checked the attempt against them at once (:class:`Refused`), or at an error
        #: that a check then put down to other commits. The others were refused by their commit's check.
        self.refused_before_commit = 0
        #: This process's CPU seconds (``time.process_time``) spent in the attempts refused: the work
        #: that conflicts cost, beside what the committed attempts cost.
        self.refused_cpu = 0.0
        #: Batches that ran under the lock after OPTIMISTIC_ATTEMPTS refused attempts.
        self.fallbacks = 0
        # What the attempts of this thread's run_batch share: attempt_memo, and the group ids handed out
        # (digest -> id), None outside one; the ids create_groups hands out next.
        self._attempt = threading.local()
        self._lock = NamespaceLock(
            self._client, self.keys.lock, namespace=namespace, url=url, timeout=self.lock_timeout, wait=self.lock_wait
        )

    # --- counters ----------------------------------------------------------------------------
    @property
    def round_trips(self) -> int:
        """Network round trips made by this object's callers (reads, the lock, commits); the lock's
        renewal thread is counted apart, in :attr:`renewals`."""
        return self._connect_round_trips + self._overlay.round_trips + self._lock.round_trips

    @property
    def refusal_hits(self) -> dict[str, int]:
        """What the refused optimistic attempts of this process had read that another commit wrote, by
        kind of key: the number of refusing checks that found each (a check counts once under each kind
        it found, so the counts add up to at least :attr:`conflicts`). The kinds are the key names of
        :class:`~rag_dedup.storage.redis.keys.Keys` after the prefix: ``digests`` (an exact copy in both
        batches), ``component-of``, ``cluster-of``, ``clusters``, ``component``, ``group-items`` (a
        component both batches changed), ``items``, ``source``; and ``bands`` (buckets both looked up or
        filed: near-duplicates) and ``unchecked`` (the commit log no longer held the commits to compare)."""
        return dict(sorted(self._overlay.refusal_hits.items()))

    @property
    def renewals(self) -> int:
        """Lock renewals sent while this object's batches worked."""
        return self._lock.renewals

    @property
    def lock_wait_seconds(self) -> float:
        """Seconds this object's callers spent waiting for another holder to release the write lock."""
        return self._lock.wait_seconds

    @property
    def clock(self) -> Clock:
        """Where the write lock reads time and waits (replace it to drive the lock in a test)."""
        return self._lock.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self._lock.clock = clock

    # --- copies into other processes -----------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """Only the configuration: a copy reconnects (IngestionPipeline(num_workers=...) pickles it)."""
        return {
            "url": self.url,
            "namespace": self.namespace,
            "lock_timeout": self.lock_timeout,
            "lock_wait": self.lock_wait,
            "connect_timeout": self.connect_timeout,
            "socket_timeout": self.socket_timeout,
            "allow_eviction": self.allow_eviction,
            "options": self.options,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        options = state.pop("options")
        self.__init__(**state, **options)  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"RedisStorage({redact(self.url)!r}, namespace={self.namespace!r})"

    def close(self) -> None:
        """Close this object's connections (a later call reconnects)."""
        self._client.close()

    # --- the lock and the batch ----------------------------------------------------------------
    def run_batch(self, body: Callable[[], None]) -> None:
        """Run ``body`` as one batch, optimistically: without the lock, committed only if nothing it read
        was written by another commit meanwhile (see :mod:`~rag_dedup.storage.redis.overlay`).

        A refused attempt is run again, reading afresh only what the other commits wrote (the rest of
        what it read is kept), and with the group ids the refused attempt handed out (each new digest
        keeps its id; ids are never shared with another worker, so an id that an attempt did not commit
        is still this batch's). Meanwhile :attr:`attempt_memo` is a dict that ``body`` may keep pure
        results in, keyed by everything they depend on read from this storage (group ids included: an
        id names one group, with one set of shingles, for as long as the dict lives; it is emptied
        when a gap in the commit log says that the namespace may have been dropped meanwhile). After
        ``OPTIMISTIC_ATTEMPTS`` refused attempts the batch runs under the lock, where nothing can
        refuse it, so it never livelocks. ``body`` may therefore run several
        times: it must only read and write this storage, from the same inputs each time. Inside
        another batch (an open :meth:`lock`), it simply joins it. The lock stays the serialisation
        point for everything else (``remove``, ``update``, ``drop``, the parameters): an optimistic
        commit waits while it is held.

        Raises:
            LockTimeout: The lock stayed held for longer than ``lock_wait`` while this batch waited to commit.
            NamespaceLost, RedisUnavailable: As :meth:`lock`.
            Whatever ``body`` raises on values that no other commit changed.
        """
        overlay = self._overlay
        if overlay.batch is not None:
            with self.lock():
                body()
            return
        shared = self._attempt
        shared.memo, shared.reserved = {}, {}
        try:
            self._attempts(body)
        finally:
            shared.memo = shared.reserved = None

    @property
    def attempt_memo(self) -> dict[Any, Any] | None:
        """Inside :meth:`run_batch` (in the thread running it), a dict that the attempts of the batch
        share (see there); None elsewhere."""
        return getattr(self._attempt, "memo", None)

    def _attempts(self, body: Callable[[], None]) -> None:
        overlay = self._overlay
        carried: Batch | None = None
        for _ in range(OPTIMISTIC_ATTEMPTS):
            batch = overlay.begin(carried)
            self._after_gap(carried)
            overlay.batch = batch
            started = time.process_time()
            try:
                try:
                    body()
                except (RedisUnavailable, NamespaceLost):
                    raise
                except Refused:  # a read found the attempt refused (Overlay.fetch): run it again now
                    self.refused_before_commit += 1
                    outcome = "conflict"
                except Exception:
                    # Read across other commits, the values may not fit together (a component named
                    # but gone): an error counts only if nothing it read has changed.
                    if overlay.validate(batch):
                        raise
                    self.refused_before_commit += 1
                    outcome = "conflict"
                else:
                    outcome = self._commit_when_free(batch)
            finally:
                overlay.batch = None
            if outcome == "committed":
                return
            self.conflicts += 1
            self.refused_cpu += time.process_time() - started
            carried = batch
        self.fallbacks += 1
        with self._locked(carried):
            self._after_gap(carried)
            body()

    def _after_gap(self, carried: Batch | None) -> None:
        """Forget what the attempts shared when a check of the refused attempt ``carried`` found a gap
        in the commit log (another worker may have dropped the namespace: the ids handed out before
        may be handed out again, and name other groups)."""
        if carried is not None and carried.gap:
            self._attempt.memo, self._attempt.reserved = {}, {}

    def _commit_when_free(self, batch: Batch) -> str:
        """:meth:`Overlay.commit_optimistic`, waiting (as for the lock, up to ``lock_wait``) while the lock
        is held, and under the lock when other commits keep landing between its check and its EXEC.

        Returns ``"committed"`` or ``"conflict"`` (see there)."""
        wait = self._lock.waiter()
        while True:
            outcome = self._overlay.commit_optimistic(batch)
            if outcome == "contended":
                return self._commit_under_lock(batch)
            if outcome == "locked for ever":
                raise self._lock.no_expiry()
            if outcome != "locked":
                return outcome
            wait()

    def _commit_under_lock(self, batch: Batch) -> str:
        """Commit the optimistic ``batch`` holding the lock for its commit only (its computation is done):
        nobody else commits meanwhile, so a check of what it read against the commits since its start
        (:meth:`Overlay.validate`) stays true until its EXEC. Returns ``"committed"``, or
        ``"conflict"`` when the check finds a commit that wrote something it read (run it again)."""
        overlay = self._overlay
        hold, _ = self._lock.acquire()
        committed = False
        try:
            if not overlay.validate(batch):
                return "conflict"
            batch.token = hold.token
            overlay.commit(batch, self._lock.lost_message)
            committed = True
            return "committed"
        finally:
            hold.end()
            if not committed:
                self._lock.release(hold.token)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the namespace's write lock; everything written inside is committed atomically at exit.

        Re-entrant within a thread (an inner ``with`` joins the outer batch). If the block raises,
        nothing it wrote reaches Redis.

        Raises:
            LockTimeout: Another worker held the lock for longer than ``lock_wait``.
            LockLost: The lock ran out before the commit (the holder stalled for ``lock_timeout``).
            NamespaceLost: The namespace lost its parameters or its group counter.
            RedisUnavailable: The connection dropped; the batch was not recorded, or (if it dropped
                during the commit itself) it may have been: retrying it is safe either way.
        """
        overlay = self._overlay
        batch = overlay.batch
        if batch is not None:
            batch.depth += 1
            try:
                yield
            finally:
                batch.depth -= 1
            return
        with self._locked(None):
            yield

    @contextlib.contextmanager
    def _locked(self, carried: Batch | None) -> Iterator[None]:
        """The outermost :meth:`lock`; with ``carried`` (a refused optimistic attempt), the batch starts
        from what that attempt read and nobody has written since (one more round trip)."""
        overlay = self._overlay
        k = self.keys
        hold, (has_meta, has_counter, has_groups) = self._lock.acquire([k.meta, k.counter, k.hashes[Table.GROUPS]])
        committed = False
        try:
            if overlay.known and not has_meta:
                raise overlay.lost("its parameters (key meta)")
            if has_groups and not has_counter:
                raise overlay.lost("its group-id counter (key next-group-id) while it holds groups")
            batch = Batch(token=hold.token)
            if carried is not None:
                overlay.carry(carried, batch)
            overlay.sync()
            overlay.batch = batch
            yield
            overlay.commit(batch, self._lock.lost_message)
            committed = True
        finally:
            overlay.batch = None
            hold.end()
            if not committed:
                self._lock.release(hold.token)

    def _decoded(self, key: bytes, fields: Sequence[bytes], raws: Sequence[Any], decode: Callable[[Any], T]) -> list[T | None]:
        """``decode`` each value read from ``key`` (its hash ``fields``); None stays None.

        Raises:
            CorruptIndexError: A value is not what rag-dedup writes there; names the key and field.
        """
        try:
            return [None if r is None else decode(r) for r in raws]
        except BAD_VALUE:
            for f, r in zip(fields, raws):
                if r is not None:
                    try:
                        decode(r)
                    except BAD_VALUE as exc:
                        raise self._overlay.corrupt(key + b"[" + f + b"]" if f else key, r, exc) from None
            raise

    # --- metadata ------------------------------------------------------------------------------
    def load_meta(self) -> dict[str, Any] | None:
        k, overlay = self.keys, self._overlay
        raw, layout = overlay.get_many([k.meta, k.format])
        if raw is None:
            batch = overlay.batch
            if batch is not None and batch.dropped:
                return None
            if overlay.known:
                raise overlay.lost("its parameters (key meta)")
            old = [k.prefix + name for name in OLD_LAYOUT_KEYS]
            new, older = overlay.pipeline(lambda p: (p.exists(*k.data), p.exists(*old)))
            if older:
                raise self._other_layout(None)
            if new:
                raise overlay.lost("its parameters (key meta) but still holds data")
            return None
        if layout != FORMAT:
            raise self._other_layout(layout)
        (meta,) = self._decoded(k.meta, [b""], [raw], keys.decode_meta)
        overlay.known = True
        return meta

    def _other_layout(self, layout: bytes | None) -> CorruptIndexError:
        held = "key layout 1 (written by an older rag-dedup; it has no key 'format')" if layout is None else repr(layout)
        return CorruptIndexError(
            f"{self!r} holds an index in {held}; this rag-dedup reads key layout {LAYOUT_VERSION} only. Index the "
            f"texts again into a new namespace, or delete this one with RedisStorage(url, namespace="
            f"{self.namespace!r}).drop() and index again"
        )

    def save_meta(self, meta: Mapping[str, Any]) -> None:
        with self.lock():
            strings = self._overlay.open_batch().strings
            strings[self.keys.meta] = json.dumps(dict(meta), sort_keys=True).encode()
            strings[self.keys.format] = FORMAT
            self._overlay.known = True

    def mend_for_drop(self) -> None:
        """Reset ``ns:commits`` or ``ns:next-group-id`` to 0 when it holds something other than a count
        (the namespace is damaged; its drop follows, and workers that had it open must open it again)."""
        counters = (self.keys.commits, self.keys.counter)
        try:
            with self._client.pipeline(transaction=False) as pipe:
                for key in counters:
                    pipe.type(key)
                pipe.mget(list(counters))  # nil for a key that is not a string
                *types, values = pipe.execute()
            damaged = [key for key, kind, raw in zip(counters, types, values)
                       if kind not in (b"none", b"string", "none", "string")
                       or (raw is not None and not re.fullmatch(rb"[0-9]{1,19}", raw))]
            for key in damaged:  # a count again (0): the drop that follows empties the namespace
                self._client.delete(key)
                self._client.set(key, b"0")
        except connection.CONNECTION_ERRORS as exc:
            raise connection.unavailable(self.url, exc, "while dropping the namespace; nothing was deleted") from exc

    # --- counting and scanning -----------------------------------------------------------------
    def item_count(self) -> int:
        return self._overlay.hash_size(self.keys.hashes[Table.ITEMS])

    def iter_keys(self) -> Iterator[str]:
        key = self.keys.hashes[Table.ITEMS]
        found = list(self._overlay.hscan(key))
        return iter(self._decoded(key, found, found, keys.dec))  # type: ignore[arg-type]

    # --- primitives: values --------------------------------------------------------------------
    def _get(self, table: Table, wanted: Sequence[Any]) -> list[Any]:
        if table is Table.COMPONENTS:
            return self._components_of(wanted)
        key = self.keys.hashes[table]
        field, _, decode = CODECS[table]
        fields = [field(k) for k in wanted]
        return self._decoded(key, fields, self._overlay.hmget(key, fields), decode)

    def add_new_item(
        self, key: str, record: ItemRecord, digest: bytes, shingles: np.ndarray, band_keys: np.ndarray
    ) -> tuple[ItemRecord, set[int]] | None:
        """As :meth:`Storage.add_new_item <rag_dedup.storage.base.Storage.add_new_item>`, with the digest's
        group and the key's record read in one round trip (the batch's cache then answers both reads)."""
        with self.lock():
            wanted = {
                self.keys.hashes[table]: [CODECS[table][0](k)] for table, k in ((Table.DIGESTS, digest), (Table.ITEMS, key))
            }
            unread = {k: fields for k, fields in ((k, self._overlay.unseen(k, fs)) for k, fs in wanted.items()) if fields}
            if unread:
                self._overlay.fetch(hashes=unread)
            return super().add_new_item(key, record, digest, shingles, band_keys)

    def _put(self, table: Table, values: Mapping[Any, Any]) -> None:
        if table is Table.COMPONENTS:
            self._put_components(values)
            return
        pending = self._overlay.open_batch().hash_of(self.keys.hashes[table])
        field, encode, _ = CODECS[table]
        done = self._encoded(table)
        if done is None:
            for k, v in values.items():
                pending[field(k)] = None if v is None else encode(v)
            return
        same = ENCODED_ONCE[table]
        for k, v in values.items():
            if v is None:
                pending[field(k)] = None
                continue
            old = done.get(k)
            if old is None or not same(old[1], v):
                old = done[k] = (field(k), v, encode(v))
            pending[old[0]] = old[2]

    def _encoded(self, table: Table) -> dict[Any, tuple[bytes, Any, bytes]] | None:
        """Inside :meth:`run_batch`, for the tables of ``ENCODED_ONCE``: what the attempts of the batch
        encoded, by key, as (field, value, encoded value); None elsewhere. A batch run again writes
        the same records and groups as its refused attempt but where a conflict changed them: each
        is encoded once."""
        memo = self.attempt_memo
        if memo is None or table not in ENCODED_ONCE:
            return None
        return memo.setdefault(("encoded", table), {})  # type: ignore[no-any-return]

    def _scan(self, table: Table) -> list[tuple[Any, Any]]:
        key = self.keys.hashes[table]
        found = self._overlay.hscan(key)
        fields = list(found)
        names = self._decoded(key, fields, fields, keys.FIELD_DECODERS[table])
        values = self._decoded(key, fields, [found[f] for f in fields], CODECS[table][2])
        return list(zip(names, values))

    # --- primitives: sets ----------------------------------------------------------------------
    def _add(self, table: Table, pairs: Iterable[tuple[Any, str]]) -> None:
        batch, set_key = self._overlay.open_batch(), self.keys.set_key
        for owner, member in pairs:
            batch.set_of(set_key(table, owner))[keys.enc(member)] = True

    def _discard(self, table: Table, pairs: Iterable[tuple[Any, str]]) -> None:
        batch, set_key = self._overlay.open_batch(), self.keys.set_key
        for owner, member in pairs:
            batch.set_of(set_key(table, owner))[keys.enc(member)] = False

    def _clear(self, table: Table, owners: Sequence[Any]) -> None:
        batch = self._overlay.open_batch()
        for owner in owners:
            batch.clear_set(self.keys.set_key(table, owner))

    def _members(self, table: Table, owners: Sequence[Any]) -> list[list[str]]:
        """Sorted (MemoryStorage keeps insertion order; sorted lists are the same in every worker)."""
        set_keys = [self.keys.set_key(table, o) for o in owners]
        out = []
        for key, members in zip(set_keys, self._overlay.smembers_many(set_keys)):
            found = list(members)
            out.append(sorted(self._decoded(key, found, found, keys.dec)))  # type: ignore[type-var]
        return out  # type: ignore[return-value]

    # --- primitives: groups and buckets --------------------------------------------------------
    def create_groups(self, digests: Sequence[bytes], shingles: Sequence[np.ndarray], band_keys: np.ndarray) -> list[int]:
        """As :meth:`Bookkeeping.create_groups`; inside :meth:`run_batch`, a digest that an earlier
        attempt of the batch gave an id keeps it (the others get new ids, one INCRBY for all)."""
        reserved = getattr(self._attempt, "reserved", None)
        batch = self._overlay.batch
        if reserved is None or batch is None or batch.dropped or len(set(digests)) != len(digests):
            return super().create_groups(digests, shingles, band_keys)
        missing = [d for d in digests if d not in reserved]
        if missing:
            reserved.update(zip(missing, self._counter_ids(len(missing))))
        self._attempt.planned = [reserved[d] for d in digests]
        try:
            return super().create_groups(digests, shingles, band_keys)
        finally:
            self._attempt.planned = None

    def _new_group_ids(self, n: int) -> list[int]:
        planned = getattr(self._attempt, "planned", None)
        if planned is not None and len(planned) == n:
            return planned
        return self._counter_ids(n)

    def _counter_ids(self, n: int) -> list[int]:
        # Ids are handed out at once (not at commit), so two workers never share one; a failed batch
        # leaves a gap in the numbering, which nothing depends on.
        self._overlay.open_batch()  # ids are taken inside a batch
        what = "in the middle of a batch; nothing of it was recorded, retry it"
        last = int(self._overlay.call(what, "INCRBY", self.keys.counter, n))
        return list(range(last - n, last))  # drop() keeps the counter: an id is never handed out twice

    def _file(self, gids: Sequence[int], band_keys: np.ndarray) -> None:
        self._overlay.open_batch().file(gids, band_keys)

    def _unfile(self, gid: int, band_keys: np.ndarray) -> None:
        self._overlay.open_batch().unfile(gid, np.asarray(band_keys, dtype=np.uint64).reshape(-1).tolist())

    def query_bands(self, band_keys: np.ndarray) -> list[set[int]]:
        rows, gids = self.query_band_pairs(band_keys)
        out: list[set[int]] = [set() for _ in range(len(band_keys))]
        for row, gid in zip(rows.tolist(), gids.tolist()):
            out[row].add(gid)
        return out

    def query_band_pairs(self, band_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = np.ascontiguousarray(band_keys, dtype=np.uint64)
        if rows.ndim != 2:
            raise ValueError(f"band_keys must be an (n, b) array, got shape {rows.shape}")
        n, b = rows.shape
        batch = self._overlay.batch
        row_parts: list[np.ndarray] = []
        gid_parts: list[np.ndarray] = []
        optimistic = batch is not None and batch.token is None
        if optimistic and n and b:
            batch.read_bands.append(rows.reshape(-1).copy())  # type: ignore[union-attr]
        if n and b and (batch is None or not batch.dropped):
            # The buckets are this process's mirror (outside a batch brought up to date first, one round
            # trip); inside a batch it holds them as of the batch's start (Overlay.begin).
            found_rows, found = self._overlay.query_mirror(rows, sync=batch is None)
            if batch is not None and batch.unfiled:  # take out what this batch took out
                gone = np.fromiter({g for gs in batch.unfiled.values() for g in gs}, dtype=np.int64)
                kept = ~np.isin(found, gone)
                found_rows, found = found_rows[kept], found[kept]
            row_parts.append(found_rows)
            gid_parts.append(found)
        if batch is not None and batch.filed_keys:
            adds = batch.filed_index()
            hits = [(i // b, g) for i, k in enumerate(rows.reshape(-1).tolist()) for g in adds.get(k, ())]
            row_parts.append(np.fromiter((r for r, _ in hits), dtype=np.int64, count=len(hits)))
            gid_parts.append(np.fromiter((g for _, g in hits), dtype=np.int64, count=len(hits)))
        if not row_parts:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        # Group ids are uint32: (row, gid) packs into one int64 that sorts the same way. Sorted, then
        # each kept once (np.unique hashes first, several times slower at these sizes).
        pairs = np.sort((np.concatenate(row_parts).astype(np.int64) << 32) | np.concatenate(gid_parts).astype(np.int64))
        if len(pairs) > 1:
            pairs = pairs[np.concatenate(([True], pairs[1:] != pairs[:-1]))]
        return pairs >> 32, pairs & 0xFFFFFFFF

    # --- components: group id -> component id -> packed members --------------------------------
    def component_members(self, gids: Sequence[int]) -> list[frozenset[int]]:
        out = super().component_members(gids)
        self._read_ahead(sorted({g for comp in out for g in comp}))
        return out

    def component_ids(self, gids: Sequence[int]) -> list[Hashable]:
        cids = self._overlay.hmget(self.keys.hashes[Table.COMPONENTS], [keys.gid_field(g) for g in gids])
        return [gid if cid is None else cid for gid, cid in zip(gids, cids)]  # cid: bytes, never an int

    def _components_of(self, gids: Sequence[int]) -> list[frozenset[int] | None]:
        key = self.keys.hashes[Table.COMPONENTS]
        cids = self._overlay.hmget(key, [keys.gid_field(g) for g in gids])
        comps = self._component_lists(sorted({c for c in cids if c is not None}))
        out: list[frozenset[int] | None] = []
        for gid, cid in zip(gids, cids):
            if cid is None:
                out.append(None)
                continue
            members = comps[cid]
            if members is None:
                raise CorruptIndexError(f"{self!r} is inconsistent: group {gid} names component {cid!r}, which is missing")
            out.append(members)
        return out

    def _put_components(self, values: Mapping[int, frozenset[int] | None]) -> None:
        batch = self._overlay.open_batch()
        key = self.keys.hashes[Table.COMPONENTS]
        fields = [keys.gid_field(g) for g in values]
        olds = self._overlay.hmget(key, fields)
        comp_of = batch.hash_of(key)
        packed: dict[int, bytes] = {}  # id(component) -> its id: a component's members share one object
        fresh: set[bytes] = set()
        for f, old, comp in zip(fields, olds, values.values()):
            if comp is None:
                if old is not None:
                    comp_of[f] = None
                continue
            cid = packed.get(id(comp))
            if cid is None:
                cid, blob = keys.encode_component(comp)
                batch.strings[self.keys.component(cid)] = blob
                packed[id(comp)] = cid
            comp_of[f] = cid
            fresh.add(cid)
        self._collect_components({o for o in olds if o is not None} | fresh)

    def _collect_components(self, cids: set[bytes]) -> None:
        """Delete the member lists of components that no group points at any more."""
        if not cids:
            return
        batch = self._overlay.open_batch()
        members = {c: m for c, m in self._component_lists(sorted(cids)).items() if m is not None}
        every = sorted({g for gs in members.values() for g in gs})
        key = self.keys.hashes[Table.COMPONENTS]
        points = dict(zip(every, self._overlay.hmget(key, [keys.gid_field(g) for g in every])))
        for cid, gs in members.items():
            if not any(points[g] == cid for g in gs):
                batch.strings[self.keys.component(cid)] = None

    def _component_lists(self, cids: Sequence[bytes]) -> dict[bytes, frozenset[int] | None]:
        """The member group ids of each component id (None where its key is missing)."""
        names = [self.keys.component(c) for c in cids]
        out: dict[bytes, frozenset[int] | None] = {}
        for cid, key, raw in zip(cids, names, self._overlay.get_many(names)):
            out[cid] = self._decoded(key, [b""], [raw], keys.decode_component)[0]
        return out

    def _read_ahead(self, gids: Sequence[int]) -> None:
        """Inside a batch, fetch what the index reads next about these groups, a few round trips in all.

        After asking for components, the index reclusters them: it reads each group's keys and
        shingles, the keys' records and cluster entries, and their representatives' member lists,
        one component at a time. Fetching all of it here turns a round trip per component into three
        for the batch; the reads that follow are served from the batch's cache.
        """
        overlay = self._overlay
        batch = overlay.batch
        if batch is None or batch.dropped or not gids:
            return
        h = self.keys.hashes
        groups = h[Table.GROUPS]
        member_keys = [self.keys.set_key(Table.GROUP_ITEMS, g) for g in gids]
        fields = overlay.unseen(groups, [keys.gid_field(g) for g in gids])
        overlay.fetch(hashes={groups: fields} if fields else {}, sets=overlay.unread_sets(member_keys))
        item_keys = sorted({k for ks in overlay.smembers_many(member_keys) for k in ks})
        wanted = {t: overlay.unseen(t, item_keys) for t in (h[Table.ITEMS], h[Table.CLUSTER_OF])}
        overlay.fetch(hashes={t: fs for t, fs in wanted.items() if fs})
        cluster_of = h[Table.CLUSTER_OF]
        entries = self._decoded(cluster_of, item_keys, overlay.hmget(cluster_of, item_keys), keys.decode_cluster_entry)
        reps = overlay.unseen(h[Table.CLUSTERS], sorted({k if e is None else keys.enc(e[0]) for k, e in zip(item_keys, entries)}))
        if reps:
            overlay.fetch(hashes={h[Table.CLUSTERS]: reps})

    # --- dropping ------------------------------------------------------------------------------
    def drop(self) -> None:
        """Delete the namespace (all its keys but the lock and the two counters, by SCAN and UNLINK in
        batches) at commit. Runs under the lock (inside :meth:`run_batch`, a RuntimeError).

        The counters are kept because their numbers must only grow (a worker's mirror and the group ids
        it hands out rely on it), except a counter that is not a count, which is reset to 0: the damage
        whose error says to drop the namespace, and which would make every later batch (and this drop's
        lock) fail again.
        """
        batch = self._overlay.batch
        if batch is not None and batch.token is None:
            raise RuntimeError("drop() runs under the lock, not inside an optimistic batch (run_batch)")
        if batch is None:
            self.mend_for_drop()
        with self.lock():
            self._overlay.open_batch().drop_all()
            self._overlay.known = False  # a deliberate drop: an empty namespace is new again
