"""The namespace write lock: taken with ``SET NX PX``, renewed while held, released by compare-and-delete.

The lock is the key ``<ns>:lock`` set to a random token with an expiry of ``timeout``. A holder renews
it every third of ``timeout`` from a background thread, so it only runs out when the holder died or
stalled; other workers then take over after at most ``timeout``. Only the holder of the token may
renew or release it (the scripts compare first). The commit of a batch releases it too, in its
``MULTI``/``EXEC`` (see :mod:`rag_dedup.storage.redis.overlay`).

Time is read through a :class:`Clock`, so that tests drive the waiting and the renewals without
sleeping (:class:`SystemClock` is the real one).
"""

from __future__ import annotations

import logging
import random
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from rag_dedup.errors import CorruptIndexError, LockTimeout, RedisConfigurationError
from rag_dedup.storage.redis import scripts
from rag_dedup.storage.redis.connection import CONNECTION_ERRORS, ResponseError, redact, unavailable

__all__ = ["Clock", "Hold", "NamespaceLock", "SystemClock"]

logger = logging.getLogger(__name__)


class Clock(Protocol):
    """Where the lock reads time and waits."""

    def now(self) -> float:
        """Seconds on a monotonic clock."""

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (between attempts to take the lock)."""

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """Wait ``seconds`` or until ``stop`` is set (between renewals); True when it was set."""


class SystemClock:
    """The real clock: ``time.monotonic``, ``time.sleep``, ``Event.wait``."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        return stop.wait(seconds)


class Hold:
    """One holding of the lock: its token, and the thread that renews it until :meth:`end`."""

    def __init__(self, token: bytes) -> None:
        self.token = token
        self.stop = threading.Event()
        self.renewer: threading.Thread | None = None

    def end(self) -> None:
        self.stop.set()
        if self.renewer is not None:
            self.renewer.join(timeout=1.0)  # it never renews a lock that is not ours: no need to wait long


class NamespaceLock:
    """The write lock of one namespace (one per :class:`~rag_dedup.storage.redis.RedisStorage`).

    Args:
        client: A redis-py client.
        key: The lock key.
        namespace, url: For messages (the URL is shown without its password).
        timeout: Seconds the lock lives without renewal.
        wait: Seconds :meth:`acquire` waits for another holder before raising :class:`LockTimeout`.
        clock: Where time is read and waited for.
    """

    def __init__(
        self, client: Any, key: bytes, *, namespace: str, url: str, timeout: float, wait: float, clock: Clock | None = None
    ) -> None:
        self.client, self.key = client, key
        self.namespace, self.url = namespace, url
        self.timeout, self.wait = timeout, wait
        self.clock: Clock = clock or SystemClock()
        #: Round trips made by :meth:`acquire` and the releases (the renewals are counted apart).
        self.round_trips = 0
        #: Renewals sent by the renewal threads.
        self.renewals = 0
        #: Seconds :meth:`acquire` spent waiting for another holder.
        self.wait_seconds = 0.0
        self._release = client.register_script(scripts.RELEASE)
        self._renew = client.register_script(scripts.RENEW)
        self._stale: list[bytes] = []  # tokens this process may still hold after a lost connection

    def acquire(self, probe: Sequence[bytes] = ()) -> tuple[Hold, list[int]]:
        """Take the lock, and (in the same round trip) ask whether each key of ``probe`` exists.

        Returns the holding, renewed from now on until :meth:`Hold.end`, and the EXISTS replies.

        Raises:
            LockTimeout: Another holder kept it for longer than ``wait``.
            CorruptIndexError: The lock's key exists without an expiry (not a lock of ours: it would never
                be free), at the first attempt rather than after ``wait``.
            RedisUnavailable: The connection dropped; nothing was taken (or the lock expires by itself).
        """
        self.release_stale()
        token = secrets.token_hex(16).encode()
        ttl = int(self.timeout * 1000)
        clock = self.clock
        started = clock.now()
        deadline = started + self.wait
        delay = 0.0005
        while True:
            try:
                self.round_trips += 1
                with self.client.pipeline(transaction=False) as pipe:
                    pipe.set(self.key, token, nx=True, px=ttl)
                    pipe.pttl(self.key)
                    for key in probe:
                        pipe.exists(key)
                    taken, expires_in, *found = pipe.execute()
            except CONNECTION_ERRORS as exc:
                self._stale.append(token)  # the SET may have succeeded without our hearing it
                raise unavailable(self.url, exc, "while taking the write lock; nothing was recorded") from exc
            except ResponseError as exc:  # a server at its maxmemory refuses the SET
                raise RedisConfigurationError(
                    f"Redis at {redact(self.url)} refused the write lock of namespace {self.namespace!r} ({str(exc)[:160]}); "
                    "nothing was recorded: if it is out of memory, raise its maxmemory or free memory, then retry"
                ) from None
            if taken:
                self.wait_seconds += clock.now() - started
                return self._hold(token), found
            if expires_in == -1:  # held, and never to expire: no holder of ours sets a lock without a timeout
                raise self.no_expiry()
            if clock.now() >= deadline:
                raise self._timeout("could not take")
            # Poll with a short, jittered backoff: a batch holds the lock only while it commits,
            # and a waiter that sleeps much longer than that leaves the store idle.
            clock.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.004)

    def no_expiry(self) -> CorruptIndexError:
        """The error for a lock key without an expiry: not a lock of ours, and it would never be free."""
        return CorruptIndexError(
            f"the write lock of namespace {self.namespace!r} at {redact(self.url)} "
            f"({self.key.decode('utf-8', 'backslashreplace')}) has no expiry, which rag-dedup's lock always has "
            f"(lock_timeout): something else set it, and no worker can take it. If no worker of this namespace "
            f"is running, delete that key"
        )

    def _timeout(self, what: str) -> LockTimeout:
        return LockTimeout(
            f"{what} the write lock of namespace {self.namespace!r} at {redact(self.url)} "
            f"within lock_wait={self.wait:g} s: another worker holds it. If a worker crashed "
            f"while holding it, it expires within lock_timeout={self.timeout:g} s; otherwise "
            "raise lock_wait or use smaller batches"
        )

    def waiter(self) -> Callable[[], None]:
        """A pause for a batch that waits for the lock to be free (an optimistic commit): each call
        sleeps a little longer, as :meth:`acquire` does between attempts, and counts in
        :attr:`wait_seconds`; a call after ``wait`` seconds raises :class:`LockTimeout`."""
        clock = self.clock
        deadline = clock.now() + self.wait
        delay = [0.0005]

        def pause() -> None:
            now = clock.now()
            if now >= deadline:
                raise self._timeout("could not commit a batch, which waits for a free moment of")
            clock.sleep(delay[0] * (0.5 + random.random()))
            delay[0] = min(delay[0] * 2, 0.004)
            self.wait_seconds += clock.now() - now

        return pause

    def _hold(self, token: bytes) -> Hold:
        hold = Hold(token)
        hold.renewer = threading.Thread(target=self._keep_alive, args=(hold,), name="rag-dedup-lock", daemon=True)
        hold.renewer.start()
        return hold

    def _keep_alive(self, hold: Hold) -> None:
        """Renew the lock every third of its lifetime until the holding ends (runs in a thread)."""
        ttl = int(self.timeout * 1000)
        while not self.clock.wait(hold.stop, self.timeout / 3):
            try:
                self.renewals += 1
                if not self._renew(keys=[self.key], args=[hold.token, ttl]):
                    return  # lost: the commit's WATCH will refuse the batch
            except Exception as exc:  # noqa: BLE001 - the commit reports connection trouble; keep trying
                logger.debug("renewing the write lock of %r failed: %s", self.namespace, exc)

    def release(self, token: bytes) -> None:
        """Release the lock if ``token`` still holds it; on a connection error, retry before the next acquire."""
        try:
            self.round_trips += 1
            self._release(keys=[self.key], args=[token])
        except Exception:  # noqa: BLE001 - the caller's error matters; the lock will expire
            self._stale.append(token)

    def release_stale(self) -> None:
        """Release locks that a batch of this process could not release (its connection had dropped)."""
        while self._stale:
            token = self._stale[-1]
            try:
                self.round_trips += 1
                self._release(keys=[self.key], args=[token])
            except CONNECTION_ERRORS:
                return
            self._stale.pop()

    def lost_message(self) -> str:
        return (
            f"the write lock of namespace {self.namespace!r} at {redact(self.url)} ran out before the batch "
            f"committed (held longer than lock_timeout={self.timeout:g} s without renewal); the batch was "
            "not recorded: retry it"
        )
