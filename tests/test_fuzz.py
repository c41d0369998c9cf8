"""Arbitrary Unicode and arbitrary bytes through canonical, the index, and save/load.

Every call gives a result or a documented exception, never another one: a key, source or text with
a lone surrogate (what ``bytes.decode(errors="surrogateescape")`` makes of bytes that are not UTF-8)
raises :class:`~rag_dedup.InvalidTextError` naming it, before anything is added; everything else is
indexed, found by its own text, and saved and loaded exactly; the chunker cuts it into exact spans,
the transform stamps it, the postprocessor keeps its input order (NaN and infinite scores included).
"""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_dedup import DedupIndex, InvalidTextError, canonical

# Text as it reaches the library: any code point (lone surrogates included), or any bytes decoded
# with surrogateescape, or words of a small alphabet (so that near-duplicates happen).
_WORDS = st.lists(st.sampled_from(["alpha", "beta", "Gamma", "δέλτα", "ß\u0301", "e\u034f\u0301", "\u200e", "x"]), max_size=14)
TEXT = st.one_of(
    st.text(max_size=80),
    st.binary(max_size=80).map(lambda b: b.decode("utf-8", "surrogateescape")),
    _WORDS.map(" ".join),
)
KEY = st.one_of(st.text(min_size=1, max_size=12), st.binary(min_size=1, max_size=12).map(lambda b: b.decode("utf-8", "surrogateescape")))
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def has_surrogate(value: str | None) -> bool:
    return value is not None and any(0xD800 <= ord(c) <= 0xDFFF for c in value)


@FUZZ
@given(TEXT)
def test_canonical_gives_a_fixed_point_or_refuses_a_surrogate(text: str) -> None:
    if has_surrogate(text):
        with pytest.raises(InvalidTextError, match="^text holds a lone surrogate"):
            canonical(text)
        return
    once = canonical(text)
    assert canonical(once) == once


@FUZZ
@given(st.lists(st.tuples(KEY, TEXT, st.one_of(st.none(), KEY)), max_size=8, unique_by=lambda t: t[0]))
def test_the_index_adds_finds_saves_and_loads_anything_or_refuses_a_surrogate(items: list[tuple[str, str, str | None]]) -> None:
    batch = [{"key": k, "text": t, "source": s} for k, t, s in items]
    index = DedupIndex(threshold=0.5)
    bad = [i for i, (k, t, s) in enumerate(items) if has_surrogate(k) or has_surrogate(t) or has_surrogate(s)]
    if bad:
        with pytest.raises(InvalidTextError, match=rf"^items\[{bad[0]}\]: (key|text|source)"):
            index.add_many(batch)
        assert len(index) == 0
        return
    matches = index.add_many(batch)
    assert [m.key for m in matches] == [k for k, _, _ in items]
    for key, text, _ in items:
        if canonical(text):
            assert key in {k for k, _ in index.query(text)}
        else:
            assert index.query(text) == []
    with tempfile.TemporaryDirectory() as tmp:
        index.save(tmp)
        loaded = DedupIndex.load(tmp)
        keys = [k for k, _, _ in items]
        assert loaded.matches(keys) == index.matches(keys)
        assert [loaded.query(t) for _, t, _ in items] == [index.query(t) for _, t, _ in items]
        for _, _, source in items:
            if source is not None:
                assert sorted(loaded.keys_of_source(source)) == sorted(index.keys_of_source(source))


@FUZZ
@given(KEY, TEXT)
def test_add_gives_a_match_or_refuses_a_surrogate(key: str, text: str) -> None:
    index = DedupIndex()
    if has_surrogate(key) or has_surrogate(text):
        with pytest.raises(InvalidTextError, match=r"^(key|text \(key .*\)) holds a lone surrogate"):
            index.add(key, text)
        assert len(index) == 0
        return
    assert index.add(key, text).key == key
    assert index.match(key).duplicate_of is None


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({1: "a", "text": "some text"}, id="int-field"),
        pytest.param({"key": "a", "text": "t", b"source": "s"}, id="bytes-field"),
        pytest.param({"key": "a", (1, 2): "x", "text": "t"}, id="tuple-field"),
    ],
)
def test_a_mapping_with_foreign_fields_names_the_item_and_its_fields(raw: dict) -> None:
    """Guards issue 17 item 12: add_many([{1: "a", "text": t}]) failed with "'<' not supported between instances"."""
    with pytest.raises(ValueError, match=r"^items\[1\]: a mapping needs 'key' and 'text' .*; got fields "):
        DedupIndex().add_many([("ok", "fine text"), raw])


# --- the LlamaIndex door: chunker, transform, postprocessor ----------------------------------------
from llama_index.core import Document  # noqa: E402
from llama_index.core.schema import NodeWithScore, TextNode  # noqa: E402

from rag_dedup.llama_index import DedupPostprocessor, DedupTransform, SentenceChunker  # noqa: E402

_CHUNKER = SentenceChunker(chunk_size=64, chunk_overlap=16)


@FUZZ
@given(TEXT)
def test_the_chunker_cuts_anything_into_exact_spans_or_refuses_a_surrogate(text: str) -> None:
    """Every node is an exact span of the text; a text with a lone surrogate is refused, naming it."""
    if has_surrogate(text):
        with pytest.raises(InvalidTextError, match="doc"):
            _CHUNKER.get_nodes_from_documents([Document(text=text, id_="doc")])
        return
    nodes = _CHUNKER.get_nodes_from_documents([Document(text=text, id_="doc")])
    for node in nodes:
        assert text[node.start_char_idx : node.end_char_idx] == node.text


@FUZZ
@given(st.lists(TEXT, min_size=1, max_size=6))
def test_the_transform_stamps_anything_or_refuses_a_surrogate_and_changes_nothing(texts: list[str]) -> None:
    dedup = DedupTransform()
    nodes = [TextNode(text=t, id_=f"n{i}") for i, t in enumerate(texts)]
    bad = [t for t in texts if t.strip() and has_surrogate(t)]
    if bad:
        with pytest.raises(InvalidTextError):
            dedup(nodes)
        assert len(dedup.index) == 0
        return
    out = dedup(nodes)
    assert {n.node_id for n in out} == {n.node_id for n in nodes}


@FUZZ
@given(st.lists(st.tuples(TEXT, st.floats(allow_nan=True, allow_infinity=True)), max_size=8))
def test_the_postprocessor_keeps_input_order_for_anything_or_refuses_a_surrogate(rows: list[tuple[str, float]]) -> None:
    nodes = [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=s) for i, (t, s) in enumerate(rows)]
    if any(has_surrogate(t) and t.strip() for t, _ in rows):
        with pytest.raises(InvalidTextError):
            DedupPostprocessor().postprocess_nodes(nodes)
        return
    out = DedupPostprocessor().postprocess_nodes(nodes)
    positions = [int(n.node.node_id[1:]) for n in out]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
