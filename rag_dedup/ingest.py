"""The ingest decision shared by every framework adapter: index a batch, stamp it, and say what passes on.

A framework's ingest component (LlamaIndex's ``DedupTransform``, LangChain's document transformer,
Haystack's deduplicator) hands this module its items as ``(key, text, source, payload)``, the payload
being its own document object, and gets back a :class:`Decision`: one :class:`Verdict` per item in input
order, and the earlier dropped items that this call promoted. The adapter only copies each verdict's
stamps onto its payload. Nothing is ever deleted: every item with text is added to the
:class:`~rag_dedup.index.DedupIndex`, passed on or not.

:meth:`Ingestor.run` adds the batch with :meth:`~rag_dedup.index.DedupIndex.add_many`, or, when a key
of it is indexed already, :meth:`~rag_dedup.index.DedupIndex.update`: a key indexed with another text
(or source) is replaced, as the frameworks' stores overwrite a document id written again (Haystack's
``DuplicatePolicy.OVERWRITE``, LangChain's upserts by id). An adapter that
writes to the index itself (``DedupTransform`` removes and replaces a re-ingested document's chunks in
one :meth:`~rag_dedup.index.DedupIndex.update`, with authority and first-seen values) passes the
resulting matches to :meth:`Ingestor.decide`, which applies the same rules.

The rules, in one place:

* **No text, no verdict on it.** An item whose text is ``None``, empty or whitespace is not indexed and
  always passes on untouched (``cluster`` None): an empty passage is no one's duplicate.
* **Stamps.** ``cluster`` is the item's cluster id (its representative's key) and ``duplicate_of`` the
  representative's key, or None on the representative, as :class:`~rag_dedup.index.Match` reports them
  after the whole batch.
* **Tag mode** passes every item on.
* **Drop mode** passes each passage on once. Every cluster that holds an item of this call or a dropped
  item must hold an item passed on (the store downstream then holds its evidence), and it gets exactly
  one when it has none: its representative if that is in this call or dropped, else the smallest such
  key. A dropped item chosen so is *promoted*: returned in :attr:`Decision.promoted` with its payload,
  for the adapter to pass on. Every other item of the call is dropped, and its payload kept in the
  :class:`Ledger` for a later promotion. So a later, longer copy that becomes the representative is
  not passed when the store holds an earlier copy (the stamps name the representative; the store
  keeps the first), and a cluster that a new text split, or whose passed item was removed
  (:meth:`Ingestor.remove`), gets a dropped member back: nothing a user still has vanishes from the
  store. Two passed items that a later merge puts in one cluster both stay passed: the store
  already holds both.
* **Re-submission.** An item that was passed before passes again when it is submitted again (and then
  nothing else of its cluster in this call does), so the same input always gives the same output
  (LangChain's indexing API, Haystack's writers and LlamaIndex's upserts rely on that to skip,
  clean up or replace).
* **A key twice in one call** (the same document fed twice): the first occurrence is indexed; a later one
  with the same text gets the same stamps and, in drop mode, does not pass again; with another text it is
  an error naming the key.

Example:
    >>> from rag_dedup.index import DedupIndex
    >>> text = "Permission is hereby granted, free of charge, to any person obtaining a copy of this software."
    >>> ingest = Ingestor(DedupIndex(), mode="drop")
    >>> decision = ingest.run([("a", text, "x", "doc a"), ("b", text.upper(), "y", "doc b")])
    >>> [(v.key, v.passed, v.duplicate_of) for v in decision.verdicts]
    [('a', True, None), ('b', False, 'a')]
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from rag_dedup.errors import KeyConflictError
from rag_dedup.index import DedupIndex, Match

__all__ = ["Decision", "Ingestor", "Ledger", "Mode", "Verdict"]

Mode = Literal["tag", "drop"]
P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class Verdict(Generic[P]):
    """What happens to one item: its stamps, and whether it passes on."""

    key: str
    cluster: str | None
    duplicate_of: str | None
    passed: bool
    payload: P


@dataclass(frozen=True, slots=True)
class Decision(Generic[P]):
    """The verdicts of one call, in input order, and the earlier dropped items it promoted (all passed)."""

    verdicts: list[Verdict[P]]
    promoted: list[Verdict[P]]

    def passed(self) -> list[Verdict[P]]:
        """What passes on: the passed verdicts in input order, then the promoted ones."""
        return [v for v in self.verdicts if v.passed] + self.promoted


@dataclass(slots=True)
class Ledger(Generic[P]):
    """What drop mode remembers between calls: the keys passed on, and the dropped items' payloads.

    ``dropped`` may be any mutable mapping: a ``dict`` in memory (the default), or one that keeps its
    payloads compactly and persists them (``DedupTransform``'s state does).
    """

    passed: set[str] = field(default_factory=set)
    dropped: MutableMapping[str, P] = field(default_factory=dict)


class Ingestor(Generic[P]):
    """Index batches of items into one :class:`~rag_dedup.index.DedupIndex` and decide what passes on.

    Args:
        index: The index (in memory or shared through Redis).
        mode: ``"tag"`` passes every item on, ``"drop"`` each passage once (see the module docstring).
        ledger: Where drop mode records what it passed and dropped; default: a new one in memory.

    What this ingestor passed and dropped in drop mode is kept in its ledger (and lost with it unless
    the caller saves it): a second ingestor over the same index knows nothing of it, so give one index
    one ingestor.

    :meth:`run` and :meth:`remove` hold a lock of the index (one for every ingestor over it, in this
    process) from the index's change to the ledger's: the adapters' async methods run them in executor
    threads, and an in-memory index is not safe for two writers at once (``asyncio.gather`` of two
    ingests would otherwise interleave them).
    """

    def __init__(self, index: DedupIndex, mode: Mode = "tag", *, ledger: Ledger[P] | None = None) -> None:
        if not isinstance(index, DedupIndex):
            raise TypeError(f"index must be a DedupIndex, got {type(index).__name__}")
        if mode not in ("tag", "drop"):
            raise ValueError(f'mode must be "tag" or "drop", got {mode!r}')
        self.index = index
        self.mode: Mode = mode
        self.ledger: Ledger[P] = ledger if ledger is not None else Ledger()

    def locked(self) -> Any:
        """The lock :meth:`run` and :meth:`remove` hold (a context manager), for a caller that reads the
        index and the ledger together (a save)."""
        return _lock_of(self.index)

    def run(self, items: Sequence[tuple[str, str | None, str | None, P]], *, replacing: Sequence[str] = ()) -> Decision[P]:
        """Add ``items`` (``(key, text, source, payload)``) to the index and decide what passes on.

        ``replacing``: keys that leave the index first, as by :meth:`remove` (the earlier version of a
        document this call brings again, which the store downstream deletes); the items they let a
        dropped copy promote are among :attr:`Decision.promoted`, stamped as of the end of the call.

        Raises:
            TypeError, ValueError: As :meth:`DedupIndex.update`, naming the item; a key given twice
                with two texts. Nothing of the batch is passed on then.
        """
        with _lock_of(self.index):
            if not replacing:
                return self._run(items)
            freed = self._remove(list(replacing))
            decision = self._run(items)
            known = {v.key for v in decision.promoted} | {v.key for v in decision.verdicts}  # decided by the call
            freed = [v for v in freed if v.key not in known]
            if not freed:
                return decision
            now = self.index.matches([v.key for v in freed])
            restamped = [Verdict(v.key, m.cluster_id, m.duplicate_of, True, v.payload) for v, m in zip(freed, now)]
            return Decision(decision.verdicts, decision.promoted + restamped)

    def _run(self, items: Sequence[tuple[str, str | None, str | None, P]]) -> Decision[P]:
        first: dict[str, int] = {}
        batch: list[dict[str, object]] = []
        for i, (key, text, source, _) in enumerate(items):
            if text is None or not text.strip():
                continue
            if key in first:
                if items[first[key]][1] != text:
                    raise ValueError(f"items[{i}]: key {key!r} appears twice in this batch with two texts")
                continue
            first[key] = i
            batch.append({"key": key, "text": text, "source": source})
        if not batch:
            matches: dict[str, Match] = {}
        elif any(self.index.contains_many([item["key"] for item in batch])):  # type: ignore[misc]
            matches = {m.key: m for m in self.index.update(batch)[0]}  # one step, replacing what changed
        else:  # nothing to replace: add_many, which a shared store commits without its lock
            try:
                matches = {m.key: m for m in self.index.add_many(batch)}
            except KeyConflictError:
                # Another worker added one of the keys with another text since contains_many looked:
                # replace it, as the update above does (what add_many committed before stays: unchanged).
                matches = {m.key: m for m in self.index.update(batch)[0]}
        return self.decide([(key, payload) for key, _, _, payload in items], matches)

    def decide(self, items: Sequence[tuple[str, P]], matches: Mapping[str, Match]) -> Decision[P]:
        """The verdicts on ``items`` (``(key, payload)``, in input order), already in the index.

        ``matches`` holds the :class:`~rag_dedup.index.Match` of every key indexed by this call, as
        things stand after it; an item whose key is not there (no text) passes on untouched. In drop
        mode only the first occurrence of a key may pass, and the ledger is updated.
        """
        first: dict[str, int] = {}
        for i, (key, _) in enumerate(items):
            if key in matches and key not in first:
                first[key] = i
        if self.mode == "tag":
            passing = set(first)
            promoted: list[Verdict[P]] = []
        else:
            payloads = {key: items[i][1] for key, i in first.items()}
            passing, promoted = self._settle(list(first), payloads, matches)
        verdicts = []
        for i, (key, payload) in enumerate(items):
            m = matches.get(key)
            if m is None:
                verdicts.append(Verdict(key, None, None, True, payload))
            else:
                passed = key in passing and (self.mode == "tag" or first[key] == i)
                verdicts.append(Verdict(key, m.cluster_id, m.duplicate_of, passed, payload))
        return Decision(verdicts, promoted)

    def remove(self, keys: Sequence[str]) -> list[Verdict[P]]:
        """Remove ``keys`` from the index (their documents left the store); return the items promoted.

        Keys not in the index are ignored; the others leave it in one
        :meth:`~rag_dedup.index.DedupIndex.update`.

        Raises:
            TypeError: ``keys`` is one ``str`` (it would be read as its characters, and remove nothing).
        """
        if isinstance(keys, (str, bytes)):
            raise TypeError(f"keys must be a list of keys, got the single {type(keys).__name__} {keys!r:.80}: pass [{keys!r:.80}]")
        with _lock_of(self.index):
            return self._remove(list(keys))

    def _remove(self, keys: list[str]) -> list[Verdict[P]]:
        present = list(dict.fromkeys(k for k, here in zip(keys, self.index.contains_many(keys)) if here))  # one lookup
        if present:
            self.index.update([], remove=present)
        self.forget(keys)
        return self._settle([], {}, {})[1] if self.mode == "drop" else []

    def forget(self, keys: Sequence[str]) -> None:
        """Forget ``keys`` as passed and as dropped (they left the index)."""
        passed, dropped = self.ledger.passed, self.ledger.dropped
        for key in keys:
            passed.discard(key)
            if key in dropped:  # not pop(): a mapping may rebuild the payload to return it
                del dropped[key]

    def _settle(
        self, keys: list[str], payloads: dict[str, P], matches: Mapping[str, Match]
    ) -> tuple[set[str], list[Verdict[P]]]:
        """Drop mode: the keys of this call that pass on, and the dropped items promoted (see the module
        docstring); records both in the ledger, and the other keys of the call as dropped."""
        ledger, index = self.ledger, self.index
        again = {k for k in keys if k in ledger.passed}
        for key in keys:
            if key in ledger.dropped:  # this call decides it again
                del ledger.dropped[key]
        dropped = list(ledger.dropped)
        gone = [k for k, here in zip(dropped, index.contains_many(dropped)) if not here]
        self.forget(gone)  # left the index elsewhere
        dropped = [k for k in dropped if k in ledger.dropped]
        clusters: dict[str, list[str]] = {}
        for m in [matches[k] for k in keys] + index.matches(dropped):
            clusters.setdefault(m.cluster_id, []).append(m.key)
        cids = sorted(clusters)
        call = set(keys)
        chosen: set[str] = set()
        for cid, found in zip(cids, index.storage.cluster_members(cids)):
            if any(k in again for k in clusters[cid]):
                chosen.update(k for k in clusters[cid] if k in again)  # re-submitted: passes again
                continue
            members = [cid, *sorted(k for k, _ in found if k != cid)] if found else [cid]
            if any(k in ledger.passed for k in members):
                continue
            pick = next((k for k in members if k in call or k in ledger.dropped), None)
            if pick is not None:
                chosen.add(pick)
        promoted_keys = sorted(chosen - call)
        promoted = [
            Verdict(m.key, m.cluster_id, m.duplicate_of, True, ledger.dropped.pop(m.key))
            for m in index.matches(promoted_keys)
        ]
        passing = chosen & call
        ledger.passed.update(chosen)
        for key in keys:
            if key not in passing:
                ledger.dropped[key] = payloads[key]
        return passing, promoted


#: One lock per index (see :class:`Ingestor`), dropped with the index.
_LOCKS: weakref.WeakKeyDictionary[DedupIndex, Any] = weakref.WeakKeyDictionary()
_LOCKS_LOCK = threading.Lock()


def _lock_of(index: DedupIndex) -> Any:
    """The index's lock (a ``threading.RLock``), made at its first use."""
    with _LOCKS_LOCK:
        lock = _LOCKS.get(index)
        if lock is None:
            lock = _LOCKS[index] = threading.RLock()
        return lock
