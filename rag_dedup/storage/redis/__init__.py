"""Redis storage: one DedupIndex shared by many processes on many machines.

``DedupIndex(storage="redis://host:6379/0", namespace="corpus-a")`` keeps its whole state in Redis,
under keys that start with ``"<namespace>:"`` (their table: :mod:`rag_dedup.storage.redis.keys`), so
that every worker of an ingestion job sees the same groups, buckets and clusters, and several indexes
can share one server. The LSH buckets are the exception: Redis keeps them as a log of each commit's
changes (``ns:band-log``), and each process keeps them in memory, brought up to date from the log
(``mirror.py``), so that looking them up costs neither a round trip nor server time.

One job per module:

====================  ==========================================================================
module                its job
====================  ==========================================================================
``storage.py``        :class:`RedisStorage`: the bookkeeping tables as Redis primitives
``keys.py``           the key layout (names, types, version) and every value's encoding
``overlay.py``        a batch's pending writes, read cache and read set, and its commit in one MULTI/EXEC
``lock.py``           the namespace write lock: take, renew from a thread, release (injectable clock)
``connection.py``     URLs (passwords hidden), TLS hints, connecting, the eviction-policy check
``mirror.py``         this process's copy of the LSH buckets, and the band-log entries it is kept up to date from
``scripts.py``        the Lua scripts (where the namespace stands, the band log, set writes, lock release and renewal)
====================  ==========================================================================

**Batches are atomic, and run without the lock.** The index runs each batch of ``add``/``add_many``
through :meth:`RedisStorage.run_batch`: read and computed without the namespace lock, its writes
committed at its end in one ``MULTI``/``EXEC``, only if no other commit meanwhile wrote what it read
(else it runs again on fresh values; after two refusals, under the lock), or not at all. ``remove``,
``update``, ``drop`` and the parameters run under :meth:`RedisStorage.lock`, committed in one
``MULTI``/``EXEC`` guarded by ``WATCH`` on the lock (see :mod:`~rag_dedup.storage.redis.overlay`).

**Round trips.** Each storage call answers with one pipelined round trip, whatever the batch size;
bucket lookups make none (the mirror, brought up to date when the batch starts), and a commit's
bucket changes are one band-log entry. Inside a batch, what was read is kept, and asking for components reads ahead what the
index reads next to recluster them, so that a batch costs about twenty round trips in all, not one
per band, per chunk or per cluster. :attr:`RedisStorage.round_trips` counts them.

**Nothing lost silently.** Connecting refuses a server whose ``maxmemory-policy`` is not
``noeviction`` (:class:`~rag_dedup.errors.RedisConfigurationError`; ``allow_eviction=True`` accepts it).
Once this object has seen the namespace hold an index, starting a batch also asks (in the same round
trip) whether ``ns:meta`` still exists, and whether ``ns:next-group-id`` does while ``ns:groups``
does; every read outside a batch asks for ``ns:meta`` in its pipeline. A namespace that lost them
raises :class:`~rag_dedup.errors.NamespaceLost` before anything is written. Every value read back is
decoded strictly; anything else raises :class:`~rag_dedup.errors.CorruptIndexError` naming the key
and field.

Redis Cluster is not supported (a batch's ``MULTI`` spans many keys); use one server or a replicated
primary.
"""

from rag_dedup.errors import (
    CorruptIndexError,
    LockLost,
    LockTimeout,
    NamespaceLost,
    RedisConfigurationError,
    RedisUnavailable,
)
from rag_dedup.storage.redis.storage import RedisStorage

# The errors a RedisStorage raises, importable from here as they were before the split (their home
# is rag_dedup.errors, and rag_dedup exports them).
__all__ = [
    "CorruptIndexError",
    "LockLost",
    "LockTimeout",
    "NamespaceLost",
    "RedisConfigurationError",
    "RedisStorage",
    "RedisUnavailable",
]
