"""The storage layer's domain rules, written once over a backend's primitive batch operations.

A :class:`~rag_dedup.storage.base.Storage` answers in domain terms (items, groups, components,
clusters). What each of those calls must keep consistent is written here, for every backend:

* an item is filed under its **source** and under its **group** when it is stored, and taken out of
  both when it is deleted;
* a new **group** is its digest, its shingles, an empty member set and one bucket entry per band; a
  deleted group takes all of them with it, and its component entry;
* a **component** of two or more groups is recorded for each member; a component of one is no entry;
* a **cluster** of two or more items is a member list under its representative and an entry for each
  member; replacing the clusters of some keys first drops their old entries and their old
  representatives' lists.

A backend (:class:`~rag_dedup.storage.memory.MemoryStorage`, :class:`~rag_dedup.storage.redis.RedisStorage`)
keeps only primitive batch operations on the named tables below: read, write or delete many values,
add or take out many set members, read many sets. Each primitive is one batch (one Redis round trip at
most), so the domain calls above cost what they cost before the rules were lifted here.

Tables (a value of None in :meth:`Bookkeeping._put` deletes the entry):

=================  ==========================  =============================================
table              key -> value                holds
=================  ==========================  =============================================
``ITEMS``          item key -> ItemRecord      every stored item
``DIGESTS``        digest -> group id          exact-text classes by digest
``GROUPS``         group id -> (digest,        each group's digest and sorted uint32 shingles
                   shingles)
``COMPONENTS``     group id -> frozenset       the component of each group in one of 2+ groups
``CLUSTER_OF``     item key -> (rep, sim)      the cluster entry of each item in a cluster of 2+
``CLUSTERS``       rep -> [(key, sim), ...]    the members of each cluster of 2+
``SOURCES`` (set)  source -> item keys         the keys added with each source
``GROUP_ITEMS``    group id -> item keys       the keys of each group
(set)
=================  ==========================  =============================================

LSH buckets are primitives of their own (:meth:`Bookkeeping._file`, :meth:`Bookkeeping._unfile`,
:meth:`~rag_dedup.storage.base.Storage.query_bands`), since each backend packs them its own way.
"""

from __future__ import annotations

import enum
from abc import abstractmethod
from collections.abc import Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from rag_dedup.errors import CorruptIndexError
from rag_dedup.storage.base import EMPTY_GROUP, ClusterEntry, ItemRecord, Storage

__all__ = ["Bookkeeping", "Table"]


class Table(enum.Enum):
    """The tables a backend keeps (see the module docstring for what each maps)."""

    ITEMS = "items"
    DIGESTS = "digests"
    GROUPS = "groups"
    COMPONENTS = "components"
    CLUSTER_OF = "cluster_of"
    CLUSTERS = "clusters"
    SOURCES = "sources"  # a set per source
    GROUP_ITEMS = "group_items"  # a set per group

    # Members are singletons compared by identity: hashed by identity too, in C (Enum's own __hash__ is a
    # Python call, paid by every primitive that looks its table up in a dict: a dozen per add()).
    __hash__ = object.__hash__


class Bookkeeping(Storage):
    """A :class:`Storage` whose domain methods are written once, over a backend's primitives.

    Every write runs inside :meth:`Storage.lock`, so that on a shared backend one domain call is one
    atomic batch even when the caller holds no lock (the lock is re-entrant; in memory it is a no-op).
    Subclasses implement the primitives (the abstract methods starting with ``_``) and the metadata,
    counting, scanning and bucket methods.
    """

    # --- primitives: values ------------------------------------------------------------------
    @abstractmethod
    def _get(self, table: Table, keys: Sequence[Any]) -> list[Any]:
        """The value of each key of ``table`` (None where there is none), in one batch."""

    @abstractmethod
    def _put(self, table: Table, values: Mapping[Any, Any]) -> None:
        """Write each value of ``table`` (None deletes the key), in one batch; called inside the lock."""

    @abstractmethod
    def _scan(self, table: Table) -> list[tuple[Any, Any]]:
        """Every (key, value) of ``table``."""

    # --- primitives: sets --------------------------------------------------------------------
    @abstractmethod
    def _add(self, table: Table, pairs: Iterable[tuple[Any, str]]) -> None:
        """Add member ``m`` to the set of owner ``o`` for each ``(o, m)``; called inside the lock."""

    @abstractmethod
    def _discard(self, table: Table, pairs: Iterable[tuple[Any, str]]) -> None:
        """Take member ``m`` out of the set of owner ``o`` for each ``(o, m)``; called inside the lock."""

    @abstractmethod
    def _clear(self, table: Table, owners: Sequence[Any]) -> None:
        """Empty the sets of ``owners`` (a new group's, a deleted group's); called inside the lock."""

    @abstractmethod
    def _members(self, table: Table, owners: Sequence[Any]) -> list[list[str]]:
        """The members of each owner's set ([] for none), in one batch; the order is the backend's."""

    # --- primitives: groups and buckets ------------------------------------------------------
    @abstractmethod
    def _new_group_ids(self, n: int) -> list[int]:
        """``n`` group ids never handed out before (called inside the lock)."""

    @abstractmethod
    def _file(self, gids: Sequence[int], band_keys: np.ndarray) -> None:
        """File group ``gids[i]`` in the bucket of every band key of row ``band_keys[i]``."""

    @abstractmethod
    def _unfile(self, gid: int, band_keys: np.ndarray) -> None:
        """Take group ``gid`` out of the buckets of ``band_keys`` (its one row, any shape)."""

    # --- items -------------------------------------------------------------------------------
    def get_items(self, keys: Sequence[str]) -> list[ItemRecord | None]:
        return self._get(Table.ITEMS, keys)

    def put_items(self, items: Mapping[str, ItemRecord]) -> None:
        with self.lock():
            self._put(Table.ITEMS, items)
            self._add(Table.SOURCES, [(rec.source, key) for key, rec in items.items() if rec.source is not None])
            self._add(Table.GROUP_ITEMS, [(rec.gid, key) for key, rec in items.items() if rec.gid != EMPTY_GROUP])

    def delete_items(self, items: Mapping[str, ItemRecord]) -> None:
        with self.lock():
            self._put(Table.ITEMS, dict.fromkeys(items))
            self._discard(Table.SOURCES, [(rec.source, key) for key, rec in items.items() if rec.source is not None])
            self._discard(Table.GROUP_ITEMS, [(rec.gid, key) for key, rec in items.items() if rec.gid != EMPTY_GROUP])

    def keys_of_source(self, source: str) -> list[str]:
        return self._members(Table.SOURCES, [source])[0]

    # --- groups ------------------------------------------------------------------------------
    def find_groups(self, digests: Sequence[bytes]) -> list[int | None]:
        return self._get(Table.DIGESTS, digests)

    def create_groups(self, digests: Sequence[bytes], shingles: Sequence[np.ndarray], band_keys: np.ndarray) -> list[int]:
        n = len(digests)
        if n != len(shingles) or n != len(band_keys):
            raise ValueError(f"create_groups: {n} digests, {len(shingles)} shingle arrays, {len(band_keys)} band-key rows")
        if n == 0:
            return []
        with self.lock():
            gids = self._new_group_ids(n)
            self._put(Table.DIGESTS, dict(zip(digests, gids)))
            self._put(Table.GROUPS, {g: (d, sh) for g, d, sh in zip(gids, digests, shingles)})
            self._clear(Table.GROUP_ITEMS, gids)
            self._file(gids, np.asarray(band_keys, dtype=np.uint64).reshape(n, -1))
        return gids

    def delete_group(self, gid: int, band_keys: np.ndarray) -> None:
        with self.lock():
            (group,) = self._get(Table.GROUPS, [gid])
            if group is not None:
                self._put(Table.DIGESTS, {group[0]: None})
            self._put(Table.GROUPS, {gid: None})
            self._clear(Table.GROUP_ITEMS, [gid])
            self._unfile(gid, band_keys)
            self._put(Table.COMPONENTS, {gid: None})

    def group_items(self, gids: Sequence[int]) -> list[list[str]]:
        return self._members(Table.GROUP_ITEMS, gids)

    def group_shingles(self, gids: Sequence[int]) -> list[np.ndarray]:
        out = []
        for gid, group in zip(gids, self._get(Table.GROUPS, gids)):
            if group is None:  # an item or a bucket names a group that is not stored: damaged data
                raise CorruptIndexError(f"{self!r}: group {gid} is named but not stored (no shingle set); the index is "
                                        "damaged: drop() it and index again")
            out.append(group[1])
        return out

    # --- components --------------------------------------------------------------------------
    def component_members(self, gids: Sequence[int]) -> list[frozenset[int]]:
        return [comp or frozenset((g,)) for g, comp in zip(gids, self._get(Table.COMPONENTS, gids))]

    def component_ids(self, gids: Sequence[int]) -> list[Hashable]:
        least: dict[int, int] = {}  # by the identity of a component's shared frozenset: one min() each
        out: list[Hashable] = []
        for g, comp in zip(gids, self._get(Table.COMPONENTS, gids)):
            if comp is None:
                out.append(g)
                continue
            found = least.get(id(comp))
            if found is None:
                found = least[id(comp)] = min(comp)
            out.append(found)
        return out

    def set_components(self, components: Sequence[Collection[int]]) -> None:
        update: dict[int, frozenset[int] | None] = {}
        for comp in components:
            shared = frozenset(comp) if len(comp) > 1 else None  # one object for all its members
            for g in comp:
                update[g] = shared
        with self.lock():
            self._put(Table.COMPONENTS, update)

    # --- clusters ----------------------------------------------------------------------------
    def get_clusters(self, keys: Sequence[str]) -> list[tuple[str, float] | None]:
        return self._get(Table.CLUSTER_OF, keys)

    def cluster_members(self, representatives: Sequence[str]) -> list[list[tuple[str, float]]]:
        return [list(m) if m else [] for m in self._get(Table.CLUSTERS, representatives)]

    def set_clusters(self, keys: Collection[str], clusters: Sequence[ClusterEntry]) -> None:
        keys = list(keys)
        entries: dict[str, tuple[str, float]] = {}
        lists: dict[str, list[tuple[str, float]]] = {}
        for rep, members in clusters:
            if len(members) < 2:
                continue
            lists[rep] = list(members)
            for key, sim in members:
                entries[key] = (rep, sim)
        with self.lock():
            olds = self._get(Table.CLUSTER_OF, keys)
            # The old entries go first, then the new ones are written (a list rewritten lands last
            # in a backend that keeps insertion order, as a new one does).
            self._put(Table.CLUSTER_OF, {k: None for k, old in zip(keys, olds) if old is not None})
            self._put(Table.CLUSTERS, {old[0]: None for old in olds if old is not None})
            self._put(Table.CLUSTERS, lists)
            self._put(Table.CLUSTER_OF, entries)

    def iter_clusters(self) -> Iterator[ClusterEntry]:
        return iter([(rep, list(members)) for rep, members in self._scan(Table.CLUSTERS)])
