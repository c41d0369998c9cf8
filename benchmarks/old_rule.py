"""The cluster rule rag-dedup used before issue 11, kept for benchmarks/bench_families.py only.

:func:`split_component` let the policy choose a center among the unplaced members; the center, every
unplaced member with Jaccard >= threshold to it, and (to a fixpoint) every unplaced member >= floor to
it that is >= threshold to a member already placed, formed a cluster; repeat. On real families the
policy's pick (the longest text) is often at the family's edge, and this peels families apart.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from rag_dedup.policy import Member, Policy, choose

__all__ = ["split_component"]


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
