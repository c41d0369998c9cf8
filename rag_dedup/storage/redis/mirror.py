"""The LSH buckets of a Redis namespace, kept in this process and brought up to date from the band log.

Key layout 4 keeps no bucket in Redis. Every commit that files groups in buckets or takes them out
appends one entry to the list ``ns:band-log`` (:func:`entry`): its number in ``ns:commits``, then the
(band key, group id) pairs it took out and those it filed. A worker keeps the buckets in a
:class:`~rag_dedup.storage.memory.BandTable` (:class:`BandMirror`), and at the start of each batch
reads the entries it has not applied yet in the same script that reads the commit count
(``scripts.COMMITS_SINCE``), so that its buckets are those of that commit exactly. Lookups then cost no
round trip and no server time; the server only appends and hands out byte strings. The optimistic
check is unchanged: a commit's write set still names the band keys it filed or took out, and a batch's
read set the band keys it looked up.

A mirror that has applied ``n`` entries asks for the entries from ``n - 1`` on, with the prefix it
read for entry ``n - 1``: a namespace dropped since (``drop()`` deletes the log, and commit numbers only
grow) no longer holds that entry there, and the script then answers with the whole log, from which the
mirror is rebuilt.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rag_dedup.storage.memory import BandTable

__all__ = ["BandMirror", "entry"]

_HEAD = np.dtype([("removed", "<u4"), ("filed", "<u4")])


def entry(removed_keys: np.ndarray, removed_gids: np.ndarray, filed_keys: np.ndarray, filed_gids: np.ndarray) -> bytes:
    """One commit's bucket changes as a band-log entry (without the prefix ``b"<commit number>:"`` the commit writes in front):
    the counts of pairs taken out and filed ('<u4' each), then the band keys ('<u8') and group ids ('<u4') of each.

    Raises:
        ValueError: A group id does not fit in 32 bits (the layout stores them as uint32).
    """
    for gids in (removed_gids, filed_gids):
        if len(gids) and int(np.max(gids)) >= 2**32:
            raise ValueError(f"group id {int(np.max(gids))} does not fit the band log (uint32)")
    head = np.array([(len(removed_keys), len(filed_keys))], dtype=_HEAD).tobytes()
    return b"".join(
        (
            head,
            np.asarray(removed_keys, dtype="<u8").tobytes(),
            np.asarray(removed_gids, dtype="<u4").tobytes(),
            np.asarray(filed_keys, dtype="<u8").tobytes(),
            np.asarray(filed_gids, dtype="<u4").tobytes(),
        )
    )


def parse(raw: bytes) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
    """A band-log entry as read: (its prefix ``b"<commit>:"``, the group ids taken out, the band keys and
    group ids filed).

    Raises:
        ValueError: It is not what :func:`entry` writes behind a commit number.
    """
    if not isinstance(raw, bytes):
        raise ValueError(f"a band-log entry is a byte string, got {type(raw).__name__}")
    cut = raw.find(b":")
    if cut < 1 or not raw[:cut].isdigit():
        raise ValueError("no commit number in front")
    body = memoryview(raw)[cut + 1 :]
    if len(body) < _HEAD.itemsize:
        raise ValueError("shorter than its header")
    removed, filed = (int(x) for x in np.frombuffer(body, dtype=_HEAD, count=1)[0])
    if len(body) != _HEAD.itemsize + 12 * (removed + filed):
        raise ValueError(f"{len(body)} bytes, not the header and {removed} + {filed} pairs of 12 bytes")
    at = _HEAD.itemsize + 8 * removed
    removed_gids = np.frombuffer(body, dtype="<u4", count=removed, offset=at).astype(np.int64)
    at += 4 * removed
    keys = np.frombuffer(body, dtype="<u8", count=filed, offset=at).astype(np.uint64)
    gids = np.frombuffer(body, dtype="<u4", count=filed, offset=at + 8 * filed).astype(np.int64)
    return raw[: cut + 1], removed_gids, keys, gids


class BandMirror:
    """The buckets as of the last band-log entry applied (see the module docstring)."""

    def __init__(self) -> None:
        self.table = BandTable()
        #: Entries applied, and the prefix (``b"<commit>:"``) of the last of them.
        self.applied = 0
        self.last_prefix = b""

    def request(self) -> tuple[int, bytes]:
        """The ``(from, prefix)`` arguments of ``scripts.COMMITS_SINCE`` that bring this mirror up to date."""
        return self.applied, self.last_prefix

    def apply(self, reply: list[object], corrupt: Callable[[int, object, BaseException], Exception]) -> bool:
        """Apply a ``COMMITS_SINCE`` band reply: ``[reset, more, entries...]``, the entries after those
        applied (from the first when ``reset``: the log is not the one applied from). Returns ``more``:
        whether the log holds entries after these.

        Raises:
            Exception: ``corrupt(entry number, raw, error)`` for an entry that is not what a commit writes.
        """
        reset, more, *entries = reply
        if reset:
            self.table, self.applied, self.last_prefix = BandTable(), 0, b""
        for raw in entries:
            try:
                prefix, removed, keys, gids = parse(raw)  # type: ignore[arg-type]
            except ValueError as exc:
                raise corrupt(self.applied, raw, exc) from None
            self.add(prefix, removed, keys, gids)
        return bool(more)

    def add(self, prefix: bytes, removed_gids: np.ndarray, keys: np.ndarray, gids: np.ndarray) -> None:
        """Apply the next entry: its prefix, the group ids it took out, the band keys and group ids it
        filed (as :func:`parse` reads them; this worker's own commit passes what it wrote)."""
        for gid in np.unique(removed_gids).tolist():
            self.table.delete(gid)
        if len(keys):
            self.table.insert(gids, keys.reshape(-1, 1))  # one key a row: the pairs as filed
        self.applied += 1
        self.last_prefix = prefix
