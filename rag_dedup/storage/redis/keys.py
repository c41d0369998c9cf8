"""The Redis key layout of a namespace, its version, and how each value is written and read back.

Key layout 4 (``ns`` is the namespace; every key starts with ``"<ns>:"``)::

    key                      type    holds
    ns:format                string  the key layout: "rag-dedup-redis 4"
    ns:meta                  string  JSON of the index parameters
    ns:lock                  string  the write lock: a random token, with an expiry
    ns:commits               string  how many batches have committed (INCR at each commit; drop() keeps it)
    ns:commit-log            list    the last commits' write sets: each the sorted '>u8' fingerprints of what it wrote
    ns:next-group-id         string  the group-id counter (INCRBY hands out ids; a failed batch leaves a gap; drop() keeps it)
    ns:items                 hash    item key -> JSON [gid, length, source, authority, first_seen]
    ns:source:<source>       set     the item keys added with that source
    ns:digests               hash    canonical-text digest -> group id (decimal)
    ns:groups                hash    group id -> 1-byte digest length + digest + shingles as '<u4'
    ns:group-items:<gid>     set     the item keys of a group
    ns:band-log              list    the LSH buckets, as each commit changed them: one entry a commit that
                                     filed or took out groups, "<commit number>:" + two '<u4' counts, then
                                     the pairs taken out and those filed, band keys '<u8' and group ids '<u4'
                                     (rag_dedup.storage.redis.mirror; every worker keeps the buckets in memory)
    ns:component-of          hash    group id -> component id (only components of two or more groups)
    ns:component:<cid>       string  the component's sorted group ids as '<i8' (cid: a hash of them)
    ns:cluster-of            hash    item key -> JSON [representative, similarity] (clusters of 2+ items)
    ns:clusters              hash    representative -> JSON [[member, similarity], ...]

Nothing is pickled: what is read back from a shared server crosses a trust boundary, so every value is
JSON, decimal ids or raw little-endian integers, and each is decoded strictly here (a decoder raises
ValueError, TypeError, ... on anything rag-dedup does not write; the storage turns that into a
:class:`~rag_dedup.errors.CorruptIndexError` naming the key and field).

**Versions.** Layout 3 kept the buckets in Redis, as fields of 4,096 hashes ``ns:buckets:<3 hex>``,
which every batch read and wrote through the server (most of the server's time); a layout-3 writer
would not append to the band log, so layout-4 mirrors would miss its groups. Layout 2 had no ``ns:commits`` and ``ns:commit-log``: a layout-2 writer would commit
without logging, under the noses of optimistic batches, so it must not share a namespace with this one.
Layout 1 (rag-dedup before the storage split) had no ``ns:format`` and shorter names
(``gm:``, ``b:``, ``comp``, ``cm:``, ``cof``, ``src:``, ``next_gid``). Opening a namespace whose format
is not :data:`FORMAT` raises :class:`~rag_dedup.errors.CorruptIndexError` saying which layout it holds
and what to do, before anything is read or written; a change of this table must bump
:data:`LAYOUT_VERSION`.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import numpy as np

from rag_dedup import settings
from rag_dedup.finite import is_finite_number
from rag_dedup.storage.base import EMPTY_GROUP, ItemRecord
from rag_dedup.storage.bookkeeping import Table

__all__ = ["FORMAT", "LAYOUT_VERSION", "OLD_LAYOUT_KEYS", "Layout"]

LAYOUT_VERSION = settings.REDIS_LAYOUT_VERSION
FORMAT = f"rag-dedup-redis {LAYOUT_VERSION}".encode()
#: Keys that only a layout-1 namespace has (it had no ``format`` key).
OLD_LAYOUT_KEYS = (b"next_gid", b"cof", b"comp")


class Layout:
    """The key names of one namespace."""

    def __init__(self, namespace: str) -> None:
        p = namespace.encode() + b":"
        self.prefix = p
        self.format = p + b"format"
        self.meta = p + b"meta"
        self.lock = p + b"lock"
        self.commits = p + b"commits"
        self.log = p + b"commit-log"
        self.counter = p + b"next-group-id"
        self.band_log = p + b"band-log"
        self.component_prefix = p + b"component:"
        #: The hash of each value table (COMPONENTS: group id -> component id).
        self.hashes = {
            Table.ITEMS: p + b"items",
            Table.DIGESTS: p + b"digests",
            Table.GROUPS: p + b"groups",
            Table.COMPONENTS: p + b"component-of",
            Table.CLUSTER_OF: p + b"cluster-of",
            Table.CLUSTERS: p + b"clusters",
        }
        self._set_prefixes = {Table.SOURCES: p + b"source:", Table.GROUP_ITEMS: p + b"group-items:"}
        #: Keys whose presence means the namespace holds data (not the counters: drop() keeps them).
        self.data = [self.hashes[t] for t in (Table.ITEMS, Table.GROUPS, Table.DIGESTS, Table.CLUSTERS)]

    def set_key(self, table: Table, owner: Any) -> bytes:
        """The key of one set: a source's item keys or a group's."""
        return self._set_prefixes[table] + (enc(owner) if table is Table.SOURCES else b"%d" % owner)

    def component(self, cid: bytes) -> bytes:
        return self.component_prefix + cid


# --- encoding ----------------------------------------------------------------------------------------
def enc(text: str) -> bytes:
    """A key or source as stored (surrogatepass: any Python str round-trips, as it does in memory)."""
    return text.encode("utf-8", "surrogatepass")


def dec(raw: bytes) -> str:
    """A key or source read back: UTF-8 (what :func:`enc` wrote for a valid str)."""
    return raw.decode("utf-8")


def gid_field(gid: int) -> bytes:
    return b"%d" % gid


def encode_item(rec: ItemRecord) -> bytes:
    return json.dumps([rec.gid, rec.length, rec.source, rec.authority, rec.first_seen], allow_nan=False).encode()


def encode_cluster_entry(entry: tuple[str, float]) -> bytes:
    return json.dumps([entry[0], float(entry[1])]).encode()


def encode_members(members: list[tuple[str, float]]) -> bytes:
    return json.dumps([[k, float(s)] for k, s in members]).encode()


def encode_group(group: tuple[bytes, np.ndarray]) -> bytes:
    digest, shingles = group
    if len(digest) > 255:
        raise ValueError(f"a group digest is {len(digest)} bytes; at most 255 are supported")
    return bytes((len(digest),)) + bytes(digest) + np.asarray(shingles, dtype="<u4").tobytes()


def encode_component(gids: frozenset[int]) -> tuple[bytes, bytes]:
    """(component id, packed sorted members): the id is a hash of the members, so two never share one."""
    packed = np.array(sorted(gids), dtype="<i8").tobytes()
    return hashlib.blake2b(packed, digest_size=12).hexdigest().encode(), packed


#: What a damaged or hostile stored value raises while it is decoded (UnicodeDecodeError and
#: json.JSONDecodeError are ValueErrors; RecursionError from deeply nested JSON).
BAD_VALUE = (ValueError, TypeError, IndexError, KeyError, RecursionError, OverflowError)
ID = re.compile(rb"[0-9]{1,18}")


def decode_id(raw: bytes) -> int:
    """A group id: decimal digits only (``int()`` would also take ``" 7"``, ``"+7"`` and ``"7_0"``)."""
    if not ID.fullmatch(raw):
        raise ValueError("not a group id")
    return int(raw)


def _number(value: object, what: str) -> float:
    if type(value) not in (int, float) or not is_finite_number(value):
        raise ValueError(f"{what} is not a finite number")
    return float(value)  # type: ignore[arg-type]


def decode_item(raw: bytes) -> ItemRecord:
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


def decode_cluster_entry(raw: bytes) -> tuple[str, float]:
    """JSON ``[representative, similarity]``."""
    found = json.loads(raw)
    if type(found) is not list or len(found) != 2 or type(found[0]) is not str:
        raise ValueError("not [representative, similarity]")
    sim = _number(found[1], "similarity")
    if not 0.0 <= sim <= 1.0:
        raise ValueError("similarity out of [0, 1]")
    return found[0], sim


def decode_members(raw: bytes) -> list[tuple[str, float]]:
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


def decode_group(raw: bytes) -> tuple[bytes, np.ndarray]:
    """1-byte digest length, digest, sorted distinct shingles as '<u4': (digest, shingles)."""
    if not raw or len(raw) < 1 + raw[0] or (len(raw) - 1 - raw[0]) % 4:
        raise ValueError("not a digest and whole shingles")
    shingles = np.frombuffer(raw, dtype="<u4", offset=1 + raw[0]).astype(np.uint32, copy=False)
    if len(shingles) > 1 and (shingles[1:] <= shingles[:-1]).any():
        raise ValueError("shingles not sorted and distinct")
    return raw[1 : 1 + raw[0]], shingles


def decode_component(raw: bytes) -> frozenset[int]:
    """Two or more sorted distinct group ids as '<i8'."""
    if len(raw) % 8 or len(raw) < 16:
        raise ValueError("not two or more group ids")
    gids = np.frombuffer(raw, dtype="<i8")
    if gids[0] < 0 or (gids[1:] <= gids[:-1]).any():
        raise ValueError("group ids not sorted, distinct and non-negative")
    return frozenset(gids.tolist())


def decode_meta(raw: bytes) -> dict[str, Any]:
    found = json.loads(raw)
    if type(found) is not dict:
        raise ValueError("not a JSON object")
    return found


def _identity(raw: bytes) -> bytes:
    return raw


#: Per value table: (encode the key as a hash field, encode a value, decode a value). COMPONENTS maps
#: a group id to its component id here; the members live under :meth:`Layout.component`.
CODECS: dict[Table, tuple[Any, Any, Any]] = {
    Table.ITEMS: (enc, encode_item, decode_item),
    Table.DIGESTS: (bytes, gid_field, decode_id),
    Table.GROUPS: (gid_field, encode_group, decode_group),
    Table.COMPONENTS: (gid_field, _identity, _identity),
    Table.CLUSTER_OF: (enc, encode_cluster_entry, decode_cluster_entry),
    Table.CLUSTERS: (enc, encode_members, decode_members),
}
#: Per value table: decode a hash field back into a key (for scans).
FIELD_DECODERS = {Table.ITEMS: dec, Table.CLUSTERS: dec, Table.CLUSTER_OF: dec}
