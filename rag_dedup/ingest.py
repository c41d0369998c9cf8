"""The ingest decision shared by every framework adapter: index a batch, stamp it, and say what passes on.

A framework's ingest component (LangChain's document transformer, Haystack's deduplicator) hands this
module its items as ``(key, text, source, payload)``, the payload being its own document object, and
gets back a :class:`Decision`: one :class:`Verdict` per item in input order, and the earlier dropped
items that this call promoted. The adapter only copies each verdict's stamps onto a copy of its payload.
Nothing is ever deleted: every item with text is added to the :class:`~rag_dedup.index.DedupIndex`,
passed on or not.

The rules, in one place:

* **No text, no verdict on it.** An item whose text is ``None``, empty or whitespace is not indexed and
  always passes on untouched (``cluster`` None): an empty passage is no one's duplicate.
* **Stamps.** ``cluster`` is the item's cluster id (its representative's key) and ``duplicate_of`` the
  representative's key, or None on the representative, as :class:`~rag_dedup.index.Match` reports them
  after the whole batch.
* **Tag mode** passes every item on.
* **Drop mode** passes each passage on once: an item passes only when no member of its cluster was passed
  before (by this :class:`Ingestor`, in this call or an earlier one). Among a cluster's members that are
  new in one call, the representative passes if it is one of them, else the first in input order. An
  item that was passed before passes again when it is submitted again, so the same input always gives
  the same output (LangChain's indexing API and Haystack's writers rely on that to skip or clean up).
  The store downstream then holds one copy of each passage, the first copy that reached it; the
  index's representative (longest text, ...) is what the stamps and reports name.
* **Promotion.** Clusters change as items arrive and leave: a new text can split a cluster so that a
  dropped item ends in a cluster with no passed member. After every call (and :meth:`Ingestor.remove`)
  each such cluster's first dropped member (the representative, else the smallest key) is *promoted*:
  it is returned in :attr:`Decision.promoted` with its payload, and the adapter passes it on. Nothing a
  user still has vanishes from the store. (Two passed items that a later merge puts in one cluster
  both stay passed: the store already holds both.) The payloads of dropped items are kept in this
  object for that, in memory.
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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from rag_dedup.index import DedupIndex, Match

__all__ = ["Decision", "Ingestor", "Mode", "Verdict"]

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


class Ingestor(Generic[P]):
    """Index batches of items into one :class:`~rag_dedup.index.DedupIndex` and decide what passes on.

    Args:
        index: The index (in memory or shared through Redis).
        mode: ``"tag"`` passes every item on, ``"drop"`` each passage once (see the module docstring).

    What this ingestor passed and dropped in drop mode is kept in this object (and lost with it): a
    second ingestor over the same index knows nothing of it, so give one index one ingestor.
    """

    def __init__(self, index: DedupIndex, mode: Mode = "tag") -> None:
        if not isinstance(index, DedupIndex):
            raise TypeError(f"index must be a DedupIndex, got {type(index).__name__}")
        if mode not in ("tag", "drop"):
            raise ValueError(f'mode must be "tag" or "drop", got {mode!r}')
        self.index = index
        self.mode: Mode = mode
        self._passed: set[str] = set()
        self._dropped: dict[str, P] = {}

    def run(self, items: Sequence[tuple[str, str | None, str | None, P]]) -> Decision[P]:
        """Add ``items`` (``(key, text, source, payload)``) to the index and decide what passes on.

        Raises:
            TypeError, ValueError: As :meth:`DedupIndex.add_many`, naming the item; a key given twice
                with two texts. Nothing of the batch is passed on then.
        """
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
        matches = {m.key: m for m in self.index.add_many(batch)} if batch else {}
        passing = self._passing(list(first), matches) if self.mode == "drop" else set(first)
        verdicts = []
        for i, (key, _, _, payload) in enumerate(items):
            m = matches.get(key)
            if m is None:
                verdicts.append(Verdict(key, None, None, True, payload))
            else:
                verdicts.append(Verdict(key, m.cluster_id, m.duplicate_of, first[key] == i and key in passing, payload))
        if self.mode == "tag":
            return Decision(verdicts, [])
        self._passed.update(passing)
        for key, i in first.items():
            if key not in passing:
                self._dropped[key] = items[i][3]
        return Decision(verdicts, self._promote())

    def remove(self, keys: Sequence[str]) -> list[Verdict[P]]:
        """Remove ``keys`` from the index (their documents left the store); return the items promoted."""
        keys = list(keys)
        removed: set[str] = set()
        for key, here in zip(keys, self.index.contains_many(keys)):  # one lookup for every key
            if here and key not in removed:
                self.index.remove(key)
                removed.add(key)
            self._passed.discard(key)
            self._dropped.pop(key, None)
        return self._promote()

    def _held(self) -> set[str]:
        """The clusters that hold a passed item now (one bulk lookup)."""
        candidates = sorted(self._passed)
        passed = [k for k, here in zip(candidates, self.index.contains_many(candidates)) if here]
        return {m.cluster_id for m in self.index.matches(passed)}

    def _promote(self) -> list[Verdict[P]]:
        """Dropped items whose cluster now has no passed member: one per such cluster, now passed."""
        if not self._dropped:
            return []
        held = self._held()
        orphans: dict[str, list[Match]] = {}
        for m in self.index.matches(sorted(self._dropped)):
            if m.cluster_id not in held:
                orphans.setdefault(m.cluster_id, []).append(m)
        promoted = []
        for cluster, ms in orphans.items():
            m = next((x for x in ms if x.key == cluster), ms[0])
            promoted.append(Verdict(m.key, m.cluster_id, m.duplicate_of, True, self._dropped.pop(m.key)))
            self._passed.add(m.key)
        return promoted

    def _passing(self, keys: list[str], matches: dict[str, Match]) -> set[str]:
        """Drop mode: the keys of this batch that pass on (see the module docstring)."""
        by_cluster: dict[str, list[str]] = {}
        for key in keys:
            by_cluster.setdefault(matches[key].cluster_id, []).append(key)
        held = self._held() if self._passed else set()
        passing: set[str] = set()
        for cluster, new in by_cluster.items():
            again = [k for k in new if k in self._passed]
            if again:  # a re-submitted item passes again: the same input gives the same output
                passing.update(again)
            elif cluster not in held:
                passing.add(cluster if cluster in new else new[0])
        return passing
