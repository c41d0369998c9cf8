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
   at J = 0.8, so it proposes but never decides. Before that, candidates whose Jaccard *upper bound*
   (from bucket counts of the two sets, :func:`~rag_dedup.similarity.jaccard_upper_bounds`) is below
   the threshold are dropped in bulk: a bound, not an estimate, so no pair at or above it is lost.
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
    >>> m.kind, m.duplicate_of, m.cluster_size
    ('near', None, 3)
    >>> m = index.match("mit-1")  # "exact": mit-2 has its canonical text
    >>> m.kind, m.duplicate_of, round(m.similarity, 3)
    ('exact', 'mit-3', 0.815)
    >>> index.members("mit-3")
    ['mit-3', 'mit-1', 'mit-2']
"""

from __future__ import annotations

import datetime as _dt
import gc
import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

from rag_dedup import lsh, settings
from rag_dedup.clusters import UnionFind, cluster_component
from rag_dedup.errors import CorruptIndexError, IndexMismatchError
from rag_dedup.minhash import SCHEME, MinHasher
from rag_dedup.normalize import NORMALIZATION, canonical
from rag_dedup.policy import Member, Policy, default_rank, longest_then_authority
from rag_dedup.shingles import DEFAULT_NGRAM, SHORT_TOKENS, canonical_digest, check_rules, shingle_hashes_many, shingles_and_digests
from rag_dedup.similarity import jaccard, jaccard_pairs, jaccard_upper_bounds
from rag_dedup.storage.base import EMPTY_GROUP, ClusterEntry, ItemRecord, Storage
from rag_dedup.storage.memory import MemoryStorage
from rag_dedup.surrogates import check_unicode

__all__ = ["FORMAT_VERSION", "SHINGLING", "DedupIndex", "Match"]

#: Version of the index's stored layout (directory and Redis).
FORMAT_VERSION = settings.INDEX_FORMAT_VERSION
#: Name and version of the shingle hashing in :mod:`rag_dedup.shingles` (stored shingles depend on it).
#: v3: texts of 12 to ``short_tokens`` tokens are token sets (v2: character trigrams).
SHINGLING = "tokens-poly64-fmix64-v3"
# add_many indexes items in batches of _BATCH, or of a _BATCH_SHARE-th of the items already indexed
# when that is more (at most _BATCH_MAX). A batch's temporaries (signatures, band keys) stay a small
# share of the index. Its band lookups and merges each sweep the sorted band tables once, in order;
# were batches fixed while the tables grow, the lookups would land far apart in tables far larger
# than the CPU caches, and each merge would copy a larger table for the same few new entries
# (benchmarks/bench_index.py: fixed batches cost 13% more per chunk at 160k items than at 10k).
_BATCH = 1024
_BATCH_SHARE = 16
_BATCH_MAX = 16384
# Candidate pairs verified at a time by _link_and_recluster (pairs already joined are skipped).
_VERIFY_BLOCK = 4096

Kind = Literal["unique", "exact", "near"]


def _batch_size(indexed: int) -> int:
    """How many items :meth:`DedupIndex.add_many` takes in its next batch, ``indexed`` items in."""
    return min(_BATCH_MAX, max(_BATCH, indexed // _BATCH_SHARE))


class Match(NamedTuple):
    """Where an item stands.

    Attributes:
        key: The item.
        cluster_id: Its cluster (the representative's key).
        representative: The key of the cluster's representative.
        duplicate_of: The representative, or None when the item is the representative.
        similarity: Exact Jaccard similarity of the item's shingles to the representative's (1.0 for
            the representative itself and for exact copies of it).
        kind: The item's place in its cluster: ``"unique"`` for a cluster of one, ``"exact"`` when
            another member has the same canonical text, ``"near"`` otherwise (a representative too:
            it stands for near-duplicates).
        cluster_size: The number of items in the cluster (1 for ``"unique"``).
    """

    key: str
    cluster_id: str
    representative: str
    duplicate_of: str | None
    similarity: float
    kind: Kind
    cluster_size: int


class _Item(NamedTuple):
    key: str
    text: str
    source: str | None
    authority: float
    first_seen: float | None


_new_item = tuple.__new__  # _Item(...) without the keyword-handling constructor (hot path)


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
        self.storage: Storage = _open_storage(storage, namespace)
        # Under the lock: two workers opening a new shared namespace at once must not both write
        # their parameters (the second would overwrite the first's unchecked).
        with self.storage.lock():
            stored = self.storage.load_meta()
            if stored is None:
                self.storage.save_meta(self._meta())
        if stored is not None:
            self._check_meta(stored, where=repr(self.storage))

    # --- parameters -----------------------------------------------------------------------
    @property
    def knee(self) -> float:
        """(1/b)^(1/r): where the candidate S-curve of the chosen bands is steepest."""
        return lsh.knee(*self.bands)

    @property
    def shared(self) -> bool:
        """True when the index lives in a store that several processes share (Redis)."""
        return self.storage.shared

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
            if stored.get(name) != expected[name]:
                raise IndexMismatchError(
                    f"{where} was built with {name}={stored.get(name)!r} but this index has {name}={expected[name]!r}; "
                    "open it with the same parameters (DedupIndex.load reads them from the files)"
                )
        if stored.get("policy") != expected["policy"]:
            raise IndexMismatchError(
                f"{where} was built with representative policy {stored.get('policy')!r} but this index uses "
                f"{expected['policy']!r}; pass policy= the same function"
            )

    # --- adding -----------------------------------------------------------------------------
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
            ValueError: ``key`` is already in the index with another text or metadata (``remove`` it
                first to replace it). Adding an identical item again is a no-op.
        """
        item = _parse_item(key, text, source, authority, first_seen, where="")
        self._add_batch([item])
        return self.matches([key])[0]

    def add_many(self, items: Iterable[tuple[str, str] | Mapping[str, Any]]) -> list[Match]:
        """Add many texts; the same final state as adding them one by one, in any order, much faster.

        Args:
            items: ``(key, text)`` pairs, or mappings with ``key`` and ``text`` and optionally
                ``source``, ``authority`` and ``first_seen``.

        Returns:
            One :class:`Match` per item, as things stand after the whole batch.

        Raises:
            TypeError, ValueError, InvalidTextError: As :meth:`add`, naming the offending item
                (``items[i]``) and argument; nothing is added then
                from the batch that held it (batches of 1,024 items, or of a sixteenth of the
                items already indexed when that is more, at most 16,384).

        The cyclic garbage collector is paused while this runs and restored afterwards.
        """
        parsed = _parse_many(items)
        self._add_parsed(parsed)
        return self.matches([item.key for item in parsed])

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
            TypeError, ValueError: As :meth:`add_many`, naming the item.
            KeyError: A key of ``remove`` is not in the index.
        """
        parsed = _parse_many(items)
        gone = list(dict.fromkeys(remove))
        for key in gone:
            _check_key(key, "remove key")
        storage = self.storage
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
            if gone or len(written) > _batch_size(len(self)):
                # A text that cannot be hashed must fail here, before the removals or a first batch
                # are applied (a single batch hashes everything before it writes).
                for item in written:
                    canonical_digest(item.text)
            for key in gone:
                self.remove(key)
            self._add_parsed(written)
            return self.matches([item.key for item in parsed]), len(written)

    def _add_parsed(self, parsed: Sequence[_Item]) -> None:
        """Add checked items in batches (see :meth:`add_many`)."""
        # The cyclic garbage collector is paused meanwhile (and restored, also on error): a batch
        # allocates many small objects that cannot form cycles, and each collection they trigger
        # would walk the caller's whole heap (all their nodes and documents) again: 15-20% of the time.
        paused = gc.isenabled()
        gc.disable()
        try:
            start = 0
            while start < len(parsed):
                size = _batch_size(len(self))
                self._add_batch(parsed[start : start + size])
                start += size
        finally:
            if paused:
                gc.enable()

    def _add_batch(self, items: Sequence[_Item]) -> None:
        storage = self.storage
        # Pure computation first, outside the lock, so that workers sharing a store hash in parallel.
        all_sets, digests = shingles_and_digests(
            [item.text for item in items], self.ngram, ignore_decoration=self.ignore_decoration, short_tokens=self.short_tokens
        )
        first: dict[bytes, int] = {}
        for i, d in enumerate(digests):
            if d is not None:
                first.setdefault(d, i)
        unique = list(first)
        sets = [all_sets[i] for i in first.values()]
        del all_sets
        band_keys = self._band_keys(sets)
        with storage.lock():
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
                    raise ValueError(
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
            # Candidates among stored groups (asked before the new ones are filed, so a group does not
            # find itself), then among the new groups themselves.
            rows, stored = storage.query_band_pairs(fresh_keys)
            new_gids = storage.create_groups([unique[i] for i in fresh], fresh_sets, fresh_keys)
            candidates, fetched = self._plausible(fresh_sets, new_gids, rows, stored, _shared_pairs(fresh_keys))
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
            self._link_and_recluster(touched, candidates, shingles, fresh_items=records, fetched=fetched)

    def _plausible(
        self,
        fresh_sets: Sequence[np.ndarray],
        new_gids: Sequence[int],
        rows: np.ndarray,
        stored: np.ndarray,
        among_new: tuple[np.ndarray, np.ndarray],
    ) -> tuple[dict[int, set[int]], dict[int, np.ndarray]]:
        """The LSH candidate pairs of new groups that may reach the threshold, and the stored shingles read.

        LSH proposes every pair that shares a band, and on real text most of them share little else
        (licence boilerplate, changelog lines): at 21 bands of 6 rows a pair with J = 0.5 is a
        candidate with probability 0.28, and the number of such neighbours of a new text grows with
        the index. :func:`~rag_dedup.similarity.jaccard_upper_bounds` gives every pair an upper bound of
        its exact Jaccard from bucket counts, in bulk; a pair whose bound is below the threshold has
        an exact Jaccard below it too and is dropped here. This is a bound, not an estimate: no pair
        with J >= threshold is ever dropped, so the edges (and the clusters) are those of verifying
        every candidate exactly, which :meth:`_link_and_recluster` still does for the pairs kept.

        Why not the MinHash estimate: it is binomial, with standard deviation sqrt(J(1-J)/num_perm)
        (0.035 at J = 0.8, 128 permutations), so any cut below the threshold drops a true pair with
        some probability; and the stored groups keep no signature (128 x 4 bytes a group would break
        the 2 KB-a-chunk memory budget). On 180-word real chunks the bound drops every candidate with
        J < 0.7 and ~97% of those below 0.8, which is what the estimate would have been used for.

        Args:
            fresh_sets: The shingle sets of the new groups.
            new_gids: Their group ids.
            rows, stored: Candidate pairs among stored groups: new group ``new_gids[rows[i]]`` and
                stored group ``stored[i]`` (from :meth:`Storage.query_band_pairs`).
            among_new: Candidate pairs among the new groups, as two arrays of row numbers.

        Returns:
            ``{new gid: {candidate gids}}`` for the pairs kept, and the shingle sets of the stored
            groups kept, by group id.
        """
        olds = np.unique(stored)
        old_sets = self.storage.group_shingles(olds.tolist())
        # Only new groups with a candidate take part (most have none): renumber them 0..n-1.
        news = np.unique(np.concatenate((rows, *among_new)))
        n = len(news)
        left = np.searchsorted(news, np.concatenate((rows, among_new[0])))
        right = np.concatenate((n + np.searchsorted(olds, stored), np.searchsorted(news, among_new[1])))
        sets = [fresh_sets[i] for i in news.tolist()]
        sets.extend(old_sets)
        keep = jaccard_upper_bounds(sets, left, right) >= self.threshold
        gid_of_row = np.concatenate((np.asarray(new_gids, dtype=np.int64)[news], olds))
        new_gid_set = set(new_gids)
        candidates: dict[int, set[int]] = {}
        for g, c in zip(gid_of_row[left[keep]].tolist(), gid_of_row[right[keep]].tolist()):
            candidates.setdefault(g, set()).add(c)
            if c in new_gid_set:  # both new: each is the other's candidate, as LSH proposed
                candidates.setdefault(c, set()).add(g)
        wanted = set(right[keep][right[keep] >= n].tolist())
        fetched = {int(olds[i - n]): old_sets[i - n] for i in wanted}
        return candidates, fetched

    def _band_keys(self, sets: Sequence[np.ndarray]) -> np.ndarray:
        b, r = self.bands
        return lsh.band_keys(self._hasher.signatures(sets), b, r)

    def _link_and_recluster(
        self,
        touched: Sequence[int],
        candidates: Mapping[int, set[int]],
        shingles: dict[int, np.ndarray],
        fresh_items: Mapping[str, ItemRecord],
        fetched: Mapping[int, np.ndarray] | None = None,
    ) -> None:
        """Verify the candidates of new groups, merge components, and recluster what changed.

        ``shingles`` holds the new groups' sets; ``fetched``, stored groups' sets already read.
        """
        storage = self.storage
        new_groups = set(shingles)
        # A new group with no candidates, holding one new item, is a cluster of its own: nothing to
        # verify, merge or store (most texts of a corpus take this path).
        candidates = {g: cs - {g} for g, cs in candidates.items() if cs - {g}}
        new_items = Counter(rec.gid for rec in fresh_items.values())
        touched = [g for g in touched if g in candidates or g not in shingles or new_items[g] > 1]
        if not touched:
            return
        others = sorted({c for g, cs in candidates.items() for c in cs if c not in new_groups})
        if fetched:
            shingles.update(fetched)
        missing = [c for c in others if c not in shingles]
        shingles.update(zip(missing, storage.group_shingles(missing)))
        involved = list(dict.fromkeys([*touched, *others]))
        component = dict(zip(involved, storage.component_members(involved)))
        root = {g: min(component[g]) for g in involved}  # a stored component, named by its least group
        uf: UnionFind[int] = UnionFind(root.values())
        # Every candidate pair once (two new groups propose each other), verified in bulk, a block at a
        # time: a pair whose two groups are already joined (by a stored component or by a pair verified
        # before) cannot change the components and is not verified. In a family of n near-identical
        # texts LSH proposes ~n²/2 pairs; the first block joins most of them, so this verifies ~n.
        pairs = [(g, c) for g in sorted(candidates) for c in sorted(candidates[g]) if g < c or g not in candidates.get(c, ())]
        find = uf.find
        for lo in range(0, len(pairs), _VERIFY_BLOCK):
            block = [(g, c) for g, c in pairs[lo : lo + _VERIFY_BLOCK] if find(root[g]) != find(root[c])]
            if not block:
                continue
            ids = list(dict.fromkeys(x for pair in block for x in pair))
            row = {g: i for i, g in enumerate(ids)}
            left = np.fromiter((row[g] for g, _ in block), dtype=np.int64, count=len(block))
            right = np.fromiter((row[c] for _, c in block), dtype=np.int64, count=len(block))
            sims = jaccard_pairs([shingles[g] for g in ids], left, right).tolist()
            for (g, c), sim in zip(block, sims):
                if sim >= self.threshold:
                    uf.union(root[g], root[c])
        merged: dict[int, set[int]] = {}
        for r, members in {root[g]: component[g] for g in involved}.items():
            merged.setdefault(find(r), set()).update(members)
        # Components that no union touched: the same groups as before (only exact copies may be new).
        unchanged = {component[g] for g in involved} & {frozenset(m) for m in merged.values()}
        changed = [comp for comp in merged.values() if len(comp) > 1]
        storage.set_components(changed)
        touched_set = set(touched)
        keys: list[str] = []
        clusters: list[ClusterEntry] = []
        for comp in merged.values():
            if not comp & touched_set:
                continue
            if len(comp) == 1:
                (g,) = comp
                members = storage.group_items([g])[0]
                if len(members) == 1 and members[0] in fresh_items:
                    continue  # a new text alone in a new group: a cluster of its own, nothing stored
            if not comp & new_groups and frozenset(comp) in unchanged:
                placed = self._place_exact_copies(comp, fresh_items)
                if placed is not None:
                    keys.extend(placed[0])
                    clusters.extend(placed[1])
                    continue
            comp_keys, comp_clusters = self._cluster_component(sorted(comp), shingles)
            keys.extend(comp_keys)
            clusters.extend(comp_clusters)
        if keys:
            storage.set_clusters(keys, clusters)

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
        storage = self.storage
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
        storage = self.storage
        keys = [k for ks in storage.group_items(gids) for k in ks]
        members = []
        for key, rec in zip(keys, storage.get_items(keys)):
            if rec is None:
                raise RuntimeError(f"storage is inconsistent: group member {key!r} has no item record")
            members.append((Member(key, rec.length, rec.source, rec.authority, rec.first_seen), rec.gid))
        missing = [g for g in gids if g not in shingles]
        if missing:
            shingles.update(zip(missing, storage.group_shingles(missing)))
        return keys, cluster_component(members, shingles, self.drift_floor, self.policy)

    # --- removing ---------------------------------------------------------------------------
    def remove(self, key: str) -> None:
        """Remove ``key``; its cluster re-elects a representative (and may split).

        Raises:
            TypeError: ``key`` is not a str.
            KeyError: ``key`` is not in the index.
        """
        _check_key(key, "key")
        storage = self.storage
        with storage.lock():
            rec = storage.get_items([key])[0]
            if rec is None:
                raise KeyError(f"{key!r} is not in the index")
            storage.delete_items({key: rec})
            if rec.gid == EMPTY_GROUP:
                storage.set_clusters([key], [])
                return
            comp = storage.component_members([rec.gid])[0]
            if storage.group_items([rec.gid])[0]:
                keys, clusters = self._cluster_component(sorted(comp), {})
                storage.set_clusters([key, *keys], clusters)
                return
            (sh,) = storage.group_shingles([rec.gid])
            storage.delete_group(rec.gid, self._band_keys([sh]))
            rest = sorted(comp - {rec.gid})
            if not rest:
                storage.set_clusters([key], [])
                return
            # The component may fall apart: rebuild its edges among the remaining groups.
            shingles = dict(zip(rest, storage.group_shingles(rest)))
            band_keys = self._band_keys([shingles[g] for g in rest])
            inside = set(rest)
            uf: UnionFind[int] = UnionFind(rest)
            for g, cands in zip(rest, storage.query_bands(band_keys)):
                for c in sorted(cands & inside):
                    if c > g and uf.find(c) != uf.find(g) and jaccard(shingles[g], shingles[c]) >= self.threshold:
                        uf.union(g, c)
            parts = uf.groups()
            storage.set_components(parts)
            keys, clusters = [key], []
            for part in parts:
                part_keys, part_clusters = self._cluster_component(sorted(part), shingles)
                keys.extend(part_keys)
                clusters.extend(part_clusters)
            storage.set_clusters(keys, clusters)

    def drop(self) -> None:
        """Delete everything this index holds (for Redis: its whole namespace). The index stays usable, empty."""
        with self.storage.lock():
            self.storage.drop()
            self.storage.save_meta(self._meta())

    # --- reading ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.storage.item_count()

    def __contains__(self, key: object) -> bool:
        return self.contains_many([key])[0]  # type: ignore[list-item]

    def contains_many(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key is in the index, in the order given, in one storage call (one Redis round trip).

        A key that is not a ``str`` is not in the index (as for ``key in index``).
        """
        keys = list(keys)
        found = [False] * len(keys)
        asked = [i for i, k in enumerate(keys) if isinstance(k, str)]
        if asked:
            records = self.storage.get_items([keys[i] for i in asked])
            for i, rec in zip(asked, records):
                found[i] = rec is not None
        return found

    def matches(self, keys: Sequence[str]) -> list[Match]:
        """Where each key stands now (see :class:`Match`).

        Raises:
            KeyError: A key is not in the index.
        """
        storage = self.storage
        records = storage.get_items(keys)
        for key, rec in zip(keys, records):
            if rec is None:
                raise KeyError(f"{key!r} is not in the index")
        entries = storage.get_clusters(keys)
        reps = sorted({e[0] for e in entries if e is not None})
        size_of = {rep: len(found) for rep, found in zip(reps, storage.cluster_members(reps))}
        gids = sorted({rec.gid for rec, e in zip(records, entries) if e is not None})  # type: ignore[union-attr]
        copies_of = {g: len(found) for g, found in zip(gids, storage.group_items(gids))}
        make = tuple.__new__  # Match(...) without the keyword-handling constructor (hot path)
        out = []
        for key, rec, entry in zip(keys, records, entries):
            if entry is None:
                out.append(make(Match, (key, key, key, None, 1.0, "unique", 1)))
                continue
            rep, sim = entry
            size = size_of[rep]
            kind = "unique" if size == 1 else "exact" if copies_of[rec.gid] > 1 else "near"  # type: ignore[union-attr]
            out.append(make(Match, (key, rep, rep, None if rep == key else rep, sim, kind, size)))
        return out

    def match(self, key: str) -> Match:
        """Where ``key`` stands now. Raises KeyError for an unknown key."""
        _check_key(key, "key")
        return self.matches([key])[0]

    def resolve(self, key: str) -> str:
        """The key of ``key``'s current representative (``key`` itself for a representative)."""
        return self.match(key).representative

    def cluster_of(self, key: str) -> str:
        """The id of ``key``'s cluster (its representative's key)."""
        return self.match(key).cluster_id

    def members(self, cluster_id: str) -> list[str]:
        """The keys in a cluster: the representative, then the others in key order.

        Raises:
            KeyError: No cluster has this id (it is unknown, or a key that is not a representative).
        """
        _check_key(cluster_id, "cluster_id")
        found = self.storage.cluster_members([cluster_id])[0]
        if found:
            return [cluster_id, *sorted(k for k, _ in found if k != cluster_id)]
        m = self.match(cluster_id)
        if m.duplicate_of is not None:
            raise KeyError(f"{cluster_id!r} is not a cluster id; it is a member of cluster {m.cluster_id!r}")
        return [cluster_id]

    def representative(self, cluster_id: str) -> str:
        """The representative's key of a cluster (raises KeyError like :meth:`members`)."""
        return self.members(cluster_id)[0]

    def clusters(self, *, include_singletons: bool = True) -> Iterator[tuple[str, list[str]]]:
        """Every cluster as (cluster_id, member keys): the representative, then the others in key order."""
        in_cluster: set[str] = set()
        for rep, members in self.storage.iter_clusters():
            in_cluster.update(k for k, _ in members)
            yield rep, [rep, *sorted(k for k, _ in members if k != rep)]
        if include_singletons:
            for key in self.storage.iter_keys():
                if key not in in_cluster:
                    yield key, [key]

    def keys_of_source(self, source: str) -> list[str]:
        """The keys added with ``source``."""
        return self.storage.keys_of_source(source)

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
            (cands,) = self.storage.query_bands(band_keys)
            gids = sorted(cands)
            try:
                found = self.storage.group_shingles(gids)
                break
            except KeyError:
                # A shared store: another process removed a group between these two reads; ask again.
                if not self.storage.shared or attempt == 2:
                    raise
        scored = []
        for gid, sh in zip(gids, found):
            s = jaccard(sets[0], sh)
            if s >= self.threshold:
                scored.append((gid, s))
        out = []
        for (gid, s), keys in zip(scored, self.storage.group_items([g for g, _ in scored])):
            out.extend((k, s) for k in keys)
        out.sort(key=lambda ks: (-ks[1], ks[0]))
        return out

    # --- persistence ------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Save an in-memory index to directory ``path`` (atomically; no pickle)."""
        from rag_dedup.storage.directory import save_directory

        if not isinstance(self.storage, MemoryStorage):
            raise TypeError(
                f"save() writes an in-memory index; this one lives in {self.storage!r}, which persists by itself"
            )
        save_directory(path, self._meta(), self.storage)

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
        except IndexMismatchError:
            raise
        except (TypeError, ValueError) as exc:
            raise CorruptIndexError(f"{manifest}: the saved parameters are invalid ({exc}); the index is damaged") from None

    def __repr__(self) -> str:
        b, r = self.bands
        return f"DedupIndex(threshold={self.threshold}, num_perm={self.num_perm}, ngram={self.ngram}, bands={b}x{r}, items={len(self)})"


# --- helpers ----------------------------------------------------------------------------------
def _shared_pairs(band_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of rows of an ``(n, b)`` band-key array that share at least one key, each once.

    Returns two int64 arrays ``(low, high)`` with ``low[i] < high[i]``, sorted.
    """
    b = band_keys.shape[1]
    flat = band_keys.reshape(-1)
    order = np.argsort(flat, kind="stable")
    ordered = flat[order]
    same = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(same) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    rows = order // b
    # Runs of equal keys: positions i..j with ordered[i] == ... == ordered[j].
    starts = same[np.concatenate(([True], same[1:] != same[:-1] + 1))]
    ends = same[np.concatenate((same[1:] != same[:-1] + 1, [True]))] + 1
    # A family of near-identical texts shares most of its bands: the same run of rows, once per band.
    runs = {tuple(sorted(set(rows[lo : hi + 1].tolist()))) for lo, hi in zip(starts.tolist(), ends.tolist())}
    n = band_keys.shape[0]
    codes = []
    for run in runs:
        members = np.array(run, dtype=np.int64)
        i, j = np.triu_indices(len(members), k=1)
        codes.append(members[i] * n + members[j])
    pair_codes = np.sort(np.concatenate(codes))
    pair_codes = pair_codes[np.concatenate(([True], pair_codes[1:] != pair_codes[:-1]))]  # each pair once, in order
    return pair_codes // n, pair_codes % n


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
        if isinstance(authority, bool) or not isinstance(authority, (int, float)) or not math.isfinite(authority):
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
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise TypeError(f"{where}first_seen must be a timestamp, a datetime or None, got {value!r} (key {key!r})")
