"""Union-find over group ids, and the order-independent rule that turns a component into clusters.

Near-duplicate detection gives a graph: nodes are distinct canonical texts (groups), edges join pairs
whose shingle sets have Jaccard >= threshold. Its connected components do not depend on the order in
which nodes were added, but a component can be a *chain* (A~B, B~C, while A and C share little), and
gluing a whole chain into one cluster would make a representative stand for text it does not contain.

So each component is cut into clusters by :func:`cluster_component`, a pure function of its members
and their shingle sets. With J the exact Jaccard similarity of two groups' shingle sets and ``f`` the
drift floor, repeat until every group is placed, over the set U of groups not yet placed:

1. **Center by coverage.** Every g in U gets its *pooled Jaccard* to the rest of U,
   ``P(g) = Σ_{x in U, x != g} |g ∩ x| / Σ_{x in U, x != g} |g ∪ x|``: the share of everything g and
   the others hold that they hold in common. The sums are exact integers, computed for all of U at
   once from one count of how many groups hold each shingle (``Σ_x |g ∩ x| = Σ_{s in g} (n_s - 1)``,
   ``Σ_x |g ∪ x| = (|U| - 2)|g| + Σ_{x in U} |x| - Σ_x |g ∩ x|``), so this step costs
   O(Σ|x| log Σ|x|), not one comparison per pair. The center is the group of highest P; the policy
   breaks ties (among the members of the tied groups).
2. **Cluster.** The center and every g in U with ``J(center, g) >= f``.
3. **Eligible to represent.** A member is *eligible* when it is ``>= f`` to every other member of its
   cluster; the center always is (step 2). The representative is the policy's choice among the
   eligible members, so every member of a cluster is ``>= f`` to its representative: no chaining
   drift, whatever the component's shape. Eligibility is certified without comparing pairs where the
   triangle inequality of the Jaccard distance ``d = 1 - J`` allows it: with ``R`` the largest
   ``d(center, y)`` in the cluster, ``d(center, x) + R <= 1 - f`` implies ``d(x, y) <= 1 - f`` for
   every member y; only the other members are compared with the whole cluster.

Why this keeps families together: the longest (or most authoritative) member of a real family is
often at its edge, and a rule that grows the cluster around the policy's pick leaves the far side of
the family out. The center by coverage is the family's middle; a family whose members are all ``>= f``
to one another (a dense clique) is always one cluster, represented by the policy's choice among all
its members, and in a chain the center covers every member within ``f`` on both sides.

Every step reads only the set of groups, their shingle sets and their members (never an order of
arrival or of union), so the clusters and representatives are a pure function of the set of items.
A :class:`Family` keeps step 1's counts (and step 2's similarities) for a component that grows, so
that clustering it again after a few groups joined does not count everything again; it changes the
cost, never the result.

Example:
    >>> import numpy as np
    >>> from rag_dedup.policy import Member, longest_then_authority
    >>> sets = {1: np.arange(0, 100), 2: np.arange(5, 105), 3: np.arange(10, 110)}
    >>> members = [(Member("edge", 300, None, 0.0, None), 1), (Member("middle", 200, None, 0.0, None), 2),
    ...            (Member("far", 100, None, 0.0, None), 3)]
    >>> [(rep, [(k, round(s, 3)) for k, s in ms]) for rep, ms in
    ...  cluster_component(members, {g: s.astype(np.uint32) for g, s in sets.items()}, 0.7, longest_then_authority)]
    [('edge', [('edge', 1.0), ('far', 0.818), ('middle', 0.905)])]
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

import numpy as np

from rag_dedup import compiled
from rag_dedup.errors import CorruptIndexError
from rag_dedup.compiled.index import intersection_matrix, jaccard_of, pack, pair_jaccard
from rag_dedup.policy import Member, Policy, choose, default_rank, longest_then_authority
from rag_dedup.similarity import jaccard_many

__all__ = ["Family", "UnionFind", "cluster_component", "cluster_components", "pooled_jaccard"]

T = TypeVar("T", bound=Hashable)
# J(g, y) for every group y of a cluster (or of the groups left), in their order (a list of floats for a
# small component: _cluster_few).
Vector = np.ndarray | list[float]
Similarities = Callable[[int], Vector]

# Slack for the float rounding of d = 1 - J in the triangle-inequality certificate (J is a ratio of
# integers below 2^32, so its rounding error is far below this); a member within the slack is compared.
_SLACK = 1e-9
# Similarity vectors a Family keeps (center, representative, an eligibility check).
_ANCHORS = 3
# A component of at most this many groups (and no Family) is clustered from the shared shingles of all
# its pairs, counted at once by the compiled kernel (_Dense), when the kernels are on.
_DENSE_MAX = 16


class UnionFind(Generic[T]):
    """Disjoint sets with path halving and union by size."""

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._parent: dict[T, T] = {}
        self._size: dict[T, int] = {}
        for item in items:
            self.add(item)

    def add(self, item: T) -> None:
        if item not in self._parent:
            self._parent[item] = item
            self._size[item] = 1

    def find(self, item: T) -> T:
        parent = self._parent
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    def union(self, a: T, b: T) -> bool:
        """Join the sets of ``a`` and ``b``; True if they were apart."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if self._size[ra] < self._size[rb]:
            ra, rb = rb, ra
        self._parent[rb] = ra
        self._size[ra] += self._size[rb]
        return True

    def groups(self) -> list[list[T]]:
        """The disjoint sets, each as a list."""
        out: dict[T, list[T]] = {}
        for item in self._parent:
            out.setdefault(self.find(item), []).append(item)
        return list(out.values())


def pooled_jaccard(sets: Sequence[np.ndarray]) -> np.ndarray:
    """``P(g) = Σ_{x != g} |g ∩ x| / Σ_{x != g} |g ∪ x|`` for every set g of ``sets`` (sorted unique arrays).

    With n_s the number of sets holding shingle s, ``Σ_{x != g} |g ∩ x| = Σ_{s in g} (n_s - 1)`` and
    ``Σ_{x != g} |g ∪ x| = (n - 2)|g| + Σ_x |x| - Σ_{x != g} |g ∩ x|``: one count of the shingles
    instead of n²/2 comparisons. Both sums are integers, so equal values compare equal exactly.
    0.0 for a set of one, or for an empty set.
    """
    n = len(sets)
    out = np.zeros(n, dtype=np.float64)
    sizes = np.fromiter((len(s) for s in sets), dtype=np.int64, count=n)
    if n < 2 or not sizes.any():
        return out
    # n_s for every element of every set: sort once, measure the runs of equal hashes, scatter back
    # (a stable sort: the sets are sorted runs, which it merges; near-identical sets defeat quicksort).
    flat = np.concatenate(sets)
    order = np.argsort(flat, kind="stable")
    ordered = flat[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    runs = np.diff(np.append(starts, len(ordered)))
    held = np.empty(len(flat), dtype=np.int64)
    held[order] = np.repeat(runs, runs)
    shared = np.concatenate(([0], np.cumsum(held - 1)))
    ends = np.cumsum(sizes)
    inter = shared[ends] - shared[ends - sizes]
    union = (n - 2) * sizes + int(sizes.sum()) - inter
    nonempty = sizes > 0
    out[nonempty] = inter[nonempty] / union[nonempty]
    return out


class Family:
    """The first step of :func:`cluster_component` for one growing set of groups, kept between calls.

    Adding groups to a component changes every group's pooled Jaccard (step 1), so the center must be
    chosen again over all of them; but the counts behind it need not be recounted. A family keeps
    n_s (how many of its groups hold shingle s), and per group ``|g|`` and ``Σ_{s in g} (n_s - 1)``;
    :meth:`add` counts the first groups with one sort, and updates the counts for later ones with
    one gather over the family's shingles (no sort of them), and
    :meth:`coverage` gives :func:`pooled_jaccard` of the whole set from them: the same integers, so
    the same floats; :meth:`discard` takes a group out the same way. It also keeps the similarity of
    every group to the last few groups it was asked about (:meth:`similarities`), so a center or a
    representative that stays (the usual case when a big family grows) is compared only with the
    groups added since. It holds the groups' shingle sets too, so that they need not be read
    again. It describes a set of groups; ``DedupIndex`` uses it for a component only
    when every group it holds is in the component (and then adds the others).

    Everything it returns is what the from-scratch computation returns, value for value, so passing
    a family to :func:`cluster_component` never changes a partition: it only makes it cheaper.
    """

    def __init__(self) -> None:
        self.index: dict[int, int] = {}  # group id -> its row
        self.sets: dict[int, np.ndarray] = {}  # group id -> its shingle set (as given to add)
        self._values = np.zeros(0, dtype=np.uint64)  # the distinct shingles, sorted
        self._slot_of = np.zeros(0, dtype=np.int64)  # the row of _counts of each of _values
        self._counts = np.zeros(0, dtype=np.int64)  # n_s, by slot
        self._flat = np.zeros(0, dtype=np.int32)  # the slots of every group's shingles, row after row
        self._sizes = np.zeros(0, dtype=np.int64)
        self._inter = np.zeros(0, dtype=np.int64)  # Σ_{s in g} (n_s - 1), by row
        self._total = 0
        # J(anchor, g) by row for the first rows (those there when it was asked), least recent first.
        self._anchors: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.index)

    def add(self, gids: Sequence[int], sets: Sequence[np.ndarray]) -> None:
        """Add groups (ids not in the family yet) with their sorted unique shingle arrays."""
        fresh = [(g, s) for g, s in zip(gids, sets) if g not in self.index]
        if not fresh:
            return
        for g, sh in fresh:
            self.index[g] = len(self.index)
            self.sets[g] = sh
        sizes = np.fromiter((len(s) for _, s in fresh), dtype=np.int64, count=len(fresh))
        flat = np.concatenate([s for _, s in fresh]) if sizes.any() else np.zeros(0, dtype=self._values.dtype)
        if not len(self._values):  # the first groups: number the distinct shingles in sorted order
            # A stable sort, as in pooled_jaccard: it merges the sorted runs, which defeat quicksort.
            order = np.argsort(flat, kind="stable")
            ordered = flat[order]
            first = np.concatenate(([True], ordered[1:] != ordered[:-1])) if len(flat) else np.zeros(0, dtype=bool)
            self._values = ordered[first]
            slots = np.empty(len(flat), dtype=np.int64)
            slots[order] = np.cumsum(first) - 1
            self._slot_of = np.arange(len(self._values), dtype=np.int64)
            self._counts = np.zeros(len(self._values), dtype=np.int64)
        else:
            distinct = np.unique(flat)
            at = self._values.searchsorted(distinct)
            known = at < len(self._values)
            known[known] = self._values[at[known]] == distinct[known]
            unseen = ~known
            first_new = len(self._counts)
            n_new = int(unseen.sum())
            if n_new:
                self._values = np.insert(self._values, at[unseen], distinct[unseen])
                self._slot_of = np.insert(self._slot_of, at[unseen], np.arange(first_new, first_new + n_new))
                self._counts = np.concatenate((self._counts, np.zeros(n_new, dtype=np.int64)))
            slots = self._slot_of[self._values.searchsorted(flat)]
        added = np.bincount(slots, minlength=len(self._counts)).astype(np.int64)
        # The old groups each gain Σ_{s in g} (number of new groups holding s).
        if len(self._flat):
            self._inter += _per_row(added[self._flat], self._sizes)
        self._counts += added
        self._inter = np.concatenate((self._inter, _per_row(self._counts[slots] - 1, sizes)))
        self._flat = np.concatenate((self._flat, slots.astype(np.int32)))
        self._sizes = np.concatenate((self._sizes, sizes))
        self._total += int(sizes.sum())

    def discard(self, gid: int) -> None:
        """Take group ``gid`` out of the family (nothing happens if it is not in it)."""
        row = self.index.pop(gid, None)
        if row is None:
            return
        del self.sets[gid]
        start = int(self._sizes[:row].sum())
        size = int(self._sizes[row])
        gone = self._flat[start : start + size]
        removed = np.bincount(gone, minlength=len(self._counts)).astype(np.int64)
        self._counts -= removed
        self._flat = np.concatenate((self._flat[:start], self._flat[start + size :]))
        self._sizes = np.delete(self._sizes, row)
        self._inter = np.delete(self._inter, row) - _per_row(removed[self._flat], self._sizes)
        self._total -= size
        self.index = {g: r - (r > row) for g, r in self.index.items()}
        self._anchors.pop(gid, None)
        for anchor, known in self._anchors.items():
            if row < len(known):
                self._anchors[anchor] = np.delete(known, row)

    def rows(self, gids: Sequence[int]) -> np.ndarray:
        """The rows of ``gids`` (all in the family)."""
        index = self.index
        return np.fromiter((index[g] for g in gids), dtype=np.int64, count=len(gids))

    def coverage(self, rows: np.ndarray) -> np.ndarray:
        """:func:`pooled_jaccard` of all the family's groups, for the groups at ``rows``."""
        n = len(self._sizes)
        out = np.zeros(len(rows), dtype=np.float64)
        if n < 2 or not self._sizes.any():
            return out
        sizes, inter = self._sizes[rows], self._inter[rows]
        union = (n - 2) * sizes + self._total - inter
        nonempty = sizes > 0
        out[nonempty] = inter[nonempty] / union[nonempty]
        return out

    def similarities(self, anchor: int, rows: np.ndarray, shingles: Mapping[int, np.ndarray], order: Sequence[int]) -> np.ndarray:
        """``jaccard_many(shingles[anchor], [shingles[g] for g in order])``, ``rows`` the rows of ``order``.

        The vectors of the last ``_ANCHORS`` anchors asked about are kept (in a growing family: the
        center, the representative, a member checked for eligibility), so asking about one of them
        again compares it only with the groups added since.
        """
        known = self._anchors.pop(anchor, None)
        if known is None:
            known = np.zeros(0, dtype=np.float64)
        if len(known) < len(self.index):
            by_row = np.empty(len(self.index), dtype=np.int64)
            by_row[rows] = np.arange(len(rows))
            later = [order[i] for i in by_row[len(known) :].tolist()]
            known = np.concatenate((known, jaccard_many(shingles[anchor], [shingles[g] for g in later])))
        self._anchors[anchor] = known
        while len(self._anchors) > _ANCHORS:
            del self._anchors[next(iter(self._anchors))]
        return known[rows]


class _Dense:
    """The shared shingles of every pair of a few groups, counted at once by the compiled kernel
    (:func:`rag_dedup.compiled.index.intersection_matrix`), for :func:`cluster_component` of a small
    component: :meth:`coverage` and :meth:`similarities` give :func:`pooled_jaccard` and
    :func:`~rag_dedup.similarity.jaccard_many` from the same integers, so the same floats (worked
    out in plain Python: a few groups make lists shorter than a numpy call's fixed cost)."""

    def __init__(self, gids: Sequence[int], shingles: Mapping[int, np.ndarray]) -> None:
        self.at = {g: i for i, g in enumerate(gids)}
        flat, bounds, self.sizes = pack([shingles[g] for g in gids])
        self.shared: list[list[int]] = intersection_matrix(flat, bounds).tolist()

    def coverage(self, order: Sequence[int]) -> list[float]:
        """:func:`pooled_jaccard` of the sets of ``order`` (groups given to the constructor)."""
        rows = [self.at[g] for g in order]
        n = len(rows)
        sizes = [self.sizes[i] for i in rows]
        total = sum(sizes)
        if n < 2 or not total:
            return [0.0] * n
        out = []
        for i, size in zip(rows, sizes):
            shared = self.shared[i]
            inter = sum(shared[j] for j in rows) - size  # Σ_{x != g} |g ∩ x|
            out.append(inter / ((n - 2) * size + total - inter) if size else 0.0)
        return out

    def similarities(self, g: int, order: Sequence[int]) -> list[float]:
        """``jaccard_many(shingles[g], [shingles[y] for y in order])``."""
        a = self.sizes[self.at[g]]
        shared = self.shared[self.at[g]]
        sizes = self.sizes
        out = []
        for y in order:
            j = self.at[y]
            out.append(shared[j] / (a + sizes[j] - shared[j]) if a and sizes[j] else 0.0)
        return out



def _placed(rep_key: str, rep_group: int, cluster: Sequence[int], to_rep: Sequence[float], items: Mapping[int, list[Member]]) -> list[tuple[str, float]]:
    """A cluster's members as it is stored: the representative first (1.0), then every other member by key,
    with its group's similarity to the representative's group ``to_rep`` (1.0 inside that group)."""
    placed = [(rep_key, 1.0)]
    for key, sim in sorted((m.key, 1.0 if g == rep_group else sim) for g, sim in zip(cluster, to_rep) for m in items[g]):
        if key != rep_key:
            placed.append((key, sim))
    return placed


def _cluster_few(
    items: Mapping[int, list[Member]],
    group_of: Mapping[str, int],
    remaining: list[int],
    dense: _Dense,
    floor: float,
    policy: Policy,
) -> list[tuple[str, list[tuple[str, float]]]]:
    """The loop of :func:`cluster_component` over a small component, with Python lists of the
    similarities ``dense`` gives instead of numpy arrays (a few groups: the lists cost less than a
    numpy call); step for step the same rule, so the same clusters (the tests hold both equal)."""
    clusters: list[tuple[str, list[tuple[str, float]]]] = []
    while remaining:
        coverage = dense.coverage(remaining)
        top = max(coverage)
        tied = [i for i, c in enumerate(coverage) if c == top]
        center = group_of[choose(policy, [m for i in tied for m in items[remaining[i]]]).key]
        to_all = dense.similarities(center, remaining)
        at_center = bisect_left(remaining, center)
        inside = [i for i, sim in enumerate(to_all) if sim >= floor or i == at_center]
        cluster = [remaining[i] for i in inside]
        to_center = [to_all[i] for i in inside]

        def within(g: int, _inside: list[int] = inside, _order: list[int] = remaining) -> list[float]:
            sims = dense.similarities(g, _order)
            return [sims[i] for i in _inside]

        if policy is longest_then_authority:
            rep = _first_eligible(cluster, within, to_center, center, floor, items)
        else:
            eligible = _eligible(cluster, within, to_center, center, floor)
            rep = choose(policy, [m for g in eligible for m in items[g]])
        rep_group = group_of[rep.key]
        to_rep = to_center if rep_group == center else within(rep_group)
        clusters.append((rep.key, _placed(rep.key, rep_group, cluster, to_rep, items)))
        taken = set(cluster)
        remaining = [g for g in remaining if g not in taken]
    return clusters


def _cluster_two(
    items: Mapping[int, list[Member]],
    group_of: Mapping[str, int],
    a: int,
    b: int,
    sim: float,
    floor: float,
    policy: Policy,
) -> list[tuple[str, list[tuple[str, float]]]]:
    """The loop of :func:`cluster_component` over a component of two groups ``a < b`` whose sets have
    Jaccard ``sim``, in closed form (the tests hold it equal to the loop). Two groups have the same
    coverage (``|a ∩ b| / (|a| + |b| - |a ∩ b|)``, or 0.0 for both), so the center is the policy's
    choice among every member. At or above ``floor`` both groups are one cluster, every member of it
    eligible (each is ``sim >= floor`` to the other group), so its representative is the policy's
    choice among every member again; below it, the center's group is a cluster and the other group
    the next (each a cluster of one group: every member eligible, the representative the policy's
    choice among its members, :func:`_first_eligible`'s too)."""
    everyone = [*items[a], *items[b]]
    center = choose(policy, everyone)
    if sim >= floor:
        rep = center if policy is longest_then_authority else choose(policy, everyone)
        return [(rep.key, _placed(rep.key, group_of[rep.key], (a, b), (sim, sim), items))]
    first = group_of[center.key]
    clusters = []
    for g in (first, b if first == a else a):
        rep = choose(policy, items[g])
        clusters.append((rep.key, _placed(rep.key, g, (g,), (1.0,), items)))
    return clusters


def _per_row(values: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The sums of consecutive runs of ``values``, run i of length ``sizes[i]`` (empty runs sum to 0)."""
    sums = np.concatenate(([0], np.cumsum(values, dtype=np.int64)))
    ends = np.cumsum(sizes)
    return sums[ends] - sums[ends - sizes]


def cluster_component(
    members: Sequence[tuple[Member, int]],
    shingles: Mapping[int, np.ndarray],
    floor: float,
    policy: Policy,
    family: Family | None = None,
) -> list[tuple[str, list[tuple[str, float]]]]:
    """Cut one connected component into clusters: centers by coverage, representatives by the policy.

    The rule is stated in this module's docstring. Members with the same canonical text (one *group*)
    have the same similarity to everything, so they always land in the same cluster; the work is
    done per group, and the policy still chooses among items.

    Args:
        members: The component's items, each with its group id.
        shingles: The sorted unique shingle-hash array of every group id in ``members``.
        floor: The drift floor: every member of a cluster is at least this similar to its
            representative (``DedupIndex.drift_floor``).
        policy: Breaks ties between centers, and chooses the representative among the eligible members.
        family: The :class:`Family` of exactly the groups of ``members``, if one is kept: the first
            center is then found from its counts, not recounted (the result is the same).

    Returns:
        ``[(representative_key, [(member_key, similarity_to_representative), ...]), ...]``, in the
        order the centers were chosen; each member list starts with the representative (1.0), then
        the others in key order. Similarities are exact Jaccard values of the groups' shingle sets.

    Raises:
        KeyError: A group of ``members`` has no entry in ``shingles``.
        ValueError: The policy returned something that is not one of the members it was given, or
            ``family`` does not hold exactly the groups of ``members``.
    """
    items, group_of, remaining = _by_group(members, shingles)
    rows = None
    if family is not None:
        if len(family) != len(remaining) or any(g not in family.index for g in remaining):
            raise ValueError("the family does not hold exactly the groups of the members")
        rows = family.rows(remaining)
    if rows is None and len(remaining) == 2 and compiled.COMPILED:
        a, b = remaining
        sim = jaccard_of(shingles[a], shingles[b])
        return _cluster_two(items, group_of, a, b, sim, floor, policy)
    if rows is None and len(remaining) <= _DENSE_MAX and compiled.COMPILED:
        return _cluster_few(items, group_of, remaining, _Dense(remaining, shingles), floor, policy)
    clusters: list[tuple[str, list[tuple[str, float]]]] = []
    while remaining:
        sets = [shingles[g] for g in remaining]
        if rows is None:
            coverage = pooled_jaccard(sets)

            def against(g: int, _sets: Sequence[np.ndarray] = sets) -> np.ndarray:
                return jaccard_many(shingles[g], _sets)
        else:
            coverage = family.coverage(rows)  # type: ignore[union-attr]

            def against(g: int, _rows: np.ndarray = rows, _order: Sequence[int] = remaining) -> np.ndarray:
                return family.similarities(g, _rows, shingles, _order)  # type: ignore[union-attr]

            rows = None  # the family covers the first step only: the groups left are a smaller set
        tied = np.flatnonzero(coverage == coverage.max()).tolist()
        center = group_of[choose(policy, [m for i in tied for m in items[remaining[i]]]).key]
        to_center = against(center)
        inside_mask = to_center >= floor
        inside_mask[bisect_left(remaining, center)] = True
        inside = np.flatnonzero(inside_mask)
        cluster = [remaining[i] for i in inside.tolist()]

        def within(g: int, _inside: np.ndarray = inside, _against: Similarities = against) -> np.ndarray:
            return _against(g)[_inside]

        if policy is longest_then_authority:
            rep = _first_eligible(cluster, within, to_center[inside], center, floor, items)
        else:
            eligible = _eligible(cluster, within, to_center[inside], center, floor)
            rep = choose(policy, [m for g in eligible for m in items[g]])
        rep_group = group_of[rep.key]
        to_rep = to_center[inside] if rep_group == center else within(rep_group)
        clusters.append((rep.key, _placed(rep.key, rep_group, cluster, to_rep.tolist(), items)))
        taken = set(cluster)
        remaining = [g for g in remaining if g not in taken]
    return clusters


def cluster_components(
    components: Sequence[Sequence[tuple[Member, int]]],
    shingles: Mapping[int, np.ndarray],
    floor: float,
    policy: Policy,
) -> list[list[tuple[str, list[tuple[str, float]]]]]:
    """:func:`cluster_component` of each of several components (without a :class:`Family`), in order:
    the same clusters. On the compiled path the Jaccard of every component of two groups (most of
    a batch's) comes from one kernel call (:func:`~rag_dedup.compiled.index.pair_jaccard`) rather
    than one call each.

    Raises:
        KeyError, ValueError: As :func:`cluster_component`.
    """
    if not compiled.COMPILED:
        return [cluster_component(members, shingles, floor, policy) for members in components]
    grouped = [_by_group(members, shingles) for members in components]
    two = [i for i, (_, _, remaining) in enumerate(grouped) if len(remaining) == 2]
    sets = [shingles[g] for i in two for g in grouped[i][2]]
    sims = iter(pair_jaccard(sets, range(0, len(sets), 2), range(1, len(sets), 2)))
    out = []
    for members, (items, group_of, remaining) in zip(components, grouped):
        if len(remaining) == 2:
            a, b = remaining
            out.append(_cluster_two(items, group_of, a, b, next(sims), floor, policy))
        else:
            out.append(cluster_component(members, shingles, floor, policy))
    return out


def _by_group(
    members: Sequence[tuple[Member, int]], shingles: Mapping[int, np.ndarray]
) -> tuple[dict[int, list[Member]], dict[str, int], list[int]]:
    """A component's members by group (each group's in key order), the group of each key, and the
    sorted groups; raises CorruptIndexError for a group without a shingle set."""
    items: dict[int, list[Member]] = {}
    group_of: dict[str, int] = {}
    for m, g in sorted(members, key=lambda mg: mg[0].key):
        items.setdefault(g, []).append(m)
        group_of[m.key] = g
    remaining = sorted(items)
    for g in remaining:
        if g not in shingles:
            raise CorruptIndexError(f"group {g} of member {items[g][0].key!r} has no shingle set; the index is damaged: "
                                    "drop() it and index again")
    return items, group_of, remaining


def _eligible(cluster: Sequence[int], within: Similarities, to_center: Vector, center: int, floor: float) -> list[int]:
    """The groups of ``cluster`` that are ``>= floor`` to every other group of it (the center always is).

    ``within(g)`` is J(g, y) for every group y of ``cluster``, in its order.
    """
    reach = _reach(to_center, floor)
    return [g for i, g in enumerate(cluster) if _is_eligible(i, g, within, to_center, center, floor, reach)]


def _first_eligible(
    cluster: Sequence[int],
    within: Similarities,
    to_center: Vector,
    center: int,
    floor: float,
    items: Mapping[int, Sequence[Member]],
) -> Member:
    """The default policy's choice among the eligible members, without finding all of them.

    :func:`~rag_dedup.policy.longest_then_authority` is the minimum of a total order
    (:func:`~rag_dedup.policy.default_rank`), so its choice among the eligible members is the first
    eligible member in that order: the same answer as ``choose(policy, eligible)``, after checking
    as few members as the order needs (in a family of near-identical texts, one) instead of all
    (taken from a heap, so that the order is not sorted further than that).
    """
    reach = _reach(to_center, floor)
    heap = [(default_rank(m), i, j) for i, g in enumerate(cluster) for j, m in enumerate(items[g])]
    heapq.heapify(heap)
    checked: dict[int, bool] = {}
    while heap:
        _, i, j = heapq.heappop(heap)
        if i not in checked:
            checked[i] = _is_eligible(i, cluster[i], within, to_center, center, floor, reach)
        if checked[i]:
            return items[cluster[i]][j]
    raise AssertionError("unreachable: the center is eligible")  # pragma: no cover


def _reach(to_center: Vector, floor: float) -> float:
    """``1 - floor - max_y d(center, y)``: a member this close to the center is eligible (see below)."""
    if isinstance(to_center, np.ndarray):
        return 1.0 - floor - _SLACK - float((1.0 - to_center).max())
    return 1.0 - floor - _SLACK - max(1.0 - sim for sim in to_center)


def _is_eligible(
    i: int, g: int, within: Similarities, to_center: Vector, center: int, floor: float, reach: float
) -> bool:
    """Whether group ``g`` (the ``i``-th of its cluster) is ``>= floor`` to every group of its cluster.

    By the triangle inequality of d = 1 - J (a metric), ``d(x, y) <= d(x, center) + d(center, y)``,
    so ``d(center, x) <= reach`` certifies x without a comparison; other groups are compared with
    the whole cluster.
    """
    if g == center or 1.0 - to_center[i] <= reach:
        return True
    sims = within(g)
    return bool(float(sims.min() if isinstance(sims, np.ndarray) else min(sims)) >= floor)
