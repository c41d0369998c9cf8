"""Band/row arithmetic, bucket keys, union-find and the order-independent cluster rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_dedup import candidate_probability, choose_bands, knee
from rag_dedup.clusters import UnionFind, cluster_component
from rag_dedup.lsh import DEFAULT_RECALL, band_keys
from rag_dedup.policy import Member, choose, default_rank, longest_then_authority


def char_trigrams(text: str) -> set[str]:
    return {text[i : i + 3] for i in range(len(text) - 2)}


def test_worked_numbers_of_the_s_curve() -> None:
    """1 - (1 - s^r)^b, computed. (The issue quoted 0.99997 and 0.0616 for s=0.9 and s=0.5 at
    16x8; the formula gives 0.99988 and 0.0607, and those are what the code must return.)"""
    assert candidate_probability(0.9, 16, 8) == pytest.approx(1 - (1 - 0.9**8) ** 16)
    assert round(candidate_probability(0.9, 16, 8), 5) == 0.99988
    assert round(candidate_probability(0.5, 16, 8), 4) == 0.0607
    assert round(knee(16, 8), 3) == 0.707


def test_cat_sat_example() -> None:
    a, b = char_trigrams("the cat sat"), char_trigrams("the cat sit")
    s = len(a & b) / len(a | b)
    assert s == pytest.approx(7 / 11)
    assert round(candidate_probability(s, 16, 8), 2) == 0.35
    assert candidate_probability(s, 32, 4) == pytest.approx(1.0, abs=0.004)


@pytest.mark.parametrize("threshold", [0.5, 0.6, 0.7, 0.8, 0.9, 0.95])
def test_choose_bands_reaches_recall_with_fewest_false_candidates(threshold: float) -> None:
    b, r = choose_bands(threshold, 128)
    assert b * r <= 128 and b == 128 // r
    assert candidate_probability(threshold, b, r) >= DEFAULT_RECALL
    # One more row per band would miss the recall: r is the largest that reaches it.
    assert candidate_probability(threshold, 128 // (r + 1), r + 1) < DEFAULT_RECALL
    assert knee(b, r) < threshold


def test_choose_bands_for_default_threshold() -> None:
    assert choose_bands(0.8, 128) == (21, 6)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda: choose_bands(0.0, 128), r"threshold \(0.0\) must be in \(0, 1\]", id="threshold-0"),
        pytest.param(lambda: choose_bands(0.8, 1), r"num_perm \(1\) must be at least 2", id="num-perm"),
        pytest.param(lambda: choose_bands(0.05, 4), "no \\(b, r\\)", id="unreachable"),
        pytest.param(lambda: candidate_probability(1.5, 2, 2), r"similarity s \(1.5\)", id="s-range"),
        pytest.param(lambda: knee(0, 3), r"bands b \(0\)", id="bands"),
    ],
)
def test_lsh_arithmetic_rejects_bad_parameters(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_band_keys_change_only_with_their_band() -> None:
    rng = np.random.default_rng(0)
    sig = rng.integers(0, 2**32, size=(1, 128), dtype=np.uint32)
    other = sig.copy()
    other[0, 13] ^= 1  # position 13 is in band 2 of 6-row bands
    a, b = band_keys(sig, 21, 6), band_keys(other, 21, 6)
    assert a.shape == (1, 21) and a.dtype == np.uint64
    assert np.flatnonzero(a[0] != b[0]).tolist() == [2]
    # The same rows in another band position give another key: buckets of bands never mix.
    shifted = np.roll(sig, -6, axis=1)
    assert band_keys(shifted, 21, 6)[0, 0] != a[0, 1]


def test_union_find() -> None:
    uf: UnionFind[int] = UnionFind(range(6))
    assert uf.union(0, 1) and uf.union(2, 3) and uf.union(1, 3)
    assert not uf.union(0, 2)
    assert sorted(sorted(g) for g in uf.groups()) == [[0, 1, 2, 3], [4], [5]]


def member(key: str, length: int, authority: float = 0.0, first_seen: float | None = None) -> Member:
    return Member(key, length, None, authority, first_seen)


def test_default_policy_order() -> None:
    a = member("a", 100)
    b = member("b", 100, authority=1.0)
    c = member("c", 100, authority=1.0, first_seen=5.0)
    d = member("d", 100, authority=1.0, first_seen=3.0)
    e = member("e", 101)
    assert longest_then_authority([a, b]) == b
    assert longest_then_authority([b, c]) == c  # a known first_seen beats an unknown one
    assert longest_then_authority([c, d]) == d
    assert longest_then_authority([a, b, c, d, e]) == e
    assert longest_then_authority([member("z", 1), member("y", 1)]).key == "y"
    assert default_rank(e) < default_rank(d)


def test_policy_must_return_a_member() -> None:
    with pytest.raises(ValueError, match="not one of the members"):
        choose(lambda ms: member("stranger", 1), [member("a", 1)])


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
    with pytest.raises(KeyError, match="group 9 of member 'x' has no shingle set"):
        cluster_component([(member("x", 1), 9)], CHAIN, 0.7, longest_then_authority)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["insert", "bulk", "delete"]), st.integers(0, 40), st.integers(0, 2**64 - 1)),
        max_size=30,
    )
)
def test_band_table_behaves_like_a_dict_of_sets(ops) -> None:
    """The sorted, sharded, buffered table answers like the obvious dict-of-sets reference."""
    from rag_dedup.storage.memory import BandTable

    table, ref = BandTable(), {}
    rng = np.random.default_rng(0)
    next_gid, dead = 0, set()
    for op, size, seed in ops:
        if op == "delete" and next_gid:
            gid = seed % next_gid
            table.delete(gid)
            dead.add(gid)
            for gs in ref.values():
                gs.discard(gid)
            continue
        n = 1 if op == "insert" else size * 20  # bulk inserts bypass the buffer
        keys = np.random.default_rng(seed).integers(0, 2**64 - 1, size=(n, 3), dtype=np.uint64)
        keys[: n // 2, 0] = keys[n // 2 :, 0][: n // 2]  # shared buckets
        gids = list(range(next_gid, next_gid + n))
        next_gid += n
        table.insert(gids, keys)
        for g, row in zip(gids, keys.tolist()):
            for k in row:
                ref.setdefault(k, set()).add(g)
    probe = np.array(list(ref)[:50] + [int(x) for x in rng.integers(0, 2**63, 5)], dtype=np.uint64)
    if len(probe) == 0:
        return
    got = table.query(probe.reshape(-1, 1))
    assert got == [ref.get(int(k), set()) - dead for k in probe]


def test_members_of_one_group_land_together() -> None:
    """Exact copies share every similarity; the policy may pick any of them as the representative."""
    ms = [(member("a1", 10), 1), (member("a2", 50), 1), (member("b", 40), 2)]
    got = cluster_component(ms, {1: interval(0, 100), 2: interval(5, 105)}, 0.7, longest_then_authority)
    assert got == [("a2", [("a2", 1.0), ("a1", 1.0), ("b", 95 / 105)])]
