"""rag_dedup.settings: each shared parameter's rule, and the callers that use it (index, adapters, identity API)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import pytest

from rag_dedup import CorruptIndexError, DedupIndex
from rag_dedup import settings as s
from rag_dedup.ingest import Ingestor
from rag_dedup.storage.directory import _manifest_digest

TEXT = "the quick brown fox jumps over the lazy dog near the river bank today"


@pytest.mark.parametrize(
    ("check", "good", "canonical"),
    [
        pytest.param(s.check_threshold, [1, 0.8, 1.0, 1e-9], [1.0, 0.8, 1.0, 1e-9], id="threshold"),
        pytest.param(lambda v: s.check_drift_floor(v, 0.8), [0, 0.5, 0.8, None], [0.0, 0.5, 0.8, 0.7], id="drift"),
        pytest.param(s.check_num_perm, [2, 128, s.MAX_NUM_PERM], [2, 128, 8192], id="num-perm"),
        pytest.param(s.check_ngram, [1, 5, 64], [1, 5, 64], id="ngram"),
        pytest.param(s.check_seed, [0, 1, 2**32 - 1], [0, 1, 2**32 - 1], id="seed"),
        pytest.param(s.check_top, [1, 10], [1, 10], id="top"),
        pytest.param(lambda v: s.check_top(v, optional=True), [None, 1], [None, 1], id="top-optional"),
        pytest.param(s.check_fetch_factor, [1, 3.0, 1e6], [1.0, 3.0, 1e6], id="fetch-factor"),
    ],
)
def test_good_values_pass_in_their_canonical_type(check: Callable[[Any], Any], good: list, canonical: list) -> None:
    out = [check(v) for v in good]
    assert out == pytest.approx(canonical) if None not in out else out == canonical
    assert [type(v) for v in out] == [type(v) for v in canonical]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        pytest.param(lambda: s.check_threshold(0), ValueError, r"threshold \(0\) must be in \(0, 1\]", id="threshold-0"),
        pytest.param(lambda: s.check_threshold(1.5), ValueError, r"threshold \(1.5\) must be in \(0, 1\]", id="threshold-big"),
        pytest.param(lambda: s.check_threshold(math.nan), ValueError, r"threshold \(nan\) must be in", id="threshold-nan"),
        pytest.param(lambda: s.check_threshold("0.8"), TypeError, "threshold must be a number, got str", id="threshold-str"),
        pytest.param(lambda: s.check_threshold(True), TypeError, "threshold must be a number, got bool", id="threshold-bool"),
        pytest.param(lambda: s.check_drift_floor(0.9, 0.8), ValueError,
                     r"drift_floor \(0.9\) must be in \[0, threshold \(0.8\)\]", id="drift-above"),
        pytest.param(lambda: s.check_drift_floor(-0.1, 0.8), ValueError, r"drift_floor \(-0.1\) must be in \[0", id="drift-neg"),
        pytest.param(lambda: s.check_drift_floor("x", 0.8), TypeError, "drift_floor must be a number", id="drift-str"),
        pytest.param(lambda: s.check_num_perm(1), ValueError, r"num_perm \(1\) must be at least 2", id="num-perm-1"),
        pytest.param(lambda: s.check_num_perm(8193), ValueError, r"num_perm \(8193\) must be at most 8192", id="num-perm-big"),
        pytest.param(lambda: s.check_num_perm(128.0), TypeError, "num_perm must be int, got float", id="num-perm-float"),
        pytest.param(lambda: s.check_ngram(0), ValueError, r"ngram \(0\) must be between 1 and 64", id="ngram-0"),
        pytest.param(lambda: s.check_ngram(65), ValueError, r"ngram \(65\) must be between 1 and 64", id="ngram-65"),
        pytest.param(lambda: s.check_ngram(True), TypeError, "ngram must be int, got bool", id="ngram-bool"),
        pytest.param(lambda: s.check_seed(1.0), TypeError, "seed must be int, got float", id="seed-float"),
        # numpy's generator takes [0, 2**32 - 1]: outside it, numpy's own message came from inside numpy.
        pytest.param(lambda: s.check_seed(-3), ValueError, r"seed \(-3\) must be in \[0, 2\*\*32 - 1\]", id="seed-negative"),
        pytest.param(lambda: s.check_seed(2**40), ValueError, r"seed \(1099511627776\)", id="seed-too-large"),
        pytest.param(lambda: s.check_top(0, "top_n"), ValueError, r"top_n \(0\) must be at least 1", id="top-0"),
        pytest.param(lambda: s.check_top(None, "top_k"), TypeError, "top_k must be int, got NoneType", id="top-none"),
        pytest.param(lambda: s.check_top(2.5, "top_k", optional=True), TypeError,
                     "top_k must be int, or None for every distinct passage, got float", id="top-float"),
        pytest.param(lambda: s.check_fetch_factor(0.5), ValueError, r"fetch_factor \(0.5\) must be a finite number >= 1",
                     id="fetch-small"),
        pytest.param(lambda: s.check_fetch_factor(math.inf), ValueError, r"fetch_factor \(inf\) must be a finite", id="fetch-inf"),
        pytest.param(lambda: s.check_fetch_factor("3"), TypeError, "fetch_factor must be a number, got str", id="fetch-str"),
    ],
)
def test_bad_values_name_the_parameter_and_the_bound(call: Callable[[], Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        pytest.param({"threshold": 0}, ValueError, r"threshold \(0\) must be in \(0, 1\]", id="threshold"),
        pytest.param({"num_perm": 10**9}, ValueError, r"num_perm \(1000000000\) must be at most 8192", id="num-perm-huge"),
        pytest.param({"num_perm": 1}, ValueError, r"num_perm \(1\) must be at least 2", id="num-perm-1"),
        pytest.param({"ngram": 65}, ValueError, r"ngram \(65\) must be between 1 and 64", id="ngram"),
        pytest.param({"seed": "1"}, TypeError, "seed must be int", id="seed"),
        pytest.param({"drift_floor": 0.95}, ValueError, r"drift_floor \(0.95\) must be in \[0, threshold \(0.8\)\]", id="drift"),
    ],
)
def test_dedup_index_refuses_through_the_settings(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        DedupIndex(**kwargs)


def test_a_saved_manifest_asking_for_a_huge_num_perm_is_refused(tmp_path: Path) -> None:
    index = DedupIndex()
    index.add("a", TEXT)
    index.save(tmp_path / "index")
    manifest = tmp_path / "index" / "manifest.json"
    body = json.loads(manifest.read_text())
    body["meta"]["num_perm"] = 10**9
    del body["sha256"]
    body["sha256"] = _manifest_digest(body)  # a crafted manifest, checksum and all (it is no signature)
    manifest.write_text(json.dumps(body))
    with pytest.raises(CorruptIndexError, match="num_perm"):
        DedupIndex.load(tmp_path / "index")


def test_adapters_use_the_same_rules() -> None:
    pytest.importorskip("haystack")
    from rag_dedup.haystack import DocumentDeduplicator, DuplicateCollapser

    with pytest.raises(ValueError, match=r"threshold \(1.5\) must be in \(0, 1\]"):
        DocumentDeduplicator(threshold=1.5)
    with pytest.raises(TypeError, match="threshold must be a number, got str"):
        DocumentDeduplicator(threshold="0.8")
    with pytest.raises(ValueError, match=r"top_k \(0\) must be at least 1, or None"):
        DuplicateCollapser(top_k=0)


def _counting(index: DedupIndex) -> list[int]:
    """Patch ``index.storage.get_items`` to record how many keys each call asks for."""
    calls: list[int] = []
    get_items = index.storage.get_items

    def counted(keys):
        calls.append(len(keys))
        return get_items(keys)

    index.storage.get_items = counted  # type: ignore[method-assign]
    return calls


def _check_contains_many(index: DedupIndex) -> None:
    index.add_many([("a", TEXT), ("b", TEXT.upper()), ("c", "a different text about other things entirely")])
    calls = _counting(index)
    keys = ["a", "zz", "c", "b", "a", 7, ""]
    assert index.contains_many(keys) == [True, False, True, True, True, False, False]  # type: ignore[list-item]
    assert calls == [6]  # one storage call for the str keys
    assert index.contains_many([]) == [] and calls == [6]
    assert index.contains_many(iter(["b"])) == [True]  # any iterable of keys
    assert [k in index for k in keys] == index.contains_many(keys)  # type: ignore[list-item]
    index.remove("b")
    assert index.contains_many(["a", "b"]) == [True, False]


def test_contains_many_in_memory() -> None:
    _check_contains_many(DedupIndex())


def test_contains_many_on_redis(redis_url: str) -> None:
    _check_contains_many(DedupIndex(storage=redis_url, namespace="contains-many"))


def test_ingest_remove_asks_the_index_once_for_all_keys() -> None:
    index = DedupIndex()
    ingestor: Ingestor[str] = Ingestor(index, mode="drop")
    decision = ingestor.run([("a", TEXT, None, "a"), ("b", TEXT.upper(), None, "b")])
    assert [v.passed for v in decision.verdicts] == [True, False]
    asked: list[list[str]] = []
    contains_many = index.contains_many
    index.contains_many = lambda keys: asked.append(list(keys)) or contains_many(keys)  # type: ignore[method-assign]
    promoted = ingestor.remove(["a", "a", "missing"])  # a repeated and an unknown key are no error
    assert asked[0] == ["a", "a", "missing"]
    assert [v.key for v in promoted] == ["b"]
    assert index.contains_many(["a", "b"]) == [False, True]


def test_the_default_drift_floor_is_threshold_minus_a_tenth_exactly():
    """0.8 - 0.1 is 0.7000000000000001 in floats: a pair at exactly J = 0.7 (14 of 20 shingles) failed the
    default floor, and the default index chose another representative than DedupIndex(drift_floor=0.7).
    An index stored with the unrounded default still opens with the default."""
    from rag_dedup import DedupIndex

    words = [f"word{i}" for i in range(14)]
    a = " ".join([*words, "alphaaaaaaaaa", "betaaaaaaaaaa", "gammaaaaaaaaa"])  # the longest: J(a, c) = 14/20
    c = " ".join([*words, "c1", "c2", "c3"])
    b = " ".join([*words, "alphaaaaaaaaa", "c1"])  # J(a, b) = J(b, c) = 15/18
    chosen = []
    for index in (DedupIndex(), DedupIndex(drift_floor=0.7)):
        index.add_many([("a", a), ("b", b), ("c", c)])
        chosen.append((index.drift_floor, index.resolve("a"), sorted(index.clusters())))
    assert chosen[0] == chosen[1] and chosen[0][:2] == (0.7, "a")
    from rag_dedup.index import _same_default_floor

    assert _same_default_floor("drift_floor", 0.8 - 0.1, 0.7) and not _same_default_floor("drift_floor", 0.69, 0.7)
