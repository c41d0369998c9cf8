"""The framework-free collapse (rag_dedup.collapse) on real text of the shipped corpus."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import rag_dedup
from rag_dedup.collapse import Collapser, Fold, Kept, Passage
from rag_dedup.index import DedupIndex
from rag_dedup.shingles import shingle_hashes
from rag_dedup.similarity import jaccard
from tests.adapter_corpus import QUERIES as ALL_QUERIES
from tests.kernels import kernels  # noqa: F401  (a fixture)

CORPUS = Path(__file__).parent / "data" / "corpus"


@pytest.fixture(scope="module")
def paragraphs() -> list[str]:
    """Real paragraphs of the licence texts, long enough to shingle, each once."""
    seen: dict[str, None] = {}
    for path in sorted((CORPUS / "licenses").glob("*.txt")):
        for block in path.read_text(encoding="utf-8").split("\n\n"):
            if len(block.split()) >= 40:
                seen.setdefault(block, None)
    return list(seen)


def test_importing_the_core_collapse_loads_no_framework():
    code = (
        "import sys, rag_dedup.collapse, rag_dedup.similarity; "
        "print(sorted(m for m in ('llama_index', 'langchain_core', 'haystack', 'pyspark') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent)
    assert out.stdout.strip() == "[]"


def test_kept_passages_come_back_in_input_order_with_their_folds(paragraphs):
    a, b = paragraphs[0], paragraphs[1]
    passages = [
        Passage("a", a, 1.0, ref_doc_id="doc-a"),
        Passage("b", b, 3.0),
        Passage("a2", "  " + a.upper() + "\n", 2.0, ref_doc_id="doc-a2"),
        Passage("img", None, 0.5),
    ]
    kept = Collapser().collapse(passages)
    assert [k.position for k in kept] == [0, 1, 3]
    assert kept[0] == Kept(0, (Fold(2, "a2", "doc-a2", 2.0, "exact", 1.0),), 1.0, None)
    assert kept[1].folded == () and kept[2].folded == ()


def test_blank_passages_pass_through_but_take_no_top_n_place(paragraphs):
    passages = [Passage("blank", "   ", 9.0), Passage("a", paragraphs[0], 2.0), Passage("b", paragraphs[1], 1.0)]
    kept = Collapser().collapse(passages, top_n=1)
    assert [k.position for k in kept] == [0, 1]
    with pytest.raises(ValueError, match="top_n"):
        Collapser().collapse(passages, top_n=0)
    with pytest.raises(TypeError, match="top_n"):
        Collapser().collapse(passages, top_n=1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        pytest.param({"threshold": 0.0}, ValueError, "threshold", id="threshold-zero"),
        pytest.param({"threshold": "0.8"}, TypeError, "threshold", id="threshold-type"),
        pytest.param({"ngram": 0}, ValueError, "ngram", id="ngram-zero"),
        pytest.param({"cache_size": -1}, ValueError, "cache_size", id="cache-negative"),
        pytest.param({"index": "not an index"}, TypeError, "index", id="index-type"),
    ],
)
def test_bad_settings_are_refused_with_the_name(kwargs, error, match):
    with pytest.raises(error, match=match):
        Collapser(**kwargs)


def edited(text: str, k: int) -> str:
    """The text with every k-th word replaced: a near-duplicate at a distance that grows as k shrinks."""
    return " ".join("changed" if i % k == k - 1 else w for i, w in enumerate(text.split()))


def test_checked_by_default_no_kept_pair_reaches_the_threshold_and_no_fold_is_below_the_floor(paragraphs):
    """A family stamped as one cluster, and a near-copy stamped as another: the stamps are hints."""
    base = paragraphs[2]
    variants = [base, edited(base, 40), edited(base, 12), edited(base, 6), edited(base, 3)]
    passages = [Passage(f"v{i}", t, 1.0, cluster="fam") for i, t in enumerate(variants)]
    passages.append(Passage("other-cluster-copy", base.upper(), 0.5, cluster="elsewhere"))
    kept = Collapser().collapse(passages)
    texts = {p.key: p.text for p in passages}
    keepers = [passages[k.position] for k in kept]
    assert all(jaccard(a.text, b.text) < 0.8 for i, a in enumerate(keepers) for b in keepers[i + 1 :])
    for k in kept:
        for f in k.folded:
            assert f.similarity == round(jaccard(passages[k.position].text, texts[f.key]), 4) >= 0.7
    assert any(f.key == "other-cluster-copy" and f.reason == "exact" for k in kept for f in k.folded)
    trusted = Collapser(trust_clusters=True).collapse(passages)
    assert [k.position for k in trusted] == [0, 5]  # stamps as proof: the whole family folds, the copy stays


def test_floor_defaults_to_the_index_drift_floor_and_is_bounded_by_the_threshold():
    assert Collapser().floor == pytest.approx(0.7)
    assert Collapser(index=DedupIndex(threshold=0.9, drift_floor=0.6)).floor == 0.6
    with pytest.raises(ValueError, match="floor"):
        Collapser(threshold=0.5, floor=0.6)


def test_a_nan_score_is_read_last_and_keeps_its_place(paragraphs):
    nan = float("nan")
    passages = [Passage("nan", paragraphs[3], nan), Passage("b", paragraphs[4], 1.0), Passage("a", paragraphs[3], 2.0)]
    kept = Collapser().collapse(passages)
    assert [(k.position, [f.key for f in k.folded]) for k in kept] == [(1, []), (2, ["nan"])]


def test_overlapping_windows_of_one_document_are_joined_where_their_texts_agree(paragraphs):
    doc = paragraphs[5] + "\n\n" + paragraphs[6]
    cut = len(paragraphs[5]) // 2
    first, second = doc[: len(paragraphs[5])], doc[cut:]
    passages = [
        Passage("second", second, 2.0, ref_doc_id="d", start=cut, end=len(doc)),
        Passage("first", first, 1.0, ref_doc_id="d", start=0, end=len(first)),
    ]
    (joined,) = Collapser(merge_overlaps=True).collapse(passages)
    assert (joined.position, joined.text, joined.start, joined.end, joined.score) == (0, doc, 0, len(doc), 2.0)
    assert [(f.key, f.reason) for f in joined.folded] == [("first", "overlap")]
    liar = passages[1]._replace(text=paragraphs[7][: len(first)])  # positions that do not describe the text
    assert len(Collapser(merge_overlaps=True).collapse([passages[0], liar])) == 2


def test_jaccard_takes_two_texts_or_two_shingle_sets_and_says_so_otherwise():
    """Regression (issue 19, item 7): rag_dedup.jaccard("a", "b") raised AttributeError on 'searchsorted'."""
    a, b = "the quick brown fox jumps over the lazy dog", "The  quick brown fox jumps over the lazy cat"
    assert 0.0 < rag_dedup.jaccard(a, b) == rag_dedup.jaccard(shingle_hashes(a), shingle_hashes(b)) < 1.0
    assert rag_dedup.jaccard("one two", "one two", ngram=1) == 1.0
    with pytest.raises(TypeError, match="two texts"):
        rag_dedup.jaccard(a, shingle_hashes(b))  # type: ignore[arg-type]


# Six of the real queries (tests/data/queries.json): the licence notices, the Apache, MIT, BSD, GPL and LGPL ones.
QUERIES = tuple(ALL_QUERIES[i] for i in (0, 2, 3, 4, 6, 8))


def _top30s() -> list[list[Passage]]:
    """For each query, the 30 overlapping windows of the shipped corpus sharing most words with it (best
    first), stamped with the clusters a DedupIndex gives them: real top 30s full of licence copies."""
    from tests.corpus import chunks

    windows = chunks(words=120, stride=60)
    index = DedupIndex()
    index.add_many(windows)
    clusters = {m.key: m.cluster_id for m in index.matches([k for k, _ in windows])}
    out = []
    for query in QUERIES:
        words = set(query.lower().split())
        scored = sorted(windows, key=lambda kt: (-len(words & set(kt[1].lower().split())), kt[0]))[:30]
        out.append([Passage(k, t, float(30 - i), clusters[k]) for i, (k, t) in enumerate(scored)])
    return out


def test_the_small_matrix_gives_the_same_similarities_and_decisions_as_the_general_path(monkeypatch):
    """TextSimilarity.matrix's path for up to 64 texts (_small_matrix) against the general one
    (_pair_counts, then _jaccard): the same floats, so the same Kept and Fold decisions, on real top 30s."""
    import numpy as np

    from rag_dedup import similarity

    def general(values, counts):
        return similarity._jaccard(*similarity._pair_counts(values, counts))

    small = similarity._small_matrix
    tops = _top30s()
    fast = [Collapser().collapse(p) for p in tops]
    fast_matrices = [similarity.TextSimilarity().matrix([q.text for q in p]) for p in tops]
    monkeypatch.setattr(similarity, "_small_matrix", general)
    slow = [Collapser().collapse(p) for p in tops]
    assert fast == slow
    assert sum(len(k.folded) for kept in fast for k in kept) > 0  # the top 30s hold duplicates
    for p, m in zip(tops, fast_matrices):
        assert np.array_equal(m, similarity.TextSimilarity().matrix([q.text for q in p]))
    # And on random small sets with repeats, shared values and empty sets.
    rng = np.random.default_rng(11)
    for _ in range(500):
        n = int(rng.integers(2, 65))
        counts = rng.integers(0, 6, n).astype(np.int64)
        if not counts.sum():
            continue
        hashes = rng.integers(0, int(rng.integers(1, 30)), int(counts.sum())).astype(np.uint64)
        hashes *= np.uint64(0x9E3779B97F4A7C15)
        assert np.array_equal(small(*similarity._set_values(hashes, counts)), general(hashes, counts))
    # And _set_values itself: each set's sorted unique hashes, low 6 bits cleared, for more than 64 sets too.
    for n in (3, 64, 65, 150):
        counts = rng.integers(0, 8, n).astype(np.int64)
        hashes = rng.integers(0, 2**63, int(counts.sum()), dtype=np.int64).astype(np.uint64)
        hashes[1::3] = hashes[::3][: len(hashes[1::3])]  # repeats, within and across sets
        values, sizes = similarity._set_values(hashes, counts)
        ends = np.cumsum(counts)
        expected = [np.unique(hashes[e - c : e] & ~np.uint64(63)) for e, c in zip(ends, counts)]
        assert sizes.tolist() == [len(x) for x in expected]
        assert np.array_equal(values, np.concatenate(expected))


# --- issue 18 item 1: every door that takes a collapse parameter checks it by rag_dedup.settings' rule ----


def _doors(**kwargs):
    """Each way a user hands collapse parameters to rag-dedup: the core, the three adapters' query-time
    collapsers and retrievers (those that take the parameter), and an assignment where one is allowed."""
    from llama_index.core.retrievers import BaseRetriever

    from rag_dedup.llama_index import DedupPostprocessor, DistinctRetriever

    class Empty(BaseRetriever):
        def _retrieve(self, query_bundle):
            return []

    if "top_n" in kwargs:  # the core takes it per call
        doors = {"Collapser.collapse": lambda: Collapser().collapse([Passage("a", "text")], **kwargs)}
    else:
        doors = {"Collapser": lambda: Collapser(**kwargs)}
    doors["DedupPostprocessor"] = lambda: DedupPostprocessor(**kwargs)
    if len(kwargs) == 1:
        ((name, value),) = kwargs.items()
        doors["DedupPostprocessor assignment"] = lambda: setattr(DedupPostprocessor(), name, value)
    if set(kwargs) <= {"threshold"}:
        doors["llama_index DistinctRetriever"] = lambda: DistinctRetriever(Empty(), top_k=3, **kwargs)
    if set(kwargs) <= {"threshold", "top_n"}:
        lc = pytest.importorskip("rag_dedup.langchain")
        doors["langchain DedupCompressor"] = lambda: lc.DedupCompressor(**kwargs)
        if "top_n" not in kwargs:
            from langchain_community.retrievers import BM25Retriever
            from langchain_core.documents import Document

            bm25 = BM25Retriever.from_documents([Document("a text")])
            doors["langchain DistinctRetriever"] = lambda: lc.DistinctRetriever(retriever=bm25, **kwargs)
        hs = pytest.importorskip("rag_dedup.haystack")
        doors["haystack DuplicateCollapser"] = lambda: hs.DuplicateCollapser(
            **{("top_k" if k == "top_n" else k): v for k, v in kwargs.items()}
        )
    return doors


@pytest.mark.parametrize(
    ("kwargs", "rule"),
    [
        pytest.param({"threshold": 1.5}, lambda s: s.check_threshold(1.5), id="threshold-above-one"),
        pytest.param({"threshold": 0}, lambda s: s.check_threshold(0), id="threshold-zero"),
        pytest.param({"threshold": "0.8"}, lambda s: s.check_threshold("0.8"), id="threshold-str"),
        pytest.param({"top_n": 0}, lambda s: s.check_top(0, "top_n", optional=True), id="top-n-zero"),
        pytest.param({"top_n": 2.5}, lambda s: s.check_top(2.5, "top_n", optional=True), id="top-n-float"),
        pytest.param({"floor": 0.9}, lambda s: s.check_drift_floor(0.9, 0.8, "floor"), id="floor-above-threshold"),
        pytest.param({"floor": "0.5"}, lambda s: s.check_drift_floor("0.5", 0.8, "floor"), id="floor-str"),
        pytest.param({"ngram": 65}, lambda s: s.check_ngram(65), id="ngram-above-max"),
        pytest.param({"ngram": 0}, lambda s: s.check_ngram(0), id="ngram-zero"),
        pytest.param({"cache_size": -1}, lambda s: s.check_cache_size(-1), id="cache-size-negative"),
        pytest.param({"cache_size": True}, lambda s: s.check_cache_size(True), id="cache-size-bool"),
    ],
)
def test_every_door_refuses_a_collapse_parameter_with_the_settings_message(kwargs, rule):
    """The rule's own error (type and message) from every door: no door keeps a bound of its own."""
    from rag_dedup import settings

    with pytest.raises((TypeError, ValueError)) as expected:
        rule(settings)
    message = str(expected.value)
    assert message.startswith(next(iter(kwargs)))  # the message names the parameter
    for door, call in _doors(**kwargs).items():
        if door == "haystack DuplicateCollapser" and "top_n" in kwargs:
            message_here = message.replace("top_n", "top_k")  # Haystack's name for it
        else:
            message_here = message
        with pytest.raises(type(expected.value), match=re.escape(message_here)):  # a TypeError is never wrapped
            call()


def test_a_threshold_assigned_below_the_floor_is_refused_by_the_floor_rule():
    from rag_dedup import settings
    from rag_dedup.llama_index import DedupPostprocessor

    pp = DedupPostprocessor(floor=0.6)
    with pytest.raises(ValueError) as expected:
        settings.check_drift_floor(0.6, 0.5, "floor")
    with pytest.raises(ValueError, match=re.escape(str(expected.value))):
        pp.threshold = 0.5
    assert pp.threshold == 0.8  # the refused assignment changed nothing


def test_collapse_columns_decides_as_collapse_on_real_top_30s():
    """The adapters' column path against the Passage path: the same Kept and Fold, value for value."""
    tops = _top30s()
    for trust in (False, True):
        collapser = Collapser(trust_clusters=trust)
        for passages in tops:
            sourced = [p._replace(ref_doc_id=f"doc-{p.key}") for p in passages]
            columns = [list(c) for c in zip(*[(p.key, p.text, p.score, p.cluster, p.ref_doc_id) for p in sourced])]
            keys, texts, scores, clusters, sources = columns
            assert collapser.collapse_columns(keys, texts, scores, clusters, 10, sources) == collapser.collapse(sourced, 10)
            assert collapser.collapse_columns(keys, texts, scores, clusters) == Collapser(trust_clusters=trust).collapse(
                [p._replace(ref_doc_id=None) for p in passages]
            )
    assert sum(len(k.folded) for p in tops for k in Collapser().collapse(p)) > 0
    with pytest.raises(ValueError, match="one entry per passage"):
        Collapser().collapse_columns(["a", "b"], ["x"], [1.0], [None])
    with pytest.raises(ValueError, match="merge_overlaps"):
        Collapser(merge_overlaps=True).collapse_columns(["a"], ["x"], [1.0], [None])


def test_a_lone_surrogate_is_refused_naming_the_passage_whatever_was_remembered(paragraphs, kernels):
    """The surrogate check skips only texts the shingle cache remembers (shingled, so valid Unicode)."""
    from rag_dedup.errors import InvalidTextError

    collapser = Collapser()
    valid = [Passage("a", paragraphs[0] + " café", 2.0), Passage("b", paragraphs[1], 1.0)]
    collapser.collapse(valid)  # remembered now
    assert paragraphs[0] + " café" in collapser.similarity.remembered(collapser.ngram)
    bad = Passage("bad", paragraphs[2] + " caf\udce9", 0.5)
    for trust in (False, True):
        with pytest.raises(InvalidTextError, match="the text of passage 'bad'"):
            Collapser(trust_clusters=trust, similarity=collapser.similarity).collapse([*valid, bad])


def test_decide_columns_is_collapse_columns_in_column_form_on_real_top_30s(kernels):
    """The adapters' column form (kept positions, unrounded raw folds, clusters) carries the decision of
    collapse_columns exactly: the same positions, folds, reasons, rounded similarities and clusters, with
    passages without text or with blank text among them, and with a top_n cut."""
    tops = _top30s()
    folded = 0
    for trust in (False, True):
        collapser = Collapser(trust_clusters=trust)
        for passages in tops:
            keys = [p.key for p in passages]
            texts: list[str | None] = [p.text for p in passages]
            texts[3], texts[7] = None, "  "  # an image and a blank passage
            scores = [p.score for p in passages]
            stamps = [p.cluster for p in passages]
            sources = [f"doc-{k}" for k in keys]
            for top_n in (None, 10):
                kept, folds, current = collapser.decide_columns(keys, texts, scores, stamps, top_n, sources)
                expected = collapser.collapse_columns(keys, texts, scores, stamps, top_n, sources)
                assert kept == [k.position for k in expected]
                assert all(folds.values()) and (top_n is not None or set(folds) <= set(kept))
                for k in expected:
                    assert current[k.position] == k.cluster
                    raw = folds.get(k.position, [])
                    assert [(f.position, f.reason, f.similarity) for f in k.folded] == [
                        (i, reason, None if s is None else round(s, 4)) for i, reason, s in raw
                    ]
                    assert [(f.key, f.ref_doc_id, f.score) for f in k.folded] == [(keys[i], sources[i], scores[i]) for i, _, _ in raw]
                    folded += len(raw)
    assert folded > 0
    assert Collapser().decide_columns([], [], [], []) == ([], {}, [])
    with pytest.raises(ValueError, match="one entry per passage"):
        Collapser().decide_columns(["a", "b"], ["x"], [1.0], [None])


def test_rounded_is_round_to_4_places_before_and_after_it_is_remembered():
    """collapse.rounded (round(s, 4), remembered) gives Python's round(s, 4) for every ratio of small
    integers (the similarities a collapse reports), on a miss and on a hit."""
    from rag_dedup.collapse import rounded

    values = [i / j for j in range(1, 400) for i in range(0, j + 1)]
    assert [rounded(v) for v in values] == [round(v, 4) for v in values]
    assert [rounded(v) for v in values] == [round(v, 4) for v in values]  # now remembered
