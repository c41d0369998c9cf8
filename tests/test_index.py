"""DedupIndex on the shipped real corpus: exact and near duplicates, order independence, removal, errors."""

from __future__ import annotations

import datetime as dt
import random
from collections import defaultdict

import pytest
from tests.corpus import chunks, documents, edited

import rag_dedup.index as index_module
from rag_dedup import DedupIndex, Match, Member, jaccard, shingle_hashes
from rag_dedup.shingles import shingle_hashes_many


def partition(index: DedupIndex, keys: list[str]) -> dict[str, str]:
    return {m.key: m.representative for m in index.matches(keys)}


@pytest.fixture(scope="module")
def corpus_items() -> list[tuple[str, str]]:
    """Real chunks plus planted near-duplicates (word edits) and exact copies (reformatted)."""
    base = list(chunks())
    rng = random.Random(5)
    planted = []
    for i, (key, text) in enumerate(rng.sample(base, 60)):
        planted.append((f"near/{i}|{key}", edited(text, rng.uniform(0.0, 0.05), seed=i)))
    for i, (key, text) in enumerate(rng.sample(base, 20)):
        planted.append((f"copy/{i}|{key}", "  " + text.upper().replace(" ", "\u00a0 ") + "\r\n"))
    return base + planted


@pytest.fixture(scope="module")
def built(corpus_items: list[tuple[str, str]]) -> DedupIndex:
    index = DedupIndex(threshold=0.8)
    index.add_many(corpus_items)
    return index


def test_every_key_stays_and_points_at_a_representative(built: DedupIndex, corpus_items) -> None:
    keys = [k for k, _ in corpus_items]
    assert len(built) == len(keys)
    for m in built.matches(keys):
        rep = built.match(m.representative)
        assert rep.duplicate_of is None and rep.representative == m.representative
        assert m.key in built.members(m.cluster_id)


def test_byte_identical_copyright_files_are_exact_duplicates() -> None:
    """Debian ships identical copyright files for sibling packages: real exact duplicates."""
    docs = documents()
    by_text = defaultdict(list)
    for path, text in docs.items():
        by_text[text].append(path)
    groups = [sorted(paths) for paths in by_text.values() if len(paths) > 1]
    assert groups, "the corpus is expected to hold byte-identical files"
    index = DedupIndex()
    index.add_many(list(docs.items()))
    for paths in groups:
        reps = {index.resolve(p) for p in paths}
        assert len(reps) == 1
        assert {index.match(p).kind for p in paths} == {"exact"}  # a representative with copies too
        assert sum(index.match(p).duplicate_of is None for p in paths) == 1


def test_reformatted_copies_are_exact_duplicates(built: DedupIndex, corpus_items) -> None:
    """Case, NBSP, padding and CRLF do not matter; the longer copy is the representative."""
    for key, _ in corpus_items:
        if key.startswith("copy/"):
            original = key.split("|", 1)[1]
            copy, orig = built.match(key), built.match(original)
            assert copy.cluster_id == orig.cluster_id
            assert copy.kind == "exact" and copy.duplicate_of is None and copy.cluster_size >= 2
            assert orig.kind == "exact" and orig.duplicate_of == key and orig.similarity == 1.0


def test_planted_near_duplicates_against_exact_ground_truth(built: DedupIndex, corpus_items) -> None:
    """Every planted pair with exact J >= 0.8 is in one cluster (explicit tolerance: none missed at
    this size), and every member is at least 0.7-similar to its representative."""
    texts = dict(corpus_items)
    sets = dict(zip(texts, shingle_hashes_many(list(texts.values()))))
    checked = 0
    for key in texts:
        if key.startswith("near/"):
            src = key.split("|", 1)[1]
            j = jaccard(sets[src], sets[key])
            if j >= 0.8:
                checked += 1
                assert built.resolve(src) == built.resolve(key), (src, j)
    assert checked >= 25
    for key in texts:
        m = built.match(key)
        if m.duplicate_of is not None:
            assert jaccard(sets[key], sets[m.representative]) >= 0.7
            assert m.similarity == pytest.approx(jaccard(sets[key], sets[m.representative]))


def test_unrelated_chunks_are_not_merged(built: DedupIndex, corpus_items) -> None:
    texts = dict(corpus_items)
    sets = dict(zip(texts, shingle_hashes_many(list(texts.values()))))
    for key in texts:
        m = built.match(key)
        if m.duplicate_of is not None:
            assert jaccard(sets[key], sets[m.representative]) >= built.drift_floor


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_clusters_do_not_depend_on_order_or_batching(built: DedupIndex, corpus_items, seed: int) -> None:
    items = list(corpus_items)
    random.Random(seed).shuffle(items)
    index = DedupIndex(threshold=0.8)
    cut = len(items) // 3
    for key, text in items[:cut]:
        index.add(key, text)
    index.add_many(items[cut:])
    keys = [k for k, _ in corpus_items]
    assert partition(index, keys) == partition(built, keys)
    assert [m.similarity for m in index.matches(keys)] == [m.similarity for m in built.matches(keys)]


def test_growing_batches_give_the_clusters_of_a_single_batch(built: DedupIndex, corpus_items, monkeypatch) -> None:
    """add_many's batches grow with the index (so lookups and merges stay in order); guards a batch
    boundary that loses candidates between batches or mis-slices the items (skipped or repeated)."""
    monkeypatch.setattr(index_module, "_BATCH", 16)
    monkeypatch.setattr(index_module, "_BATCH_SHARE", 4)
    monkeypatch.setattr(index_module, "_BATCH_MAX", 90)
    sizes: list[int] = []
    add_batch = DedupIndex._add_batch
    monkeypatch.setattr(DedupIndex, "_add_batch", lambda self, items, *rest: (sizes.append(len(items)), add_batch(self, items, *rest)))
    index = DedupIndex(threshold=0.8)
    got = index.add_many(corpus_items)
    keys = [k for k, _ in corpus_items]
    assert sum(sizes) == len(keys) and sizes[0] == 16 and max(sizes) == 90 and len(set(sizes)) > 3
    assert partition(index, keys) == partition(built, keys)
    assert got == built.matches(keys)


def test_add_many_results_equal_matches_after_the_batch(corpus_items) -> None:
    index = DedupIndex()
    got = index.add_many(corpus_items[:200])
    assert got == index.matches([k for k, _ in corpus_items[:200]])
    assert all(isinstance(m, Match) for m in got)


def test_default_representative_is_longest_then_authority_then_first_seen() -> None:
    text = documents()["licenses/BSD.txt"]
    index = DedupIndex()
    index.add("short", text)
    index.add("long", text + " ")  # same canonical text, one character longer
    assert index.resolve("short") == "long"
    index.add("auth", text + " ", authority=2.0)
    assert index.resolve("long") == "auth"
    index.add("early", text + " ", authority=2.0, first_seen=dt.datetime(2020, 1, 1))
    index.add("late", text + " ", authority=2.0, first_seen=dt.datetime(2024, 1, 1))
    assert index.resolve("short") == "early"
    assert index.match("late").kind == "exact"


def test_custom_policy_chooses_the_representative() -> None:
    def prefer_docs(members: list[Member]) -> Member:
        return min(members, key=lambda m: (m.source != "docs", m.key))

    text = documents()["licenses/MPL-2.0.txt"]
    index = DedupIndex(policy=prefer_docs)
    index.add("z", text + " extra words at the end", source="docs")
    index.add("a", text, source="wiki")
    assert index.resolve("a") == "z"


@pytest.mark.parametrize(
    ("texts", "merged"),
    [
        pytest.param(["Permission is granted", "Warranty is disclaimed"], False, id="different-three-word"),
        pytest.param(["license", "copyright"], False, id="different-one-word"),
        pytest.param(["", ""], False, id="two-empty"),
        pytest.param(["   \n", "\t"], False, id="two-whitespace"),
        pytest.param(["GNU General Public", "gnu  general public"], True, id="same-short-text"),
    ],
)
def test_short_and_empty_texts(texts: list[str], merged: bool) -> None:
    index = DedupIndex()
    index.add_many([(f"k{i}", t) for i, t in enumerate(texts)])
    assert (index.resolve("k0") == index.resolve("k1")) is merged


def test_empty_text_is_no_ones_duplicate() -> None:
    index = DedupIndex()
    assert index.add("e", "").kind == "unique"
    assert index.add("f", " ").kind == "unique"
    assert index.query("") == []
    assert index.members("e") == ["e"]


def test_remove_reelects_a_representative(corpus_items) -> None:
    text = documents()["licenses/Apache-2.0.txt"]
    index = DedupIndex()
    index.add("v1", text)
    index.add("v2", text + " Appendix: how to apply the license.")
    index.add("copy", text)
    assert index.members("v2") == ["v2", "copy", "v1"]
    index.remove("v2")
    assert index.resolve("copy") == "copy"  # v1 and copy tie; the smaller key wins
    assert index.members("copy") == ["copy", "v1"]
    index.remove("copy")
    assert index.match("v1") == Match("v1", "v1", "v1", None, 1.0, "unique", 1)
    with pytest.raises(KeyError, match="'copy' is not in the index"):
        index.remove("copy")
    assert len(index) == 1


def test_remove_splits_a_chain_into_its_parts() -> None:
    """Removing the bridge of two near-duplicate groups leaves two clusters, as if it never came."""
    words = documents()["licenses/GPL-3.txt"].split()[:400]
    a = " ".join(words[:200])
    bridge = " ".join(words[20:220])
    b = " ".join(words[40:240])
    index = DedupIndex(threshold=0.8)
    index.add_many([("a", a), ("bridge", bridge), ("b", b)])
    assert jaccard(shingle_hashes(a), shingle_hashes(b)) < 0.8 <= jaccard(shingle_hashes(a), shingle_hashes(bridge))
    index.remove("bridge")
    fresh = DedupIndex(threshold=0.8)
    fresh.add_many([("a", a), ("b", b)])
    assert partition(index, ["a", "b"]) == partition(fresh, ["a", "b"]) == {"a": "a", "b": "b"}


def test_remove_then_add_again_with_new_text() -> None:
    index = DedupIndex()
    index.add("doc", documents()["licenses/BSD.txt"])
    with pytest.raises(ValueError, match="already in the index with another text"):
        index.add("doc", "a new version of the document")
    index.remove("doc")
    assert index.add("doc", "a new version of the document").kind == "unique"


def test_adding_the_same_item_again_is_a_no_op() -> None:
    index = DedupIndex()
    index.add("doc", "same text here", source="s")
    index.add_many([{"key": "doc", "text": "same text here", "source": "s"}])
    assert len(index) == 1
    assert index.keys_of_source("s") == ["doc"]


def test_query_returns_duplicates_best_first(built: DedupIndex, corpus_items) -> None:
    texts = dict(corpus_items)
    key = next(k for k in texts if k.startswith("near/"))
    found = built.query(texts[key])
    assert found[0][1] == 1.0 and key in [k for k, s in found if s == 1.0]
    assert all(s >= 0.8 for _, s in found)
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
    assert built.query("a text that appears nowhere in the corpus at all, surely") == []


def test_sources_and_cluster_listing(corpus_items) -> None:
    index = DedupIndex()
    index.add_many([{"key": k, "text": t, "source": k.split("#")[0]} for k, t in corpus_items[:100]])
    src = corpus_items[0][0].split("#")[0]
    assert set(index.keys_of_source(src)) == {k for k, _ in corpus_items[:100] if k.startswith(src + "#")}
    listed = dict(index.clusters())
    assert sorted(k for ms in listed.values() for k in ms) == sorted(k for k, _ in corpus_items[:100])
    for cid, ms in listed.items():
        assert index.members(cid) == ms and ms[0] == cid and index.resolve(cid) == cid


def test_the_deprecated_identity_aliases_warn_and_answer_as_resolve_and_members(built: DedupIndex, corpus_items) -> None:
    """cluster_of(key) and representative(cluster_id) stay for old callers; the one way is resolve(key)."""
    m = next(m for m in built.matches(list(dict(corpus_items))) if m.duplicate_of)
    assert m.representative == m.cluster_id == built.resolve(m.key)
    with pytest.warns(DeprecationWarning, match=r"use resolve\(key\)"):
        assert built.cluster_of(m.key) == m.cluster_id
    with pytest.warns(DeprecationWarning, match="its representative's key"):
        assert built.representative(m.cluster_id) == m.cluster_id
    with pytest.warns(DeprecationWarning), pytest.raises(KeyError, match="is not a cluster id"):
        built.representative(m.key)


def test_members_of_a_non_cluster_id(built: DedupIndex, corpus_items) -> None:
    dup = next(m for m in built.matches(list(dict(corpus_items))) if m.duplicate_of)
    with pytest.raises(KeyError, match="is not a cluster id"):
        built.members(dup.key)
    with pytest.raises(KeyError, match="not in the index"):
        built.members("no-such-key")


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        pytest.param(lambda i: i.add("k", None), TypeError, "text must be str", id="text-none"),
        pytest.param(lambda i: i.add(3, "text"), TypeError, "key must be str", id="key-int"),
        pytest.param(lambda i: i.add("", "text"), ValueError, "non-empty", id="key-empty"),
        pytest.param(lambda i: i.add("k", "t", source=5), TypeError, "source must be str", id="source"),
        pytest.param(lambda i: i.add("k", "t", authority="high"), TypeError, "authority", id="authority"),
        pytest.param(lambda i: i.add("k", "t", first_seen="2020"), TypeError, "first_seen", id="first-seen"),
        pytest.param(lambda i: i.add_many([("a", "x"), ("a", "y")]), ValueError, "appears twice", id="dup-in-batch"),
        pytest.param(lambda i: i.add_many([{"text": "x"}]), ValueError, "needs 'key' and 'text'", id="mapping"),
        pytest.param(lambda i: i.add_many(["just text"]), TypeError, r"items\[0\]", id="bare-str"),
        pytest.param(lambda i: i.add_many([("a", b"bytes")]), TypeError, r"items\[0\]: text must be str", id="bytes"),
        pytest.param(lambda i: i.remove(7), TypeError, "key must be str", id="remove-int"),
        pytest.param(lambda i: i.match("nope"), KeyError, "not in the index", id="match-unknown"),
        pytest.param(lambda i: i.query(None), TypeError, "text must be str", id="query-none"),
        # An int beyond the float range: math.isfinite raised a bare OverflowError.
        pytest.param(lambda i: i.add("k", "t", authority=10**400), TypeError, "authority must be a finite", id="authority-huge"),
        pytest.param(lambda i: i.add("k", "t", first_seen=-(10**400)), TypeError, "first_seen", id="first-seen-huge"),
        # A str where a list of keys belongs was read one key per character.
        pytest.param(lambda i: i.update([], remove="ab"), TypeError, r"remove must be a list of keys.*\['ab'\]", id="remove-str"),
        pytest.param(lambda i: i.contains_many("ab"), TypeError, "keys must be a list of keys", id="contains-str"),
        pytest.param(lambda i: i.matches("ab"), TypeError, "keys must be a list of keys", id="matches-str"),
    ],
)
def test_bad_input_fails_clearly(call, error: type[Exception], message: str) -> None:
    index = DedupIndex()
    with pytest.raises(error, match=message):
        call(index)
    assert len(index) == 0


def test_a_str_of_keys_to_remove_is_refused_before_anything_leaves() -> None:
    """Regression: update(remove="ab") removed the keys "a" and "b" and kept "ab"."""
    index = DedupIndex()
    index.add_many([("a", "the first of three texts here"), ("b", "a second text with other words"), ("ab", "and a third one")])
    with pytest.raises(TypeError, match="remove must be a list of keys"):
        index.update([], remove="ab")
    assert sorted(k for _, members in index.clusters() for k in members) == ["a", "ab", "b"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        pytest.param({"threshold": 0}, ValueError, r"threshold \(0\) must be in \(0, 1\]", id="threshold-0"),
        pytest.param({"threshold": 1.2}, ValueError, "threshold", id="threshold-high"),
        pytest.param({"threshold": "0.8"}, TypeError, "threshold must be a number", id="threshold-str"),
        pytest.param({"ngram": 0}, ValueError, r"ngram \(0\)", id="ngram"),
        pytest.param({"num_perm": 1}, ValueError, r"num_perm \(1\)", id="num-perm"),
        pytest.param({"seed": -1}, ValueError, r"seed \(-1\) must be in \[0, 2\*\*32 - 1\]", id="seed-negative"),
        pytest.param({"seed": 2**32}, ValueError, r"seed \(4294967296\)", id="seed-too-large"),
        pytest.param({"drift_floor": 0.9}, ValueError, "drift_floor", id="floor"),
        pytest.param({"policy": "longest"}, TypeError, "policy must be callable", id="policy"),
        pytest.param({"storage": "postgres://x"}, ValueError, "not a redis", id="storage-url"),
        pytest.param({"storage": 5}, TypeError, "storage must be", id="storage-type"),
    ],
)
def test_bad_parameters_fail_at_construction(kwargs, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        DedupIndex(**kwargs)


def test_parameters_are_visible() -> None:
    index = DedupIndex(threshold=0.8, num_perm=128)
    assert index.bands == (21, 6)
    assert index.knee == pytest.approx((1 / 21) ** (1 / 6))
    assert "bands=21x6" in repr(index)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_exact_copies_added_later_match_a_build_from_scratch(seed: int) -> None:
    """Guards the shortcut that files a new exact copy without reclustering its component: the result
    must be what reclustering from scratch gives, whatever the order and batching."""
    base = list(chunks())[:30]
    rng = random.Random(seed)
    items = [{"key": k, "text": t} for k, t in base]
    for i in range(60):
        key, text = rng.choice(base)
        items.append(
            {"key": f"{key}/copy{i}", "text": text + " " * rng.randrange(3), "authority": float(rng.randrange(3))}
        )
    items += [{"key": f"near{i}", "text": edited(t, 0.02, seed=i)} for i, (_, t) in enumerate(base[:10])]
    reference = DedupIndex()
    reference.add_many(items)
    rng.shuffle(items)
    index = DedupIndex()
    for start in range(0, len(items), 7):
        index.add_many(items[start : start + 7])
    keys = [it["key"] for it in items]
    assert index.matches(keys) == reference.matches(keys)
    assert sorted(index.clusters()) == sorted(reference.clusters())


def test_add_many_restores_the_garbage_collector() -> None:
    import gc

    index = DedupIndex()
    assert gc.isenabled()
    index.add_many(list(chunks())[:10])
    assert gc.isenabled()
    with pytest.raises(TypeError):
        index.add_many([("k", None)])
    assert gc.isenabled()
    gc.disable()
    try:
        index.add_many(list(chunks())[10:20])
        assert not gc.isenabled()  # a caller's own choice is left alone
    finally:
        gc.enable()


def test_with_block_closes_an_in_memory_index_and_keeps_its_items() -> None:
    with DedupIndex() as index:
        index.add("a", "the quick brown fox jumps over the lazy dog")
    assert "a" in index and len(index) == 1


def test_close_releases_the_redis_connections_and_a_later_call_reconnects(redis_url: str) -> None:
    """``with DedupIndex(storage=redis://...)`` used to leave its connection pool open until garbage collection."""
    redis = pytest.importorskip("redis")
    import time

    probe = redis.Redis.from_url(redis_url)

    def connected_after_close(expected: int) -> int:
        # The server sees a closed socket on its next event-loop turn: wait for it, up to a bound.
        for _ in range(100):
            now = int(probe.info("clients")["connected_clients"])
            if now == expected:
                break
            time.sleep(0.02)
        return now

    before = int(probe.info("clients")["connected_clients"])
    with DedupIndex(storage=redis_url, namespace="close") as index:
        index.add("a", "the quick brown fox jumps over the lazy dog")
        assert int(probe.info("clients")["connected_clients"]) > before
    assert connected_after_close(before) == before
    assert "a" in index and index.match("a").kind == "unique"  # the data stayed; the call reconnected
    index.close()
    assert connected_after_close(before) == before
    probe.close()


@pytest.mark.parametrize("call", [lambda i: i.keys_of_source(None), lambda i: i.keys_of_source(3),
                                  lambda i: i.matches([None]), lambda i: i.matches(["a", 7])])
def test_a_source_or_key_that_is_not_a_str_is_refused_by_name(call):
    """On a Redis index these raised AttributeError ('NoneType' object has no attribute 'encode'); in
    memory they answered [] or KeyError: both storages now refuse them alike, naming the argument."""
    index = DedupIndex()
    index.add("a", "Permission is hereby granted, free of charge, to any person obtaining a copy.", source="doc")
    with pytest.raises(TypeError, match=r"source must be a str|keys\[\d\] must be a str key"):
        call(index)
