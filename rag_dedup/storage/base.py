"""The storage contract of a :class:`~rag_dedup.index.DedupIndex`: what it keeps, and where.

An index keeps five kinds of state, all behind this interface so that it can live in process memory
(:class:`~rag_dedup.storage.memory.MemoryStorage`, the default, saved to a directory) or in Redis,
shared by many workers:

* **items** — every added key with its :class:`ItemRecord`; nothing is ever deleted but by ``remove``;
* **groups** — one per distinct canonical text (exact-duplicate class): its digest, its sorted
  shingle-hash array, the keys of its items, and its LSH bucket entries;
* **bands** — LSH buckets: band key → group ids;
* **components** — connected components of the verified near-duplicate graph over groups (only
  components of two or more groups are stored);
* **clusters** — for every item in a cluster of two or more items, its representative and its
  similarity to it; an item with no entry is a cluster of its own.

Every method works on a batch, so that a remote backend can answer in one round trip.
:meth:`Storage.lock` serialises writers where several processes share a store.

What each method must keep consistent (an item filed under its group and source, a group's parts,
components, clusters) is written once, in :class:`~rag_dedup.storage.bookkeeping.Bookkeeping`; the
shipped backends derive from it and implement only primitive batch operations on its tables. A
backend of your own may do the same, or implement this interface directly.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = ["EMPTY_GROUP", "ClusterEntry", "ItemRecord", "Storage"]

#: The group id of an item whose canonical text is empty: it belongs to no group and is no one's duplicate.
EMPTY_GROUP = -1

#: One cluster: (representative key, [(member key, similarity to the representative), ...]).
ClusterEntry = tuple[str, list[tuple[str, float]]]


class ItemRecord(NamedTuple):
    """What the index keeps of one added item (never its text)."""

    gid: int
    length: int
    source: str | None
    authority: float
    first_seen: float | None


class Storage(ABC):
    """Where a DedupIndex keeps its state. Subclasses implement every abstract method."""

    #: True when several processes can share this storage (and therefore the index).
    shared: bool = False

    # --- metadata ---------------------------------------------------------------------------
    @abstractmethod
    def load_meta(self) -> dict[str, Any] | None:
        """The stored index parameters, or None for a new store."""

    @abstractmethod
    def save_meta(self, meta: Mapping[str, Any]) -> None:
        """Store the index parameters."""

    def lock(self) -> contextlib.AbstractContextManager[Any]:
        """A context manager that holds the store's write lock (a no-op for a private store)."""
        return contextlib.nullcontext()

    def run_batch(self, body: Callable[[], None]) -> None:
        """Run ``body``, the reads and writes of one batch of the index, as one batch: here under :meth:`lock`.

        A shared store may run ``body`` more than once (RedisStorage commits optimistically and runs a
        batch again when another worker changed what it read): ``body`` must only read and write the
        store, from the same inputs each time.
        """
        with self.lock():
            body()

    # --- items ------------------------------------------------------------------------------
    @abstractmethod
    def get_items(self, keys: Sequence[str]) -> list[ItemRecord | None]:
        """The record of each key, or None where the key is unknown."""

    @abstractmethod
    def put_items(self, items: Mapping[str, ItemRecord]) -> None:
        """Add new items (keys not yet stored), filing each under its group and source."""

    @abstractmethod
    def delete_items(self, items: Mapping[str, ItemRecord]) -> None:
        """Remove items (with the records they were stored with) from items, groups and sources."""

    @abstractmethod
    def item_count(self) -> int:
        """How many items are stored."""

    @abstractmethod
    def iter_keys(self) -> Iterator[str]:
        """Every stored key."""

    @abstractmethod
    def keys_of_source(self, source: str) -> list[str]:
        """The keys added with ``source``."""

    # --- groups and bands -------------------------------------------------------------------
    @abstractmethod
    def find_groups(self, digests: Sequence[bytes]) -> list[int | None]:
        """The group id of each canonical-text digest, or None where there is none."""

    @abstractmethod
    def create_groups(self, digests: Sequence[bytes], shingles: Sequence[np.ndarray], band_keys: np.ndarray) -> list[int]:
        """Create one group per digest with its shingle array and ``band_keys`` row; return the new ids."""

    @abstractmethod
    def delete_group(self, gid: int, band_keys: np.ndarray) -> None:
        """Delete an empty group: its digest, shingles, bucket entries (``band_keys`` row) and component."""

    @abstractmethod
    def group_items(self, gids: Sequence[int]) -> list[list[str]]:
        """The keys filed under each group."""

    @abstractmethod
    def group_shingles(self, gids: Sequence[int]) -> list[np.ndarray]:
        """The sorted uint32 shingle array of each group."""

    @abstractmethod
    def query_bands(self, band_keys: np.ndarray) -> list[set[int]]:
        """For each row of an ``(n, b)`` band-key array, the ids of groups sharing at least one bucket."""

    def query_band_pairs(self, band_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`query_bands` as arrays: ``(rows, gids)``, one entry per distinct (row, group) pair.

        Both are int64 arrays, sorted by row, then group id. The default builds them from
        :meth:`query_bands`; a backend may override it to skip the Python sets (the bulk path of
        ``add_many`` reads candidates this way).
        """
        found = self.query_bands(band_keys)
        sizes = [len(s) for s in found]
        rows = np.repeat(np.arange(len(found), dtype=np.int64), sizes)
        gids = np.fromiter((g for s in found for g in sorted(s)), dtype=np.int64, count=sum(sizes))
        return rows, gids

    def add_new_item(
        self, key: str, record: ItemRecord, digest: bytes, shingles: np.ndarray, band_keys: np.ndarray
    ) -> tuple[ItemRecord, set[int]] | None:
        """Store one item whose key and canonical text are both new, alone in a new group: ``add()``'s
        common case, in one call.

        When ``key`` is not stored and ``digest`` has no group: asks the groups sharing a bucket with
        ``band_keys`` (the new group's ``(1, b)`` row), creates the group (``digest``, ``shingles``, that
        row) and stores ``record`` under the new group's id (``record.gid`` is not read). Returns the
        record as stored and those groups (asked before the new one was filed, so without it).
        Otherwise writes nothing and returns None.

        The default makes the calls it stands for, in order, under :meth:`lock`: :meth:`find_groups`,
        :meth:`get_items`, :meth:`query_bands`, :meth:`create_groups`, :meth:`put_items`; a backend may
        override it with the same effect in fewer steps (the memory store does).
        """
        with self.lock():
            (gid,) = self.find_groups([digest])
            (old,) = self.get_items([key])
            if gid is not None or old is not None:
                return None
            (candidates,) = self.query_bands(band_keys)
            (gid,) = self.create_groups([digest], [shingles], band_keys)
            stored = ItemRecord(gid, record.length, record.source, record.authority, record.first_seen)
            self.put_items({key: stored})
        return stored, candidates

    # --- components -------------------------------------------------------------------------
    @abstractmethod
    def component_members(self, gids: Sequence[int]) -> list[frozenset[int]]:
        """The full component of each group (``{gid}`` when it is alone)."""

    def component_ids(self, gids: Sequence[int]) -> list[Hashable]:
        """An id of each group's component: two groups have equal ids exactly when they share a component.

        A group alone has its own id as the id. The default takes the least group of
        :meth:`component_members`; a backend may answer without reading the members.
        """
        return [min(comp) for comp in self.component_members(gids)]

    @abstractmethod
    def set_components(self, components: Sequence[Collection[int]]) -> None:
        """Record each collection as one whole component (a single group means: alone)."""

    # --- clusters ---------------------------------------------------------------------------
    @abstractmethod
    def get_clusters(self, keys: Sequence[str]) -> list[tuple[str, float] | None]:
        """(representative, similarity) of each key, or None where the key is a cluster of its own."""

    @abstractmethod
    def cluster_members(self, representatives: Sequence[str]) -> list[list[tuple[str, float]]]:
        """The (key, similarity) members of each cluster of two or more items; [] otherwise."""

    @abstractmethod
    def set_clusters(self, keys: Collection[str], clusters: Sequence[ClusterEntry]) -> None:
        """Replace the clusters of ``keys`` (old entries dropped) by ``clusters`` (singletons not stored)."""

    @abstractmethod
    def iter_clusters(self) -> Iterator[ClusterEntry]:
        """Every cluster of two or more items."""

    @abstractmethod
    def drop(self) -> None:
        """Delete everything stored, metadata included."""

    def mend_for_drop(self) -> None:  # noqa: B027 - optional hook
        """Before :meth:`drop` under the lock: mend what would keep the lock from being taken (a shared
        store's damaged counters). The default does nothing."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections (:meth:`DedupIndex.close <rag_dedup.index.DedupIndex.close>` calls it); a later call
        may reconnect. The default does nothing."""
