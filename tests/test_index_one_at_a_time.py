"""The one-at-a-time paths (issue 14) against the bulk paths they shortcut, value for value.

``DedupIndex.add`` hashes one text, signs one set and looks up one row of band keys; each of those
has a path of its own for that case (:func:`rag_dedup.shingles._hash_one`, the single-set branch of
:meth:`MinHasher.signatures`, :meth:`BandTable._query_small`, and for the few rows of a small batch
:meth:`DedupIndex._lookup_few`), and each must give exactly what the bulk path gives for the same input.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from tests.corpus import chunks, documents
from tests.oracles import batch_path, reference_signature
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_dedup import DedupIndex, Match, compiled
from rag_dedup.index import _FEW_KEYS, _buckets
from rag_dedup.minhash import MinHasher
from rag_dedup.shingles import reference_shingle_hashes, shingle_hashes_many, shingles_and_digests
from rag_dedup.storage.memory import BandTable

# Words that exercise every token rule: decoration (ASCII and Unicode punctuation), line-leading
# numbers, https, split scripts, Hangul runs, separators 28-31, CR, NBSP, soft hyphen, ligatures.
_PIECES = [
    "alpha", "Beta", "gamma", "delta", "x", "*", "//", "--", "•", "—", "…", "1.", "12)", "(a)", "iv)", "(xxxviii)",
    "b.", "a.b", "(c)", "<name@host>", "https://example.org/x", "日本語", "中文字", "한국어의문장은띄어쓰기가없다",
    "ß\u0301", "ﬁle", "\u00ad", "\u00a0", "\x1c", "\x1f", "\t", "\r", "\r\n", "\n", "\n\n", "  ",
]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=40).map(lambda ps: " ".join(ps))


def _bulk(text: str, **rules: object) -> tuple[np.ndarray, bytes | None]:
    """The bulk path's shingles and digest of ``text`` (batched with another text, so not the one-text path)."""
    sets, digests = shingles_and_digests([text, "pad"], **rules)  # type: ignore[arg-type]
    return sets[0], digests[0]


@settings(max_examples=300, deadline=None)
@given(_TEXT, st.integers(1, 6), st.booleans(), st.sampled_from([0, 20]))
def test_one_text_shingles_and_digest_equal_the_bulk_path_and_the_reference(
    text: str, ngram: int, ignore_decoration: bool, short_tokens: int
) -> None:
    rules = {"ngram": ngram, "ignore_decoration": ignore_decoration, "short_tokens": short_tokens}
    (one,), (digest,) = shingles_and_digests([text], **rules)  # type: ignore[arg-type]
    bulk, bulk_digest = _bulk(text, **rules)
    assert np.array_equal(one, bulk) and one.dtype == np.uint32
    assert digest == bulk_digest
    assert np.array_equal(one, reference_shingle_hashes(text, **rules))  # type: ignore[arg-type]


def test_one_text_shingles_equal_the_bulk_path_on_real_text() -> None:
    texts = [t for _, t in chunks()[:400]] + list(documents().values())[:40]
    bulk = shingle_hashes_many([*texts, "pad"])
    for text, expected in zip(texts, bulk):
        assert np.array_equal(shingle_hashes_many([text])[0], expected)
        assert np.array_equal(shingle_hashes_many([text.lower()], canonicalized=True)[0], shingle_hashes_many([text.lower(), "pad"], canonicalized=True)[0])


def test_one_set_signature_equals_the_batch_and_datasketch() -> None:
    hasher = MinHasher(128, seed=3)
    sets = shingle_hashes_many([t for _, t in chunks()[:60]])
    batch = hasher.signatures(sets)
    for i, s in enumerate(sets):
        one = hasher.signatures([s])
        assert one.shape == (1, 128) and one.dtype == np.uint32
        assert np.array_equal(one[0], batch[i])
    assert np.array_equal(hasher.signatures([sets[0]])[0], reference_signature(sets[0], 128, seed=3))


def _table_with_every_level() -> tuple[BandTable, np.ndarray]:
    """A band table with entries in main and young levels, in the write buffer, and a deleted group."""
    rng = np.random.default_rng(14)
    keys = rng.integers(0, 1 << 63, size=(3000, 9), dtype=np.uint64) * np.uint64(2)
    keys[1::7] = keys[0::7][: len(keys[1::7])]  # rows sharing every band with another
    keys[2::5, :3] = keys[3::5, :3][: len(keys[2::5])]  # rows sharing three bands
    table = BandTable()
    table.insert(list(range(0, 2000)), keys[:2000])  # bulk: straight into the runs' main levels
    table.insert(list(range(2000, 2460)), keys[2000:2460])  # into the young levels (under a quarter of main)
    for g in range(2460, 2710):  # small inserts: the write buffer
        table.insert([g], keys[g : g + 1])
    table.delete(7)
    table.delete(2705)
    return table, keys


@pytest.mark.parametrize("rows", [pytest.param(1, id="one-row"), pytest.param(3, id="three-rows"), pytest.param(7, id="seven-rows")])
def test_small_band_query_equals_the_bulk_query(rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    table, keys = _table_with_every_level()
    assert table._buffered and any(len(r.young_keys) for r in table._runs)  # every level is exercised
    queries = [keys[lo : lo + rows] for lo in random.Random(rows).sample(range(0, 2710 - rows), 150)]
    assert rows * keys.shape[1] <= BandTable._SMALL_QUERY
    small = [table.query_pairs(q) for q in queries]
    monkeypatch.setattr(BandTable, "_SMALL_QUERY", 0)
    found = 0
    for q, (rows_small, gids_small) in zip(queries, small):
        rows_bulk, gids_bulk = table.query_pairs(q)
        assert rows_small.dtype == rows_bulk.dtype == gids_small.dtype == gids_bulk.dtype == np.int64
        assert np.array_equal(rows_small, rows_bulk) and np.array_equal(gids_small, gids_bulk)
        found += len(gids_small)
        assert 7 not in gids_small.tolist() and 2705 not in gids_small.tolist()
    assert found > len(queries)  # the queries do find groups (not only empty answers)


def test_add_one_at_a_time_gives_the_partition_of_add_many() -> None:
    """The one-text, one-set and small-query paths together: the clusters and matches of one batch."""
    items = chunks()[:500]
    items = random.Random(5).sample(items, len(items))
    batch = DedupIndex(threshold=0.8)
    batch.add_many(items)
    single = DedupIndex(threshold=0.8)
    for key, text in items:
        single.add(key, text)
    keys = [k for k, _ in items]
    assert single.matches(keys) == batch.matches(keys)
    assert sorted(single.clusters()) == sorted(batch.clusters())
    assert sum(len(m) > 1 for _, m in batch.clusters()) > 0  # there are clusters to agree on


def test_band_keys_golden_values_and_input_dtypes() -> None:
    """Band keys are stored with a saved index: pinned to the values of commit 902b820, before the
    constants were cached, for signatures of any integer dtype (as ``astype(uint64)`` read them).
    The set is a fixed array, so a change of the shingling rule cannot move these values."""
    from rag_dedup.lsh import band_keys

    shingles = np.unique((np.arange(1, 60, dtype=np.uint64) * 2654435761 % 2**32).astype(np.uint32))
    sig = MinHasher(128, seed=1).signatures([shingles])
    assert band_keys(sig, 21, 6)[0, [0, 1, 20]].tolist() == [2111227792932466431, 18243647497887853426, 7811309235380028834]
    assert band_keys(sig, 16, 8)[0, [0, 15]].tolist() == [17302462120833434630, 18180676060412541770]
    assert np.array_equal(band_keys(sig.astype(np.int64), 21, 6), band_keys(sig, 21, 6))


@pytest.mark.parametrize("rows", [1, 4, 12])
def test_few_rows_buckets_equal_the_bulk_lookup(rows: int) -> None:
    """:meth:`DedupIndex._lookup_few` gives the buckets of :meth:`~DedupIndex._lookup_buckets` and
    :func:`~rag_dedup.index._buckets`: the same buckets, in the same order, with the same groups."""
    items = chunks()[:700]
    index = DedupIndex(threshold=0.8)
    index.add_many(items[:300])  # the runs
    for key, text in items[300:400]:
        index.add(key, text)  # the write buffer
    index.remove(items[3][0])  # a tombstone
    texts = [t for _, t in items[400:]] + [t for _, t in items[:200:7]]  # new texts and copies of stored ones
    sets = shingle_hashes_many(texts)
    band_keys = index._band_keys(sets)
    band_keys[1::5] = band_keys[0::5][: len(band_keys[1::5])]  # rows that share every bucket with another
    assert rows * band_keys.shape[1] <= _FEW_KEYS
    shared = 0
    for lo in range(0, len(band_keys) - rows, rows):
        keys = band_keys[lo : lo + rows]
        gids = list(range(10**6, 10**6 + rows))  # the ids the new groups would get
        slot, bucket_rows, bucket_gids = index._lookup_buckets(keys)
        bulk = _buckets(slot, keys.shape[1], gids, bucket_rows, bucket_gids)
        few = [(old, [gids[r] for r in new]) for old, new in index._lookup_few(keys)]
        assert few == bulk
        shared += sum(len(old) > 0 for old, _ in few)
    assert shared > 0  # stored groups are found, not only buckets among the new rows


def _family_items(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """``n`` items from a few texts with 0 to 3 words edited: near-duplicates of each other, exact
    copies (also in upper case), an empty text now and then; their lengths differ, so the
    representative moves as they arrive."""
    base = [t for _, t in chunks()[:4]]
    items = []
    for i in range(n):
        words = base[rng.randrange(len(base))].split()
        for _ in range(rng.randrange(4)):
            words[rng.randrange(len(words))] = "edited"
        text = " ".join(words)
        roll = rng.random()
        items.append((f"k{i}", text.upper() if roll < 0.1 else " \n " if roll < 0.13 else text))
    return items


def _same_answers_block_by_block(items: list[tuple[str, str]], sizes: list[int]) -> list[Match]:
    few, batch = DedupIndex(threshold=0.8), DedupIndex(threshold=0.8)
    got: list[Match] = []
    start, i = 0, 0
    while start < len(items):
        block = items[start : start + sizes[i % len(sizes)]]
        answer = few.add_many(block)
        with batch_path():
            assert answer == batch.add_many(block)
        got.extend(answer)
        start, i = start + len(block), i + 1
    assert sorted(few.clusters()) == sorted(batch.clusters())
    return got


@settings(max_examples=30, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 48), st.lists(st.integers(1, 20), min_size=1, max_size=6))
def test_a_few_items_placed_one_at_a_time_equal_the_batch_path(rng: random.Random, n: int, sizes: list[int]) -> None:
    """``add_many`` of at most ``_ONE_BY_ONE`` items (:meth:`DedupIndex._add_few`) returns, block by
    block, the Matches of the batch path (``displaced`` too) and ends in its clusters: blocks holding
    near-duplicates of each other and of stored texts, exact copies, empty texts, blocks of 1 to 20
    (above ``_ONE_BY_ONE``, the batch path on both sides)."""
    items = _family_items(rng, n)
    got = _same_answers_block_by_block(items, sizes)
    assert [m.key for m in got] == [key for key, _ in items]  # one Match an item, in order


def test_a_few_items_placed_one_at_a_time_move_representatives_as_the_batch_path() -> None:
    """The same in a stream where representatives move (``displaced`` set) and clusters grow."""
    got = _same_answers_block_by_block(_family_items(random.Random(1), 60), [5, 3, 8, 1])
    assert any(m.displaced for m in got) and {m.kind for m in got} == {"unique", "exact", "near"}


def test_a_few_items_mostly_unique_answer_as_the_batch_path() -> None:
    """Blocks of distinct texts (most a cluster of their own, answered without reading the store:
    ``DedupIndex._new_matches``) with a near-duplicate and an exact copy of an earlier block's text
    among them: the Matches of the batch path, the earlier text's included."""
    texts = [t for _, t in chunks()[:40]]
    items = [(f"u{i}", t) for i, t in enumerate(texts[:30])]
    items[12:12] = [("near", texts[3] + " edited"), ("copy", texts[5])]
    got = _same_answers_block_by_block(items, [10, 7])
    kinds = {m.key: m.kind for m in got}
    assert kinds["near"] == "near" and kinds["copy"] == "exact" and list(kinds.values()).count("unique") >= 25


def test_a_few_items_with_a_stored_key_take_the_batch_path_whole() -> None:
    """A small ``add_many`` holding a key already in the index: unchanged, a no-op for it; with another
    text, a ValueError before anything of the block is written."""
    items = list(chunks()[:12])
    index = DedupIndex(threshold=0.8)
    index.add_many(items[:3])
    again = index.add_many([items[0], items[5], (items[6][0] + "-copy", items[6][1])])
    assert len(index) == 5 and again[0] == index.match(items[0][0])
    with pytest.raises(ValueError, match="already in the index with another text"):
        index.add_many([items[7], (items[1][0], items[8][1])])
    assert items[7][0] not in index and len(index) == 5


@settings(max_examples=30, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 40))
def test_add_returns_the_match_of_the_batch_path(rng: random.Random, n: int) -> None:
    """``add()`` returns what ``add_many`` of that one item returns on the batch path, ``displaced``
    too, for every branch of ``_place_one``: a new group alone, a new group with edges (its Match
    built from the clusters just stored, :func:`~rag_dedup.index._new_group_match`), an exact copy
    and an empty text (their Match asked of ``_matches``); the clusters end the same."""
    one, batch = DedupIndex(threshold=0.8), DedupIndex(threshold=0.8)
    got: list[Match] = []
    for key, text in _family_items(rng, n):
        answer = one.add(key, text)
        with batch_path():
            assert [answer] == batch.add_many([(key, text)])
        assert answer == one.match(key)._replace(displaced=answer.displaced)
        got.append(answer)
    assert sorted(one.clusters()) == sorted(batch.clusters())


def test_add_returns_moved_representatives_as_the_batch_path() -> None:
    """The same in a stream where representatives move (``displaced`` set) and near-duplicates join."""
    one, batch = DedupIndex(threshold=0.8), DedupIndex(threshold=0.8)
    got = []
    for key, text in _family_items(random.Random(1), 60):
        got.append(one.add(key, text))
        with batch_path():
            assert [got[-1]] == batch.add_many([(key, text)])
    assert any(m.displaced for m in got) and {m.kind for m in got} == {"unique", "exact", "near"}
    assert any(m.displaced and m.kind == "near" for m in got)


@pytest.mark.parametrize("few_candidates", [0, 8, 10**9])
def test_add_with_many_candidates_takes_the_batch_path_with_the_same_answers(
    few_candidates: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new group with more than ``_FEW_CANDIDATES`` candidates (a big family's buckets) is placed the
    batch way (one probe a stored component); with fewer, by ``_place_one``'s own verification of every
    candidate. Either way ``add()`` returns what the batch path returns and the clusters end the same:
    here a family of 80 variants of one real chunk (one or two words edited each), added one at a time
    with every route forced in turn (0: always the batch way once there is a candidate; 10**9: never)."""
    monkeypatch.setattr("rag_dedup.index._FEW_CANDIDATES", few_candidates)
    rng = random.Random(5)
    words = chunks()[0][1].split()
    items = []
    for i in range(80):
        variant = list(words)
        for _ in range(1 + i % 2):
            variant[rng.randrange(len(variant))] = f"edit{i}"
        items.append((f"v{i}", " ".join(variant)))
    one, batch = DedupIndex(threshold=0.8), DedupIndex(threshold=0.8)
    for key, text in items:
        answer = one.add(key, text)
        with batch_path():
            assert [answer] == batch.add_many([(key, text)])
    assert sorted(one.clusters()) == sorted(batch.clusters())
    assert max(len(members) for _, members in one.clusters()) > 8  # the family is big enough to take both routes


def _shortest_key_first(members):  # a policy other than the default (module level: a stable name)
    return min(members, key=lambda m: (len(m.key), m.key))


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 3),
    st.integers(0, 3),
    st.integers(1, 2),
    st.sampled_from([None, 0.0, 0.5, 0.8]),
    st.booleans(),
    st.booleans(),
)
def test_a_near_duplicate_of_one_stored_group_is_clustered_as_the_batch_path(
    copies: int, new_copies: int, edits: int, floor: float | None, custom: bool, on_kernels: bool
) -> None:
    """A text whose one edge is to a stored group alone (a component of two groups: on the compiled
    path ``DedupIndex._cluster_pair``, the Jaccard just verified passed to ``_cluster_two``) returns
    the batch path's Match and ends in its clusters: copies of either text with other lengths and
    authorities (so either may represent), the drift floor at 0, between the pair's Jaccard and the
    threshold or at it (one cluster or two), the default policy or another, and on both kernel paths."""
    words = chunks()[3][1].split()
    edited = list(words)
    for i in range(edits):
        edited[7 * i + 3] = f"edit{i}"
    first, second = " ".join(words), " ".join(edited)
    items = [("a", first), *((f"a{i}", f" {first.upper()}" + " " * i) for i in range(copies))]
    later = [("b", second), *((f"b{i}", second + "\n" * (i + 1)) for i in range(new_copies))]
    policy = _shortest_key_first if custom else None
    was = compiled.COMPILED
    compiled.COMPILED = on_kernels and was
    try:
        one = DedupIndex(threshold=0.8, drift_floor=floor, policy=policy)
        batch = DedupIndex(threshold=0.8, drift_floor=floor, policy=policy)
        for key, text in items:
            one.add(key, text, authority=float(len(key)))
            with batch_path():
                batch.add_many([{"key": key, "text": text, "authority": float(len(key))}])
        for key, text in later:
            answer = one.add(key, text, authority=0.5)
            with batch_path():
                assert [answer] == batch.add_many([{"key": key, "text": text, "authority": 0.5}])
        assert sorted(one.clusters()) == sorted(batch.clusters())
        assert "a" in dict(one.query(second))  # the pair is an edge: the route under test was taken
    finally:
        compiled.COMPILED = was
