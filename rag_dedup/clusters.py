"""Union-find over group ids, and the order-independent rule that turns a component into clusters.

Near-duplicate detection gives a graph: nodes are distinct canonical texts (groups), edges join pairs
whose shingle sets have Jaccard >= threshold. Its connected components do not depend on the order in
which nodes were added, but a component can be a *chain* (A~B, B~C, while A and C share little), and
gluing a whole chain into one cluster would make a representative stand for text it does not contain.

So each component is split by :func:`split_component`, a pure function of its members: let the policy
choose a center among the members not yet placed; the center, every unplaced member with Jaccard
>= threshold *to the center*, and every unplaced member at least ``floor``-similar to the center that
is a near-duplicate of a member already placed, form a cluster; repeat. Every member of a cluster is
therefore at least ``floor``-similar to its representative (no drift along chains), and the result
depends only on the set of members, never on arrival or union order.

Example:
    >>> from rag_dedup.policy import Member, longest_then_authority
    >>> m = {k: Member(k, n, None, 0.0, None) for k, n in [("a", 30), ("b", 20), ("c", 10)]}
    >>> sims = {("a", "b"): 0.9, ("b", "c"): 0.9, ("a", "c"): 0.5}
    >>> def sim(x, y):
    ...     return 1.0 if x == y else sims.get((x, y), sims.get((y, x), 0.0))
    >>> def similarities(x, others):
    ...     return [sim(x, y) for y in others]
    >>> split_component(list(m.values()), lambda m: m.key, similarities, 0.8, longest_then_authority)
    [('a', [('a', 1.0), ('b', 0.9)]), ('c', [('c', 1.0)])]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

from rag_dedup.policy import Member, Policy, choose

__all__ = ["UnionFind", "split_component"]

T = TypeVar("T", bound=Hashable)


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


def split_component(
    members: Sequence[Member],
    group_of: Callable[[Member], Hashable],
    similarities: Callable[[Hashable, Sequence[Hashable]], Sequence[float]],
    threshold: float,
    policy: Policy,
    floor: float | None = None,
) -> list[tuple[str, list[tuple[str, float]]]]:
    """Split one connected component into clusters around policy-chosen centers.

    A cluster is its center, every unplaced member with similarity >= ``threshold`` to the center,
    and, to a fixpoint, every unplaced member with similarity >= ``floor`` to the center that has
    similarity >= ``threshold`` to a member already in the cluster. The floor bounds chaining drift
    (every member is at least ``floor``-similar to its representative) while a near-duplicate pair
    is not torn apart merely because one of the two is a little further from the center.

    Members with the same text (the same *group*) have the same similarity to everything, so they
    always land in the same cluster; the work is done per group, the policy still chooses items.

    Args:
        members: The component's items.
        group_of: The group (exact-duplicate class) of a member.
        similarities: ``similarities(g, others)``: the Jaccard similarity of group ``g`` to each of
            the groups ``others`` (1.0 for a group and itself), computed in one call.
        threshold: The duplicate threshold.
        policy: Chooses the center among the members not yet placed.
        floor: The least similarity to the center a member reached through a chain may have;
            None means ``threshold`` (no chains).

    Returns:
        ``[(representative_key, [(member_key, similarity_to_representative), ...]), ...]`` in the
        order the centers were chosen; each member list starts with the representative.
    """
    floor = threshold if floor is None else min(floor, threshold)
    items: dict[Hashable, list[Member]] = {}
    for m in members:
        items.setdefault(group_of(m), []).append(m)
    remaining = list(items)
    clusters: list[tuple[str, list[tuple[str, float]]]] = []
    while remaining:
        center = choose(policy, [m for g in remaining for m in items[g]])
        cg = group_of(center)
        others = [g for g in remaining if g != cg]
        placed: list[tuple[Hashable, float]] = [(cg, 1.0)]
        fringe: list[tuple[Hashable, float]] = []
        rest: list[Hashable] = []
        for g, s in zip(others, similarities(cg, others)):
            if s >= threshold:
                placed.append((g, float(s)))
            elif s >= floor:
                fringe.append((g, float(s)))
            else:
                rest.append(g)
        grew = True
        while fringe and grew:
            grew = False
            still: list[tuple[Hashable, float]] = []
            for g, s in fringe:
                near = similarities(g, [p for p, _ in placed[1:]])
                if len(near) and max(near) >= threshold:
                    placed.append((g, s))
                    grew = True
                else:
                    still.append((g, s))
            fringe = still
        rest.extend(g for g, _ in fringe)
        cluster = [(center.key, 1.0)]
        cluster.extend((m.key, s) for g, s in placed for m in items[g] if m.key != center.key)
        clusters.append((center.key, cluster))
        remaining = rest
    return clusters
