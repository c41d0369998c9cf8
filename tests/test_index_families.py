"""Real near-duplicate families stay together, without drift, whatever the order (issue 11).

Families (provenance in tests/data/README.md): ``apache-notice`` is a dense clique (10 distinct
Debian copies of the Apache licence notice, every pair >= 0.79), ``gfdl-notice`` a real family of 9
GFDL notices whose longest member is at its edge (the rule before issue 11 cut it in two), and the
chain is made of overlapping word windows of the shipped GPL-3 text (each 0.82 like the next,
three steps apart below the drift floor). The mid-size family is the shipped BSD licence under each
real copyright line of the shipped Debian copyright files, and lightly edited copies of a third of them.
"""

from __future__ import annotations

import json
import random
import re
import uuid
from pathlib import Path

import pytest
from tests.corpus import documents, edited
from hypothesis import given, settings
from hypothesis import strategies as st

import rag_dedup.index as index_module
from rag_dedup import DedupIndex
from rag_dedup.clusters import UnionFind, cluster_component
from rag_dedup.policy import Member
from rag_dedup.shingles import shingle_hashes
from rag_dedup.similarity import jaccard

FAMILIES = Path(__file__).resolve().parent / "data" / "families"


def family(name: str) -> list[tuple[str, str]]:
    return [(f"{name}/{r['source']}", r["text"]) for r in json.loads((FAMILIES / f"{name}.json").read_text("utf-8"))]


def chain(links: int = 8, width: int = 60, step: int = 5) -> list[tuple[str, str]]:
    words = documents()["licenses/GPL-3.txt"].split()[200:]
    return [(f"chain/{i}", " ".join(words[i * step : i * step + width])) for i in range(links)]


def bsd_family() -> list[tuple[str, str]]:
    """The BSD licence under 443 real copyright lines, and 148 copies edited at 0.4% to 2.4% of their words."""
    docs = documents()
    line = re.compile(r"\s*Copyright:?\s*(\([cC]\)\s*)?\d{4}")
    lines = sorted({r.strip() for p, t in docs.items() if p.startswith("copyright/") for r in t.splitlines() if line.match(r)})
    body = docs["licenses/BSD.txt"]
    body = body[body.index("Redistribution") :]
    items = [(f"bsd/{i}", f"{holder}\n\n{body}") for i, holder in enumerate(lines)]
    return items + [(f"bsd-edited/{i}", edited(t, 0.004 * (1 + i % 6), i)) for i, (_, t) in enumerate(items[::3])]


def exact_graph_clusters(index: DedupIndex) -> set[tuple[str, tuple[tuple[str, float], ...]]]:
    """The clusters of the index's items from first principles: every pair of groups that shares a band
    is verified with its exact Jaccard (no skipping), components by union-find, then the cluster rule."""
    keys = sorted(index.storage.iter_keys())
    records = dict(zip(keys, index.storage.get_items(keys)))
    gids = sorted({r.gid for r in records.values() if r.gid >= 0})
    sets = dict(zip(gids, index.storage.group_shingles(gids)))
    bands = index._band_keys([sets[g] for g in gids])
    uf: UnionFind[int] = UnionFind(gids)
    for i, g in enumerate(gids):
        for j in range(i + 1, len(gids)):
            if (bands[i] == bands[j]).any() and jaccard(sets[g], sets[gids[j]]) >= index.threshold:
                uf.union(g, gids[j])
    out = set()
    for comp in uf.groups():
        members = [(Member(k, r.length, r.source, r.authority, r.first_seen), r.gid) for k, r in records.items() if r.gid in comp]
        for rep, placed in cluster_component(members, sets, index.drift_floor, index.policy):
            if len(placed) > 1:
                out.add((rep, tuple(placed)))
    return out


def stored_clusters(index: DedupIndex) -> set[tuple[str, tuple[tuple[str, float], ...]]]:
    return {(rep, tuple(members)) for rep, members in index.storage.iter_clusters()}


def test_mid_size_real_family_is_clustered_as_the_exact_graph_says() -> None:
    """Probing one member per stored component and skipping joined pairs must give the partition of
    verifying every LSH candidate pair: added at once, in shuffled batches, and after removals."""
    items = bsd_family()
    index = DedupIndex(threshold=0.8)
    index.add_many(items)
    expected = exact_graph_clusters(index)
    assert stored_clusters(index) == expected
    assert max(len(placed) for _, placed in expected) > len(items) // 2  # one big family, and loners
    order = list(items)
    random.Random(7).shuffle(order)
    batched = DedupIndex(threshold=0.8)
    for lo in range(0, len(order), 97):
        batched.add_many(order[lo : lo + 97])
    assert stored_clusters(batched) == expected
    gone = [k for k, _ in order[:: len(order) // 12]]
    for key in gone:
        batched.remove(key)
    assert stored_clusters(batched) == exact_graph_clusters(batched)
    batched.add_many([(k, t) for k, t in items if k in set(gone)])
    assert snapshot(batched) == snapshot(index)


def test_a_big_family_verifies_a_few_pairs_a_member(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression guard for the quadratic candidate blow-up: LSH proposes ~n²/2 pairs in a family of n
    near-identical texts (97,903 here); the pairs that reach verification must stay a few per member.
    (A text that joins nothing is compared with every member it shares a bucket with: that is exact.)"""
    items = [(k, t) for k, t in bsd_family() if k.startswith("bsd/")]
    verified: list[int] = []
    for name in ("jaccard_upper_bounds", "pair_jaccard"):  # the numpy path's first step, the compiled path's
        plain = getattr(index_module, name)
        monkeypatch.setattr(
            index_module, name, lambda sets, left, right, _plain=plain: (verified.append(len(left)), _plain(sets, left, right))[1]
        )
    index = DedupIndex(threshold=0.8)
    index.add_many(items)
    index.add("one-more", items[0][1] + " All rights reserved.")
    assert 0 < sum(verified) < 10 * len(items)


def test_kept_family_counts_give_the_partition_of_counting_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every component of two groups or more keeps a Family here: added in shuffled batches and one
    at a time, groups and single copies removed and added again, the clusters are those of an index
    that counts every component again, and those of the exact graph."""
    items = bsd_family()[::2] + [(f"copy/{k}", t.upper()) for k, t in bsd_family()[:40:4]]
    monkeypatch.setattr(index_module, "_FAMILY_MIN", 10**9)
    counted = DedupIndex(threshold=0.8)
    counted.add_many(items)
    monkeypatch.setattr(index_module, "_FAMILY_MIN", 2)
    order = list(items)
    random.Random(3).shuffle(order)
    index = DedupIndex(threshold=0.8)
    index.add_many(order[:100])
    for key, text in order[100:130]:
        index.add(key, text)
    index.add_many(order[130:])
    assert index._families  # the path under test was taken
    gone = [k for k, _ in order[::25]] + ["copy/bsd/0", "bsd/0"]
    for key in gone:
        index.remove(key)
    assert stored_clusters(index) == exact_graph_clusters(index)
    for key, text in items:
        if key in gone:
            index.add(key, text)
    assert snapshot(index) == snapshot(counted)


def test_add_many_clusters_a_component_once_however_many_batches_grow_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A family that grows over many batches of one add_many is clustered after the last one only
    (it was clustered after each, a cost quadratic in its size), with the same result as one batch."""
    items = [(k, t) for k, t in bsd_family() if k.startswith("bsd/")]
    whole = DedupIndex(threshold=0.8)
    whole.add_many(items)
    sizes: list[int] = []
    clustering, clustering_many = index_module.cluster_component, index_module.cluster_components
    monkeypatch.setattr(index_module, "cluster_component", lambda members, *a: (sizes.append(len(members)), clustering(members, *a))[1])
    monkeypatch.setattr(
        index_module, "cluster_components", lambda comps, *a: (sizes.extend(map(len, comps)), clustering_many(comps, *a))[1]
    )
    monkeypatch.setattr(index_module, "_BATCH", 50)
    index = DedupIndex(threshold=0.8)
    index.add_many(items)
    assert len([s for s in sizes if s > len(items) // 2]) == 1
    assert snapshot(index) == snapshot(whole)


def test_add_many_stopped_by_a_bad_item_leaves_the_batches_before_it_clustered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches before the one holding a rejected item stay added, and clustered as that set says."""
    items = [(k, t) for k, t in bsd_family() if k.startswith("bsd/")][:200]
    monkeypatch.setattr(index_module, "_BATCH", 50)
    index = DedupIndex(threshold=0.8)
    index.add(items[120][0], "another text under a key the third batch holds")
    with pytest.raises(ValueError, match="already in the index"):
        index.add_many(items)
    index.remove(items[120][0])
    expected = DedupIndex(threshold=0.8)
    expected.add_many(items[:100])
    assert snapshot(index) == snapshot(expected)


def test_match_says_which_representative_an_add_displaced() -> None:
    (a, ta), (b, tb) = family("apache-notice")[:2]
    short, long_ = sorted([(a, ta), (b, tb)], key=lambda kt: len(kt[1]))
    index = DedupIndex(threshold=0.8)
    assert index.add(*short).displaced is None  # a cluster of one
    m = index.add(*long_)  # the longer text takes over as representative
    assert (m.representative, m.displaced) == (long_[0], short[0])
    assert index.match(long_[0]).displaced is None  # match() reports no call
    copy = index.add("copy", short[1].upper())  # joins, the representative stays
    assert (copy.representative, copy.displaced) == (long_[0], None)
    longer = index.add_many([("longer", long_[1] + " Apache License, Version 2.0.")])[0]
    assert (longer.representative, longer.displaced) == ("longer", long_[0])
    matches, _ = index.update([], remove=["longer"])
    assert matches == []
    back = index.update([("longer", long_[1] + " Apache License, Version 2.0.")])[0][0]
    assert (back.representative, back.displaced) == ("longer", long_[0])


def exact(a: str, b: str) -> float:
    return jaccard(shingle_hashes(a), shingle_hashes(b))


def snapshot(index: DedupIndex) -> dict[str, tuple[str, float, str, int]]:
    keys = sorted(index.storage.iter_keys())
    return {m.key: (m.cluster_id, m.similarity, m.kind, m.cluster_size) for m in index.matches(keys)}


def assert_no_drift(index: DedupIndex, texts: dict[str, str]) -> None:
    for key, text in texts.items():
        m = index.match(key)
        assert m.similarity == exact(text, texts[m.representative])
        assert m.similarity >= index.drift_floor, (key, m)


def test_dense_clique_is_one_cluster_represented_by_the_longest() -> None:
    items = family("apache-notice")
    texts = dict(items)
    assert min(exact(a, b) for a in texts.values() for b in texts.values()) >= 0.7  # a clique at the floor
    index = DedupIndex(threshold=0.8)
    index.add_many(items)
    clusters = list(index.clusters())
    assert len(clusters) == 1 and len(clusters[0][1]) == len(items)
    longest = max(texts, key=lambda k: (len(texts[k]), [-ord(c) for c in k]))
    assert index.resolve(items[0][0]) == longest
    assert_no_drift(index, texts)


def test_family_with_its_longest_member_at_the_edge_stays_together() -> None:
    items = family("gfdl-notice")
    texts = dict(items)
    longest = max(texts, key=lambda k: len(texts[k]))
    assert min(exact(texts[longest], t) for t in texts.values()) < 0.7  # a center-on-the-longest rule splits it
    index = DedupIndex(threshold=0.8)
    matches = index.add_many(items)
    assert {m.cluster_id for m in matches} == {matches[0].cluster_id}
    rep = matches[0].representative
    assert all(exact(texts[rep], t) >= 0.7 for t in texts.values())  # eligible: >= floor to every member
    assert_no_drift(index, texts)


def test_chain_is_cut_without_drift_around_its_middle() -> None:
    items = chain()
    texts = dict(items)
    sims = [exact(texts[f"chain/{i}"], texts[f"chain/{i + 1}"]) for i in range(len(items) - 1)]
    assert min(sims) >= 0.8 and exact(texts["chain/0"], texts["chain/3"]) < 0.7
    index = DedupIndex(threshold=0.8)
    index.add_many(items)
    clusters = [sorted(int(k.split("/")[1]) for k in ms) for _, ms in index.clusters()]
    assert len(clusters) > 1
    assert all(c == list(range(c[0], c[-1] + 1)) for c in clusters)  # cut into runs of links, never scattered
    assert_no_drift(index, texts)


def test_match_kinds_tell_the_place_in_the_cluster() -> None:
    (a, ta), (b, tb) = family("apache-notice")[:2]
    index = DedupIndex(threshold=0.8)
    m = index.add(a, ta)
    assert (m.kind, m.duplicate_of, m.cluster_size) == ("unique", None, 1)
    m, n = index.add_many([(b, tb)])[0], index.match(a)
    rep, other = (m, n) if m.duplicate_of is None else (n, m)
    assert (rep.kind, rep.cluster_size) == ("near", 2) and other.kind == "near" and other.duplicate_of == rep.key
    copy = index.add("copy", ta.upper() + "  ")  # re-cased, padded: the same canonical text
    assert copy.kind == "exact" and copy.cluster_id == index.match(a).cluster_id and copy.cluster_size == 3
    assert index.match(a).kind == "exact"
    index.remove("copy")
    assert index.match(a).kind == "near" and index.match(a).cluster_size == 2
    index.remove(b)
    assert index.match(a) == (a, a, a, None, 1.0, "unique", 1, None)


def all_items() -> list[tuple[str, str]]:
    """The three families, and re-cased copies of three of their members (exact copies, shorter or longer)."""
    items = family("apache-notice") + family("gfdl-notice") + chain()
    copies = [(f"copy/{k}", t.upper() + " " * i) for i, (k, t) in enumerate(items[::9])]
    return items + copies


@settings(max_examples=12, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 9), st.integers(0, 6))
def test_partition_is_a_function_of_the_set(rng, batch: int, removed: int) -> None:
    """Shuffled, added in batches, some removed and added again: the same clusters, representatives,
    similarities and kinds as adding the final set at once."""
    items = all_items()
    fresh = DedupIndex(threshold=0.8)
    fresh.add_many(items)
    expected = snapshot(fresh)
    order = list(items)
    rng.shuffle(order)
    index = DedupIndex(threshold=0.8)
    for lo in range(0, len(order), batch):
        index.add_many(order[lo : lo + batch])
    again = rng.sample(order, removed)
    for key, _ in again:
        index.remove(key)
    index.add_many(again)
    assert snapshot(index) == expected


def test_redis_links_a_big_family_as_memory_does(redis_url: str) -> None:
    """Component ids read from Redis drive the same linking: the same clusters, also after removals."""
    items = bsd_family()[::2]
    memory = DedupIndex(threshold=0.8)
    shared = DedupIndex(threshold=0.8, storage=redis_url, namespace=f"test-{uuid.uuid4().hex[:8]}")
    try:
        for index in (memory, shared):
            for lo in range(0, len(items), 60):
                index.add_many(items[lo : lo + 60])
            index.remove(items[0][0])
            index.remove(items[7][0])
        assert snapshot(shared) == snapshot(memory)
    finally:
        shared.drop()


def test_redis_gives_the_same_families_as_memory(redis_url: str) -> None:
    items = all_items()
    memory = DedupIndex(threshold=0.8)
    memory.add_many(items)
    shared = DedupIndex(threshold=0.8, storage=redis_url, namespace=f"test-{uuid.uuid4().hex[:8]}")
    try:
        for lo in range(0, len(items), 7):
            shared.add_many(items[lo : lo + 7])
        assert snapshot(shared) == snapshot(memory)
    finally:
        shared.drop()


@pytest.mark.parametrize("name", ["apache-notice", "gfdl-notice"])
def test_shipped_families_are_distinct_texts(name: str) -> None:
    """Each shipped member is its own canonical text (exact copies would make the family trivial)."""
    index = DedupIndex(threshold=0.8)
    assert all(m.kind != "exact" for m in index.add_many(family(name)))


def test_a_family_kept_before_another_workers_drop_is_not_used_after_it(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker B keeps a Family (group ids and their shingle sets) of the chain; worker A drops the
    namespace and indexes the BSD family. Group ids are never handed out again in a namespace, not even
    after a drop, so B's kept family cannot pass for the new component: B's next add clusters as one
    index of the BSD family does."""
    monkeypatch.setattr(index_module, "_FAMILY_MIN", 2)
    namespace = f"test-{uuid.uuid4().hex[:8]}"
    worker_a = DedupIndex(threshold=0.8, storage=redis_url, namespace=namespace)
    worker_b = DedupIndex(threshold=0.8, storage=redis_url, namespace=namespace)
    try:
        worker_b.add_many(chain(links=30))
        assert worker_b._families  # B keeps the chain's family
        worker_a.drop()
        bsd = bsd_family()[:40]
        worker_a.add_many(bsd)
        new = bsd_family()[41]
        worker_b.add(*new)
        reference = DedupIndex(threshold=0.8)
        reference.add_many(bsd)
        reference.add(*new)
        assert snapshot(worker_b) == snapshot(reference)
        live = {rec.gid for rec in worker_b.storage.get_items(sorted(worker_b.storage.iter_keys()))}
        for kept in worker_b._families:  # a kept family that could be used holds what the store holds
            gids = sorted(kept.index)
            if set(gids) <= live:
                for gid, stored in zip(gids, worker_b.storage.group_shingles(gids)):
                    assert stored.tolist() == kept.sets[gid].tolist()
    finally:
        worker_a.drop()
