"""Every exception rag-dedup raises on purpose, in one place.

``except rag_dedup.RagDedupError`` catches all of them. Each also keeps the builtin base that callers
caught before these classes had a common root, so ``except ValueError`` or ``except ConnectionError``
still works where it did::

    RagDedupError
     ├── InvalidTextError (ValueError)     a key, source or text is not valid Unicode (a lone surrogate)
     ├── IndexMismatchError (ValueError)   a stored index has other parameters, or another format
     ├── KeyConflictError (ValueError)     a key added is in the index already with another text or metadata
     ├── CorruptIndexError (ValueError)    a saved file or a stored value is damaged; names the file or key
     │    ├── NamespaceLost                a Redis namespace lost its parameters or counters (eviction,
     │    │                                a restart without persistence, a flush)
     │    ├── TransformStateError          a saved DedupTransform state file is damaged, foreign or newer
     │    └── CorruptResultError           a Spark job's result directory is incomplete or damaged
     ├── PolicyError (ValueError)          the representative policy raised, or returned a non-member
 ├── IndexIncomplete (RuntimeError)    an in-memory index that a failed policy left part-updated
 ├── SharedIndexRequired (RuntimeError)  a process-local index was about to be copied to a worker
     ├── SparkSetupError (RuntimeError)  Spark cannot start: Java is missing or broken
     ├── RedisConfigurationError           the server may evict keys (maxmemory-policy is not noeviction)
     ├── RedisUnavailable (ConnectionError)  the server cannot be reached, or the connection dropped
     ├── LockTimeout (TimeoutError)        a namespace's write lock could not be taken in time
     └── LockLost (RuntimeError)           the write lock expired before the batch committed

Bad arguments (a threshold out of range, a key that is not a str) raise the builtin ``ValueError`` and
``TypeError`` directly, as Python's own functions do; the classes here are for states of data and servers.
This module imports nothing but the standard library.
"""

from __future__ import annotations

__all__ = [
    "CorruptIndexError",
    "CorruptResultError",
    "IndexIncomplete",
    "IndexMismatchError",
    "InvalidTextError",
    "KeyConflictError",
    "LockLost",
    "LockTimeout",
    "NamespaceLost",
    "PolicyError",
    "RagDedupError",
    "RedisConfigurationError",
    "RedisUnavailable",
    "SharedIndexRequired",
    "SparkSetupError",
    "TransformStateError",
]


class RagDedupError(Exception):
    """The base of every exception that rag-dedup raises on purpose."""


class InvalidTextError(RagDedupError, ValueError):
    """A key, source or text holds a lone surrogate, so it is not valid Unicode and has no UTF-8 form.

    Python makes such strings from bytes that are not UTF-8 (``os.listdir`` on a non-UTF-8 file name,
    ``bytes.decode(errors="surrogateescape")``). The message names the argument, the item and the
    position; :func:`rag_dedup.surrogates.escape_surrogates` turns such a string into a valid one.
    """


class IndexMismatchError(RagDedupError, ValueError):
    """A stored index was made with other parameters than the ones asked for, or by another format."""


class KeyConflictError(RagDedupError, ValueError):
    """``add``/``add_many`` of a key that the index holds already with another text or metadata.

    Adding an identical item again is a no-op; to replace an item, ``remove`` it first or use
    ``DedupIndex.update``. The message names the key. Nothing of the batch that held it was added.
    """


class CorruptIndexError(RagDedupError, ValueError):
    """A saved index file, or a value stored in Redis, is missing, truncated, damaged or of an unknown format.

    The message names the file (or the Redis key) and what is wrong with it.
    """


class NamespaceLost(CorruptIndexError):
    """A Redis namespace lost its parameters or counters while it held an index.

    Keys were evicted (``maxmemory-policy`` other than ``noeviction``), the server restarted without
    persistence, or someone flushed the database. Nothing of the failing batch was written.
    """


class TransformStateError(CorruptIndexError):
    """A saved DedupTransform state file (``dedup_transform.json``) is damaged, foreign or from a newer format."""


class CorruptResultError(CorruptIndexError):
    """A Spark job's result directory is incomplete or holds values the job cannot have written."""


class SparkSetupError(RagDedupError, RuntimeError):
    """Spark cannot start here: Java is missing or broken, or the JVM did not come up."""


class SharedIndexRequired(RagDedupError, RuntimeError):
    """A DedupTransform with a process-local index was about to be copied into another process."""


class RedisConfigurationError(RagDedupError):
    """The Redis server is configured so that it may silently lose the index (it may evict keys)."""


class RedisUnavailable(RagDedupError, ConnectionError):
    """The Redis server cannot be reached, or the connection dropped; the message names the URL, never a password."""


class LockTimeout(RagDedupError, TimeoutError):
    """A namespace's write lock could not be acquired within ``lock_wait`` seconds."""


class LockLost(RagDedupError, RuntimeError):
    """The write lock expired or was taken over before the batch committed; nothing was recorded."""


class PolicyError(RagDedupError, ValueError):
    """The representative policy raised, or returned something that is not one of its members. The
    message names the policy and what it did; the policy's own exception is the ``__cause__``."""


class IndexIncomplete(RagDedupError, RuntimeError):
    """An in-memory index whose representative policy failed in the middle of a change: part of the
    change is stored, its clusters are not, and answers would be wrong. Every later call raises this
    until :meth:`DedupIndex.drop <rag_dedup.index.DedupIndex.drop>`; rebuild the index from its texts.
    (A Redis index is not left so: a failed batch records nothing.)"""
