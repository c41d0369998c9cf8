"""Union-find and the order-independent cluster rule: chains cut at the drift floor, cliques kept whole."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rag_dedup.errors import CorruptIndexError
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.members import member

from rag_dedup.clusters import Family, UnionFind, cluster_component, pooled_jaccard
from rag_dedup.policy import Member, longest_then_authority
from rag_dedup.similarity import jaccard_many


def test_union_find() -> None:
    uf: UnionFind[int] = UnionFind(range(6))
    assert uf.union(0, 1) and uf.union(2, 3) and uf.union(1, 3)
    assert not uf.union(0, 2)
    assert sorted(sorted(g) for g in uf.groups()) == [[0, 1, 2, 3], [4], [5]]


def interval(lo: int, hi: int) -> np.ndarray:
    """A shingle set: the hashes lo..hi-1 (two intervals' Jaccard is their overlap over their union)."""
    return np.arange(lo, hi, dtype=np.uint32)


# A chain of four: each 0.818 to the next, 0.667 two steps apart, 0.538 end to end.
CHAIN = {1: interval(0, 100), 2: interval(10, 110), 3: interval(20, 120), 4: interval(30, 130)}
CHAIN_KEYS = {"a": 1, "b": 2, "c": 3, "d": 4}


def test_chain_is_cut_at_the_drift_floor_around_its_middle() -> None:
    """The center is a middle link (b and c tie on coverage; the policy takes b, the longer); a and
    c join it, d (0.667 to b) does not. a, the longest, is not eligible: it is only 0.667 like c."""
    ms = [(member("a", 40), 1), (member("b", 30), 2), (member("c", 20), 3), (member("d", 10), 4)]
    got = cluster_component(ms, CHAIN, 0.7, longest_then_authority)
    assert got == [("b", [("b", 1.0), ("a", 90 / 110), ("c", 90 / 110)]), ("d", [("d", 1.0)])]
    for rep, placed in got:
        assert all(s >= 0.7 for _, s in placed)  # no drift


def test_clique_is_one_cluster_represented_by_the_policy() -> None:
    """All four are >= 0.7 to each other at floor 0.5: one cluster, and the longest represents it,
    though it is at the edge of the family."""
    ms = [(member("a", 40), 1), (member("b", 30), 2), (member("c", 20), 3), (member("d", 10), 4)]
    assert cluster_component(ms, CHAIN, 0.5, longest_then_authority) == [
        ("a", [("a", 1.0), ("b", 90 / 110), ("c", 80 / 120), ("d", 70 / 130)])
    ]


@settings(max_examples=50, deadline=None)
@given(st.permutations(["a", "b", "c", "d"]), st.permutations([1, 2, 3, 4]))
def test_cluster_component_ignores_member_order(order: list[str], dict_order: list[int]) -> None:
    lengths = {"a": 40, "b": 30, "c": 20, "d": 10}
    ms = [(member(k, lengths[k]), CHAIN_KEYS[k]) for k in order]
    sets = {g: CHAIN[g] for g in dict_order}
    assert cluster_component(ms, sets, 0.7, longest_then_authority) == cluster_component(
        sorted(ms, key=lambda m: m[0].key), CHAIN, 0.7, longest_then_authority
    )


def test_cluster_component_names_a_group_without_shingles() -> None:
    with pytest.raises(CorruptIndexError, match="group 9 of member 'x' has no shingle set; the index is damaged"):
        cluster_component([(member("x", 1), 9)], CHAIN, 0.7, longest_then_authority)


def test_members_of_one_group_land_together() -> None:
    """Exact copies share every similarity; the policy may pick any of them as the representative."""
    ms = [(member("a1", 10), 1), (member("a2", 50), 1), (member("b", 40), 2)]
    got = cluster_component(ms, {1: interval(0, 100), 2: interval(5, 105)}, 0.7, longest_then_authority)
    assert got == [("a2", [("a2", 1.0), ("a1", 1.0), ("b", 95 / 105)])]


def by_largest_key(members: list[Member]) -> Member:
    """A policy other than the default (which takes a shortcut of its own): the largest key."""
    return max(members, key=lambda m: m.key)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 30))
def test_a_kept_family_gives_what_counting_again_gives(seed: int, n: int) -> None:
    """Groups join and leave a Family in any order: its coverage is pooled_jaccard of the groups it
    holds, float for float, its similarities are jaccard_many's, and cluster_component with it gives
    the clusters it gives without (the default policy and another)."""
    rng = random.Random(seed)  # a seed, not st.randoms(): the draws would exceed hypothesis's entropy budget
    core = rng.sample(range(300), 50)
    sets = {}
    for g in range(n):
        kept = [x for x in core if rng.random() < rng.choice((0.7, 0.9, 1.0))]
        sets[3 * g + 1] = np.unique(np.array(kept + [rng.randrange(300) for _ in range(rng.randrange(20))], dtype=np.uint32))
    waiting = list(sets)
    rng.shuffle(waiting)
    family, held = Family(), []
    while waiting or held:
        if waiting and (not held or rng.random() < 0.7):
            joining = [waiting.pop() for _ in range(min(len(waiting), rng.randint(1, 4)))]
            family.add(joining, [sets[g] for g in joining])
            held += joining
        else:
            family.discard(held.pop(rng.randrange(len(held))))
        if not held:
            continue
        order = sorted(held)
        rows = family.rows(order)
        assert np.array_equal(family.coverage(rows), pooled_jaccard([sets[g] for g in order]))
        anchor = rng.choice(order)
        assert np.array_equal(family.similarities(anchor, rows, sets, order), jaccard_many(sets[anchor], [sets[g] for g in order]))
        ms = [(member(f"k{g}-{i}", rng.randint(1, 4)), g) for g in order for i in range(rng.randint(1, 2))]
        for policy in (longest_then_authority, by_largest_key):
            assert cluster_component(ms, sets, 0.7, policy, family) == cluster_component(ms, sets, 0.7, policy)


def test_cluster_component_refuses_a_family_of_other_groups() -> None:
    family = Family()
    family.add([1, 2], [CHAIN[1], CHAIN[2]])
    ms = [(member("a", 40), 1), (member("b", 30), 2), (member("c", 20), 3)]
    with pytest.raises(ValueError, match="exactly the groups"):
        cluster_component(ms, CHAIN, 0.7, longest_then_authority, family)
