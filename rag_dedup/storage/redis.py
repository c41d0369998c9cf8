"""Redis storage: one DedupIndex shared by many processes on many machines.

``DedupIndex(storage="redis://host:6379/0", namespace="corpus-a")`` keeps its whole state in Redis,
under keys that start with ``"<namespace>:"``, so that every worker of an ingestion job sees the same
groups, buckets and clusters, and several indexes can share one server. Nothing is pickled: what is
read back from a shared server crosses a trust boundary, so every value is JSON, decimal ids or raw
little-endian integers.

Key layout (``ns`` is the namespace)::

    ns:meta           string  JSON of the index parameters
    ns:lock           string  the write lock: a random token, with an expiry (see below)
    ns:next_gid       string  group id counter (INCRBY hands out ids; a failed batch leaves a gap)
    ns:items          hash    item key -> JSON [gid, length, source, authority, first_seen]
    ns:src:<source>   set     item keys added with that source
    ns:digests        hash    canonical-text digest -> group id
    ns:groups         hash    group id -> 1-byte digest length + digest + shingles as '<u4'
    ns:gm:<gid>       set     item keys of a group
    ns:b:<16 hex>     set     LSH bucket: ids of the groups filed under that band key
    ns:comp           hash    group id -> component id (only components of two or more groups)
    ns:cm:<cid>       string  the component's sorted group ids as '<i8' (cid: a hash of them)
    ns:cof            hash    item key -> JSON [representative, similarity] (clusters of 2+ items)
    ns:clusters       hash    representative -> JSON [[member, similarity], ...]

**Batches are atomic.** The index enters :meth:`RedisStorage.lock` around every batch it writes. The
lock is a Redis key set with ``SET NX PX`` to a random token, renewed by a background thread while it
is held, and released by a compare-and-delete. Inside the lock, writes go to a local overlay that
every read consults, so the batch sees its own pending writes; at the end they are committed in one
``MULTI``/``EXEC`` guarded by ``WATCH`` on the lock key, which also deletes the lock. If the lock was
lost meanwhile (it expired, or the connection dropped), ``EXEC`` does nothing and the batch raises.
If the batch raises for any reason, the overlay is thrown away: nothing of it reaches Redis, and
retrying it starts clean. Reads outside the lock go straight to Redis and see committed batches only.

**Round trips.** Each storage call answers with one pipelined round trip, whatever the batch size;
bucket writes and lookups run as server-side scripts over hex blobs of band keys, not as a command
per bucket. Inside a batch, what was read is kept (nobody else can write while the lock is held),
and asking for components reads ahead what the index reads next to recluster them, so that a batch
costs about twenty round trips in all (measured: 16 for 500 chunks, ~23 for 1024), not one per band,
per chunk or per cluster. :attr:`RedisStorage.round_trips` counts them.

**Nothing lost silently.** Connecting refuses a server whose ``maxmemory-policy`` is not
``noeviction`` (:class:`~rag_dedup.errors.RedisConfigurationError`; ``allow_eviction=True`` accepts it).
Once this object has seen the namespace hold an index, taking the lock also asks (in the same round
trip) whether ``ns:meta`` still exists, and whether ``ns:next_gid`` does while ``ns:groups`` does; every
read outside a batch asks for ``ns:meta`` in its pipeline. A namespace that lost them raises
:class:`~rag_dedup.errors.NamespaceLost` before anything is written. Every value read back is decoded
strictly (decimal ids only, JSON of the expected shape and types, packed arrays of whole, sorted
entries); anything else raises :class:`~rag_dedup.errors.CorruptIndexError` naming the key and field.

Lists come back sorted (the keys of a group or of a source), where MemoryStorage keeps insertion
order; no caller depends on that order, and sorted lists are the same in every worker.

Redis Cluster is not supported (a batch's ``MULTI`` spans many keys); use one server or a replicated
primary.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import math
import random
import re
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from rag_dedup.errors import (
    CorruptIndexError,
    LockLost,
    LockTimeout,
    NamespaceLost,
    RedisConfigurationError,
    RedisUnavailable,
)
from rag_dedup.storage.base import EMPTY_GROUP, ClusterEntry, ItemRecord, Storage

try:  # optional dependency: pip install rag-dedup[redis]
    import redis as _redis
    from redis.exceptions import ConnectionError as _RedisConnectionError
    from redis.exceptions import ResponseError as _ResponseError
    from redis.exceptions import TimeoutError as _RedisTimeoutError
    from redis.exceptions import WatchError as _WatchError
except ImportError:  # pragma: no cover - exercised only without the extra
    _redis = None
    _RedisConnectionError = ConnectionError  # type: ignore[misc,assignment]
    _ResponseError = RuntimeError  # type: ignore[misc,assignment]
    _RedisTimeoutError = TimeoutError  # type: ignore[misc,assignment]
    _WatchError = RuntimeError  # type: ignore[misc,assignment]

__all__ = ["RedisStorage"]

logger = logging.getLogger(__name__)

# Compare-and-delete and compare-and-extend: only the holder of the token may release or renew.
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0
"""
# Bulk set writes: KEYS[i] gets member ARGV[i] (a key may repeat).
_SADD_PAIRS = "for i = 1, #KEYS do redis.call('sadd', KEYS[i], ARGV[i]) end return #KEYS"
_SREM_PAIRS = "for i = 1, #KEYS do redis.call('srem', KEYS[i], ARGV[i]) end return #KEYS"
# LSH buckets travel as hex blobs, not as one argument per bucket (which costs the client more than the
# server's work): ARGV[1] is the bucket key prefix, ARGV[2] concatenated 16-hex-digit band keys, and
# the script names bucket i as prefix .. hex_i. The bucket keys are therefore not declared in KEYS,
# which a standalone server allows (Redis Cluster would not; it is not supported, see above).
#   _BUCKETS_ADD / _BUCKETS_REM: ARGV[2] holds (band key, group id) pairs, 32 hex digits each.
#   _BUCKET_UNIONS: ARGV[2] holds rows of ARGV[3] band keys; returns the union of each row's buckets.
_BUCKETS_ADD = """
local pfx, blob, last, member = ARGV[1], ARGV[2], nil, nil
for i = 1, #blob, 32 do
  local g = string.sub(blob, i + 16, i + 31)
  if g ~= last then last, member = g, string.format('%d', tonumber(g, 16)) end
  redis.call('sadd', pfx .. string.sub(blob, i, i + 15), member)
end
return 1
"""
_BUCKETS_REM = _BUCKETS_ADD.replace("'sadd'", "'srem'")
_BUCKET_UNIONS = """
local pfx, blob, b = ARGV[1], ARGV[2], tonumber(ARGV[3])
local out, keys = {}, {}
for i = 1, #blob, 16 * b do
  for j = 0, b - 1 do keys[j + 1] = pfx .. string.sub(blob, i + 16 * j, i + 16 * j + 15) end
  out[#out + 1] = redis.call('sunion', unpack(keys, 1, b))
end
return out
"""
# Fields or commands per request part: keeps each command's argument list and reply moderate.
_CHUNK = 4096
_SCAN_COUNT = 1000

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def _writes(method: F) -> F:
    """Run a write method inside the lock (its own one-call batch) when no batch is open."""

    @functools.wraps(method)
    def wrapper(self: RedisStorage, *args: Any, **kwargs: Any) -> Any:
        if self._txn() is not None:
            return method(self, *args, **kwargs)
        with self.lock():
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


@dataclass
class _Batch:
    """The pending writes of one batch (one holder of the lock), consulted by every read."""

    token: bytes
    depth: int = 1
    dropped: bool = False  # drop() was called: Redis holds nothing of the namespace for this batch
    strings: dict[bytes, bytes | None] = field(default_factory=dict)  # None: deleted
    hashes: dict[bytes, dict[bytes, bytes | None]] = field(default_factory=dict)  # None: field deleted
    sets: dict[bytes, dict[bytes, bool]] = field(default_factory=dict)  # member -> present
    cleared: set[bytes] = field(default_factory=set)  # sets deleted (or created empty) in this batch
    # Buckets: groups filed (flat band-key and group-id arrays, appended per create_groups call) and
    # taken out (band key -> group ids). At commit the removals go first, then the additions.
    filed_keys: list[np.ndarray] = field(default_factory=list)
    filed_gids: list[np.ndarray] = field(default_factory=list)
    unfiled: dict[int, set[int]] = field(default_factory=dict)
    _filed_index: dict[int, set[int]] | None = None
    # What this batch read from Redis (which cannot change while it holds the lock): read once.
    seen_strings: dict[bytes, bytes | None] = field(default_factory=dict)
    seen_hashes: dict[bytes, dict[bytes, bytes | None]] = field(default_factory=dict)
    seen_sets: dict[bytes, set[bytes]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    renewer: threading.Thread | None = None

    def hash_of(self, key: bytes) -> dict[bytes, bytes | None]:
        return self.hashes.setdefault(key, {})

    def set_of(self, key: bytes) -> dict[bytes, bool]:
        return self.sets.setdefault(key, {})

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


class RedisStorage(Storage):
    """DedupIndex storage in Redis, shared by every process that opens the same URL and namespace.

    Args:
        url: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` for TLS, or ``unix://``.
        namespace: Prefix of every key (no ``:``); two indexes on one server need two namespaces.
        lock_timeout: Seconds the write lock lives without renewal. A holder renews it every third of
            this while it works, so it only runs out when the holder died or stalled; other workers
            then take over after at most this long.
        lock_wait: Seconds to wait for the lock before raising :class:`LockTimeout`.
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
    read, instead of answering from what is left.

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
        if _redis is None:
            raise ImportError(
                "RedisStorage needs the redis package, which is not installed: pip install rag-dedup[redis]"
            )
        if not isinstance(url, str):
            raise TypeError(f"url must be a str like 'redis://localhost:6379/0', got {type(url).__name__}")
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"url {_redact(url)!r} must start with redis://, rediss:// (TLS) or unix://")
        _check_url(url)
        if not isinstance(allow_eviction, bool):
            raise TypeError(f"allow_eviction must be True or False, got {type(allow_eviction).__name__}")
        if not isinstance(namespace, str):
            raise TypeError(f"namespace must be a str, got {type(namespace).__name__}")
        if not namespace or ":" in namespace:
            raise ValueError(
                f"namespace ({namespace!r}) must be a non-empty string without ':' (':' separates the "
                "namespace from the key names); use '-' or '/' instead, e.g. 'team-corpus'"
            )
        for name, value in (("lock_timeout", lock_timeout), ("lock_wait", lock_wait), ("connect_timeout", connect_timeout)):
            _check_seconds(name, value)
        if socket_timeout is not None:
            _check_seconds("socket_timeout", socket_timeout)
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
        # True once this object has seen the namespace hold an index: from then on, a namespace
        # without its parameters has lost them (NamespaceLost), it is not new.
        self._known = False
        #: Network round trips made by this object's callers (reads, the lock, commits); the lock's
        #: renewal thread is counted separately in :attr:`renewals`.
        self.round_trips = 0
        self.renewals = 0
        #: Seconds this object's callers spent waiting for another holder to release the write lock.
        self.lock_wait_seconds = 0.0
        self._prefix = namespace.encode() + b":"
        self._lock_key = self._prefix + b"lock"
        self._local = threading.local()
        self._stale_tokens: list[bytes] = []  # locks this process may still hold after a lost connection
        self._client = _redis.Redis.from_url(
            url,
            socket_connect_timeout=self.connect_timeout,
            socket_timeout=self.socket_timeout,
            **self.options,
        )
        self._release = self._client.register_script(_RELEASE)
        self._renew = self._client.register_script(_RENEW)
        try:
            self._client.ping()
            self.round_trips += 1
        except _redis.exceptions.AuthenticationError as exc:
            self._client.close()
            raise RedisUnavailable(
                f"Redis at {_redact(url)} refused the credentials of the URL ({exc}); put the password in the "
                "URL as redis://:PASSWORD@host:port/db (or redis://USER:PASSWORD@... for an ACL user)"
            ) from exc
        except (_RedisConnectionError, _RedisTimeoutError, OSError) as exc:
            self._client.close()
            if "certificate" in str(exc).lower() or "ssl" in str(exc).lower():
                hint = "for rediss://, the server's certificate must verify: add ?ssl_ca_certs=/path/to/ca.pem to the URL"
            else:
                hint = "is redis-server running there? (apt-get install redis-server; redis-server --port 6379)"
            raise RedisUnavailable(f"cannot reach Redis at {_redact(url)} ({exc}); {hint}") from exc
        if not allow_eviction:
            self._check_eviction_policy()

    def _check_eviction_policy(self) -> None:
        """Refuse a server that may evict keys (``maxmemory-policy`` other than ``noeviction``)."""
        try:
            self.round_trips += 1
            section = self._client.info("memory")
        except (_RedisConnectionError, _RedisTimeoutError) as exc:
            self._client.close()
            raise self._unavailable(exc, "while reading its configuration") from exc
        policy = section.get("maxmemory_policy") if isinstance(section, dict) else None
        if policy != "noeviction":
            self._client.close()
            raise RedisConfigurationError(
                f"Redis at {_redact(self.url)} has maxmemory-policy {policy!r}: when memory runs short it evicts "
                "keys, and an index with evicted keys answers wrongly without an error. Run the server with "
                "maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, or in redis.conf), or "
                "pass allow_eviction=True to accept the risk"
            )

    # --- copies into other processes --------------------------------------------------------
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
        return f"RedisStorage({_redact(self.url)!r}, namespace={self.namespace!r})"

    def close(self) -> None:
        """Close this object's connections (a later call reconnects)."""
        self._client.close()

    # --- the lock and the batch overlay -----------------------------------------------------
    def _txn(self) -> _Batch | None:
        return getattr(self._local, "batch", None)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the namespace's write lock; everything written inside is committed atomically at exit.

        Re-entrant within a thread (an inner ``with`` joins the outer batch). If the block raises,
        nothing it wrote reaches Redis.

        Raises:
            LockTimeout: Another worker held the lock for longer than ``lock_wait``.
            LockLost: The lock ran out before the commit (the holder stalled for ``lock_timeout``).
            RedisUnavailable: The connection dropped; the batch was not recorded, or (if it dropped
                during the commit itself) it may have been: retrying it is safe either way.
        """
        batch = self._txn()
        if batch is not None:
            batch.depth += 1
            try:
                yield
            finally:
                batch.depth -= 1
            return
        batch = _Batch(token=self._acquire())
        self._local.batch = batch
        batch.renewer = threading.Thread(target=self._keep_alive, args=(batch,), name="rag-dedup-lock", daemon=True)
        batch.renewer.start()
        committed = False
        try:
            yield
            self._commit(batch)
            committed = True
        finally:
            self._local.batch = None
            batch.stop.set()
            batch.renewer.join(timeout=1.0)  # it never renews a lock that is not ours, so no need to wait long
            if not committed:
                self._release_quietly(batch.token)

    def _acquire(self) -> bytes:
        self._release_stale()
        token = secrets.token_hex(16).encode()
        ttl = int(self.lock_timeout * 1000)
        started = time.monotonic()
        deadline = started + self.lock_wait
        delay = 0.0005
        meta, counter, groups = self._prefix + b"meta", self._prefix + b"next_gid", self._prefix + b"groups"
        while True:
            try:
                self.round_trips += 1
                # One round trip: the SET, and (for a namespace known to hold an index) whether it still
                # has its parameters, and its group counter if it has groups.
                with self._client.pipeline(transaction=False) as pipe:
                    pipe.set(self._lock_key, token, nx=True, px=ttl)
                    pipe.exists(meta)
                    pipe.exists(counter)
                    pipe.exists(groups)
                    taken, has_meta, has_counter, has_groups = pipe.execute()
                if taken:
                    self.lock_wait_seconds += time.monotonic() - started
                    if self._known and not has_meta:
                        self._release_quietly(token)
                        raise self._lost("its parameters (key meta)")
                    if has_groups and not has_counter:
                        self._release_quietly(token)
                        raise self._lost("its group-id counter (key next_gid) while it holds groups")
                    return token
            except (_RedisConnectionError, _RedisTimeoutError) as exc:
                self._stale_tokens.append(token)  # the SET may have succeeded without our hearing it
                raise self._unavailable(exc, "while taking the write lock; nothing was recorded") from exc
            if time.monotonic() >= deadline:
                raise LockTimeout(
                    f"could not take the write lock of namespace {self.namespace!r} at {_redact(self.url)} "
                    f"within lock_wait={self.lock_wait:g} s: another worker holds it. If a worker crashed "
                    f"while holding it, it expires within lock_timeout={self.lock_timeout:g} s; otherwise "
                    "raise lock_wait or use smaller batches"
                )
            # Poll with a short, jittered backoff: a batch holds the lock for tens of milliseconds,
            # and a waiter that sleeps much longer than that leaves the store idle.
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.004)

    def _keep_alive(self, batch: _Batch) -> None:
        """Renew the lock every third of its lifetime until the batch ends (runs in a thread)."""
        ttl = int(self.lock_timeout * 1000)
        while not batch.stop.wait(self.lock_timeout / 3):
            try:
                self.renewals += 1
                if not self._renew(keys=[self._lock_key], args=[batch.token, ttl]):
                    return  # lost: the commit's WATCH will refuse the batch
            except Exception as exc:  # noqa: BLE001 - the commit reports connection trouble; keep trying
                logger.debug("renewing the write lock of %r failed: %s", self.namespace, exc)

    def _release_quietly(self, token: bytes) -> None:
        try:
            self.round_trips += 1
            self._release(keys=[self._lock_key], args=[token])
        except Exception:  # noqa: BLE001 - the original error matters; the lock will expire
            self._stale_tokens.append(token)

    def _release_stale(self) -> None:
        """Release locks that a batch of this process could not release (its connection had dropped)."""
        while self._stale_tokens:
            token = self._stale_tokens[-1]
            try:
                self.round_trips += 1
                self._release(keys=[self._lock_key], args=[token])
            except (_RedisConnectionError, _RedisTimeoutError):
                return
            self._stale_tokens.pop()

    def _commit(self, batch: _Batch) -> None:
        """Write the overlay in one MULTI/EXEC, only if the lock is still ours; the EXEC releases it."""
        sent = False
        try:
            with self._client.pipeline(transaction=True) as pipe:
                self.round_trips += 2
                pipe.watch(self._lock_key)
                if pipe.get(self._lock_key) != batch.token:
                    raise LockLost(self._lost_message())
                if batch.dropped:
                    self._unlink_namespace()
                pipe.multi()
                for key, fields in batch.hashes.items():
                    gone = [f for f, v in fields.items() if v is None]
                    kept = {f: v for f, v in fields.items() if v is not None}
                    for part in _chunks(gone):
                        pipe.hdel(key, *part)
                    for part in _chunks(list(kept.items())):
                        pipe.hset(key, mapping=dict(part))
                for part in _chunks(list(batch.cleared)):
                    pipe.delete(*part)
                # Set writes are (key, member) pairs, most of them one member for each of many keys (a
                # group id into each of its band buckets): one script call per few thousand pairs
                # instead of one command each.
                gone = [(k, m) for k, ms in batch.sets.items() if k not in batch.cleared for m, p in ms.items() if not p]
                added = [(k, m) for k, ms in batch.sets.items() for m, p in ms.items() if p]
                for script, pairs in ((_SREM_PAIRS, gone), (_SADD_PAIRS, added)):
                    for part in _chunks(pairs):
                        pipe.eval(script, len(part), *(k for k, _ in part), *(m for _, m in part))
                bucket_prefix = self._prefix + b"b:"
                unfiled = [(k, g) for k, gs in batch.unfiled.items() for g in gs]
                removals = (
                    np.array([k for k, _ in unfiled], dtype=np.uint64),
                    np.array([g for _, g in unfiled], dtype=np.uint64),
                )
                for script, (keys, gids) in ((_BUCKETS_REM, removals), (_BUCKETS_ADD, batch.filed_pairs())):
                    for blob in _pair_blobs(keys, gids):
                        pipe.eval(script, 0, bucket_prefix, blob)
                for key, value in batch.strings.items():
                    if value is None:
                        pipe.delete(key)
                    else:
                        pipe.set(key, value)
                pipe.delete(self._lock_key)
                self.round_trips += 1
                sent = True
                pipe.execute()
        except _WatchError as exc:
            if isinstance(exc.__context__, (_RedisConnectionError, _RedisTimeoutError)):
                raise self._unavailable(exc, "while committing a batch; nothing of it was recorded, retry it") from exc
            raise LockLost(self._lost_message()) from exc
        except (_RedisConnectionError, _RedisTimeoutError) as exc:
            if not sent:
                raise self._unavailable(exc, "before committing a batch; nothing of it was recorded, retry it") from exc
            raise self._unavailable(
                exc, "while committing a batch; it may or may not have been recorded: retry it (a retry is idempotent)"
            ) from exc

    def _lost_message(self) -> str:
        return (
            f"the write lock of namespace {self.namespace!r} at {_redact(self.url)} ran out before the batch "
            f"committed (held longer than lock_timeout={self.lock_timeout:g} s without renewal); the batch was "
            "not recorded: retry it"
        )

    def _unavailable(self, exc: BaseException, what: str) -> RedisUnavailable:
        return RedisUnavailable(f"lost the connection to Redis at {_redact(self.url)} {what} ({exc})")

    def _lost(self, what: str) -> NamespaceLost:
        return NamespaceLost(
            f"{self!r} lost {what}: the server restarted without persistence, was flushed, or evicted keys. "
            "Nothing of this batch was written; the index in this namespace is incomplete: drop() it and index "
            "again, and run Redis with appendonly yes and maxmemory-policy noeviction"
        )

    def _corrupt(self, key: bytes, raw: object, exc: BaseException) -> CorruptIndexError:
        shown = raw[:80] if isinstance(raw, bytes) else raw
        return CorruptIndexError(
            f"{self!r}: {key.decode('utf-8', 'backslashreplace')} holds {shown!r}, which is not what rag-dedup "
            f"stores there ({str(exc)[:120]}); the namespace is damaged: drop() it and index again"
        )

    def _decoded(self, key: bytes, fields: Sequence[bytes], raws: Sequence[Any], decode: Callable[[Any], T]) -> list[T | None]:
        """``decode`` each value read from ``key`` (its hash ``fields``); None stays None.

        Raises:
            CorruptIndexError: A value is not what rag-dedup writes there; names the key and field.
        """
        try:
            return [None if r is None else decode(r) for r in raws]
        except _BAD_VALUE:
            for field, r in zip(fields, raws):
                if r is not None:
                    try:
                        decode(r)
                    except _BAD_VALUE as exc:
                        raise self._corrupt(key + b"[" + field + b"]" if field else key, r, exc) from None
            raise

    # --- reading with the overlay -----------------------------------------------------------
    def _pipeline(self, build: Callable[[Any], None]) -> list[Any]:
        """Run the commands that ``build`` queues in one round trip; translate connection errors."""
        pipe = self._client.pipeline(transaction=False)
        build(pipe)
        if len(pipe) == 0:
            return []
        # A read outside a batch also asks whether the namespace still has its parameters (a batch
        # checked that when it took the lock), so that a lost index is not read as an empty one.
        guard = self._known and self._txn() is None
        if guard:
            pipe.exists(self._prefix + b"meta")
        commands = [args for args, _ in pipe.command_stack]
        try:
            self.round_trips += 1
            replies = pipe.execute(raise_on_error=False)
        except (_RedisConnectionError, _RedisTimeoutError) as exc:
            what = "in the middle of a batch; nothing of it was recorded, retry it" if self._txn() else "while reading"
            raise self._unavailable(exc, what) from exc
        finally:
            pipe.reset()
        for args, reply in zip(commands, replies):
            if isinstance(reply, _ResponseError):
                raise self._wrong_type(args, reply)
        if guard and not replies.pop():
            raise self._lost("its parameters (key meta)")
        return replies

    def _wrong_type(self, args: Sequence[Any], exc: BaseException) -> CorruptIndexError:
        """A command failed on a stored key (a key of another type, a non-integer counter)."""
        key = next((a for a in args[1:] if isinstance(a, bytes) and a.startswith(self._prefix)), None)
        where = key.decode("utf-8", "backslashreplace") if key is not None else f"a {args[0]} command"
        return CorruptIndexError(
            f"{self!r}: {where} cannot be read as rag-dedup stores it ({exc}); the namespace is damaged: drop() it "
            "and index again"
        )

    def _fetch(
        self,
        hashes: Mapping[bytes, Sequence[bytes]] = {},
        sets: Sequence[bytes] = (),
        strings: Sequence[bytes] = (),
    ) -> tuple[dict[tuple[bytes, bytes], bytes | None], dict[bytes, set[bytes]], dict[bytes, bytes | None]]:
        """Read hash fields, whole sets and strings from Redis in one round trip.

        Inside a batch the answers are also kept (the batch holds the lock, so Redis cannot change
        under it): a later read of the same thing is served without a round trip.
        """
        parts = [(key, part) for key, fields in hashes.items() for part in _chunks(list(fields))]
        sets, strings = list(sets), list(strings)

        def build(p: Any) -> None:
            for key, part in parts:
                p.hmget(key, part)
            for key in sets:
                p.smembers(key)
            for key in strings:
                p.get(key)

        replies = iter(self._pipeline(build))
        fields_out = {(key, f): v for key, part in parts for f, v in zip(part, next(replies))}
        sets_out = {key: next(replies) for key in sets}
        strings_out = {key: next(replies) for key in strings}
        batch = self._txn()
        if batch is not None:
            for (key, f), v in fields_out.items():
                batch.seen_hashes.setdefault(key, {})[f] = v
            for key, members in sets_out.items():
                batch.seen_sets[key] = set(members)
            batch.seen_strings.update(strings_out)
        return fields_out, sets_out, strings_out

    def _hmget(self, key: bytes, fields: Sequence[bytes]) -> list[bytes | None]:
        """``HMGET`` that sees the open batch's pending writes."""
        batch = self._txn()
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
            found, _, _ = self._fetch(hashes={key: list(dict.fromkeys(fields[i] for i in todo))})
            for i in todo:
                out[i] = found[(key, fields[i])]
        return out

    def _get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        batch = self._txn()
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
            _, _, found = self._fetch(strings=list(dict.fromkeys(keys[i] for i in todo)))
            for i in todo:
                out[i] = found[keys[i]]
        return out

    def _smembers_many(self, keys: Sequence[bytes]) -> list[set[bytes]]:
        """``SMEMBERS`` of each key (one round trip), with the open batch's pending writes applied."""
        batch = self._txn()
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
            _, found, _ = self._fetch(sets=list(dict.fromkeys(keys[i] for i in todo)))
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

    def _read_ahead(self, gids: Collection[int]) -> None:
        """Inside a batch, fetch what the index reads next about these groups, a few round trips in all.

        After asking for components, the index reclusters them: it reads each group's keys and
        shingles, the keys' records and cluster entries, and their representatives' member lists,
        one component at a time. Fetching all of it here turns a round trip per component into three
        for the batch; the reads that follow are served from the batch's cache.
        """
        batch = self._txn()
        if batch is None or batch.dropped or not gids:
            return
        groups, items, cof = self._prefix + b"groups", self._prefix + b"items", self._prefix + b"cof"
        pending, seen = batch.hashes.get(groups, {}), batch.seen_hashes.get(groups, {})
        fields = [f for f in (b"%d" % g for g in gids) if f not in pending and f not in seen]
        member_sets = [
            k for k in map(self._members_key, gids) if k not in batch.cleared and k not in batch.seen_sets
        ]
        self._fetch(hashes={groups: fields} if fields else {}, sets=member_sets)
        keys = sorted({k for ks in self._smembers_many([self._members_key(g) for g in gids]) for k in ks})

        def unseen(key: bytes, fields: Sequence[bytes]) -> list[bytes]:
            pending, seen = batch.hashes.get(key, {}), batch.seen_hashes.get(key, {})
            return [f for f in fields if f not in pending and f not in seen]

        wanted = {h: unseen(h, keys) for h in (items, cof)}
        self._fetch(hashes={h: fs for h, fs in wanted.items() if fs})
        entries = self._decoded(cof, keys, self._hmget(cof, keys), _decode_cluster_entry)
        reps = sorted({_enc(e[0]) for e in entries if e is not None})
        reps = unseen(self._prefix + b"clusters", reps)
        if reps:
            self._fetch(hashes={self._prefix + b"clusters": reps})

    def _hscan(self, key: bytes) -> dict[bytes, bytes]:
        """A whole hash (by HSCAN, so a large one does not block the server), with pending writes."""
        batch = self._txn()
        found: dict[bytes, bytes] = {}
        if batch is None or not batch.dropped:
            cursor = 0
            try:
                while True:
                    self.round_trips += 1
                    cursor, part = self._client.hscan(key, cursor, count=_SCAN_COUNT)
                    found.update(part)
                    if cursor == 0:
                        break
            except (_RedisConnectionError, _RedisTimeoutError) as exc:
                raise self._unavailable(exc, "while reading") from exc
            except _ResponseError as exc:
                raise self._wrong_type(("HSCAN", key), exc) from None
        if batch is not None:
            for f, v in batch.hashes.get(key, {}).items():
                if v is None:
                    found.pop(f, None)
                else:
                    found[f] = v
        return found

    # --- writing into the overlay (only inside a batch) -------------------------------------
    def _batch(self) -> _Batch:
        batch = self._txn()
        if batch is None:  # pragma: no cover - every write method is wrapped by _writes
            raise RuntimeError("RedisStorage writes happen inside lock()")
        return batch

    # --- metadata ---------------------------------------------------------------------------
    def load_meta(self) -> dict[str, Any] | None:
        key = self._prefix + b"meta"
        (raw,) = self._get_many([key])
        if raw is None:
            batch = self._txn()
            if batch is not None and batch.dropped:
                return None
            if self._known:
                raise self._lost("its parameters (key meta)")
            data = [self._prefix + name for name in (b"items", b"groups", b"digests", b"next_gid", b"clusters")]
            (count,) = self._pipeline(lambda p: p.exists(*data))
            if count:
                raise self._lost("its parameters (key meta) but still holds data")
            return None
        (meta,) = self._decoded(key, [b""], [raw], _decode_meta)
        self._known = True
        return meta

    @_writes
    def save_meta(self, meta: Mapping[str, Any]) -> None:
        self._batch().strings[self._prefix + b"meta"] = json.dumps(dict(meta), sort_keys=True).encode()
        self._known = True

    # --- items ------------------------------------------------------------------------------
    def get_items(self, keys: Sequence[str]) -> list[ItemRecord | None]:
        key, fields = self._prefix + b"items", [_enc(k) for k in keys]
        return self._decoded(key, fields, self._hmget(key, fields), _decode_item)

    @_writes
    def put_items(self, items: Mapping[str, ItemRecord]) -> None:
        batch = self._batch()
        records = batch.hash_of(self._prefix + b"items")
        for key, rec in items.items():
            k = _enc(key)
            records[k] = _encode_item(rec)
            if rec.source is not None:
                batch.set_of(self._source_key(rec.source))[k] = True
            if rec.gid != EMPTY_GROUP:
                batch.set_of(self._members_key(rec.gid))[k] = True

    @_writes
    def delete_items(self, items: Mapping[str, ItemRecord]) -> None:
        batch = self._batch()
        records = batch.hash_of(self._prefix + b"items")
        for key, rec in items.items():
            k = _enc(key)
            records[k] = None
            if rec.source is not None:
                batch.set_of(self._source_key(rec.source))[k] = False
            if rec.gid != EMPTY_GROUP:
                batch.set_of(self._members_key(rec.gid))[k] = False

    def item_count(self) -> int:
        key = self._prefix + b"items"
        batch = self._txn()
        pending = {} if batch is None else batch.hashes.get(key, {})
        if batch is not None and batch.dropped:
            return sum(v is not None for v in pending.values())
        fields = list(pending)
        replies = self._pipeline(lambda p: (p.hlen(key), *(p.hexists(key, f) for f in fields)))
        count = int(replies[0])
        for f, stored in zip(fields, replies[1:]):
            count += (pending[f] is not None) - bool(stored)
        return count

    def iter_keys(self) -> Iterator[str]:
        key = self._prefix + b"items"
        found = list(self._hscan(key))
        return iter(self._decoded(key, found, found, _dec))  # type: ignore[arg-type]

    def keys_of_source(self, source: str) -> list[str]:
        key = self._source_key(source)
        (members,) = self._smembers_many([key])
        found = list(members)
        return sorted(self._decoded(key, found, found, _dec))  # type: ignore[type-var]

    # --- groups and bands -------------------------------------------------------------------
    def find_groups(self, digests: Sequence[bytes]) -> list[int | None]:
        key, fields = self._prefix + b"digests", list(digests)
        return self._decoded(key, fields, self._hmget(key, fields), _decode_id)

    @_writes
    def create_groups(self, digests: Sequence[bytes], shingles: Sequence[np.ndarray], band_keys: np.ndarray) -> list[int]:
        n = len(digests)
        if n != len(shingles) or n != len(band_keys):
            raise ValueError(f"create_groups: {n} digests, {len(shingles)} shingle arrays, {len(band_keys)} band-key rows")
        if n == 0:
            return []
        batch = self._batch()
        # Ids are handed out at once (not at commit), so two workers never share one; a failed batch
        # leaves a gap in the numbering, which nothing depends on.
        try:
            self.round_trips += 1
            last = int(self._client.incrby(self._prefix + b"next_gid", n))
        except (_RedisConnectionError, _RedisTimeoutError) as exc:
            raise self._unavailable(exc, "in the middle of a batch; nothing of it was recorded, retry it") from exc
        except _ResponseError as exc:
            raise self._wrong_type(("INCRBY", self._prefix + b"next_gid"), exc) from None
        gids = list(range(last - n, last))
        if batch.dropped:  # the commit deletes the namespace's counter first: write it back after that
            batch.strings[self._prefix + b"next_gid"] = b"%d" % last
        digest_map = batch.hash_of(self._prefix + b"digests")
        groups = batch.hash_of(self._prefix + b"groups")
        for gid, digest, sh in zip(gids, digests, shingles):
            if len(digest) > 255:
                raise ValueError(f"a group digest is {len(digest)} bytes; at most 255 are supported")
            g = b"%d" % gid
            digest_map[bytes(digest)] = g
            groups[g] = bytes((len(digest),)) + bytes(digest) + np.asarray(sh, dtype="<u4").tobytes()
            members = self._members_key(gid)
            batch.cleared.add(members)  # a new group has no members yet: no need to ask Redis
            batch.sets.pop(members, None)
        batch.file(gids, np.asarray(band_keys, dtype=np.uint64).reshape(n, -1))
        return gids

    @_writes
    def delete_group(self, gid: int, band_keys: np.ndarray) -> None:
        batch = self._batch()
        g = b"%d" % gid
        (group,) = self._decoded(self._prefix + b"groups", [g], self._hmget(self._prefix + b"groups", [g]), _decode_group)
        if group is not None:
            batch.hash_of(self._prefix + b"digests")[group[0]] = None
        batch.hash_of(self._prefix + b"groups")[g] = None
        members = self._members_key(gid)
        batch.cleared.add(members)
        batch.sets.pop(members, None)
        batch.unfile(gid, np.asarray(band_keys, dtype=np.uint64).reshape(-1).tolist())
        (cid,) = self._hmget(self._prefix + b"comp", [g])
        if cid is not None:
            batch.hash_of(self._prefix + b"comp")[g] = None
            self._collect_components({cid})

    def group_items(self, gids: Sequence[int]) -> list[list[str]]:
        keys = [self._members_key(g) for g in gids]
        out = []
        for key, ms in zip(keys, self._smembers_many(keys)):
            found = list(ms)
            out.append(sorted(self._decoded(key, found, found, _dec)))
        return out  # type: ignore[return-value]

    def group_shingles(self, gids: Sequence[int]) -> list[np.ndarray]:
        key, fields = self._prefix + b"groups", [b"%d" % g for g in gids]
        out = []
        for gid, group in zip(gids, self._decoded(key, fields, self._hmget(key, fields), _decode_group)):
            if group is None:
                raise KeyError(f"group {gid} does not exist")
            out.append(group[1])
        return out

    def query_bands(self, band_keys: np.ndarray) -> list[set[int]]:
        rows = np.ascontiguousarray(band_keys, dtype=np.uint64)
        if rows.ndim != 2:
            raise ValueError(f"band_keys must be an (n, b) array, got shape {rows.shape}")
        n, b = rows.shape
        batch = self._txn()
        flat = rows.reshape(-1).tolist()
        stored: list[set[int]] = [set() for _ in range(n)]
        if n and b and (batch is None or not batch.dropped):
            # A row with a bucket this batch took groups out of is read bucket by bucket, to apply the
            # removals; every other row is one union on the server.
            rems = batch.unfiled if batch is not None else {}
            apart = [i for i in range(n) if rems and any(rems.get(k) for k in flat[i * b : (i + 1) * b])]
            together = sorted(set(range(n)) - set(apart)) if apart else list(range(n))
            per_call = max(1, _CHUNK // b)
            parts = [together[i : i + per_call] for i in range(0, len(together), per_call)]
            singles = [k for i in apart for k in flat[i * b : (i + 1) * b]]
            prefix = self._prefix + b"b:"

            def build(p: Any) -> None:
                for part in parts:
                    p.eval(_BUCKET_UNIONS, 0, prefix, rows[part].astype(">u8").tobytes().hex(), b)
                for k in singles:
                    p.smembers(self._band_key(k))

            replies = self._pipeline(build)
            ids = functools.partial(self._bucket_ids, prefix)
            for part, reply in zip(parts, replies):
                for i, members in zip(part, reply):
                    stored[i] = ids(members)
            single = iter(replies[len(parts) :])
            for i in apart:
                for k in flat[i * b : (i + 1) * b]:
                    stored[i].update(ids(next(single)) - rems.get(k, set()))
        if batch is not None and batch.filed_keys:
            adds = batch.filed_index()
            for i in range(n):
                for k in flat[i * b : (i + 1) * b]:
                    filed = adds.get(k)
                    if filed:
                        stored[i] |= filed
        return stored

    def _bucket_ids(self, prefix: bytes, members: Sequence[bytes]) -> set[int]:
        """The group ids of a bucket (or of a union of buckets) read back."""
        try:
            return {_decode_id(m) for m in members}
        except ValueError as exc:
            bad = next(m for m in members if not _ID.fullmatch(m))
            raise self._corrupt(prefix + b"<band key>", bad, exc) from None

    # --- components -------------------------------------------------------------------------
    def component_members(self, gids: Sequence[int]) -> list[frozenset[int]]:
        cids = self._hmget(self._prefix + b"comp", [b"%d" % g for g in gids])
        wanted = sorted({c for c in cids if c is not None})
        comps = self._components(wanted)
        out = []
        for gid, cid in zip(gids, cids):
            if cid is None:
                out.append(frozenset((gid,)))
                continue
            members = comps[cid]
            if members is None:
                raise CorruptIndexError(f"{self!r} is inconsistent: group {gid} names component {cid!r}, which is missing")
            out.append(frozenset(members))
        self._read_ahead(sorted({g for comp in out for g in comp}))
        return out

    def component_ids(self, gids: Sequence[int]) -> list[Hashable]:
        cids = self._hmget(self._prefix + b"comp", [b"%d" % g for g in gids])
        return [gid if cid is None else cid for gid, cid in zip(gids, cids)]  # cid: bytes, never an int

    @_writes
    def set_components(self, components: Sequence[Collection[int]]) -> None:
        batch = self._batch()
        everyone = [g for comp in components for g in comp]
        old = set(self._hmget(self._prefix + b"comp", [b"%d" % g for g in everyone])) - {None}
        comp_map = batch.hash_of(self._prefix + b"comp")
        fresh: set[bytes] = set()
        for comp in components:
            if len(comp) < 2:
                for g in comp:
                    comp_map[b"%d" % g] = None
                continue
            packed = np.array(sorted(comp), dtype="<i8").tobytes()
            # The id is a hash of the members: two different components never share one.
            cid = hashlib.blake2b(packed, digest_size=12).hexdigest().encode()
            batch.strings[self._prefix + b"cm:" + cid] = packed
            for g in comp:
                comp_map[b"%d" % g] = cid
            fresh.add(cid)
        self._collect_components(old | fresh)  # type: ignore[arg-type]

    def _collect_components(self, cids: set[bytes]) -> None:
        """Delete the member lists of components that no group points at any more."""
        if not cids:
            return
        batch = self._batch()
        members = {c: m for c, m in self._components(sorted(cids)).items() if m is not None}
        every = sorted({g for gs in members.values() for g in gs})
        points = dict(zip(every, self._hmget(self._prefix + b"comp", [b"%d" % g for g in every])))
        for cid, gs in members.items():
            if not any(points[g] == cid for g in gs):
                batch.strings[self._prefix + b"cm:" + cid] = None

    def _components(self, cids: Sequence[bytes]) -> dict[bytes, list[int] | None]:
        """The member group ids of each component id (None where its key is missing)."""
        keys = [self._prefix + b"cm:" + c for c in cids]
        out: dict[bytes, list[int] | None] = {}
        for cid, key, raw in zip(cids, keys, self._get_many(keys)):
            out[cid] = self._decoded(key, [b""], [raw], _decode_component)[0]
        return out

    # --- clusters ---------------------------------------------------------------------------
    def get_clusters(self, keys: Sequence[str]) -> list[tuple[str, float] | None]:
        key, fields = self._prefix + b"cof", [_enc(k) for k in keys]
        return self._decoded(key, fields, self._hmget(key, fields), _decode_cluster_entry)

    def cluster_members(self, representatives: Sequence[str]) -> list[list[tuple[str, float]]]:
        key, fields = self._prefix + b"clusters", [_enc(r) for r in representatives]
        return [m or [] for m in self._decoded(key, fields, self._hmget(key, fields), _decode_members)]

    @_writes
    def set_clusters(self, keys: Collection[str], clusters: Sequence[ClusterEntry]) -> None:
        batch = self._batch()
        keys = list(keys)
        cof = batch.hash_of(self._prefix + b"cof")
        reps = batch.hash_of(self._prefix + b"clusters")
        fields = [_enc(k) for k in keys]
        olds = self._decoded(self._prefix + b"cof", fields, self._hmget(self._prefix + b"cof", fields), _decode_cluster_entry)
        for field, old in zip(fields, olds):
            if old is not None:
                cof[field] = None
                reps[_enc(old[0])] = None
        for rep, members in clusters:
            if len(members) < 2:
                continue
            reps[_enc(rep)] = json.dumps([[k, float(s)] for k, s in members]).encode()
            for key, sim in members:
                cof[_enc(key)] = json.dumps([rep, float(sim)]).encode()

    def iter_clusters(self) -> Iterator[ClusterEntry]:
        key = self._prefix + b"clusters"
        found = self._hscan(key)
        reps = list(found)
        names = self._decoded(key, reps, reps, _dec)
        members = self._decoded(key, reps, [found[r] for r in reps], _decode_members)
        return iter(list(zip(names, members)))  # type: ignore[arg-type]

    # --- dropping ---------------------------------------------------------------------------
    @_writes
    def drop(self) -> None:
        """Delete the namespace (all its keys but the lock, by SCAN and UNLINK in batches) at commit."""
        batch = self._batch()
        batch.dropped = True
        self._known = False  # a deliberate drop: an empty namespace is new again
        batch.strings.clear()
        batch.hashes.clear()
        batch.sets.clear()
        batch.cleared.clear()
        batch.filed_keys.clear()
        batch.filed_gids.clear()
        batch.unfiled.clear()
        batch._filed_index = None
        batch.seen_strings.clear()
        batch.seen_hashes.clear()
        batch.seen_sets.clear()

    def _unlink_namespace(self) -> None:
        pattern = _glob_escape(self._prefix) + b"*"
        try:
            doomed: list[bytes] = []
            cursor = 0
            while True:
                self.round_trips += 1
                cursor, keys = self._client.scan(cursor, match=pattern, count=_SCAN_COUNT)
                doomed.extend(k for k in keys if k != self._lock_key)
                if len(doomed) >= _SCAN_COUNT:
                    self.round_trips += 1
                    self._client.unlink(*doomed)
                    doomed = []
                if cursor == 0:
                    break
            if doomed:
                self.round_trips += 1
                self._client.unlink(*doomed)
        except (_RedisConnectionError, _RedisTimeoutError) as exc:
            raise self._unavailable(exc, "while dropping the namespace; drop() again to finish") from exc

    # --- key names --------------------------------------------------------------------------
    def _source_key(self, source: str) -> bytes:
        return self._prefix + b"src:" + _enc(source)

    def _members_key(self, gid: int) -> bytes:
        return self._prefix + b"gm:%d" % gid

    def _band_key(self, band_key: int) -> bytes:
        return self._prefix + b"b:%016x" % band_key


# --- encoding ------------------------------------------------------------------------------------
def _enc(text: str) -> bytes:
    # surrogatepass: any Python str round-trips, as it does in memory.
    return text.encode("utf-8", "surrogatepass")


def _dec(raw: bytes) -> str:
    """A key or source read back: UTF-8 (what :func:`_enc` wrote for a valid str)."""
    return raw.decode("utf-8")


def _encode_item(rec: ItemRecord) -> bytes:
    return json.dumps([rec.gid, rec.length, rec.source, rec.authority, rec.first_seen], allow_nan=False).encode()


# What a damaged or hostile stored value raises while it is decoded (UnicodeDecodeError and
# json.JSONDecodeError are ValueErrors; RecursionError from deeply nested JSON).
_BAD_VALUE = (ValueError, TypeError, IndexError, KeyError, RecursionError, OverflowError)
_ID = re.compile(rb"[0-9]{1,18}")


def _decode_id(raw: bytes) -> int:
    """A group id: decimal digits only (``int()`` would also take ``" 7"``, ``"+7"`` and ``"7_0"``)."""
    if not _ID.fullmatch(raw):
        raise ValueError("not a group id")
    return int(raw)


def _number(value: object, what: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):  # type: ignore[arg-type]
        raise ValueError(f"{what} is not a finite number")
    return float(value)  # type: ignore[arg-type]


def _decode_item(raw: bytes) -> ItemRecord:
    """JSON ``[gid, length, source, authority, first_seen]``."""
    found = json.loads(raw)
    if type(found) is not list or len(found) != 5:
        raise ValueError("not a list of 5 values")
    gid, length, source, authority, first_seen = found
    if type(gid) is not int or gid < EMPTY_GROUP or type(length) is not int or length < 0:
        raise ValueError("group id or length out of range")
    if source is not None and type(source) is not str:
        raise ValueError("source is not a string")
    return ItemRecord(
        gid, length, source, _number(authority, "authority"), None if first_seen is None else _number(first_seen, "first_seen")
    )


def _decode_cluster_entry(raw: bytes) -> tuple[str, float]:
    """JSON ``[representative, similarity]``."""
    found = json.loads(raw)
    if type(found) is not list or len(found) != 2 or type(found[0]) is not str:
        raise ValueError("not [representative, similarity]")
    sim = _number(found[1], "similarity")
    if not 0.0 <= sim <= 1.0:
        raise ValueError("similarity out of [0, 1]")
    return found[0], sim


def _decode_members(raw: bytes) -> list[tuple[str, float]]:
    """JSON ``[[member, similarity], ...]``."""
    found = json.loads(raw)
    if type(found) is not list:
        raise ValueError("not a list of members")
    out = []
    for member in found:
        if type(member) is not list or len(member) != 2 or type(member[0]) is not str:
            raise ValueError("a member is not [key, similarity]")
        out.append((member[0], _number(member[1], "similarity")))
    return out


def _decode_group(raw: bytes) -> tuple[bytes, np.ndarray]:
    """1-byte digest length, digest, sorted distinct shingles as '<u4': (digest, shingles)."""
    if not raw or len(raw) < 1 + raw[0] or (len(raw) - 1 - raw[0]) % 4:
        raise ValueError("not a digest and whole shingles")
    shingles = np.frombuffer(raw, dtype="<u4", offset=1 + raw[0]).astype(np.uint32, copy=False)
    if len(shingles) > 1 and (shingles[1:] <= shingles[:-1]).any():
        raise ValueError("shingles not sorted and distinct")
    return raw[1 : 1 + raw[0]], shingles


def _decode_component(raw: bytes) -> list[int]:
    """Two or more sorted distinct group ids as '<i8'."""
    if len(raw) % 8 or len(raw) < 16:
        raise ValueError("not two or more group ids")
    gids = np.frombuffer(raw, dtype="<i8")
    if gids[0] < 0 or (gids[1:] <= gids[:-1]).any():
        raise ValueError("group ids not sorted, distinct and non-negative")
    return gids.tolist()


def _decode_meta(raw: bytes) -> dict[str, Any]:
    found = json.loads(raw)
    if type(found) is not dict:
        raise ValueError("not a JSON object")
    return found


def _pair_blobs(keys: np.ndarray, gids: np.ndarray, per_blob: int = 65536) -> list[str]:
    """(band key, group id) pairs as hex blobs for _BUCKETS_ADD/_BUCKETS_REM, ``per_blob`` pairs each."""
    pairs = np.stack((keys, gids), axis=1).astype(">u8")
    return [pairs[i : i + per_blob].tobytes().hex() for i in range(0, len(pairs), per_blob)]


def _chunks(values: list[Any]) -> list[list[Any]]:
    return [values[i : i + _CHUNK] for i in range(0, len(values), _CHUNK)]


def _glob_escape(raw: bytes) -> bytes:
    out = bytearray()
    for byte in raw:
        if byte in b"*?[]\\":
            out += b"\\"
        out.append(byte)
    return bytes(out)


def _redact(url: str) -> str:
    """The URL with its password hidden: ``redis://user:***@host:port/db``, ``...?password=***``.

    Works on the raw string, not on a parsed URL, so that a password holding ``#``, ``?``, ``/`` or ``@``
    (which a URL parser would cut at the wrong place) is hidden whole: everything from the end of the
    scheme to the last ``@`` counts as user information.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" in rest:
        userinfo, _, host = rest.rpartition("@")
        rest = (userinfo.split(":", 1)[0] + ":***@" if ":" in userinfo else "***@") + host
    rest = _PASSWORD_PARAMETER.sub(r"\1***", rest)
    return f"{scheme}{sep}{rest}"


_PASSWORD_PARAMETER = re.compile(r"(?i)([?&;]password=)[^&;]*")


def _check_url(url: str) -> None:
    """Refuse what redis-py would misread silently: a ``#`` (a fragment) and a database that is not a number."""
    if "#" in url:
        raise ValueError(
            f"url {_redact(url)!r} contains '#', where a URL ends and a fragment begins, so a password holding it "
            "would be cut there: write '#' as %23"
        )
    if url.startswith("unix://"):
        return
    try:
        path = urllib.parse.urlsplit(url).path
    except ValueError as exc:
        raise ValueError(f"url {_redact(url)!r} is not a valid URL ({exc})") from None
    if path not in ("", "/") and not re.fullmatch(r"/[0-9]+", path):
        raise ValueError(
            f"url {_redact(url)!r} names the database {path[1:]!r}: after the host comes a database number, "
            "such as redis://localhost:6379/0"
        )


def _check_seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not value > 0:
        raise ValueError(f"{name} ({value}) must be a positive number of seconds")
