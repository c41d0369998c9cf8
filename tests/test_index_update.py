"""DedupIndex.update: removals, replacements and additions in one step, all or nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_dedup.errors import InvalidTextError
from rag_dedup.index import DedupIndex

LICENSES = Path(__file__).parent / "data" / "corpus" / "licenses"
PARAGRAPHS = [
    p
    for name in ("GPL-3.txt", "Apache-2.0.txt", "MPL-2.0.txt")
    for p in (LICENSES / name).read_text(encoding="utf-8").split("\n\n")
    if len(p.split()) > 30
][:60]


def state(index: DedupIndex) -> tuple[object, ...]:
    clusters = sorted(index.clusters())
    return clusters, index.matches(sorted(k for _, members in clusters for k in members))


def items(texts: list[str], prefix: str) -> list[dict[str, str]]:
    return [{"key": f"{prefix}{i}", "text": t, "source": prefix} for i, t in enumerate(texts)]


def test_update_equals_removing_then_adding_and_skips_unchanged_items():
    first = items(PARAGRAPHS[:40], "a") + items([p.upper() for p in PARAGRAPHS[:20]], "b")
    index = DedupIndex()
    index.add_many(first)
    changed = [{**first[3], "text": PARAGRAPHS[45]}]
    unchanged = first[10:30]
    matches, written = index.update(changed + unchanged + items(PARAGRAPHS[40:], "c"), remove=["b1", "b2"])

    reference = DedupIndex()
    kept = [i for i in first if i["key"] not in {"b1", "b2", "a3"}]
    reference.add_many(kept + changed + items(PARAGRAPHS[40:], "c"))
    assert state(index) == state(reference)
    assert written == 1 + len(PARAGRAPHS[40:])  # the unchanged items are not written again
    assert [m.key for m in matches] == [i["key"] for i in changed + unchanged + items(PARAGRAPHS[40:], "c")]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        pytest.param({"items": [("new", "a text")], "remove": ["missing"]}, KeyError, id="unknown-remove-key"),
        pytest.param({"items": [("a0", 7)], "remove": ["b1"]}, TypeError, id="bad-text"),
        pytest.param({"items": [("x", "t"), ("x", "u")], "remove": ["b1"]}, ValueError, id="key-twice"),
        # A text that cannot be hashed, after removals and past the first batch: refused before either
        # is applied (update relies on the parse checks for that, not on hashing every text first).
        pytest.param(
            {"items": [(f"n{i}", f"text {i} of many") for i in range(1500)] + [("bad", "lone \ud800 surrogate")],
             "remove": ["b1"]},
            InvalidTextError, id="unhashable-text-past-the-first-batch",
        ),
    ],
)
def test_a_refused_update_changes_nothing(kwargs, error):
    index = DedupIndex()
    index.add_many(items(PARAGRAPHS[:20], "a") + items([p.upper() for p in PARAGRAPHS[:10]], "b"))
    before = state(index)
    with pytest.raises(error):
        index.update(**kwargs)
    assert state(index) == before
