"""Real near-duplicate families stay together, without drift, whatever the order (issue 11).

Families (provenance in tests/data/README.md): ``apache-notice`` is a dense clique (10 distinct
Debian copies of the Apache licence notice, every pair >= 0.79), ``gfdl-notice`` a real family of 9
GFDL notices whose longest member is at its edge (the rule before issue 11 cut it in two), and the
chain is made of overlapping word windows of the shipped GPL-3 text (each 0.82 like the next,
three steps apart below the drift floor).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from tests.corpus import documents
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_dedup import DedupIndex
from rag_dedup.shingles import shingle_hashes
from rag_dedup.similarity import jaccard

FAMILIES = Path(__file__).resolve().parent / "data" / "families"


def family(name: str) -> list[tuple[str, str]]:
    return [(f"{name}/{r['source']}", r["text"]) for r in json.loads((FAMILIES / f"{name}.json").read_text("utf-8"))]


def chain(links: int = 8, width: int = 60, step: int = 5) -> list[tuple[str, str]]:
    words = documents()["licenses/GPL-3.txt"].split()[200:]
    return [(f"chain/{i}", " ".join(words[i * step : i * step + width])) for i in range(links)]


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
    assert index.match(a) == (a, a, a, None, 1.0, "unique", 1)


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
