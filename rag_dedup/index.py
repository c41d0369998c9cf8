"""DedupIndex: exact and near-duplicate clusters of texts, order-independent, nothing deleted.

How a text is placed:

1. **Exact pass.** Texts with the same :func:`~rag_dedup.normalize.canonical` form form one *group*
   (an exact-duplicate class). An empty canonical text forms no group: it is no one's duplicate.
2. **Candidates.** A new group's shingle set (token ``ngram``-grams, or for a short text character
   bigrams or its tokens: :func:`rag_dedup.shingles.short_measure`) gets a MinHash signature; LSH with
   ``b`` bands of ``r`` rows proposes every stored group that shares a band. (b, r) is chosen so that
   P(candidate) = 1 - (1 - s^r)^b >= 0.995 at s = threshold (see :mod:`rag_dedup.lsh`).
3. **Verification.** Each candidate is checked with the *exact* Jaccard of the two shingle sets; only
   pairs with J >= threshold become edges. An estimate from 128 permutations is noisy by about 0.035
   at J = 0.8, so it proposes but never decides. Before that, on the numpy reference path, candidates
   whose Jaccard *upper bound* (from bucket counts of the two sets,
   :func:`~rag_dedup.similarity.jaccard_upper_bounds`) is below the threshold are dropped in bulk: a
   bound, not an estimate, so no pair at or above it is lost (the compiled kernel of the exact Jaccard
   costs no more than the bound).
   Only the components of the verified pairs matter, so a pair whose groups are already joined is not
   verified, nor a pair of two stored groups (settled when the later was added); a new group is first
   tried against one member of each stored component in its bucket (:meth:`DedupIndex._link`), which
   keeps a family of n near-identical texts at a few verifications a text instead of n²/2 pairs.
4. **Clusters.** Connected components of the edge graph are cut into clusters around centers chosen
   by coverage (:func:`~rag_dedup.clusters.cluster_component`): a cluster is its center and every
   group at least ``drift_floor``-similar to it, and its representative is the policy's choice among
   the members at least ``drift_floor``-similar to every other member, so every member is within
   ``drift_floor`` of its representative and a chain A~B~C cannot glue together texts that share little.

Steps 1-4 depend only on the *set* of items, so adding the same items in any order, one at a time or
in batches, gives the same clusters and representatives. A cluster's id is its representative's key.
Every added key stays until :meth:`DedupIndex.remove`, pointing at its representative.

Example:
    >>> index = DedupIndex(threshold=0.8)
    >>> text = ("Permission is hereby granted, free of charge, to any person obtaining a copy of this software "
    ...         "and associated documentation files, to deal in the Software without restriction")
    >>> index.add("mit-1", text).kind
    'unique'
    >>> m = index.add("mit-2", text.upper())
    >>> m.kind, m.duplicate_of, m.cluster_size
    ('exact', 'mit-1', 2)
    >>> m = index.add("mit-3", text + ", including without limitation")  # the longest text represents
    >>> m.kind, m.duplicate_of, m.cluster_size, m.displaced
    ('near', None, 3, 'mit-1')
    >>> m = index.match("mit-1")  # "exact": mit-2 has its canonical text
    >>> m.kind, m.duplicate_of, round(m.similarity, 3)
    ('exact', 'mit-3', 0.815)
    >>> index.members("mit-3")
    ['mit-3', 'mit-1', 'mit-2']
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import os
import warnings
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple, TypeVar, cast

import numpy as np

from rag_dedup import compiled, lsh, settings
from rag_dedup._gc import gc_paused
from rag_dedup.clusters import Family, UnionFind, _cluster_two, cluster_component, cluster_components
from rag_dedup.compiled.index import jaccard_of, pair_jaccard
from rag_dedup.errors import CorruptIndexError, IndexIncomplete, IndexMismatchError, KeyConflictError, PolicyError
from rag_dedup.finite import is_finite_number
from rag_dedup.minhash import SCHEME, MinHasher
from rag_dedup.normalize import NORMALIZATION, canonical
from rag_dedup.policy import Member, Policy, default_rank, longest_then_authority
from rag_dedup.shingles import (
    DEFAULT_NGRAM, SHORT_TOKENS, canonical_digest, check_rules, shingle_hashes_many, shingles_and_digests, shingles_digest_and_keys,
)  # fmt: skip
from rag_dedup.similarity import jaccard, jaccard_many, jaccard_pairs, jaccard_upper_bounds
from rag_dedup.storage.base import EMPTY_GROUP, ClusterEntry, ItemRecord, Storage
from rag_dedup.storage.memory import MemoryStorage
from rag_dedup.surrogates import check_unicode

__all__ = ["FORMAT_VERSION", "SHINGLING", "DedupIndex", "Match"]

#: Version of the index's stored layout (directory and Redis).
FORMAT_VERSION = settings.INDEX_FORMAT_VERSION
#: Name and version of the shingle hashing in :mod:`rag_dedup.shingles` (stored shingles depend on it).
#: v3: texts of 12 to ``short_tokens`` tokens are token sets (v2: character trigrams).
#: v4: a run of ``HANGUL_RUN`` or more Hangul syllables is apart from letters stuck to it (v3: its first
#: syllable stayed one token with the letters before it, unlike the rule, :func:`normalize.shingle_tokens`).
SHINGLING = "tokens-poly64-fmix64-v4"
#: The stored parameters that name a rule of this rag-dedup (not a choice of the caller): an index that
#: differs in one was made by another version of the library, and only a rebuild brings it up to date.
_RULE_VERSIONS = frozenset({"scheme", "normalization", "shingling"})
T = TypeVar("T")

# add_many indexes items in batches of _BATCH, or of a _BATCH_SHARE-th of the items already indexed
# when that is more (at most _BATCH_MAX). A batch's temporaries (signatures, band keys) stay a small
# share of the index. Its band lookups and merges each sweep the sorted band tables once, in order;
# were batches fixed while the tables grow, the lookups would land far apart in tables far larger
# than the CPU caches, and each merge would copy a larger table for the same few new entries
# (the README's Performance section has the measurement).
_BATCH = 1024
_BATCH_SHARE = 16
_BATCH_MAX = 16384
# Texts hashed, and shingle sets signed, at a time within a batch: a block's temporaries (word and
# shingle hashes, the (num_perm, shingles) permutation blocks, uint64 band products) are what the
# peak memory of add_many pays above the index itself.
_HASH_BLOCK = 64
# Band keys of the new groups of a batch at most this many: their buckets are looked up by
# DedupIndex._lookup_few (Python) rather than _lookup_buckets and _buckets (numpy: a fixed cost a call).
_FEW_KEYS = 256
# A component of at least _FAMILY_MIN groups keeps its shingle counts between reclusterings
# (rag_dedup.clusters.Family); at most _FAMILIES are kept (a few MB each for a family of 20,000).
_FAMILY_MIN = 512
_FAMILIES = 4
# add_many of at most this many items into a private store hashes and signs them together, then places
# them one at a time (DedupIndex._add_few) instead of as a batch: below it, a batch's fixed cost (its
# bucket lookup, verification and bookkeeping in numpy) is more than the one-item path's cost per item.
# The crossover, measured on the 20k-chunk stream of bench_stream.py (blocks of k added to both paths
# in turn): one at a time 1.37x faster a chunk on blocks of 1, 1.04-1.37x on 8 to 48, even at 64 to
# 128 (0.97-1.00), slower from 200 (0.91) and 400 (0.78).
_ONE_BY_ONE = 64
# An add() whose new group has more candidates than this hands them to DedupIndex._link_and_recluster
# as one bucket, whose _link verifies it against one member of each stored component there, not against
# every candidate: joining a family of n near-identical texts costs ~1 verification there, n on the
# one-item path (bench_families.py: one add() into a family of 20,000 took 2.07 s verifying every
# candidate, 0.16-0.19 s the other way).
_FEW_CANDIDATES = 64
# Components reclustered at a time by _recluster_deferred (their storage reads made together:
# DedupIndex._cluster_components), so that the shingle sets read stay those of one block.
_CLUSTER_BLOCK = 256
# Candidate pairs verified at a time by _link_and_recluster (pairs already joined are skipped).
_VERIFY_BLOCK = 4096

# _jaccard_to verifies up to this many candidates a kernel call each (jaccard_of), more in one packed call
# (pair_jaccard): a call costs ~0.4 us, packing the sets ~5 us.
_PAIRWISE = 8

Kind = Literal["unique", "exact", "near"]


def _batch_size(indexed: int) -> int:
    """How many items :meth:`DedupIndex.add_many` takes in its next batch, ``indexed`` items in."""
    return min(_BATCH_MAX, max(_BATCH, indexed // _BATCH_SHARE))


class Match(NamedTuple):
    """Where an item stands.

    Attributes:
        key: The item.
        cluster_id: Its cluster, named by the representative's key: the one id to use (the stamps,
            :meth:`~DedupIndex.members` and :meth:`~DedupIndex.clusters` name clusters by it).
        representative: The same key as ``cluster_id``, always (a field of this tuple since the first
            release, so it stays; read ``cluster_id``).
        duplicate_of: The representative, or None when the item is the representative.
        similarity: Exact Jaccard similarity of the item's shingles to the representative's (1.0 for
            the representative itself and for exact copies of it).
        kind: The item's place in its cluster: ``"unique"`` for a cluster of one, ``"exact"`` when
            another member has the same canonical text, ``"near"`` otherwise (a representative too:
            it stands for near-duplicates).
        cluster_size: The number of items in the cluster (1 for ``"unique"``).
        displaced: In a Match returned by :meth:`~DedupIndex.add`, :meth:`~DedupIndex.add_many` or
            :meth:`~DedupIndex.update`: the key that represented this cluster's earlier members
            (those already in the index before the call) and no longer does, because the call changed
            the representative (the item itself took over, or another member did); when the earlier
            members came from several clusters, the representative of most of them (ties: the
            smallest key). None when the representative did not change, for a cluster of one, and
            always in a Match from :meth:`~DedupIndex.match` or :meth:`~DedupIndex.matches`.
    """

    key: str
    cluster_id: str
    representative: str
    duplicate_of: str | None
    similarity: float
    kind: Kind
    cluster_size: int
    displaced: str | None = None


class _Item(NamedTuple):
    key: str
    text: str
    source: str | None
    authority: float
    first_seen: float | None


_new_item = tuple.__new__  # _Item(...) without the keyword-handling constructor (hot path)


_F = TypeVar("_F", bound=Callable[..., Any])


def _whole_or_incomplete(method: _F) -> _F:
    """A change of the index that a failed representative policy stops half-way leaves a private store
    part-updated (its items stored, their clusters not): the index then refuses every later call with
    :class:`IndexIncomplete` rather than answer from that state. A shared store's batch records nothing
    when it fails, so a Redis index stays usable. The policy is a user's function, the only step of a
    change that can fail after the change's checks."""

    @functools.wraps(method)
    def guarded(self: DedupIndex, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except PolicyError as e:
            storage = self._storage
            if not isinstance(storage, _Incomplete) and not storage.shared:
                self._storage = _Incomplete(  # type: ignore[assignment]
                    f"this in-memory index is incomplete: {e}, in the middle of {method.__name__}(), after part of "
                    "that change was stored; its answers would be wrong. Rebuild it from its texts (drop() empties it)",
                    storage,
                )
            raise

    return guarded  # type: ignore[return-value]


class DedupIndex:
    """Exact and near-duplicate clusters over keyed texts.

    Args:
        threshold: Jaccard similarity of shingle sets at and above which two texts are duplicates.
        num_perm: MinHash permutations (signature length).
        ngram: Words per shingle.
        storage: Where the state lives: None for this process's memory, a ``redis://`` or
            ``rediss://`` URL (needs ``pip install rag-dedup[redis]``), or a
            :class:`~rag_dedup.storage.base.Storage`.
        namespace: Key prefix for a Redis storage (several indexes can share one server).
        policy: Chooses a cluster's representative from its members; must be a pure function of them.
            Default: longest text, then highest authority, then earliest first_seen, then smallest key.
        seed: MinHash permutation seed.
        drift_floor: No member of a cluster is less similar than this to its representative: a cluster
            is its center and the texts at least this similar to it, and only members at least this
            similar to every other member may represent it. Default ``threshold - 0.1``.
        ignore_decoration: Shingle without comment and list markers, punctuation-only tokens and
            line-leading numbers, reading ``https://`` as ``http://``
            (:func:`~rag_dedup.normalize.shingle_tokens`); exact copies are still judged on the whole
            canonical text. Stored with the index.
        short_tokens: Texts of 3 to this many tokens are compared in the short-text regime (character
            bigrams below 12 tokens, token sets from 12: :func:`rag_dedup.shingles.short_measure`);
            0 turns it off. Stored with the index.

    Raises:
        ValueError: A parameter is out of range, or the storage holds an index made with others.
        TypeError: A parameter has the wrong type.
    """

    # The groups whose components add_many reclusters after its last batch (None: not deferring).
    _deferred: set[int] | None = None
    # The kept counts of big components (see _family), most recently used first (always replaced,
    # never changed in place, so this shared empty default stays empty).
    _families: list[Family] = []

    def __init__(
        self,
        threshold: float = 0.8,
        num_perm: int = 128,
        ngram: int = DEFAULT_NGRAM,
        storage: Storage | str | None = None,
        *,
        namespace: str = "rag-dedup",
        policy: Policy | None = None,
        seed: int = 1,
        drift_floor: float | None = None,
        ignore_decoration: bool = True,
        short_tokens: int = SHORT_TOKENS,
    ) -> None:
        threshold = settings.check_threshold(threshold)
        num_perm = settings.check_num_perm(num_perm)  # before MinHasher allocates num_perm permutations
        ngram = settings.check_ngram(ngram)
        seed = settings.check_seed(seed)
        drift_floor = settings.check_drift_floor(drift_floor, threshold)
        if policy is not None and not callable(policy):
            raise TypeError(f"policy must be callable, got {type(policy).__name__}")
        check_rules(ignore_decoration, short_tokens)
        self.ignore_decoration = ignore_decoration
        self.short_tokens = short_tokens
        self.threshold = threshold
        self.drift_floor = drift_floor
        self.ngram = ngram
        self.policy: Policy = policy or longest_then_authority
        self._hasher = MinHasher(num_perm=num_perm, seed=seed)
        self.num_perm = num_perm
        self.seed = seed
        self.bands: tuple[int, int] = lsh.choose_bands(self.threshold, num_perm)
        self._storage: Storage = _open_storage(storage, namespace)
        # Under the lock: two workers opening a new shared namespace at once must not both write
        # their parameters (the second would overwrite the first's unchecked).
        with self._storage.lock():
            stored = self._storage.load_meta()
            if stored is None:
                self._storage.save_meta(self._meta())
        if stored is not None:
            self._check_meta(stored, where=repr(self._storage))

    # --- parameters -----------------------------------------------------------------------
    @property
    def knee(self) -> float:
        """(1/b)^(1/r): where the candidate S-curve of the chosen bands is steepest."""
        return lsh.knee(*self.bands)

    @property
    def storage(self) -> Storage:
        """Where the index lives (:class:`~rag_dedup.storage.memory.MemoryStorage`, or a Redis store). Of an
        in-memory index a failed policy left incomplete (:func:`_whole_or_incomplete`), a stand-in whose
        every use raises :class:`IndexIncomplete`."""
        return self._storage

    @property
    def shared(self) -> bool:
        """True when the index lives in a store that several processes share (Redis)."""
        return self._storage.shared

    def _meta(self) -> dict[str, Any]:
        b, r = self.bands
        return {
            "format": settings.INDEX_FORMAT,
            "format_version": FORMAT_VERSION,
            "threshold": self.threshold,
            "drift_floor": self.drift_floor,
            "num_perm": self.num_perm,
            "seed": self.seed,
            "scheme": SCHEME,
            "b": b,
            "r": r,
            "ngram": self.ngram,
            "normalization": NORMALIZATION,
            "shingling": SHINGLING,
            "ignore_decoration": self.ignore_decoration,
            "short_tokens": self.short_tokens,
            "policy": _policy_name(self.policy),
        }

    def _check_meta(self, stored: Mapping[str, Any], where: str) -> None:
        version = stored.get("format_version")
        if stored.get("format") != settings.INDEX_FORMAT or not isinstance(version, int):
            raise IndexMismatchError(f"{where} does not hold a rag-dedup index (no format/format_version)")
        if version > FORMAT_VERSION:
            raise IndexMismatchError(
                f"{where} holds index format {version}, newer than this rag-dedup understands "
                f"({FORMAT_VERSION}); upgrade rag-dedup"
            )
        expected = self._meta()
        names = ("threshold", "drift_floor", "num_perm", "seed", "scheme", "b", "r", "ngram", "normalization", "shingling")
        for name in (*names, "ignore_decoration", "short_tokens"):
            if stored.get(name) != expected[name] and not _same_default_floor(name, stored.get(name), expected[name]):
                fix = (
                    "this rag-dedup computes it another way, so rebuild the index from its texts"
                    if name in _RULE_VERSIONS
                    else "open it with the same parameters (DedupIndex.load reads them from the files)"
                )
                raise IndexMismatchError(
                    f"{where} was built with {name}={stored.get(name)!r} but this index has {name}={expected[name]!r}; {fix}"
                )
        if stored.get("policy") != expected["policy"]:
            raise IndexMismatchError(
                f"{where} was built with representative policy {stored.get('policy')!r} but this index uses "
                f"{expected['policy']!r}; pass policy= the same function"
            )

    # --- adding -----------------------------------------------------------------------------
    @_whole_or_incomplete
    def add(
        self,
        key: str,
        text: str,
        *,
        source: str | None = None,
        authority: float = 0.0,
        first_seen: float | _dt.datetime | None = None,
    ) -> Match:
        """Add one text under ``key`` and return where it stands now.

        Args:
            key: A unique key (for example a node id).
            text: The original text; duplicates are judged on its canonical form.
            source: Where it came from (a document id, a path): reports count removals per source.
            authority: Higher wins a tie in length when choosing the representative.
            first_seen: A POSIX timestamp or datetime; earlier wins the next tie. None counts as latest.

        Raises:
            TypeError: ``key`` or ``text`` (or another argument) has the wrong type.
            InvalidTextError: ``key``, ``text`` or ``source`` holds a lone surrogate (not valid Unicode;
                see :mod:`rag_dedup.surrogates`); nothing is added.
            KeyConflictError: ``key`` is already in the index with another text or metadata (``remove``
                it first to replace it, or use :meth:`update`); a ``ValueError``. Adding an identical
                item again is a no-op.
        """
        item = _parse_item(key, text, source, authority, first_seen, where="")
        previous: dict[str, str] = {}
        alone = self._add_one(item, previous)
        if alone is not None:
            return alone
        return self._matches([key], previous, {key})[0]

    def _add_one(self, item: _Item, previous: dict[str, str]) -> Match | None:
        """:meth:`_add_batch` of one checked item, without the machinery that pays off for a batch.

        The same steps, in the same order under the lock, with the same result: one text hashed and
        signed, then placed by :meth:`_place_one`. Returns its :class:`Match` when it is a new group
        (most texts), else None and :meth:`add` asks :meth:`_matches`.
        """
        shingles, digest, band_keys = shingles_digest_and_keys(
            item.text, self.ngram, ignore_decoration=self.ignore_decoration, short_tokens=self.short_tokens,
            hasher=self._hasher, b=self.bands[0], r=self.bands[1],
        )  # fmt: skip
        if digest is None or band_keys is None:
            self._add_batch([item], previous)
            return None
        return self._place_one(item, shingles, digest, band_keys, previous)

    def _place_one(
        self, item: _Item, shingles: np.ndarray, digest: bytes, band_keys: np.ndarray, previous: dict[str, str]
    ) -> Match | None:
        """Store one hashed item (its canonical text not empty; ``band_keys`` its ``(1, b)`` row) and place it.

        A new key with a new canonical text (most items) is stored in one storage call,
        :meth:`~rag_dedup.storage.base.Storage.add_new_item`: its new group filed and its candidates
        (every stored group that shares a band with it, asked before it was filed) returned; in memory
        the band lookup (:func:`~rag_dedup.compiled.index.band_lookup`, one kernel call) and the filing
        are one pass over the band table's buffer. For a single new group the pairs to verify are those
        with each candidate, whatever bands they share: they are verified here at once, and those at or
        above the threshold are its edges, which join it and their stored components into one
        component, reclustered here (what :meth:`_link_and_recluster` makes of them).
        A new group with none (no bucket shared, or only false candidates) is a cluster of its own:
        its :class:`Match` is returned at once, without reading the store again; a new group with
        edges gets its :class:`Match` from the clusters just stored (:func:`_new_group_match`).
        Otherwise (an exact copy of a stored text, a key already in the index: :meth:`_place_known`;
        a new group with more than ``_FEW_CANDIDATES`` candidates: its candidates handed to
        :meth:`_link_and_recluster` as one bucket, whose :meth:`_link` probes each stored component
        once) returns None.
        """
        if not self._storage.shared:
            with self._storage.lock():  # a no-op: nobody else writes a private store
                return self._place_one_here(item, shingles, digest, band_keys, previous)
        # A shared store runs it as a batch of its own (RedisStorage: optimistically, without the lock).
        return self._in_one_batch(
            lambda noted: self._place_one_here(item, shingles, digest, band_keys, cast(dict, noted)), previous
        )

    def _place_one_here(
        self, item: _Item, shingles: np.ndarray, digest: bytes, band_keys: np.ndarray, previous: dict[str, str]
    ) -> Match | None:
        """The body of :meth:`_place_one`, inside the store's lock or batch."""
        storage = self._storage
        key = item.key
        # The common case first, in one storage call: a new key with a new text, alone in a new group.
        placed = storage.add_new_item(
            key, tuple.__new__(ItemRecord, (EMPTY_GROUP, len(item.text), item.source, item.authority, item.first_seen)),
            digest, shingles, band_keys,
        )  # fmt: skip
        if placed is None:  # a stored key (a retried add or an error) or an exact copy of a stored text
            return self._place_known(item, digest, previous)
        record, candidates = placed
        if not candidates:  # no bucket shared: a cluster of its own (most texts)
            return tuple.__new__(Match, (key, key, key, None, 1.0, "unique", 1, None))
        gid = record.gid
        if len(candidates) > _FEW_CANDIDATES:  # a big family's buckets: one probe a component there
            self._link_and_recluster(
                [gid], [(sorted(candidates), [gid])], {gid: shingles}, fresh_items={key: record}, previous=previous
            )
            return None
        # A candidate below the threshold is no edge; none at or above it (a false candidate: a shared
        # boilerplate line) leaves the new group a cluster of its own.
        olds = sorted(candidates)
        found = storage.group_shingles(olds)
        known: dict[int, np.ndarray] = {gid: shingles}  # the new group's shingles and those of the groups it links
        linked: list[int] = []
        threshold = self.threshold
        edge = 0.0
        for g, sh, sim in zip(olds, found, _jaccard_to(shingles, found)):
            if sim >= threshold:
                linked.append(g)
                known[g] = sh
                edge = sim
        if not linked:
            return tuple.__new__(Match, (key, key, key, None, 1.0, "unique", 1, None))
        # Its edges join the new group and the stored components of the groups it links into one
        # component: what _link_and_recluster makes of them, without its general machinery.
        comp = {gid}.union(*storage.component_members(linked))
        storage.set_components([comp])
        if len(comp) == 2 and compiled.COMPILED:  # a text and its one stored near-duplicate (most near-duplicates)
            keys, clusters = self._cluster_pair(*sorted((linked[0], gid)), edge)
        else:
            keys, clusters = self._cluster_component(sorted(comp), known)
        self._store_clusters(keys, clusters, previous)
        return _new_group_match(key, clusters, previous)

    def _place_known(self, item: _Item, digest: bytes, previous: dict[str, str]) -> None:
        """:meth:`_place_one` of an item whose key is stored (the batch path: a retried add is a no-op, else
        an error) or whose canonical text is (an exact copy: placed in its group's unchanged component,
        what _link_and_recluster does with a touched old group and no new edges). Under the lock."""
        storage = self._storage
        key = item.key
        (gid,) = storage.find_groups([digest])
        (old,) = storage.get_items([key])
        if old is not None or gid is None:
            self._add_batch([item], previous)
            return
        record: ItemRecord = tuple.__new__(ItemRecord, (gid, len(item.text), item.source, item.authority, item.first_seen))
        storage.put_items({key: record})
        (comp,) = storage.component_members([gid])
        placed = self._place_exact_copies(set(comp), {key: record})
        self._store_clusters(*(placed or self._cluster_component(sorted(comp), {})), previous)

    def _add_few(self, parsed: Sequence[_Item], previous: dict[str, str]) -> bool:
        """:meth:`_add_parsed` of a few checked items (at most ``_ONE_BY_ONE``) into a private store: hashed
        and signed together, then placed one at a time by :meth:`_place_one`, which costs less than
        a batch's fixed cost for so few. The same final state (the clusters are a pure function of
        the set of items) and the same ``previous``. A batch that holds a key already in the index
        takes the batch path whole (it is a no-op or an error before anything is written).

        Returns True when every key was new (then :meth:`_new_matches` may answer), False when the
        batch path took them.
        """
        storage = self._storage
        if any(rec is not None for rec in storage.get_items([item.key for item in parsed])):
            self._add_parsed(parsed, previous)
            return False
        sets, digests = shingles_and_digests(
            [item.text for item in parsed], self.ngram, ignore_decoration=self.ignore_decoration, short_tokens=self.short_tokens
        )
        signed = [i for i, d in enumerate(digests) if d is not None]
        band_keys = self._band_keys([sets[i] for i in signed]) if signed else None
        row_of = {i: row for row, i in enumerate(signed)}
        with gc_paused(), storage.lock():  # as _add_parsed
            for i, (item, d) in enumerate(zip(parsed, digests)):
                if d is None:
                    self._add_batch([item], previous)
                else:
                    row = row_of[i]
                    self._place_one(item, sets[i], d, band_keys[row : row + 1], previous)  # type: ignore[index]
        return True

    def _new_matches(self, keys: Sequence[str], previous: Mapping[str, str]) -> list[Match]:
        """``_matches(keys, previous, set(keys))`` of keys that were all new to the index before this call
        (``previous`` as the call left it), reading the store only for the keys the call reclustered.

        Every cluster entry a call writes goes through :meth:`_store_clusters`, which first notes the
        key in ``previous``; a new key not there has no entry, so it is a cluster of its own ("unique",
        what :meth:`_matches` says of a key without one). Most new texts are.
        """
        touched = [key for key in keys if key in previous]
        found = dict(zip(touched, self._matches(touched, previous, set(keys)))) if touched else {}
        make = tuple.__new__
        return [found.get(key) or make(Match, (key, key, key, None, 1.0, "unique", 1, None)) for key in keys]

    @_whole_or_incomplete
    def add_many(self, items: Iterable[tuple[str, str] | Mapping[str, Any]]) -> list[Match]:
        """Add many texts; the same final state as adding them one by one, in any order, much faster.

        Args:
            items: ``(key, text)`` pairs, or mappings with ``key`` and ``text`` and optionally
                ``source``, ``authority`` and ``first_seen``.

        Returns:
            One :class:`Match` per item, as things stand after the whole batch.

        Raises:
            TypeError, ValueError, InvalidTextError, KeyConflictError: As :meth:`add`, naming the offending item
                (``items[i]``) and argument; nothing is added then
                from the batch that held it (batches of 1,024 items, or of a sixteenth of the
                items already indexed when that is more, at most 16,384).

        The cyclic garbage collector is paused while this runs and restored afterwards. Up to 64 items
        into a private store (one document's chunks) are hashed together and then placed one at a
        time, which costs less than a batch for so few: the same result either way.
        """
        parsed = _parse_many(items)
        previous: dict[str, str] = {}
        keys = [item.key for item in parsed]
        if len(parsed) <= _ONE_BY_ONE and not self._storage.shared:
            if self._add_few(parsed, previous):
                return self._new_matches(keys, previous)
        else:
            self._add_parsed(parsed, previous)
        return self._matches(keys, previous, set(keys))

    @_whole_or_incomplete
    def update(
        self, items: Iterable[tuple[str, str] | Mapping[str, Any]], remove: Iterable[str] = ()
    ) -> tuple[list[Match], int]:
        """Remove keys and add or replace items in one step that applies whole or not at all.

        Every key of ``remove`` leaves the index. An item whose key is present with another text or
        metadata replaces it; an item present unchanged stays as it is (not hashed or reclustered
        again); the others are added. The result is the index that removing those keys and then
        adding the items gives.

        All or nothing: every item and key is checked before anything changes, and in a shared
        store the whole step is one batch under the write lock, committed at once (a connection
        lost meanwhile records none of it). An in-memory index has nothing left to fail after the
        checks but its memory.

        Args:
            items: As for :meth:`add_many`.
            remove: Keys to remove (each must be in the index).

        Returns:
            One :class:`Match` per item after the step, and how many items were added or replaced.

        Raises:
            TypeError, ValueError: As :meth:`add_many`, naming the item; ``remove`` is a str (one key: pass ``[key]``).
            KeyError: A key of ``remove`` is not in the index.
        """
        parsed = _parse_many(items)
        gone = list(dict.fromkeys(_key_list(remove, "remove")))
        for key in gone:
            _check_key(key, "remove key")
        storage = self._storage
        with storage.lock():
            for key, rec in zip(gone, storage.get_items(gone)):
                if rec is None:
                    raise KeyError(f"{key!r} is not in the index (asked to remove it)")
            leaving = set(gone)
            present = [
                (item, rec)
                for item, rec in zip(parsed, storage.get_items([item.key for item in parsed]))
                if rec is not None and item.key not in leaving
            ]
            digests = [canonical_digest(item.text) for item, _ in present]
            known = [d for d in digests if d is not None]
            found = dict(zip(known, storage.find_groups(known)))
            kept: set[str] = set()
            for (item, rec), d in zip(present, digests):
                gid = EMPTY_GROUP if d is None else found[d]
                if rec == (gid, len(item.text), item.source, item.authority, item.first_seen):
                    kept.add(item.key)
                else:
                    gone.append(item.key)
            written = [item for item in parsed if item.key not in kept]
            # Nothing below can refuse a text: the only texts hashing refuses (not a str, a lone
            # surrogate) were refused by _parse_many above, before the removals or a first batch.
            previous: dict[str, str] = {}
            for key in gone:
                self._remove(key, previous)
            self._add_parsed(written, previous)
            return self._matches([item.key for item in parsed], previous, {item.key for item in written}), len(written)

    def _add_parsed(self, parsed: Sequence[_Item], previous: dict[str, str] | None = None) -> None:
        """Add checked items in batches (see :meth:`add_many`); ``previous`` as for :meth:`_link_and_recluster`."""
        # More than one batch into a private store: the components the batches change are
        # reclustered once, after the last one (see _recluster_deferred), not after every batch
        # that touches them. A shared store commits each batch whole, its clusters with it, so
        # that other workers (and a batch lost with its connection) never see items unplaced.
        self._deferred = set() if not self._storage.shared and len(parsed) > _batch_size(len(self)) else None
        # The cyclic garbage collector is paused meanwhile (and restored, also on error): a batch
        # allocates many small objects that cannot form cycles, and each collection they trigger
        # would walk the caller's whole heap (all their nodes and documents) again.
        with gc_paused():
            try:
                start = 0
                while start < len(parsed):
                    size = _batch_size(len(self))
                    self._add_batch(parsed[start : start + size], previous)
                    start += size
            finally:
                self._recluster_deferred(previous)

    def _add_batch(self, items: Sequence[_Item], previous: dict[str, str] | None = None) -> None:
        storage = self._storage
        # Pure computation first, outside the lock, so that workers sharing a store hash in parallel.
        # Hashed a block of texts at a time: the temporaries of hashing stay those of one block.
        all_sets: list[np.ndarray] = []
        digests: list[bytes | None] = []
        for lo in range(0, len(items), _HASH_BLOCK):
            block_sets, block_digests = shingles_and_digests(
                [item.text for item in items[lo : lo + _HASH_BLOCK]],
                self.ngram,
                ignore_decoration=self.ignore_decoration,
                short_tokens=self.short_tokens,
            )
            all_sets.extend(block_sets)
            digests.extend(block_digests)
        first: dict[bytes, int] = {}
        for i, d in enumerate(digests):
            if d is not None:
                first.setdefault(d, i)
        unique = list(first)
        sets = [all_sets[i] for i in first.values()]
        del all_sets
        band_keys = self._band_keys(sets)

        # The storage phase, one batch (see _in_one_batch): it starts from the same items and digests each time.
        def store(
            previous_here: dict[str, str] | None, items: Sequence[_Item] = items, digests: list[bytes | None] = digests
        ) -> None:
            gid_of = dict(zip(unique, storage.find_groups(unique)))
            # Re-adding a key is a no-op when nothing about it changed (a retried batch), else an error;
            # checked before anything is written.
            keys = [item.key for item in items]
            again: set[str] = set()
            for item, d, old in zip(items, digests, storage.get_items(keys)):
                if old is None:
                    continue
                gid = EMPTY_GROUP if d is None else gid_of[d]
                if old != (gid, len(item.text), item.source, item.authority, item.first_seen):
                    raise KeyConflictError(
                        f"key {item.key!r} is already in the index with another text or metadata; "
                        "remove() it first to replace it"
                    )
                again.add(item.key)
            if again:
                items = [item for item in items if item.key not in again]
                digests = [canonical_digest(item.text) for item in items]
            wanted = {d for d in digests if d is not None and gid_of[d] is None}
            fresh = [i for i, d in enumerate(unique) if d in wanted]
            fresh_sets = [sets[i] for i in fresh]
            fresh_keys = band_keys[fresh]
            # The buckets of the new groups, each once, with the stored groups in them (asked before the
            # new ones are filed, so a group does not find itself).
            pairs: list[tuple[int, int]] = []
            if fresh_keys.size <= _FEW_KEYS:
                few = self._lookup_few(fresh_keys)
                new_gids = storage.create_groups([unique[i] for i in fresh], fresh_sets, fresh_keys)
                buckets = [(old, [new_gids[row] for row in rows]) for old, rows in few]
            elif compiled.COMPILED and isinstance(storage, MemoryStorage):
                # One kernel call (rag_dedup.compiled.batch.batch_buckets): the two-group buckets come
                # as the pairs _link would make of them, the others as buckets.
                found = storage.bands.batch_buckets(fresh_keys)
                new_gids = storage.create_groups([unique[i] for i in fresh], fresh_sets, fresh_keys)
                pairs, buckets = _kernel_buckets(found, new_gids)
            else:
                slot, bucket_rows, bucket_gids = self._lookup_buckets(fresh_keys)
                new_gids = storage.create_groups([unique[i] for i in fresh], fresh_sets, fresh_keys)
                pairs, buckets = _split_buckets(slot, fresh_keys.shape[1], new_gids, bucket_rows, bucket_gids)
            gid_of.update(zip((unique[i] for i in fresh), new_gids))
            new_record = tuple.__new__
            records = {
                item.key: new_record(
                    ItemRecord,
                    (EMPTY_GROUP if d is None else gid_of[d], len(item.text), item.source, item.authority, item.first_seen),
                )
                for item, d in zip(items, digests)
            }
            storage.put_items(records)
            shingles = dict(zip(new_gids, fresh_sets))
            # Groups that changed: new ones, and old ones that received an exact copy.
            touched = list(dict.fromkeys(rec.gid for rec in records.values() if rec.gid != EMPTY_GROUP))
            self._link_and_recluster(touched, buckets, shingles, fresh_items=records, previous=previous_here, pairs=pairs)

        self._in_one_batch(store, previous)

    def _in_one_batch(self, body: Callable[[dict[str, str] | None], T], previous: dict[str, str] | None) -> T:
        """``body``'s answer, ``body`` run as one batch of the store (:meth:`Storage.run_batch
        <rag_dedup.storage.base.Storage.run_batch>`), given a dict of its own in which to note the
        representatives it replaces (None when ``previous`` is None).

        A shared store may run ``body`` more than once (an optimistic attempt refused because another
        worker's commit changed what it read): only the committed attempt's answer and notes count (a
        refused attempt saw representatives that the other commit may have changed); its notes join
        ``previous`` where a key has none yet (a key an earlier batch of the same call noted keeps its entry).
        """
        answer: list[T] = []
        noted: list[dict[str, str]] = []

        def attempt() -> None:
            noted[:] = [{}]
            answer[:] = [body(None if previous is None else noted[0])]

        self._storage.run_batch(attempt)
        if previous is not None:
            for key, rep in noted[0].items():
                previous.setdefault(key, rep)
        return answer[0]

    def _lookup_buckets(self, band_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The stored groups of every bucket of ``band_keys`` (an ``(n, b)`` array), each bucket asked once.

        Returns ``slot`` (for each entry of ``band_keys.reshape(-1)``, the number of its distinct key)
        and the pairs ``(bucket_rows, bucket_gids)``: distinct key number and a stored group filed under
        it. A family of near-identical texts fills a few buckets with most of its groups; asking each
        bucket once costs the bucket's size, where asking per new group would cost it once per group.
        """
        keys, slot = np.unique(band_keys.reshape(-1), return_inverse=True)
        bucket_rows, bucket_gids = self._storage.query_band_pairs(keys[:, None])
        return slot.reshape(-1), bucket_rows, bucket_gids

    def _lookup_few(self, band_keys: np.ndarray) -> list[tuple[list[int], list[int]]]:
        """:meth:`_lookup_buckets` and :func:`_buckets` in one, for the few rows of one ``add`` or small
        ``add_many`` (``band_keys.size <= _FEW_KEYS``), in Python rather than a dozen numpy calls.

        Returns the buckets that hold a row of ``band_keys`` and another group (a stored one or another
        row) as ``(stored gids, rows)``, in the order and with the contents of :func:`_buckets` (by key;
        rows and stored gids ascending).
        """
        width = band_keys.shape[1]
        rows_of: dict[int, list[int]] = {}
        for i, key in enumerate(band_keys.reshape(-1).tolist()):
            rows_of.setdefault(key, []).append(i // width)
        distinct = sorted(rows_of)
        found_rows, found_gids = self._storage.query_band_pairs(np.array(distinct, dtype=np.uint64)[:, None])
        stored: dict[int, list[int]] = {}
        for k, gid in zip(found_rows.tolist(), found_gids.tolist()):
            stored.setdefault(k, []).append(gid)
        out = []
        for k, key in enumerate(distinct):
            rows, old = rows_of[key], stored.get(k, [])
            if len(rows) + len(old) > 1:
                out.append((old, rows))
        return out

    def _band_keys(self, sets: Sequence[np.ndarray]) -> np.ndarray:
        """The ``(len(sets), b)`` band keys of shingle sets, signed ``_HASH_BLOCK`` sets at a time (the
        signatures and their uint64 products are temporaries of one block, not of the whole batch)."""
        b, r = self.bands
        if len(sets) <= _HASH_BLOCK:
            return self._hasher.band_keys(sets, b, r)
        out = np.empty((len(sets), b), dtype=np.uint64)
        for lo in range(0, len(sets), _HASH_BLOCK):
            out[lo : lo + _HASH_BLOCK] = self._hasher.band_keys(sets[lo : lo + _HASH_BLOCK], b, r)
        return out

    def _link(
        self,
        buckets: Sequence[tuple[list[int], list[int]]],
        node_of: Mapping[int, Any],
        shingles: dict[int, np.ndarray],
        uf: UnionFind[Any],
        pairs: Sequence[tuple[int, int]] = (),
    ) -> None:
        """Join in ``uf`` every pair of groups that shares a bucket and has J >= threshold: the edges.

        ``pairs`` are buckets of two groups given as the pair this makes of one (``(new, old)``, or
        ``(new, new)`` without an old group: what :func:`_kernel_buckets` lists), before ``buckets``.

        Each bucket is ``(old, new)``: groups whose pairs among themselves are already settled (stored
        groups: their pairs were verified when the later of the two was added, so their components
        are stored, ``node_of[g]`` naming each one), and groups whose pairs are not. ``uf`` holds one
        element per node: ``node_of[g]`` for an old group, the group id itself otherwise.

        The components are those of verifying every candidate pair: a pair is skipped only when its
        two groups are already joined (it cannot change a component) or when both are old (settled).
        What is bounded is the order. First every new group of a bucket is verified against one
        member of each old component in it (or, with none, against the bucket's first new group),
        once per component however many buckets they share (the pass below lists what that leaves
        out): in a family of n near-identical texts that joins the family with ~n verifications.
        Then, bucket by bucket, only the pairs across what is still apart are listed and verified, a block
        at a time (a block skips the pairs the blocks before it joined). A pair is verified once,
        however many buckets it shares.
        """
        find = uf.find
        verified: set[tuple[int, int]] = set()
        # In a bucket of more than two groups, one probe per new group and old component (without
        # old groups, against the bucket's first new group): a second probe of the same two sides from another such bucket
        # is left to the pass below, which lists it only if the two are still apart. In a family
        # of near-identical texts, whose groups share ~b buckets, that is one verification a new
        # group instead of ~b.
        pairs = list(pairs)
        probes: dict[tuple[int, Any], int] = {}
        prepared = []
        for old, new in buckets:
            if len(old) + len(new) == 2:  # the most common bucket: its one pair is its probe, and all
                pairs.append((new[0], old[0] if old else new[1]))
                continue
            nodes = [node_of[g] for g in old]
            heads = dict(zip(reversed(nodes), reversed(old)))  # each old node's first group in the bucket
            if old:
                for x in new:
                    for n, t in heads.items():
                        probes.setdefault((x, n), t)
            else:  # new groups only: each against the bucket's first
                first = new[0]
                pairs.extend((x, first) for x in new[1:])
            prepared.append((old, new, nodes, heads))
        pairs.extend((x, t) for (x, _), t in probes.items())
        self._verify(pairs, node_of, shingles, uf, verified)
        apart: list[tuple[int, int, int]] = []  # (rank among the partners of its first group, pair)
        for old, new, nodes, heads in prepared:
            roots = {n: find(n) for n in heads}
            new_roots = [find(g) for g in new]
            if len({*roots.values(), *new_roots}) < 2:
                continue
            by_root: dict[Any, tuple[list[int], list[int]]] = {}
            for g, n in zip(old, nodes):
                by_root.setdefault(roots[n], ([], []))[0].append(g)
            for g, r in zip(new, new_roots):
                by_root.setdefault(r, ([], []))[1].append(g)
            apart.extend(_apart_pairs(list(by_root.values())))
        # Each group's first partner first, then its second...: a block then holds one try for many
        # groups rather than every try for a few, and the blocks after it skip what it joined.
        apart.sort(key=lambda rxy: rxy[0])
        self._verify(((x, y) for _, x, y in apart), node_of, shingles, uf, verified)

    def _verify(
        self,
        pairs: Iterable[tuple[int, int]],
        node_of: Mapping[int, Any],
        shingles: dict[int, np.ndarray],
        uf: UnionFind[Any],
        verified: set[tuple[int, int]],
    ) -> None:
        """Verify candidate pairs of groups with their exact Jaccard, a block at a time; join those >= threshold.

        Pairs are taken in the order given; those already in ``verified``, or whose groups ``uf`` joins
        when their block starts, are skipped; shingle sets
        not in ``shingles`` are read from the storage (and kept there).

        On the numpy reference path, before the exact Jaccard,
        :func:`~rag_dedup.similarity.jaccard_upper_bounds` gives every pair of a block an upper bound
        from bucket counts, in bulk (the compiled path computes every pair's exact Jaccard with
        :func:`~rag_dedup.compiled.index.pair_jaccard`, which costs no more than the bound); a pair whose bound is below the
        threshold has an exact Jaccard below it too. LSH proposes every pair that shares a band, and
        on real text most share little else (licence boilerplate, changelog lines): at 21 bands of 6
        rows a pair with J = 0.5 is a candidate with probability 0.28. The bound is a bound, not an
        estimate, so no pair with J >= threshold is dropped. Why not the MinHash estimate: it is
        binomial, with standard deviation sqrt(J(1-J)/num_perm) (0.035 at J = 0.8, 128 permutations),
        so any cut below the threshold drops a true pair with some probability; and the stored groups
        keep no signature (128 x 4 bytes a group would break the 2 KB-a-chunk memory budget). What
        the bound saves on real text is a measurement (the README's Performance section), not a contract.
        """
        find = uf.find

        def node(g: int) -> Any:
            return node_of.get(g, g)

        # Run again after a conflict (a shared store's run_batch), a pair an earlier attempt verified is
        # not verified again: whether it joins is a function of its two groups' shingles, which a group
        # id names for as long as attempt_memo lives (see _attempt_cache).
        joins = self._attempt_cache(("joins", self.threshold))
        todo = [pair for pair in dict.fromkeys((a, b) if a < b else (b, a) for a, b in pairs) if pair not in verified]
        for lo in range(0, len(todo), _VERIFY_BLOCK):
            block = [(a, b) for a, b in todo[lo : lo + _VERIFY_BLOCK] if find(node(a)) != find(node(b))]
            if not block:
                continue
            verified.update(block)
            if joins is not None:
                known = [pair for pair in block if pair in joins]
                if known:
                    for a, b in known:
                        if joins[a, b]:
                            uf.union(node(a), node(b))
                    block = [pair for pair in block if pair not in joins]
                    if not block:
                        continue
            ids = list(dict.fromkeys(x for pair in block for x in pair))
            self._read_shingles(ids, shingles)
            row = {g: i for i, g in enumerate(ids)}
            sets = [shingles[g] for g in ids]
            if compiled.COMPILED:
                # The compiled kernel: every pair's exact Jaccard at once, without the bound (a merge of
                # two sorted sets costs about what the bound's bucket counts cost a pair in numpy, so
                # the bound saves nothing here: 1.4 against 2.8 us a chunk for the verification of
                # add_many's blocks of 1,000, bench_stream.py's chunks); the same decisions (the bound
                # only skips pairs whose exact Jaccard is below the threshold).
                left_rows, right_rows = [row[a] for a, _ in block], [row[b] for _, b in block]
                sims = pair_jaccard(sets, left_rows, right_rows)
            else:
                left = np.fromiter((row[a] for a, _ in block), dtype=np.int64, count=len(block))
                right = np.fromiter((row[b] for _, b in block), dtype=np.int64, count=len(block))
                exact = np.zeros(len(block), dtype=np.float64)
                plausible = np.flatnonzero(jaccard_upper_bounds(sets, left, right) >= self.threshold)
                if len(plausible):
                    exact[plausible] = jaccard_pairs(sets, left[plausible], right[plausible])
                sims = exact.tolist()
            for (a, b), sim in zip(block, sims):
                joined = sim >= self.threshold
                if joined:
                    uf.union(node(a), node(b))
                if joins is not None:
                    joins[a, b] = joined

    def _attempt_cache(self, name: Hashable) -> dict[Any, Any] | None:
        """The dict ``name`` of the storage's ``attempt_memo`` (made on first use), or None without one.

        Inside a shared store's ``run_batch`` the attempts of one batch share it: what is kept there
        must be a pure function of group ids (an id names one group, with one set of shingles, for
        as long as the memo lives; it is emptied when that may no longer hold)."""
        memo: dict[Any, Any] | None = getattr(self._storage, "attempt_memo", None)
        return None if memo is None else memo.setdefault(name, {})

    def _read_shingles(self, gids: Iterable[int], shingles: dict[int, np.ndarray]) -> None:
        """Put in ``shingles`` the sets of ``gids`` it lacks: from the attempt memo (see
        :meth:`_attempt_cache`; an earlier attempt of the batch read them), else from the storage
        (then kept in the memo too)."""
        missing = [g for g in gids if g not in shingles]
        if not missing:
            return
        kept = self._attempt_cache("shingles")
        if kept is not None:
            shingles.update((g, kept[g]) for g in missing if g in kept)
            missing = [g for g in missing if g not in shingles]
            if not missing:
                return
        found = self._storage.group_shingles(missing)
        shingles.update(zip(missing, found))
        if kept is not None:
            kept.update(zip(missing, found))

    def _link_and_recluster(
        self,
        touched: Sequence[int],
        buckets: Sequence[tuple[list[int], list[int]]],
        shingles: dict[int, np.ndarray],
        fresh_items: Mapping[str, ItemRecord],
        previous: dict[str, str] | None = None,
        pairs: Sequence[tuple[int, int]] = (),
    ) -> None:
        """Verify the candidates of new groups, merge components, and recluster what changed.

        ``buckets`` are the buckets of the new groups that hold another group, each as (stored
        groups, new groups), and ``pairs`` more such buckets of two groups, each as the pair
        ``(new group, the other)`` (see :meth:`_link`); ``shingles`` holds the new groups' sets.
        ``previous``, when given, receives the representative each reclustered key had before
        (a key already there is kept).
        """
        storage = self._storage
        new_groups = set(shingles)
        # A new group in no shared bucket, holding one new item, is a cluster of its own: nothing to
        # verify, merge or store (most texts of a corpus take this path).
        new_items = Counter(rec.gid for rec in fresh_items.values())
        in_bucket = {g for _, new in buckets for g in new}
        in_bucket.update(g for pair in pairs for g in pair)
        touched = [g for g in touched if g in in_bucket or g not in new_groups or new_items[g] > 1]
        if not touched:
            return
        olds = sorted(
            {g for old, _ in buckets for g in old}
            | {b for _, b in pairs if b not in new_groups}
            | {g for g in touched if g not in new_groups}
        )
        node_of = dict(zip(olds, storage.component_ids(olds)))
        uf: UnionFind[Any] = UnionFind(node_of.values())
        # The new groups that can be joined or need placing: those in a bucket (all touched) and the
        # other touched ones; the rest stay clusters of their own and need no element in uf.
        active = [g for g in touched if g in new_groups]
        for g in active:
            uf.add(g)
        self._link(buckets, node_of, shingles, uf, pairs)
        # The components that hold a touched group: stored ones read whole, joined by the new edges.
        first_of: dict[Any, int] = {}
        for g, n in node_of.items():
            first_of.setdefault(n, g)
        find = uf.find
        wanted = {find(node_of.get(g, g)) for g in touched}
        nodes_of: dict[Any, list[Any]] = {}
        for n in [*first_of, *active]:
            r = find(n)
            if r in wanted:
                nodes_of.setdefault(r, []).append(n)
        stored = sorted({first_of[n] for ns in nodes_of.values() for n in ns if n in first_of})
        whole = dict(zip(stored, storage.component_members(stored)))
        merged = [
            (set().union(*(whole[first_of[n]] if n in first_of else (n,) for n in ns)), len(ns) > 1)
            for ns in nodes_of.values()
        ]
        storage.set_components([comp for comp, joined in merged if joined])
        singles = [min(comp) for comp, _ in merged if len(comp) == 1]
        found = storage.group_items(singles) if singles else []
        alone = {g for g, members in zip(singles, found) if len(members) == 1 and members[0] in fresh_items}
        # Each component's clusters in the order of merged (what set_clusters writes, in that order): a
        # list of keys and clusters already placed, or the sorted groups of one to cluster (batched).
        parts: list[tuple[list[str], list[ClusterEntry]] | list[int]] = []
        for comp, joined in merged:
            if len(comp) == 1 and min(comp) in alone:
                continue  # a new text alone in a new group: a cluster of its own, nothing stored
            if self._deferred is not None:
                self._deferred.add(min(comp))  # reclustered after the call's last batch
                continue
            if not joined and not comp & new_groups:
                placed = self._place_exact_copies(comp, fresh_items)
                if placed is not None:
                    parts.append(placed)
                    continue
            parts.append(sorted(comp))
        clustered = iter(self._cluster_components([p for p in parts if type(p) is list], shingles))
        keys: list[str] = []
        clusters: list[ClusterEntry] = []
        for part in parts:
            comp_keys, comp_clusters = next(clustered) if type(part) is list else part
            keys.extend(comp_keys)
            clusters.extend(comp_clusters)
        self._store_clusters(keys, clusters, previous)

    def _store_clusters(self, keys: list[str], clusters: list[ClusterEntry], previous: dict[str, str] | None) -> None:
        """Write the clusters of ``keys``, first noting in ``previous`` the representative each had
        before (its own key if it had none), as :meth:`_link_and_recluster` reports it."""
        if not keys:
            return
        storage = self._storage
        if previous is not None:
            for key, entry in zip(keys, storage.get_clusters(keys)):
                previous.setdefault(key, key if entry is None else entry[0])
        storage.set_clusters(keys, clusters)

    def _recluster_deferred(self, previous: dict[str, str] | None) -> None:
        """Recluster, whole, the components that hold a group :meth:`_add_parsed`'s batches deferred.

        The clusters are a pure function of a component's set of groups and items, so clustering it
        once after the last batch gives what clustering it after every batch would, at the cost of
        one clustering instead of one a batch (a family that grows over k batches was clustered k
        times, a quadratic cost in its size). Between the batches its new items have no cluster entry
        yet, which is why only a private store defers (see :meth:`_add_parsed`); ``previous`` as for
        :meth:`_link_and_recluster` (the representatives before the call).
        Does nothing (and stops deferring) when nothing was deferred.
        """
        deferred, self._deferred = self._deferred, None
        if not deferred:
            return
        storage = self._storage
        with storage.lock():
            gids = sorted(deferred)
            comps: dict[int, frozenset[int]] = {}
            for comp in storage.component_members(gids):
                comps.setdefault(min(comp), frozenset(comp))
            keys: list[str] = []
            clusters: list[ClusterEntry] = []
            ordered = [sorted(comp) for comp in comps.values()]
            for lo in range(0, len(ordered), _CLUSTER_BLOCK):  # the shingle sets read of one block at a time
                for comp_keys, comp_clusters in self._cluster_components(ordered[lo : lo + _CLUSTER_BLOCK], {}):
                    keys.extend(comp_keys)
                    clusters.extend(comp_clusters)
            self._store_clusters(keys, clusters, previous)

    def _place_exact_copies(
        self, comp: set[int], fresh_items: Mapping[str, ItemRecord]
    ) -> tuple[list[str], list[ClusterEntry]] | None:
        """Place new exact copies in a component whose groups did not change, without reclustering.

        With the default policy (a total order), a copy that ranks after its group's best old item
        ``y`` is never chosen as a center while ``y`` is unplaced, and lands in ``y``'s cluster with
        ``y``'s similarity, which is what reclustering from scratch gives. Returns the keys and
        clusters to store, or None when some copy outranks its group (then recluster).
        """
        if self.policy is not longest_then_authority:
            return None
        storage = self._storage
        gids = sorted(comp)
        updates: dict[str, list[tuple[str, float]]] = {}
        for keys in storage.group_items(gids):
            new = [k for k in keys if k in fresh_items]
            old = [k for k in keys if k not in fresh_items]
            if not new:
                continue
            if not old:
                return None
            records = dict(zip(keys, storage.get_items(keys)))
            rank = {k: default_rank(Member(k, r.length, r.source, r.authority, r.first_seen)) for k, r in records.items() if r}
            best = min(old, key=rank.__getitem__)
            if any(rank[k] < rank[best] for k in new):
                return None
            entry = storage.get_clusters([best])[0]
            rep, sim = entry if entry is not None else (best, 1.0)
            if rep not in updates:
                updates[rep] = storage.cluster_members([rep])[0] or [(best, 1.0)]
            updates[rep].extend((k, sim) for k in new)
        return [k for members in updates.values() for k, _ in members], list(updates.items())

    def _cluster_component(self, gids: Sequence[int], shingles: dict[int, np.ndarray]) -> tuple[list[str], list[ClusterEntry]]:
        """The keys of one component and its clusters (see :func:`~rag_dedup.clusters.cluster_component`).

        ``shingles`` holds sets already read; the component's others are read from the storage.
        """
        storage = self._storage
        keys = [k for ks in storage.group_items(gids) for k in ks]
        records = storage.get_items(keys)
        members = []
        for key, rec in zip(keys, records):
            if rec is None:
                raise RuntimeError(f"storage is inconsistent: group member {key!r} has no item record")
            members.append((Member(key, rec.length, rec.source, rec.authority, rec.first_seen), rec.gid))
        # Run again after a conflict (a shared store's run_batch), a component whose members and
        # records did not change is not clustered again: the clusters are a function of them (and of
        # the groups' shingles, which a group id names for as long as attempt_memo lives).
        memo = self._attempt_cache("clusters")
        if memo is not None:
            memo_key = (tuple(keys), tuple(records))
            done = memo.get(memo_key)
            if done is not None:
                return keys, [(rep, list(ms)) for rep, ms in done]
        family = self._family(gids)
        if family is not None:
            shingles.update((g, family.sets[g]) for g in gids if g not in shingles and g in family.index)
        self._read_shingles(gids, shingles)
        if family is not None:
            fresh = [g for g in gids if g not in family.index]
            family.add(fresh, [shingles[g] for g in fresh])
        clusters = cluster_component(members, shingles, self.drift_floor, self.policy, family)
        if memo is not None:
            memo[memo_key] = [(rep, list(ms)) for rep, ms in clusters]
        return keys, clusters

    def _cluster_pair(self, a: int, b: int, sim: float) -> tuple[list[str], list[ClusterEntry]]:
        """:meth:`_cluster_component` of a component of two groups ``a < b`` whose Jaccard ``sim`` was just
        verified, on the compiled path: :func:`~rag_dedup.clusters._cluster_two` (where
        :func:`~rag_dedup.clusters.cluster_component` takes a component of two groups, after counting
        their Jaccard again: the same integers, so the same float), with the members it would pass."""
        storage = self._storage
        keys = [k for ks in storage.group_items([a, b]) for k in ks]
        members = []
        for key, rec in zip(keys, storage.get_items(keys)):
            if rec is None:
                raise RuntimeError(f"storage is inconsistent: group member {key!r} has no item record")
            members.append((Member(key, rec.length, rec.source, rec.authority, rec.first_seen), rec.gid))
        items: dict[int, list[Member]] = {a: [], b: []}
        group_of: dict[str, int] = {}
        for m, g in sorted(members, key=lambda mg: mg[0].key):
            items[g].append(m)
            group_of[m.key] = g
        return keys, _cluster_two(items, group_of, a, b, sim, self.drift_floor, self.policy)

    def _cluster_components(
        self, comps: Sequence[Sequence[int]], shingles: dict[int, np.ndarray]
    ) -> list[tuple[list[str], list[ClusterEntry]]]:
        """:meth:`_cluster_component` of each component (its sorted groups), in order, with the storage
        reads of the small ones (no kept :class:`~rag_dedup.clusters.Family`) made once for all of
        them: their keys, records and missing shingle sets (a batch reclusters a hundred or more
        small components; four reads each cost more than their clustering)."""
        small = [comp for comp in comps if len(comp) < _FAMILY_MIN]
        if not small:
            return [self._cluster_component(comp, shingles) for comp in comps]
        storage = self._storage
        gids = [g for comp in small for g in comp]
        group_keys = storage.group_items(gids)
        keys_of = dict(zip(gids, group_keys))
        flat = [k for ks in group_keys for k in ks]
        record_of = dict(zip(flat, storage.get_items(flat)))
        self._read_shingles(gids, shingles)
        memo = self._attempt_cache("clusters")
        small_keys: list[list[str]] = []
        small_done: list[list[ClusterEntry] | None] = []  # from an earlier attempt's memo (see _cluster_component)
        small_members: list[list[tuple[Member, int]]] = []
        for comp in small:
            keys = [k for g in comp for k in keys_of[g]]
            records = [record_of[key] for key in keys]
            done = None if memo is None else memo.get((tuple(keys), tuple(records)))
            small_keys.append(keys)
            small_done.append(None if done is None else [(rep, list(ms)) for rep, ms in done])
            if done is not None:
                continue
            members = []
            for key, rec in zip(keys, records):
                if rec is None:
                    raise RuntimeError(f"storage is inconsistent: group member {key!r} has no item record")
                members.append((Member(key, rec.length, rec.source, rec.authority, rec.first_seen), rec.gid))
            small_members.append(members)
        computed = iter(cluster_components(small_members, shingles, self.drift_floor, self.policy))
        small_out: list[tuple[list[str], list[ClusterEntry]]] = []
        for keys, done in zip(small_keys, small_done):
            if done is None:
                done = next(computed)
                if memo is not None:
                    memo[tuple(keys), tuple(record_of[k] for k in keys)] = [(rep, list(ms)) for rep, ms in done]
            small_out.append((keys, done))
        placed = iter(small_out)
        return [self._cluster_component(comp, shingles) if len(comp) >= _FAMILY_MIN else next(placed) for comp in comps]

    def _family(self, gids: Sequence[int]) -> Family | None:
        """The kept :class:`~rag_dedup.clusters.Family` to cluster the component ``gids`` with, or None.

        Only components of at least ``_FAMILY_MIN`` groups keep one (a small one is cheap to count
        again, and most of an index is small components). A family whose groups are all in ``gids``
        describes an earlier state of this component (a group's shingles never change, and its id is
        never handed out again: a shared store's counter outlives even another worker's drop(), and a
        private store starts again only after this index's own drop(), which forgets the families), so
        the largest such one is brought up to ``gids``; one with a group that is
        no longer here (removed, also by another worker) does not, and is not used. At most
        ``_FAMILIES`` are kept, the most recently used.
        """
        if len(gids) < _FAMILY_MIN:
            return None
        here = set(gids)
        fits = [f for f in self._families if len(f) <= len(here) and all(g in here for g in f.index)]
        family = max(fits, key=len) if fits else Family()
        self._families = [family, *(f for f in self._families if f is not family)][:_FAMILIES]
        return family

    def _forget_group(self, gid: int) -> None:
        """Take group ``gid`` (being deleted) out of the kept families."""
        for family in self._families:
            family.discard(gid)

    # --- removing ---------------------------------------------------------------------------
    @_whole_or_incomplete
    def remove(self, key: str) -> None:
        """Remove ``key``; its cluster re-elects a representative (and may split).

        Raises:
            TypeError: ``key`` is not a str.
            KeyError: ``key`` is not in the index.
        """
        _check_key(key, "key")
        self._remove(key)

    def _remove(self, key: str, previous: dict[str, str] | None = None) -> None:
        """:meth:`remove` a checked key; ``previous`` as for :meth:`_link_and_recluster`."""
        storage = self._storage
        with storage.lock():
            rec = storage.get_items([key])[0]
            if rec is None:
                raise KeyError(f"{key!r} is not in the index")
            keys: list[str] = [key]
            clusters: list[ClusterEntry] = []
            if rec.gid != EMPTY_GROUP:
                comp = storage.component_members([rec.gid])[0]
                keys.extend(k for ks in storage.group_items(sorted(comp)) for k in ks if k != key)
            if previous is not None:
                for k, entry in zip(keys, storage.get_clusters(keys)):
                    previous.setdefault(k, k if entry is None else entry[0])
            storage.delete_items({key: rec})
            if rec.gid == EMPTY_GROUP:
                storage.set_clusters(keys, clusters)
                return
            if storage.group_items([rec.gid])[0]:
                _, clusters = self._cluster_component(sorted(comp), {})
                storage.set_clusters(keys, clusters)
                return
            (sh,) = storage.group_shingles([rec.gid])
            self._forget_group(rec.gid)
            storage.delete_group(rec.gid, self._band_keys([sh]))
            rest = sorted(comp - {rec.gid})
            if not rest:
                storage.set_clusters(keys, clusters)
                return
            # The component may fall apart: rebuild its edges among the remaining groups, with the
            # verification add uses (none of their pairs is settled: all are "new" to each other).
            shingles = dict(zip(rest, storage.group_shingles(rest)))
            band_keys = self._band_keys([shingles[g] for g in rest])
            slot = np.unique(band_keys.reshape(-1), return_inverse=True)[1].reshape(-1)
            uf: UnionFind[Any] = UnionFind(rest)
            self._link(_buckets(slot, band_keys.shape[1], rest), {}, shingles, uf)
            parts = uf.groups()
            storage.set_components(parts)
            for part in parts:
                clusters.extend(self._cluster_component(sorted(part), shingles)[1])
            storage.set_clusters(keys, clusters)

    def drop(self) -> None:
        """Delete everything this index holds (for Redis: its whole namespace). The index stays usable, empty
        (an index a failed policy left incomplete, too)."""
        if isinstance(self._storage, _Incomplete):
            self._storage = self._storage.real  # type: ignore[attr-defined]
        self._storage.mend_for_drop()  # a damaged counter of a shared store would refuse the lock
        with self._storage.lock():
            self._storage.drop()
            self._storage.save_meta(self._meta())
        self._families = []  # group ids may be handed out again

    def close(self) -> None:
        """Release the storage's connections: a Redis index closes its connection pool, an in-memory
        index has none to release. Nothing stored is lost, and the index stays usable: a later call
        reconnects. ``with DedupIndex(...) as index:`` calls this at the end of the block::

            with DedupIndex(storage="redis://localhost:6379/0") as index:
                index.add_many(items)
        """
        self._storage.close()

    def __enter__(self) -> DedupIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._storage.item_count()

    def __contains__(self, key: object) -> bool:
        return self.contains_many([key])[0]  # type: ignore[list-item]

    def contains_many(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key is in the index, in the order given, in one storage call (one Redis round trip).

        A key that is not a ``str`` is not in the index (as for ``key in index``).
        """
        keys = _key_list(keys, "keys")
        found = [False] * len(keys)
        asked = [i for i, k in enumerate(keys) if isinstance(k, str)]
        if asked:
            records = self._storage.get_items([keys[i] for i in asked])
            for i, rec in zip(asked, records):
                found[i] = rec is not None
        return found

    def matches(self, keys: Sequence[str]) -> list[Match]:
        """Where each key stands now (see :class:`Match`; ``displaced`` is None here).

        Raises:
            KeyError: A key is not in the index.
            TypeError: ``keys`` is a str (one key: pass ``[key]``, or use :meth:`match`), or a key is not a str.
        """
        keys = _key_list(keys, "keys")
        for i, key in enumerate(keys):
            if type(key) is not str:
                raise TypeError(f"keys[{i}] must be a str key, got {type(key).__name__} ({key!r:.80})")
        return self._matches(keys)

    def _matches(
        self, keys: Sequence[str], previous: Mapping[str, str] | None = None, added: Collection[str] = ()
    ) -> list[Match]:
        """:meth:`matches`, with ``displaced`` filled in after a call that changed the index.

        ``previous`` maps each key the call reclustered or removed around to the representative it
        had before the call (:meth:`_link_and_recluster`); ``added`` holds the keys the call wrote.
        """
        storage = self._storage
        records = storage.get_items(keys)
        for key, rec in zip(keys, records):
            if rec is None:
                raise KeyError(f"{key!r} is not in the index")
        entries = storage.get_clusters(keys)
        reps = sorted({e[0] for e in entries if e is not None})
        found_of = dict(zip(reps, storage.cluster_members(reps)))
        size_of = {rep: len(found) for rep, found in found_of.items()}
        gids = sorted({rec.gid for rec, e in zip(records, entries) if e is not None})  # type: ignore[union-attr]
        copies_of = {g: len(found) for g, found in zip(gids, storage.group_items(gids))}
        displaced: dict[str, str | None] = {}
        if previous is not None:
            for rep, found in found_of.items():
                before = Counter(previous.get(k, rep) for k, _ in found if k not in added)
                most = min(before.items(), key=lambda kc: (-kc[1], kc[0]))[0] if before else rep
                displaced[rep] = None if most == rep else most
        make = tuple.__new__  # Match(...) without the keyword-handling constructor (hot path)
        out = []
        for key, rec, entry in zip(keys, records, entries):
            if entry is None:
                out.append(make(Match, (key, key, key, None, 1.0, "unique", 1, None)))
                continue
            rep, sim = entry
            size = size_of[rep]
            kind = "unique" if size == 1 else "exact" if copies_of[rec.gid] > 1 else "near"  # type: ignore[union-attr]
            out.append(make(Match, (key, rep, rep, None if rep == key else rep, sim, kind, size, displaced.get(rep))))
        return out

    def match(self, key: str) -> Match:
        """Where ``key`` stands now. Raises KeyError for an unknown key."""
        _check_key(key, "key")
        return self.matches([key])[0]

    def resolve(self, key: str) -> str:
        """The id of ``key``'s cluster, which is its current representative's key (``key`` itself for a
        representative): the one way to ask where a key went. Raises KeyError for an unknown key."""
        return self.match(key).cluster_id

    def cluster_of(self, key: str) -> str:
        """Deprecated: the same as :meth:`resolve` (a cluster's id is its representative's key)."""
        warnings.warn("DedupIndex.cluster_of(key) is deprecated: use resolve(key), the same id", DeprecationWarning, stacklevel=2)
        return self.resolve(key)

    def members(self, cluster_id: str) -> list[str]:
        """The keys in a cluster: the representative, then the others in key order.

        Raises:
            KeyError: No cluster has this id (it is unknown, or a key that is not a representative).
        """
        _check_key(cluster_id, "cluster_id")
        found = self._storage.cluster_members([cluster_id])[0]
        if found:
            return [cluster_id, *sorted(k for k, _ in found if k != cluster_id)]
        m = self.match(cluster_id)
        if m.duplicate_of is not None:
            raise KeyError(f"{cluster_id!r} is not a cluster id; it is a member of cluster {m.cluster_id!r}")
        return [cluster_id]

    def representative(self, cluster_id: str) -> str:
        """Deprecated: a cluster's id is its representative's key, so this returns ``cluster_id``
        (raising KeyError like :meth:`members`, which is the way to check that an id names a cluster)."""
        warnings.warn(
            "DedupIndex.representative(cluster_id) is deprecated: a cluster's id is its representative's key",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.members(cluster_id)[0]

    def clusters(self, *, include_singletons: bool = True) -> Iterator[tuple[str, list[str]]]:
        """Every cluster as (cluster_id, member keys): the representative, then the others in key order."""
        in_cluster: set[str] = set()
        for rep, members in self._storage.iter_clusters():
            in_cluster.update(k for k, _ in members)
            yield rep, [rep, *sorted(k for k, _ in members if k != rep)]
        if include_singletons:
            for key in self._storage.iter_keys():
                if key not in in_cluster:
                    yield key, [key]

    def keys_of_source(self, source: str) -> list[str]:
        """The keys added with ``source``.

        Raises:
            TypeError: ``source`` is not a str (an item's source is a str, or None for none: no keys).
        """
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, got {type(source).__name__} ({source!r:.80})")
        return self._storage.keys_of_source(source)

    def query(self, text: str) -> list[tuple[str, float]]:
        """Keys whose texts have Jaccard similarity >= threshold with ``text``, most similar first.

        The similarity is the exact Jaccard of shingle sets (LSH proposes, the sets decide).
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        canon = canonical(text)
        if not canon:
            return []
        sets = shingle_hashes_many(
            [canon], self.ngram, canonicalized=True, ignore_decoration=self.ignore_decoration, short_tokens=self.short_tokens
        )
        band_keys = self._band_keys(sets)
        for attempt in range(3):
            (cands,) = self._storage.query_bands(band_keys)
            gids = sorted(cands)
            try:
                found = self._storage.group_shingles(gids)
                break
            except CorruptIndexError:
                # A shared store: another process removed a group between these two reads; ask again.
                if not self._storage.shared or attempt == 2:
                    raise
        scored = []
        for gid, sh in zip(gids, found):
            s = jaccard(sets[0], sh)
            if s >= self.threshold:
                scored.append((gid, s))
        out = []
        for (gid, s), keys in zip(scored, self._storage.group_items([g for g, _ in scored])):
            out.extend((k, s) for k in keys)
        out.sort(key=lambda ks: (-ks[1], ks[0]))
        return out

    # --- persistence ------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Save an in-memory index to directory ``path`` (atomically; no pickle)."""
        from rag_dedup.storage.directory import save_directory

        if not isinstance(self._storage, MemoryStorage):
            raise TypeError(
                f"save() writes an in-memory index; this one lives in {self._storage!r}, which persists by itself"
            )
        save_directory(path, self._meta(), self._storage)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, policy: Policy | None = None) -> DedupIndex:
        """Load an index saved with :meth:`save`; it answers exactly as before saving.

        Args:
            path: The directory.
            policy: The representative policy, required when the index was saved with a custom one.

        Raises:
            FileNotFoundError: No saved index at ``path``.
            CorruptIndexError: A file is damaged, truncated, missing, of another format version, or
                holds values out of range (the message names the file).
            IndexMismatchError: The saved parameters disagree with each other or with this rag-dedup
                (e.g. another normalisation), or a custom policy was not passed.
        """
        from rag_dedup.storage.directory import MANIFEST, load_directory

        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike (a directory), got {type(path).__name__}")
        if policy is not None and not callable(policy):
            raise TypeError(f"policy must be callable, got {type(policy).__name__}")
        meta, storage = load_directory(path)
        manifest = os.path.join(os.fspath(path), MANIFEST)
        names = ("threshold", "num_perm", "ngram", "seed", "drift_floor", "ignore_decoration", "short_tokens")
        if any(name not in meta for name in (*names, "policy")):
            raise CorruptIndexError(f"{manifest}: the parameters lack one of {[*names, 'policy']}; the index is damaged")
        saved_policy = meta["policy"]
        if policy is None and saved_policy != _policy_name(longest_then_authority):
            raise IndexMismatchError(
                f"{os.fspath(path)!r} was saved with representative policy {saved_policy!r}; pass policy= that function"
            )
        chosen = policy or longest_then_authority
        if _policy_name(chosen) != saved_policy:
            raise IndexMismatchError(
                f"{os.fspath(path)!r} was saved with representative policy {saved_policy!r}, not {_policy_name(chosen)!r}"
            )
        try:
            return cls(storage=storage, policy=chosen, **{name: meta[name] for name in names})
        except IndexMismatchError as exc:  # the manifest's parameters disagree with its data files
            raise IndexMismatchError(
                f"{manifest}: the saved parameters disagree with the saved data ({_after_storage(str(exc))}); "
                "the manifest was edited or the index is damaged: save it again from its source"
            ) from None
        except (TypeError, ValueError) as exc:
            raise CorruptIndexError(f"{manifest}: the saved parameters are invalid ({exc}); the index is damaged") from None

    def __repr__(self) -> str:
        b, r = self.bands
        return f"DedupIndex(threshold={self.threshold}, num_perm={self.num_perm}, ngram={self.ngram}, bands={b}x{r}, items={len(self)})"


# --- helpers ----------------------------------------------------------------------------------
def _bucket_spans(
    slot: np.ndarray, width: int, gids: Sequence[int], bucket_rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where each distinct key's groups are, for :func:`_buckets` and :func:`_split_buckets`: the new groups'
    ids in key order (stable: row order within a key), and for each key number the end and count of
    its new groups there and of its stored groups in ``bucket_rows`` order."""
    n = len(slot)
    n_keys = int(slot.max()) + 1 if n else 0
    # The stable order of slot: (slot, position) packed into one int64 sorts without a stable sort.
    shift = max(1, (n - 1).bit_length())
    order = np.sort((slot.astype(np.int64) << shift) | np.arange(n, dtype=np.int64)) & ((1 << shift) - 1)
    new_ends = np.cumsum(np.bincount(slot, minlength=n_keys))
    old_ends = np.cumsum(np.bincount(bucket_rows, minlength=n_keys))
    news = np.asarray(gids, dtype=np.int64)[order // width]
    return news, new_ends, np.diff(new_ends, prepend=0), old_ends, np.diff(old_ends, prepend=0)


def _buckets(
    slot: np.ndarray,
    width: int,
    gids: Sequence[int],
    bucket_rows: np.ndarray | None = None,
    bucket_gids: np.ndarray | None = None,
) -> list[tuple[list[int], list[int]]]:
    """The buckets that hold a new group and another group, as ``(stored gids, new gids)``.

    ``slot`` numbers the distinct keys of an ``(n, width)`` band-key array of the new groups ``gids``
    (from :meth:`DedupIndex._lookup_buckets`), and ``(bucket_rows, bucket_gids)`` lists the stored
    groups under each number (none when not given). Buckets of a single group are left out.
    """
    if bucket_rows is None or bucket_gids is None:
        bucket_rows = bucket_gids = np.empty(0, dtype=np.int64)
    news, new_ends, new_count, old_ends, old_count = _bucket_spans(slot, width, gids, bucket_rows)
    wanted = np.flatnonzero((new_count > 0) & (new_count + old_count > 1))
    return _sliced(bucket_gids, news, wanted, new_ends, new_count, old_ends, old_count)


def _sliced(
    bucket_gids: np.ndarray,
    news: np.ndarray,
    wanted: np.ndarray,
    new_ends: np.ndarray,
    new_count: np.ndarray,
    old_ends: np.ndarray,
    old_count: np.ndarray,
) -> list[tuple[list[int], list[int]]]:
    """The buckets ``wanted`` (key numbers) as ``(stored gids, new gids)`` lists, sliced from two lists
    (a list slice costs ~0.1 us, a numpy slice and its tolist ~1 us)."""
    olds, new_list = bucket_gids.tolist(), news.tolist()
    bounds = zip(
        (old_ends[wanted] - old_count[wanted]).tolist(),
        old_ends[wanted].tolist(),
        (new_ends[wanted] - new_count[wanted]).tolist(),
        new_ends[wanted].tolist(),
    )
    return [(olds[a:b], new_list[c:d]) for a, b, c, d in bounds]


def _split_buckets(
    slot: np.ndarray, width: int, gids: Sequence[int], bucket_rows: np.ndarray, bucket_gids: np.ndarray
) -> tuple[list[tuple[int, int]], list[tuple[list[int], list[int]]]]:
    """:func:`_buckets`, split as :meth:`DedupIndex._link` takes it: each bucket of two groups as the pair
    it makes, ``(new, old)`` or, without an old group, ``(first new, second new)``; then the buckets of
    more than two, as ``(stored gids, new gids)``. Both in the order of :func:`_buckets` (by key).

    The same buckets as :func:`_buckets` (tested), built with a few numpy calls for the two-group ones
    (most buckets a batch finds), where building a pair of lists for each costs ~0.6 us a bucket.
    """
    news, new_ends, new_count, old_ends, old_count = _bucket_spans(slot, width, gids, bucket_rows)
    total = new_count + old_count
    has_new = new_count > 0
    two = np.flatnonzero(has_new & (total == 2))
    first = news[new_ends[two] - new_count[two]]
    other = news[new_ends[two] - 1]  # the second new group, where the bucket has no old one
    with_old = old_count[two] == 1
    other[with_old] = bucket_gids[old_ends[two][with_old] - 1]
    pairs = list(zip(first.tolist(), other.tolist()))
    many = np.flatnonzero(has_new & (total > 2))
    return pairs, _sliced(bucket_gids, news, many, new_ends, new_count, old_ends, old_count)


def _kernel_buckets(
    found: tuple[np.ndarray, ...], new_gids: Sequence[int]
) -> tuple[list[tuple[int, int]], list[tuple[list[int], list[int]]]]:
    """:func:`~rag_dedup.compiled.batch.batch_buckets`'s answer for the new groups ``new_gids`` (by row)
    as :meth:`DedupIndex._link` takes it: its two-group buckets as pairs (each once, in the order
    first listed: a near-duplicate shares most bands with its original), and the others as
    ``(stored gids, new gids)``, what :func:`_buckets` gives of them, in its order."""
    left, right, right_is_row, old_bounds, old_gids, new_bounds, new_rows = found
    gid_of = np.asarray(new_gids, dtype=np.int64)
    pairs: list[tuple[int, int]] = []
    if len(left):
        a = gid_of[left]
        b = np.where(right_is_row, gid_of[np.where(right_is_row, right, 0)], right)
        packed = (a << 32) | b  # group ids are non-negative int32
        _, first = np.unique(packed, return_index=True)
        first.sort()
        pairs = list(zip(a[first].tolist(), b[first].tolist()))
    old_list, old_at = old_gids.tolist(), old_bounds.tolist()
    new_list, new_at = gid_of[new_rows].tolist(), new_bounds.tolist()
    buckets = [(old_list[old_at[k] : old_at[k + 1]], new_list[new_at[k] : new_at[k + 1]]) for k in range(len(old_at) - 1)]
    return pairs, buckets


def _apart_pairs(parts: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[tuple[int, int, int]]:
    """The pairs still to verify in one bucket of :meth:`DedupIndex._link`, as ``(rank, x, y)``.

    ``parts`` are the bucket's groups by current component, each as ``(old groups, new groups)``. For
    every two parts ``a`` before ``b``: each new group of ``a`` with each group of ``b`` (old ones first,
    ``rank`` its place there), then each old group of ``a`` with each new group of ``b``; two old groups
    are settled and never paired. Only the pairs of parts with a new group on either side are visited:
    a bucket of k old components (real text's shared boilerplate fills some buckets with hundreds of
    groups, more as the index grows) costs ~k per part with a new group, not k * k.
    """
    out: list[tuple[int, int, int]] = []
    with_new = [i for i, (_, new) in enumerate(parts) if new]
    for i, (a_old, a_new) in enumerate(parts):
        later = range(i + 1, len(parts)) if a_new else with_new[bisect_right(with_new, i) :]
        for j in later:
            b_old, b_new = parts[j]
            if a_new:
                b_all = (*b_old, *b_new)
                for x in a_new:
                    out.extend((rank, x, y) for rank, y in enumerate(b_all))
            if b_new:
                for x in a_old:
                    out.extend((rank, x, y) for rank, y in enumerate(b_new))
    return out


def _new_group_match(key: str, clusters: Sequence[ClusterEntry], previous: Mapping[str, str]) -> Match:
    """The :class:`Match` :meth:`DedupIndex._matches` gives ``key``, just added (``added`` is ``{key}``),
    the one item of a new group, from the clusters of its component just stored (``clusters``, as
    :func:`~rag_dedup.clusters.cluster_component` returns them) and ``previous`` (the representatives
    before the call), without reading the store again: a cluster of one is not stored ("unique"); a
    new group has one copy, so a larger cluster makes it "near"."""
    for rep, members in clusters:
        for k, sim in members:
            if k != key:
                continue
            if len(members) < 2:
                return tuple.__new__(Match, (key, key, key, None, 1.0, "unique", 1, None))
            before = Counter(previous.get(m, rep) for m, _ in members if m != key)
            most = min(before.items(), key=lambda kc: (-kc[1], kc[0]))[0] if before else rep
            moved = None if most == rep else most
            return tuple.__new__(Match, (key, rep, rep, None if rep == key else rep, sim, "near", len(members), moved))
    raise RuntimeError(f"{key!r} is in no cluster of its component")


def _jaccard_to(a: np.ndarray, others: Sequence[np.ndarray]) -> list[float]:
    """The exact Jaccard of ``a`` with each of ``others`` (sorted unique shingle arrays): a kernel call a
    pair (:func:`~rag_dedup.compiled.index.jaccard_of`) for a few, one for all of them
    (:func:`~rag_dedup.compiled.index.pair_jaccard`) for more, or :func:`~rag_dedup.similarity.jaccard_many`
    on the reference path; the same floats (all divide the same integers)."""
    if compiled.COMPILED:
        if len(others) <= _PAIRWISE:
            return [jaccard_of(a, b) for b in others]
        return pair_jaccard([a, *others], [0] * len(others), range(1, len(others) + 1))
    return jaccard_many(a, others).tolist()


def _policy_name(policy: Policy) -> str:
    return f"{getattr(policy, '__module__', '?')}.{getattr(policy, '__qualname__', type(policy).__name__)}"


def _open_storage(storage: Storage | str | None, namespace: str) -> Storage:
    if storage is None:
        return MemoryStorage()
    if isinstance(storage, Storage):
        return storage
    if isinstance(storage, str):
        if storage.startswith(("redis://", "rediss://", "unix://")):
            from rag_dedup.storage.redis import RedisStorage

            return RedisStorage(storage, namespace=namespace)
        raise ValueError(f"storage {storage!r} is not a redis:// or rediss:// URL; pass None for memory or a Storage")
    raise TypeError(f"storage must be None, a Redis URL or a Storage, got {type(storage).__name__}")


def _same_default_floor(name: str, stored: object, expected: object) -> bool:
    """Whether a stored ``drift_floor`` is this one but for the rounding the default gained (an index made
    before it stored ``0.8 - 0.1``, 0.7000000000000001, where the default is now 0.7)."""
    return (name == "drift_floor" and isinstance(stored, float) and isinstance(expected, float)
            and round(stored, settings.DEFAULT_FLOOR_DIGITS) == expected)


class _Incomplete:
    """The storage of an in-memory index that a failed policy left part-updated: any use of it raises
    :class:`IndexIncomplete` (so every call of the index does), until :meth:`DedupIndex.drop` puts
    ``real`` back and empties it."""

    def __init__(self, message: str, real: Storage) -> None:
        self.message = message
        self.real = real

    def __getattr__(self, name: str) -> Any:  # only for what the instance lacks: every storage method
        raise IndexIncomplete(self.message)


def _after_storage(message: str) -> str:
    """A storage's mismatch message without the storage's name and the advice to open it with the same
    parameters (which a load already did)."""
    message = message.split(" was built with ", 1)[-1]
    return message.split("; open it with", 1)[0]


def _key_list(keys: Iterable[str], name: str) -> list[str]:
    """``keys`` as a list; a str (or bytes) is refused: iterated, it would be one key per character."""
    if isinstance(keys, (str, bytes)):
        raise TypeError(
            f"{name} must be a list of keys, got a {type(keys).__name__} ({keys!r}), which would be read as one key "
            f"per character; pass [{keys!r}]"
        )
    return list(keys)


def _check_key(key: object, name: str) -> None:
    """A key is a non-empty str that is valid Unicode (see :mod:`rag_dedup.surrogates`)."""
    if type(key) is str and key and key.isascii():
        return
    if not isinstance(key, str):
        raise TypeError(f"{name} must be str, got {type(key).__name__}")
    if not key:
        raise ValueError(f"{name} must be a non-empty string")
    check_unicode(key, name)


def _parse_item(key: object, text: object, source: object, authority: object, first_seen: object, where: str) -> _Item:
    _check_key(key, f"{where}key")
    if not isinstance(text, str):
        raise TypeError(f"{where}text must be str, got {type(text).__name__} (key {key!r})")
    check_unicode(text, "%stext (key %r)", where, key)
    if source is not None:
        if not isinstance(source, str):
            raise TypeError(f"{where}source must be str or None, got {type(source).__name__} (key {key!r})")
        check_unicode(source, "%ssource (key %r)", where, key)
    if type(authority) is not float:
        if not is_finite_number(authority):
            raise TypeError(f"{where}authority must be a finite number, got {authority!r} (key {key!r})")
        authority = float(authority)
    elif not math.isfinite(authority):
        raise TypeError(f"{where}authority must be a finite number, got {authority!r} (key {key!r})")
    seen = None if first_seen is None else _timestamp(first_seen, where, key)
    return _new_item(_Item, (key, text, source, authority, seen))


_FIELDS = frozenset(("key", "text", "source", "authority", "first_seen"))


def _parse_many(items: Iterable[object]) -> list[_Item]:
    parsed: list[_Item] = []
    seen: set[str] = set()
    for i, raw in enumerate(items):
        item = _parse_raw(raw, i)
        if item.key in seen:
            raise ValueError(f"items[{i}]: key {item.key!r} appears twice in this batch")
        seen.add(item.key)
        parsed.append(item)
    return parsed


def _parse_raw(raw: object, i: int) -> _Item:
    if (
        type(raw) is tuple
        and len(raw) == 2
        and type(raw[0]) is str
        and raw[0]
        and raw[0].isascii()
        and type(raw[1]) is str
        and raw[1].isascii()
    ):
        return _new_item(_Item, (raw[0], raw[1], None, 0.0, None))  # the common case, checked in one line
    where = "items[%d]: " % i
    if type(raw) is dict or isinstance(raw, Mapping):
        if len(raw) <= 5 and raw.keys() <= _FIELDS and "key" in raw and "text" in raw:
            return _parse_item(
                raw["key"], raw["text"], raw.get("source"), raw.get("authority", 0.0), raw.get("first_seen"), where
            )
        # Field names of any type (a mapping may have int keys): shown by repr, never compared.
        raise ValueError(
            f"{where}a mapping needs 'key' and 'text' (and may have source, authority, first_seen); "
            f"got fields {', '.join(sorted(map(repr, raw)))}"
        )
    if isinstance(raw, tuple) and len(raw) == 2:
        return _parse_item(raw[0], raw[1], None, 0.0, None, where)
    raise TypeError(f"{where}expected a (key, text) tuple or a mapping with key and text, got {type(raw).__name__}")


def _timestamp(value: object, where: str, key: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return value.timestamp()
    if is_finite_number(value):
        return float(value)  # type: ignore[arg-type]
    raise TypeError(f"{where}first_seen must be a timestamp, a datetime or None, got {value!r} (key {key!r})")
