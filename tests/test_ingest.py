"""The framework-free ingest decision (rag_dedup.ingest) on real paragraphs: stamps, tag, drop, re-runs."""

from __future__ import annotations

import pytest
from tests.adapter_corpus import paragraphs

from rag_dedup.index import DedupIndex
from rag_dedup.ingest import Ingestor, Ledger


def test_stamps_are_the_index_matches_after_the_batch() -> None:
    items = [(k, t, s, None) for k, t, s in paragraphs()]
    verdicts = Ingestor(DedupIndex(), "tag").run(items).verdicts
    reference = DedupIndex().add_many([{"key": k, "text": t, "source": s} for k, t, s, _ in items])
    assert [(v.key, v.cluster, v.duplicate_of) for v in verdicts] == [
        (m.key, m.cluster_id, m.duplicate_of) for m in reference
    ]
    assert all(v.passed for v in verdicts)
    assert sum(v.duplicate_of is not None for v in verdicts) > 50  # the corpus repeats its licences


def test_drop_mode_passes_each_passage_once_across_calls_and_promotes() -> None:
    """Documents arriving a few at a time: at the moment an item passes, no passed item shares its
    cluster; at the end every cluster holds a passed item (promotions filled those a split left empty)."""
    items = [(k, t, s, k) for k, t, s in paragraphs()]
    ingestor: Ingestor[str] = Ingestor(DedupIndex(), "drop")
    index = ingestor.index
    passed: list[str] = []
    for start in range(0, len(items), 37):
        decision = ingestor.run(items[start : start + 37])
        now = [v.key for v in decision.passed()]
        clusters_now = [index.match(k).cluster_id for k in now]
        assert len(clusters_now) == len(set(clusters_now)), "two copies of one passage passed in one call"
        assert not set(clusters_now) & {index.match(k).cluster_id for k in passed}, "a passage passed twice"
        passed += now
    assert {index.match(k).cluster_id for k in passed} == {index.match(k).cluster_id for k, *_ in items}
    assert len(passed) < len(items)
    assert len(index) == len(items)  # nothing is lost: dropped items stay indexed


def test_removing_the_passed_copy_promotes_a_dropped_one() -> None:
    (key, text, source), *_ = paragraphs()
    ingestor: Ingestor[str] = Ingestor(DedupIndex(), "drop")
    decision = ingestor.run([("a", text, "x", "payload a"), ("b", text.upper(), "y", "payload b")])
    assert [v.key for v in decision.passed()] == ["a"]
    promoted = ingestor.remove(["a"])
    assert [(v.key, v.payload, v.duplicate_of) for v in promoted] == [("b", "payload b", None)]
    assert "a" not in ingestor.index and "b" in ingestor.index


def test_drop_mode_rerun_gives_the_same_output() -> None:
    items = [(k, t, s, None) for k, t, s in paragraphs()][:300]
    ingestor: Ingestor[None] = Ingestor(DedupIndex(), "drop")
    first = [v.key for v in ingestor.run(items).passed()]
    again = [v.key for v in ingestor.run(items).passed()]
    assert again == first
    assert len(first) < len(items)


def test_drop_mode_choice_does_not_depend_on_input_order() -> None:
    """Within a call each cluster passes its representative, else its smallest key: a pure function of
    the members, whatever order the items arrive in."""
    items = [(k, t, s, None) for k, t, s in paragraphs()][:300]
    forward = {v.key for v in Ingestor(DedupIndex(), "drop").run(items).passed()}
    backward = {v.key for v in Ingestor(DedupIndex(), "drop").run(items[::-1]).passed()}
    assert forward == backward
    assert len(forward) < len(items)


def test_a_ledger_carries_drop_mode_over_to_another_ingestor() -> None:
    """What was passed and dropped lives in the ledger: an ingestor given it continues where the first
    left off (DedupTransform persists its ledger this way)."""
    items = [(k, t, s, k) for k, t, s in paragraphs()][:200]
    index = DedupIndex()
    ledger: Ledger[str] = Ledger()
    passed = {v.key for v in Ingestor(index, "drop", ledger=ledger).run(items).passed()}
    assert ledger.passed == passed and set(ledger.dropped) == {k for k, *_ in items} - passed
    again = Ingestor(index, "drop", ledger=ledger).run(items[:50]).passed()
    assert {v.key for v in again} == passed & {k for k, *_ in items[:50]}


def test_tag_mode_passes_every_occurrence_of_a_repeated_key() -> None:
    (key, text, source), *_ = paragraphs()
    verdicts = Ingestor(DedupIndex(), "tag").run([(key, text, source, 1), (key, text, source, 2)]).verdicts
    assert [(v.passed, v.cluster, v.payload) for v in verdicts] == [(True, key, 1), (True, key, 2)]


def test_empty_texts_pass_untouched_and_repeated_keys_follow_the_first() -> None:
    (key, text, source), *_ = paragraphs()
    ingestor = Ingestor(DedupIndex(), "drop")
    verdicts = ingestor.run(
        [(key, text, source, 1), ("blank", "  \n", None, 2), ("none", None, None, 3), (key, text, source, 4)]
    ).verdicts
    assert [(v.key, v.passed, v.cluster) for v in verdicts] == [
        (key, True, key),
        ("blank", True, None),
        ("none", True, None),
        (key, False, key),
    ]
    assert "blank" not in ingestor.index and "none" not in ingestor.index


def test_a_key_twice_with_two_texts_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"items\[1\]: key 'k' appears twice"):
        Ingestor(DedupIndex()).run([("k", "one text here", None, 1), ("k", "another text", None, 2)])


@pytest.mark.parametrize(
    ("index", "mode", "error"),
    [
        pytest.param(object(), "tag", TypeError, id="not-an-index"),
        pytest.param(DedupIndex(), "keep", ValueError, id="bad-mode"),
    ],
)
def test_bad_arguments(index: object, mode: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        Ingestor(index, mode)  # type: ignore[arg-type]


def test_an_id_written_again_with_another_text_replaces_it_as_the_stores_do() -> None:
    """Regression: re-ingesting a stable id with new text raised ValueError, where Haystack's
    DuplicatePolicy.OVERWRITE and LangChain's upserts by id replace the document."""
    from tests.adapter_corpus import paragraphs

    (_, first, _), (_, second, _), *_ = paragraphs()
    index = DedupIndex()
    ingest = Ingestor(index, mode="drop")
    before = ingest.run([("readme#0", first, "readme", "v1"), ("other", first.upper(), "x", "copy")])
    assert len(before.passed()) == 1  # one copy of the passage
    decision = ingest.run([("readme#0", second, "readme", "v2")])
    (verdict,) = decision.verdicts
    assert verdict.passed and verdict.duplicate_of is None and verdict.payload == "v2"
    assert index.match("readme#0").cluster_size == 1  # the old text left with its version
    assert len(index) == 2
    # Both passages are in the store now, each once: the old one by "other" (passed then, or promoted now).
    stored = {v.key for v in before.passed()} | {v.key for v in decision.passed()}
    assert stored == {"readme#0", "other"} and ingest.ledger.passed == stored


def test_a_key_another_worker_added_after_the_check_is_replaced_not_an_error(monkeypatch) -> None:
    """Two workers ingesting a new version of one document: the other's add lands between this one's
    look for the keys (none there) and its add_many, which then finds the key with another text."""
    from rag_dedup import KeyConflictError

    (_, first, _), (_, second, _), *_ = paragraphs()
    index = DedupIndex()
    index.add_many([("readme#0", first)])  # the other worker's version, added "meanwhile"
    with pytest.raises(KeyConflictError, match="'readme#0' is already in the index with another text"):
        index.add_many([("readme#0", second)])
    monkeypatch.setattr(index, "contains_many", lambda keys: [False] * len(keys))  # the look, before that add
    (verdict,) = Ingestor(index, mode="tag").run([("readme#0", second, "readme", "v2")]).verdicts
    assert verdict.passed and verdict.duplicate_of is None
    assert index.resolve("readme#0") == "readme#0" and len(index) == 1
    reference = DedupIndex()
    reference.add_many([("readme#0", second)])
    assert index.match("readme#0") == reference.match("readme#0")
