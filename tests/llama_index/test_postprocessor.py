"""DedupPostprocessor on real chunks of the shipped corpus, alone and inside real LlamaIndex query engines."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import Document, SummaryIndex
from llama_index.core.llms import MockLLM
from llama_index.core.postprocessor import LongContextReorder
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import RecursiveRetriever
from llama_index.core.schema import (
    ImageNode,
    IndexNode,
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    TextNode,
)
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.retrievers.bm25 import BM25Retriever

from rag_dedup.llama_index.chunking import SentenceChunker
from rag_dedup.index import DedupIndex
from rag_dedup.llama_index.metadata import DEDUP_CLUSTER, DEDUP_COLLAPSED, DEDUP_DUPLICATE_OF
from rag_dedup.normalize import canonical, gram_text, shingle_tokens
from rag_dedup.llama_index.postprocessor import DedupPostprocessor
from rag_dedup.llama_index.retriever import DistinctRetriever
from rag_dedup.shingles import GRAM, shingle_hashes, shingle_stream, short_measure
from rag_dedup.similarity import TextSimilarity, jaccard, jaccard_matrix
from rag_dedup.llama_index.transform import DedupTransform
from tests.adapter_corpus import QUERIES as ALL_QUERIES
from tests.kernels import kernels  # noqa: F401  (a fixture)

CORPUS = Path(__file__).parents[1] / "data" / "corpus"


def load_documents() -> list[Document]:
    return [
        Document(text=p.read_text(encoding="utf-8", errors="replace"), id_=p.relative_to(CORPUS).as_posix())
        for p in sorted(CORPUS.rglob("*.txt"))
    ]


@pytest.fixture(scope="module")
def documents() -> list[Document]:
    return load_documents()


@pytest.fixture(scope="module")
def chunks(documents: list[Document]) -> list[TextNode]:
    return SentenceChunker().get_nodes_from_documents(documents)  # type: ignore[return-value]


@pytest.fixture(scope="module")
def distinct_texts(chunks: list[TextNode]) -> list[str]:
    """Chunk texts of the corpus that are pairwise below the threshold, each a near-duplicate of its
    :func:`edited` copy (a pool to plant copies from): passages above the short-text regime, and the
    edit checked (hypothesis once found a short licence header only J = 0.73 from its edit)."""
    pool: list[str] = []
    sets: list[np.ndarray] = []
    for node in chunks:
        s = shingle_hashes(node.text)
        passage = short_measure(len(shingle_tokens(node.text))) == "shingles"
        if passage and len(s) > 20 and jaccard(node.text, edited(node.text)) >= 0.8 and all(jaccard(s, t) < 0.5 for t in sets):
            pool.append(node.text)
            sets.append(s)
        if len(pool) == 40:
            break
    return pool


def scored(texts: list[str], scores: list[float] | None = None, prefix: str = "n") -> list[NodeWithScore]:
    scores = scores if scores is not None else [float(len(texts) - i) for i in range(len(texts))]
    return [
        NodeWithScore(node=TextNode(text=t, id_=f"{prefix}{i}"), score=s) for i, (t, s) in enumerate(zip(texts, scores))
    ]


def edited(text: str) -> str:
    """A near-duplicate: the same passage with its last word replaced."""
    words = text.split(" ")
    return " ".join([*words[:-1], "changed"])


def max_pairwise_jaccard(nodes: list[NodeWithScore]) -> float:
    sets = [shingle_hashes(n.node.get_content()) for n in nodes]
    return max((jaccard(a, b) for a, b in itertools.combinations(sets, 2)), default=0.0)


# --- the contract, as properties over planted duplicates of real text --------------------------


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_kept_nodes_are_distinct_in_input_order_and_every_input_is_accounted_for(data, distinct_texts):
    picks = data.draw(st.lists(st.integers(0, len(distinct_texts) - 1), min_size=1, max_size=30))
    kinds = data.draw(st.lists(st.sampled_from(["same", "edited"]), min_size=len(picks), max_size=len(picks)))
    texts = [distinct_texts[p] if k == "same" else edited(distinct_texts[p]) for p, k in zip(picks, kinds)]
    scores = data.draw(st.lists(st.floats(0, 100), min_size=len(texts), max_size=len(texts)))
    nodes = scored(texts, scores)
    ids_in = [n.node_id for n in nodes]

    kept = DedupPostprocessor().postprocess_nodes(nodes)

    assert [ids_in.index(n.node_id) for n in kept] == sorted(ids_in.index(n.node_id) for n in kept)
    assert max_pairwise_jaccard(kept) < 0.8
    # Exactly the distinct planted passages survive: one per source text picked, its first occurrence.
    assert [n.node_id for n in kept] == [f"n{picks.index(p)}" for p in dict.fromkeys(picks)]
    folded = [c["node_id"] for n in kept for c in n.node.metadata.get(DEDUP_COLLAPSED, [])]
    assert sorted([n.node_id for n in kept] + folded) == sorted(ids_in)
    score_of = {n.node_id: n.score for n in nodes}
    assert all(n.score == score_of[n.node_id] for n in kept)
    assert all(DEDUP_COLLAPSED not in n.node.metadata for n in nodes)  # the caller's nodes are not written to


def test_remembered_shingles_never_change_the_result(chunks):
    nodes = [
        NodeWithScore(node=TextNode(text=n.text, id_=f"c{i}"), score=float(i % 7)) for i, n in enumerate(chunks[:120])
    ]

    def run(pp: DedupPostprocessor) -> list[tuple[str, list[str]]]:
        kept = pp.postprocess_nodes([n.model_copy(deep=True) for n in nodes])
        return [(n.node_id, [c["node_id"] for c in n.node.metadata.get(DEDUP_COLLAPSED, [])]) for n in kept]

    uncached = run(DedupPostprocessor(cache_size=0))
    cached = DedupPostprocessor(cache_size=50)
    assert run(cached) == uncached  # cold
    assert run(cached) == uncached  # partly warm, with evictions
    cached.ngram = 3  # a changed setting must not reuse shingles made with the old one
    assert run(cached) == run(DedupPostprocessor(cache_size=0, ngram=3))
    assert len(cached._similarity) <= 50  # bounded memory


def test_empty_input_returns_empty_sync_and_async():
    pp = DedupPostprocessor()
    assert pp.postprocess_nodes([]) == []
    assert asyncio.run(pp.apostprocess_nodes([])) == []


def test_input_order_is_kept_whatever_the_scores(distinct_texts):
    """Regression (issue 16, item 10): re-sorting by score undid LongContextReorder's order."""
    nodes = scored(distinct_texts[:5], [1.0, 5.0, 3.0, 4.0, 2.0])
    kept = DedupPostprocessor().postprocess_nodes(nodes)
    assert [n.score for n in kept] == [1.0, 5.0, 3.0, 4.0, 2.0]


def test_folded_nodes_are_cited_with_document_score_reason_and_similarity(distinct_texts):
    base = distinct_texts[0]
    nodes = [
        NodeWithScore(node=TextNode(text=base, id_="a"), score=3.0),
        NodeWithScore(node=TextNode(text="  " + base.upper() + "\n", id_="b"), score=2.0),
        NodeWithScore(node=TextNode(text=edited(base), id_="c"), score=1.0),
    ]
    kept = DedupPostprocessor().postprocess_nodes(nodes)
    assert [n.node_id for n in kept] == ["a"]
    entries = {c["node_id"]: c for c in kept[0].node.metadata[DEDUP_COLLAPSED]}
    assert entries["b"]["reason"] == "exact" and entries["b"]["similarity"] == 1.0 and entries["b"]["score"] == 2.0
    assert entries["c"]["reason"] == "near" and 0.8 <= entries["c"]["similarity"] < 1.0
    assert set(entries["c"]) == {"node_id", "ref_doc_id", "score", "reason", "similarity"}


@pytest.mark.parametrize("show", ["best", "representative"])
def test_a_node_retrieved_twice_is_one_node_not_a_copy_of_itself(distinct_texts, show):
    """Regression: the same node id twice (two retrievers of a fusion found it) was listed as folded into
    itself; LlamaIndex takes one id for one node."""
    a = TextNode(text=distinct_texts[0], id_="a")
    b = TextNode(text=distinct_texts[0].upper(), id_="b")
    nodes = [NodeWithScore(node=a, score=3.0), NodeWithScore(node=a, score=2.0), NodeWithScore(node=b, score=1.0)]
    (kept,) = DedupPostprocessor(show=show).postprocess_nodes(nodes)
    assert kept.node_id == "a" and kept.score == 3.0
    assert [c["node_id"] for c in kept.node.metadata[DEDUP_COLLAPSED]] == ["b"]


def test_collapsed_list_is_hidden_from_llm_and_embedding_text(distinct_texts):
    nodes = scored([distinct_texts[0], distinct_texts[0]])
    (kept,) = DedupPostprocessor().postprocess_nodes(nodes)
    assert kept.node.metadata[DEDUP_COLLAPSED]
    for mode in (MetadataMode.LLM, MetadataMode.EMBED):
        assert "dedup" not in kept.node.get_content(metadata_mode=mode)


def test_ref_doc_ids_of_folded_nodes_are_kept_for_citations(chunks):
    # Byte-identical copyright files in the corpus give chunks with one text in different documents.
    by_text: dict[str, list[TextNode]] = {}
    for node in chunks:
        by_text.setdefault(node.text, []).append(node)
    copies = next(ns for ns in by_text.values() if len({n.ref_doc_id for n in ns}) >= 2)
    nodes = [NodeWithScore(node=n, score=1.0) for n in copies]
    (kept,) = DedupPostprocessor().postprocess_nodes(nodes)
    cited = {kept.node.ref_doc_id} | {c["ref_doc_id"] for c in kept.node.metadata[DEDUP_COLLAPSED]}
    assert cited == {n.ref_doc_id for n in copies}


# --- clusters: stamps, the index, and text ------------------------------------------------------


def test_trusted_stamped_nodes_collapse_to_one_per_cluster(documents):
    nodes = DedupTransform()(SentenceChunker().get_nodes_from_documents(documents[:30]))
    kept = DedupPostprocessor(trust_clusters=True).postprocess_nodes([NodeWithScore(node=n, score=1.0) for n in nodes])
    clusters = [n.node.metadata[DEDUP_CLUSTER] for n in kept]
    assert len(clusters) == len(set(clusters)) == len({n.metadata[DEDUP_CLUSTER] for n in nodes})


def test_index_clusters_override_stale_stamps(distinct_texts):
    """Regression: stamps written at ingest go stale when a later, longer copy becomes the representative;
    trusting them would return both copies."""
    index = DedupIndex()
    transform = DedupTransform(index=index)
    short = TextNode(text=distinct_texts[0], id_="short")
    longer = TextNode(text=distinct_texts[0] + " Copyright notice follows.", id_="longer")
    transform([short])  # stamped as its own cluster
    transform([longer])  # longer wins the cluster now; short's stamp still names "short"
    assert short.metadata[DEDUP_CLUSTER] == "short" and longer.metadata[DEDUP_CLUSTER] == "longer"
    nodes = [NodeWithScore(node=short, score=2.0), NodeWithScore(node=longer, score=1.0)]

    stale = DedupPostprocessor(trust_clusters=True).postprocess_nodes(nodes)
    current = DedupPostprocessor(index=index, trust_clusters=True).postprocess_nodes(nodes)

    assert len(stale) == 2
    assert [n.node_id for n in current] == ["short"]
    assert current[0].node.metadata[DEDUP_COLLAPSED][0]["reason"] == "cluster"


def test_unstamped_copy_of_a_stamped_node_is_folded_by_text(distinct_texts):
    stamped = TextNode(text=distinct_texts[1], id_="s", metadata={DEDUP_CLUSTER: "s", DEDUP_DUPLICATE_OF: None})
    plain = TextNode(text=distinct_texts[1], id_="p")
    other = TextNode(text=distinct_texts[2], id_="o")
    nodes = [NodeWithScore(node=n, score=s) for n, s in [(stamped, 3.0), (plain, 2.0), (other, 1.0)]]
    kept = DedupPostprocessor().postprocess_nodes(nodes)
    assert [n.node_id for n in kept] == ["s", "o"]


@pytest.mark.parametrize(
    ("trust", "expected"),
    [pytest.param(True, ["x", "y"], id="trust-clusters"), pytest.param(False, ["x"], id="compare-texts")],
)
def test_trust_clusters_decides_whether_clustered_texts_are_compared(distinct_texts, trust, expected):
    x = TextNode(text=distinct_texts[3], id_="x", metadata={DEDUP_CLUSTER: "x"})
    y = TextNode(text=distinct_texts[3], id_="y", metadata={DEDUP_CLUSTER: "y"})
    kept = DedupPostprocessor(trust_clusters=trust).postprocess_nodes(
        [NodeWithScore(node=x, score=2.0), NodeWithScore(node=y, score=1.0)]
    )
    assert [n.node_id for n in kept] == expected


# --- nodes without text, top_n, which text is shown, overlapping windows ------------------------


def test_nodes_without_text_pass_through_untouched_in_place(distinct_texts):
    image = ImageNode(image_url="file:///figure.png", text="Figure 1", id_="img")
    captioned_twin = ImageNode(image_url="file:///other.png", text="Figure 1", id_="img2")
    empty = TextNode(text="   ", id_="empty")
    nodes = [
        NodeWithScore(node=TextNode(text=distinct_texts[0], id_="t0"), score=5.0),
        NodeWithScore(node=image, score=4.0),
        NodeWithScore(node=TextNode(text=distinct_texts[0], id_="t1"), score=3.0),
        NodeWithScore(node=captioned_twin, score=2.5),
        NodeWithScore(node=empty, score=2.0),
    ]
    kept = DedupPostprocessor().postprocess_nodes(nodes)
    assert [n.node_id for n in kept] == ["t0", "img", "img2", "empty"]
    assert kept[1] is nodes[1] and kept[2] is nodes[3] and kept[3] is nodes[4]
    assert image.metadata == {} and empty.metadata == {}


def test_top_n_keeps_the_best_distinct_nodes(distinct_texts):
    texts = [distinct_texts[i // 2] for i in range(12)]  # six passages, each twice
    kept = DedupPostprocessor(top_n=4).postprocess_nodes(scored(texts))
    assert [n.node_id for n in kept] == ["n0", "n2", "n4", "n6"]


def test_show_representative_uses_the_retrieved_representative_with_the_best_score(distinct_texts):
    index = DedupIndex()
    rep_text = distinct_texts[4] + " And a longer tail makes this copy the representative."
    nodes = DedupTransform(index=index)(
        [TextNode(text=distinct_texts[4], id_="copy"), TextNode(text=rep_text, id_="rep")]
    )
    assert index.resolve("copy") == "rep"
    inputs = [NodeWithScore(node=nodes[0], score=9.0), NodeWithScore(node=nodes[1], score=1.0)]

    best = DedupPostprocessor(index=index).postprocess_nodes([n.model_copy(deep=True) for n in inputs])
    shown = DedupPostprocessor(index=index, show="representative").postprocess_nodes(inputs)

    assert (best[0].node_id, best[0].score) == ("copy", 9.0)
    assert (shown[0].node_id, shown[0].score, shown[0].node.text) == ("rep", 9.0, rep_text)
    assert [c["node_id"] for c in shown[0].node.metadata[DEDUP_COLLAPSED]] == ["copy"]


def test_show_representative_reads_an_unretrieved_representative_from_the_docstore(distinct_texts):
    index = DedupIndex()
    rep = TextNode(text=distinct_texts[5] + " With a longer tail.", id_="rep")
    copy = TextNode(text=distinct_texts[5], id_="copy")
    DedupTransform(index=index)([copy, rep])
    docstore = SimpleDocumentStore()
    docstore.add_documents([rep, copy])
    pp = DedupPostprocessor(index=index, show="representative", docstore=docstore)
    (kept,) = pp.postprocess_nodes([NodeWithScore(node=copy, score=2.0)])
    assert (kept.node_id, kept.node.text, kept.score) == ("rep", rep.text, 2.0)
    without_docstore = DedupPostprocessor(index=index, show="representative")
    assert without_docstore.postprocess_nodes([NodeWithScore(node=copy, score=2.0)])[0].node_id == "copy"


def test_merge_overlaps_joins_neighbour_windows_into_the_document_text(documents):
    doc = next(d for d in documents if d.id_ == "licenses/GPL-3.txt")
    windows = SentenceChunker().get_nodes_from_documents([doc])
    at = next(i for i in range(len(windows) - 1) if windows[i].end_char_idx > windows[i + 1].start_char_idx)
    first, second = windows[at], windows[at + 1]  # neighbours that share the chunker's overlap
    third = next(w for w in windows[at + 2 :] if w.start_char_idx >= second.end_char_idx)
    nodes = [NodeWithScore(node=n, score=s) for n, s in [(second, 3.0), (third, 2.0), (first, 1.0)]]

    plain = DedupPostprocessor().postprocess_nodes([n.model_copy(deep=True) for n in nodes])
    merged = DedupPostprocessor(merge_overlaps=True).postprocess_nodes(nodes)

    assert len(plain) == 3
    assert [n.node_id for n in merged] == [second.node_id, third.node_id]
    joined = merged[0].node
    assert (joined.start_char_idx, joined.end_char_idx) == (first.start_char_idx, second.end_char_idx)
    assert joined.text == doc.text[first.start_char_idx : second.end_char_idx]
    assert merged[0].score == 3.0
    assert [(c["node_id"], c["reason"]) for c in joined.metadata[DEDUP_COLLAPSED]] == [(first.node_id, "overlap")]
    assert second.text == doc.text[second.start_char_idx : second.end_char_idx]  # the input is not rewritten


def test_merge_overlaps_refuses_windows_whose_positions_do_not_match_their_text(distinct_texts):
    """Regression: splicing by positions that do not describe the text would invent a passage."""
    source = {NodeRelationship.SOURCE: Document(text="unused", id_="d").as_related_node_info()}
    a = TextNode(text=distinct_texts[6][:100], id_="a", start_char_idx=0, end_char_idx=100, relationships=source)
    b = TextNode(text=distinct_texts[12][:100], id_="b", start_char_idx=50, end_char_idx=150, relationships=source)
    kept = DedupPostprocessor(merge_overlaps=True).postprocess_nodes(
        [NodeWithScore(node=a, score=2.0), NodeWithScore(node=b, score=1.0)]
    )
    assert [n.node.text for n in kept] == [a.text, b.text]


# --- the fast text path equals the reference ----------------------------------------------------

WHITESPACE = st.sampled_from([" ", "  ", "\t", "\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\n\n\n", " \n "])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 60), max_size=40), min_size=1, max_size=8))
def test_jaccard_matrix_equals_pairwise_jaccard(raw_sets):
    sets = [np.unique(np.array(s, dtype=np.uint32)) for s in raw_sets]
    m = jaccard_matrix(sets)
    for i, j in itertools.product(range(len(sets)), repeat=2):
        assert m[i, j] == pytest.approx(jaccard(sets[i], sets[j]), abs=1e-12)


def many_sets(kind: str) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    if kind == "short-runs":  # 100 sets over a wide range: values shared by few sets
        return [np.unique(rng.integers(0, 5000, 40).astype(np.uint32)) for _ in range(100)]
    shared = rng.choice(1 << 30, 5000 if kind == "wide-block" else 300, replace=False).astype(np.uint32)
    own = [rng.integers(0, 1 << 30, 5).astype(np.uint32) for _ in range(70)]  # a few values of its own
    sets = [np.unique(np.concatenate((shared[rng.random(len(shared)) < 0.9], values))) for values in own]
    return [*sets, np.empty(0, dtype=np.uint32)]


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("short-runs", id="pairs-counted-one-by-one"),
        pytest.param("long-runs", id="pairs-counted-by-matrix-product"),
        pytest.param("wide-block", id="matrix-product-in-column-blocks"),
    ],
)
def test_jaccard_matrix_of_more_than_64_sets_equals_pairwise_jaccard(kind):
    sets = many_sets(kind)
    m = jaccard_matrix(sets)
    for i in range(0, len(sets), 7):
        assert m[i].tolist() == [jaccard(sets[i], b) if i != j else float(len(b) > 0) for j, b in enumerate(sets)]


def test_jaccard_matrix_tells_apart_values_that_share_their_low_32_bits():
    """Regression guard: the sets are sorted as 32-bit values shifted into 64-bit keys; wider values
    (uint64 hashes, negative ints) must not be cut to their low 32 bits and merged."""
    a = np.array([1, 2**40, 2**40 + 1], dtype=np.uint64)
    b = np.array([1 + 2**40], dtype=np.uint64)
    c = np.array([-(2**33) + 1, 1], dtype=np.int64)
    m = jaccard_matrix([a, b, c])
    assert m[0].tolist() == [1.0, 1 / 3, 1 / 4]
    assert m[1, 2] == 0.0


def test_jaccard_matrix_on_real_chunks_is_symmetric_with_unit_diagonal(chunks):
    sets = [shingle_hashes(n.text) for n in chunks[:50]]
    m = jaccard_matrix(sets)
    assert np.array_equal(m, m.T)
    assert np.all(np.diag(m) == 1.0)


# --- the batch text path equals a pure-Python reference ---------------------------------------


def reference_shingles(text: str, ngram: int = 5) -> set[tuple[str, ...]]:
    """The definition, token tuples and all (see reference_shingle_list)."""
    return set(reference_shingle_list(text, ngram))


def reference_shingle_list(text: str, ngram: int = 5) -> list[tuple[str, ...]]:
    """Tokens of shingle_tokens(text); in the short-text regime (short_measure), character GRAM-grams
    of their gram_text or the tokens themselves; fewer than ngram tokens make one shingle of all of
    them; no tokens, no shingles."""
    words = shingle_tokens(text)
    measure = short_measure(len(words))
    if measure == "tokens":
        return [("token", word) for word in words]
    if measure == "chars":
        chars = gram_text(" ".join(words))
        return [("gram", chars[i : i + GRAM]) for i in range(len(chars) - GRAM + 1)]
    if len(words) < ngram:
        return [tuple(words)] if words else []
    return [tuple(words[i : i + ngram]) for i in range(len(words) - ngram + 1)]


def reference_jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def reference_collapse(nodes: list[NodeWithScore], threshold: float = 0.8) -> list[tuple[str, list[tuple]]]:
    """The greedy pass written plainly: in input order, fold a node into the first kept node whose text is
    within the threshold; (kept id, [(folded id, reason, similarity), ...]) in input order."""
    kept: list[tuple[NodeWithScore, set, list[tuple]]] = []
    for nws in nodes:
        mine = reference_shingles(nws.node.get_content())
        for other, theirs, folded in kept:
            s = reference_jaccard(mine, theirs)
            if s >= threshold:
                folded.append((nws.node_id, "exact" if s >= 1.0 else "near", round(s, 4)))
                break
        else:
            kept.append((nws, mine, []))
    return [(k.node_id, folded) for k, _, folded in kept]


def planted_batch(chunks: list[TextNode], start: int, size: int) -> list[str]:
    """`size` consecutive real chunks, and planted copies of the first: exact copies, copies that differ in
    case and spacing only, edited near-copies, and short, empty and odd texts (NUL bytes, long words,
    non-ASCII), so that every rule of the text comparison is exercised on real text."""
    texts = [n.text for n in chunks[start : start + size]]
    base = chunks[start].text
    return [
        *texts,
        base,  # an exact copy
        "  " + base.upper().replace(" ", "\t", 3) + "\r\n",  # the same words, other case and spacing
        edited(base),  # one word changed
        " ".join(base.split()[: len(base.split()) // 2]),  # half of it
        "MIT License",  # short texts: one shingle of all their words
        "mit   LICENSE",
        "Copyright",
        "\u200b",  # no words at all after normalisation
        "a\x00b c\x00 d e f g",  # NUL bytes inside and at the end of words
        "a\x00b c d e f g",
        "https://www.apache.org/licenses/LICENSE-2.0 https://www.apache.org/licenses/LICENSE-2.1 x y z",
        "https://www.apache.org/licenses/LICENSE-2.0 https://www.apache.org/licenses/LICENSE-2.0 x y z",
        "Ünïcode\u00a0Straße café naïve résumé façade",
        "unicode straße café naïve résumé façade",
    ]


@pytest.mark.parametrize("start", [pytest.param(s, id=f"chunks-{s}") for s in (0, 37, 150, 400, 777)])
def test_batch_similarity_equals_pure_python_jaccard_on_real_chunks(chunks, start):
    texts = planted_batch(chunks, start, 30)
    sets = [reference_shingles(t) for t in texts]
    expected = np.array([[reference_jaccard(a, b) for b in sets] for a in sets])
    np.fill_diagonal(expected, [1.0 if s else 0.0 for s in sets])
    for cache_size in (0, 4096):
        sim = TextSimilarity()
        got = sim.matrix(texts, 5, cache_size)
        assert np.array_equal(got, expected)
        assert np.array_equal(sim.matrix(texts[::-1], 5, cache_size), expected[::-1, ::-1])  # partly remembered


def test_batch_similarity_with_more_than_64_texts_equals_pure_python_jaccard(chunks):
    """More than 64 texts take the other counting paths (product or pair enumeration)."""
    texts = [n.text for n in chunks[200:300]] + [n.text for n in chunks[200:220]]
    sets = [reference_shingles(t) for t in texts]
    expected = np.array([[reference_jaccard(a, b) for b in sets] for a in sets])
    np.fill_diagonal(expected, [1.0 if s else 0.0 for s in sets])
    assert np.array_equal(TextSimilarity().matrix(texts, 5, 0), expected)


@pytest.mark.parametrize(
    ("start", "size"),
    [pytest.param(s, n, id=f"{n}-chunks-from-{s}") for s, n in ((0, 30), (150, 30), (777, 30), (300, 60))],
)
def test_collapse_equals_the_plain_greedy_pass_on_real_chunks(chunks, start, size, kernels):
    texts = planted_batch(chunks, start, size)
    scores = [float((7 * i) % 11) for i in range(len(texts))]  # ties included: the input order breaks them
    nodes = scored(texts, scores)
    expected = reference_collapse(nodes)
    kept = DedupPostprocessor().postprocess_nodes(nodes)
    got = [
        (n.node_id, [(c["node_id"], c["reason"], c["similarity"]) for c in n.node.metadata.get(DEDUP_COLLAPSED, [])])
        for n in kept
    ]
    assert got == expected


def test_shingle_stream_hashes_equal_exactly_the_equal_shingles_of_the_whole_corpus(chunks):
    """One hash per distinct shingle over the whole corpus (several buffer pieces), for three n-gram
    sizes: no two different shingles share a hash, no shingle gets two."""
    texts = [n.text for n in chunks] + planted_batch(chunks, 0, 0)
    for ngram in (1, 3, 5):
        hashes, counts = shingle_stream(texts, ngram)
        assert len(hashes) == int(counts.sum())
        owner_of: dict[int, tuple[str, ...]] = {}
        position = 0
        for text, count in zip(texts, counts.tolist()):
            shingles = reference_shingle_list(text, ngram)
            assert len(shingles) == count
            for value, shingle in zip(hashes[position : position + count].tolist(), shingles):
                assert owner_of.setdefault(value, shingle) == shingle
            position += count
        assert len(set(owner_of.values())) == len(owner_of)


def test_shingle_stream_hashes_a_text_alike_in_any_batch(chunks):
    """Regression: a word's hash depended on its batch (whether any text of the batch held a NUL byte),
    so shingles remembered from one query no longer matched the same text in the next."""
    odd = planted_batch(chunks, 0, 0)
    text = chunks[3].text + " https://www.apache.org/licenses/LICENSE-2.0 and_a_very_long_identifier_here"
    alone, _ = shingle_stream([text])
    for batch in ([text, *odd], [*odd, text], [chunks[5].text, text]):
        hashes, counts = shingle_stream(batch)
        at = batch.index(text)
        start = int(counts[:at].sum())
        assert np.array_equal(hashes[start : start + counts[at]], alone)


def test_shingle_stream_refuses_bad_input():
    with pytest.raises(TypeError, match="texts\\[1\\]"):
        shingle_stream(["fine", b"bytes"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="ngram"):
        shingle_stream(["fine"], 0)
    hashes, counts = shingle_stream([])
    assert len(hashes) == 0 and len(counts) == 0


SMALL_VOCABULARY = st.sampled_from(["a", "b", "ab", "A", "é", "x" * 9, "y" * 17])  # 1-, 9- and 17-byte words


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.tuples(SMALL_VOCABULARY, WHITESPACE), max_size=12), min_size=2, max_size=12))
def test_batch_similarity_equals_pure_python_jaccard_on_small_vocabularies(raw):
    """A small vocabulary makes texts share and repeat shingles, and split runs in many ways."""
    texts = ["".join(w + s for w, s in parts) for parts in raw]
    got = TextSimilarity().matrix(texts, 3, 0)
    sets = [reference_shingles(t, 3) for t in texts]
    for i, j in itertools.product(range(len(texts)), repeat=2):
        expected = (1.0 if sets[i] else 0.0) if i == j else reference_jaccard(sets[i], sets[j])
        assert got[i, j] == expected


# --- construction and serialisation --------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        pytest.param({"threshold": 0.0}, ValueError, id="threshold-zero"),
        pytest.param({"threshold": 1.5}, ValueError, id="threshold-above-one"),
        pytest.param({"top_n": 0}, ValueError, id="top-n-zero"),
        pytest.param({"show": "first"}, ValueError, id="unknown-show"),
        pytest.param({"ngram": 0}, ValueError, id="ngram-zero"),
        pytest.param({"index": {"not": "an index"}}, TypeError, id="index-type"),
        pytest.param({"docstore": "docstore.json"}, TypeError, id="docstore-type"),
    ],
)
def test_bad_arguments_are_refused(kwargs, error):
    with pytest.raises(error):
        DedupPostprocessor(**kwargs)


def test_bad_assignment_is_refused():
    pp = DedupPostprocessor()
    with pytest.raises(ValueError, match="threshold"):
        pp.threshold = 2.0


def test_threshold_and_ngram_default_to_the_index():
    pp = DedupPostprocessor(index=DedupIndex(threshold=0.9, ngram=3))
    assert (pp.threshold, pp.ngram) == (0.9, 3)


def test_serialises_like_other_components():
    pp = DedupPostprocessor(threshold=0.7, top_n=5, show="representative", merge_overlaps=True)
    data = pp.to_dict()
    assert data["class_name"] == "DedupPostprocessor"
    again = DedupPostprocessor.from_dict(data)
    assert again.to_dict() == data
    assert DedupPostprocessor.from_json(pp.to_json()).to_dict() == data


# --- inside real query engines ------------------------------------------------------------------


@pytest.fixture(scope="module")
def bm25(chunks) -> BM25Retriever:
    return BM25Retriever.from_defaults(nodes=chunks, similarity_top_k=30)


QUERIES = ALL_QUERIES[:3]  # the real query list (tests/data/queries.json): its first three


@pytest.mark.parametrize("query", [pytest.param(q, id=q.split()[0].lower() + str(i)) for i, q in enumerate(QUERIES)])
def test_retriever_query_engine_synthesizes_from_distinct_sources(bm25, query):
    engine = RetrieverQueryEngine.from_args(
        bm25, llm=MockLLM(max_tokens=32), node_postprocessors=[DedupPostprocessor(top_n=10)]
    )
    response = engine.query(query)
    sources = response.source_nodes
    raw = bm25.retrieve(query)
    distinct_in_top_30 = DedupPostprocessor().postprocess_nodes(bm25.retrieve(query))
    assert len(sources) == min(10, len(distinct_in_top_30)) >= 5
    assert max_pairwise_jaccard(sources) < 0.8
    assert [n.score for n in sources] == sorted((n.score for n in sources), reverse=True)
    assert max_pairwise_jaccard(raw[:10]) >= 0.8  # the query does retrieve duplicates without the postprocessor
    async_response = asyncio.run(engine.aquery(query))
    assert [n.node_id for n in async_response.source_nodes] == [n.node_id for n in sources]


def test_as_query_engine_of_an_index_collapses_its_copies(documents):
    copies = [d for d in documents if d.id_.startswith("licenses/")][:2]
    docs = copies + [Document(text=d.text, id_=d.id_ + "-mirror") for d in copies]
    nodes = SentenceChunker().get_nodes_from_documents(docs)
    engine = SummaryIndex(nodes).as_query_engine(llm=MockLLM(max_tokens=32), node_postprocessors=[DedupPostprocessor()])
    response = engine.query("What does the licence permit?")
    assert len(response.source_nodes) == len(nodes) // 2
    assert max_pairwise_jaccard(response.source_nodes) < 0.8


# --- issue 11 item 4: stamps are hints; every decision is checked on the texts -------------------



@pytest.fixture(scope="module")
def stamped_bm25(chunks) -> tuple[BM25Retriever, DedupTransform]:
    transform = DedupTransform()
    stamped = transform([n.model_copy(deep=True) for n in chunks])
    return BM25Retriever.from_defaults(nodes=stamped, similarity_top_k=30), transform


@pytest.mark.parametrize("with_index", [pytest.param(False, id="stamps"), pytest.param(True, id="index")])
def test_stamped_top_30_keeps_no_duplicate_pair_and_folds_nothing_below_the_floor(stamped_bm25, with_index, kernels):
    retriever, transform = stamped_bm25
    pp = DedupPostprocessor(index=transform.index if with_index else None)
    for query in QUERIES + ["Redistributions in binary form must reproduce the above copyright notice"]:
        hits = retriever.retrieve(query)
        kept = pp.postprocess_nodes(hits)
        assert max_pairwise_jaccard(kept) < 0.8
        text_of = {h.node_id: h.node.get_content() for h in hits}
        for n in kept:
            for c in n.node.metadata.get(DEDUP_COLLAPSED, []):
                similarity = jaccard(n.node.get_content(), text_of[c["node_id"]])
                assert similarity >= 0.7 and c["similarity"] == round(similarity, 4)


def test_a_cluster_stamp_alone_never_folds_a_passage_below_the_floor(distinct_texts):
    """Two members of one cluster are each within the floor of their representative, not of each other."""
    a = TextNode(text=distinct_texts[8], id_="a", metadata={DEDUP_CLUSTER: "rep"})
    b = TextNode(text=distinct_texts[9], id_="b", metadata={DEDUP_CLUSTER: "rep"})
    c = TextNode(text=edited(distinct_texts[8]), id_="c", metadata={DEDUP_CLUSTER: "rep"})
    nodes = [NodeWithScore(node=n, score=1.0) for n in (a, b, c)]
    kept = DedupPostprocessor().postprocess_nodes(nodes)
    assert [n.node_id for n in kept] == ["a", "b"]
    (entry,) = kept[0].node.metadata[DEDUP_COLLAPSED]
    assert (entry["node_id"], entry["reason"]) == ("c", "cluster") and entry["similarity"] >= 0.7
    trusted = DedupPostprocessor(trust_clusters=True).postprocess_nodes(nodes)
    assert [n.node_id for n in trusted] == ["a"]


def test_floor_is_validated_against_the_threshold():
    with pytest.raises(ValueError, match="floor"):
        DedupPostprocessor(threshold=0.6, floor=0.7)
    assert DedupPostprocessor(floor=0.5).floor == 0.5


# --- issue 16 items 8-10 and issue 17 item 10, with LlamaIndex's own classes ---------------------


def test_a_second_pass_merges_the_first_pass_citations(stamped_bm25):
    """Regression (issue 16, item 8): DistinctRetriever then DedupPostprocessor erased the first pass's list."""
    retriever, _ = stamped_bm25
    engine = RetrieverQueryEngine.from_args(
        DistinctRetriever(retriever, top_k=10),
        llm=MockLLM(max_tokens=8),
        node_postprocessors=[DedupPostprocessor(threshold=0.3)],
    )
    query = QUERIES[0]
    first = DistinctRetriever(retriever, top_k=10).retrieve(query)
    cited_first = {c["node_id"] for n in first for c in n.node.metadata.get(DEDUP_COLLAPSED, [])}
    sources = engine.query(query).source_nodes
    cited = {c["node_id"] for n in sources for c in n.node.metadata.get(DEDUP_COLLAPSED, [])}
    assert cited_first and len(sources) < len(first)  # both passes folded something
    assert cited_first <= cited
    assert {n.node_id for n in first} == {n.node_id for n in sources} | (cited - cited_first)


def test_nodes_a_recursive_retriever_returns_every_time_are_never_written_to(chunks):
    """Regression (issue 16, item 9): RecursiveRetriever returns its node_dict's objects; writing on them
    showed an earlier query's dedup_collapsed in a later one."""
    node_dict = {n.node_id: n.model_copy(deep=True) for n in chunks}
    links = [IndexNode(text=n.text, index_id=n.node_id, id_="link-" + n.node_id) for n in chunks]
    base = BM25Retriever.from_defaults(nodes=links, similarity_top_k=20)
    recursive = RecursiveRetriever("root", retriever_dict={"root": base}, node_dict=node_dict)
    pp = DedupPostprocessor()
    before = {k: dict(n.metadata) for k, n in node_dict.items()}
    for query in QUERIES:
        hits = recursive.retrieve(query)
        assert any(h.node is node_dict[h.node_id] for h in hits)  # the same objects every time
        kept = pp.postprocess_nodes(hits)
        retrieved = {h.node_id for h in hits}
        for n in kept:
            assert {c["node_id"] for c in n.node.metadata.get(DEDUP_COLLAPSED, [])} <= retrieved
    assert {k: dict(n.metadata) for k, n in node_dict.items()} == before


def test_long_context_reorder_order_survives_the_collapse(bm25):
    """Regression (issue 16, item 10): re-sorting by score undid LongContextReorder."""
    hits = bm25.retrieve(QUERIES[1])
    reordered = LongContextReorder().postprocess_nodes(hits)
    kept = DedupPostprocessor().postprocess_nodes(reordered)
    position = {n.node_id: i for i, n in enumerate(reordered)}
    assert len(kept) < len(reordered)
    assert [position[n.node_id] for n in kept] == sorted(position[n.node_id] for n in kept)
    for n in kept:  # each kept node is the first of its group in the reordered list
        assert all(position[c["node_id"]] > position[n.node_id] for c in n.node.metadata.get(DEDUP_COLLAPSED, []))


def test_a_nan_score_node_absorbs_no_scored_copy_and_breaks_no_order(distinct_texts):
    """Regression (issue 17, item 10): a 2.0-score copy was folded into a NaN-score node."""
    nan = float("nan")
    nodes = [
        NodeWithScore(node=TextNode(text=distinct_texts[0], id_="nan"), score=nan),
        NodeWithScore(node=TextNode(text=distinct_texts[0], id_="copy"), score=2.0),
        NodeWithScore(node=TextNode(text=distinct_texts[1], id_="other"), score=1.0),
        NodeWithScore(node=TextNode(text=distinct_texts[2], id_="nan-alone"), score=nan),
    ]
    kept = DedupPostprocessor().postprocess_nodes(nodes)
    assert [n.node_id for n in kept] == ["copy", "other", "nan-alone"]
    assert [c["node_id"] for c in kept[0].node.metadata[DEDUP_COLLAPSED]] == ["nan"]


def test_an_empty_text_node_takes_no_top_n_place(distinct_texts):
    nodes = scored(["", *distinct_texts[:3]])
    kept = DedupPostprocessor(top_n=2).postprocess_nodes(nodes)
    assert [n.node_id for n in kept] == ["n0", "n1", "n2"]


def test_shallow_copy_is_model_copy(chunks):
    """The postprocessor's node copies (rag_dedup.llama_index._nodes.shallow_copy) against pydantic's
    model_copy: equal objects, the same fields set, and the original left as it was."""
    from rag_dedup.llama_index._nodes import shallow_copy

    node = chunks[3]
    before = node.model_dump()
    update = {"metadata": {**node.metadata, DEDUP_COLLAPSED: [{"node_id": "x"}]}, "excluded_llm_metadata_keys": ["k"]}
    ours, theirs = shallow_copy(node, update), node.model_copy(update=update)
    assert type(ours) is type(theirs) and ours == theirs and ours.model_dump() == theirs.model_dump()
    assert ours.__pydantic_fields_set__ == theirs.__pydantic_fields_set__
    assert ours.__pydantic_private__ == theirs.__pydantic_private__
    assert node.model_dump() == before and ours.metadata is not node.metadata
    nws = NodeWithScore(node=node, score=1.5)
    copied = shallow_copy(nws, {"node": ours, "score": 2.0})
    assert copied == nws.model_copy(update={"node": ours, "score": 2.0}) and nws.score == 1.5 and nws.node is node


def test_ref_doc_id_and_private_read_what_llama_index_and_pydantic_give(chunks):
    """The adapter's fast reads (rag_dedup.llama_index.metadata.ref_doc_id, _nodes.private) against the
    properties they replace: a chunk with a SOURCE, a node without one, a Document, a SOURCE that is a
    list (the same ValueError), and a private attribute read before and after it is set."""
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo

    from rag_dedup.llama_index._nodes import private
    from rag_dedup.llama_index.metadata import ref_doc_id

    listed = TextNode(text="x", id_="l")
    listed.relationships[NodeRelationship.SOURCE] = [RelatedNodeInfo(node_id="a")]
    for node in (chunks[3], TextNode(text="x", id_="n"), Document(text="d", id_="doc")):
        assert ref_doc_id(node) == node.ref_doc_id
    assert chunks[3].ref_doc_id is not None
    with pytest.raises(ValueError, match="single RelatedNodeInfo"):
        ref_doc_id(listed)
    pp = DedupPostprocessor()
    assert private(pp, "_made") is None is pp._made
    pp.collapse([NodeWithScore(node=chunks[3], score=1.0)])
    assert private(pp, "_made") is pp._made is not None


def test_carried_entries_are_collapsed_entry_with_the_similarity_rounded(chunks):
    """The entries the show="best" path writes (collapsed_entry, ref_doc_id and round(s, 4) inlined in
    _carried) against collapsed_entry itself: a chunk with a SOURCE, a TextNode without one, a Document
    (not a TextNode: collapsed_entry's own path), near (rounded) and exact similarities."""
    from rag_dedup.llama_index.metadata import collapsed_entry

    base = chunks[5]
    nodes = [
        NodeWithScore(node=base, score=3.0),
        NodeWithScore(node=TextNode(text=base.text + " one more word", id_="plain"), score=2.0),
        NodeWithScore(node=Document(text=base.text, id_="doc"), score=1.0),
        NodeWithScore(node=base.model_copy(update={"id_": "copy"}), score=0.5),
    ]
    pp = DedupPostprocessor()
    kept = pp.postprocess_nodes(nodes)
    _, folds, _ = pp._collapser().decide_columns(
        [n.node.node_id for n in nodes], [n.node.text for n in nodes], [n.score for n in nodes], [None] * 4
    )
    expected = [collapsed_entry(nodes[i].node, nodes[i].score, r, None if s is None else round(s, 4)) for i, r, s in folds[0]]
    assert [n.node_id for n in kept] == [base.node_id] and len(expected) == 3
    assert kept[0].node.metadata[DEDUP_COLLAPSED] == expected
    assert [e["ref_doc_id"] for e in expected] == [None, None, base.ref_doc_id] and base.ref_doc_id is not None
    assert 0.8 <= expected[0]["similarity"] < 1.0 and expected[0]["similarity"] == round(folds[0][0][2], 4)


def test_a_copied_postprocessor_keeps_its_settings_and_shares_its_index(distinct_texts):
    import copy
    import pickle

    index = DedupIndex()
    index.add_many([("a", distinct_texts[0]), ("b", edited(distinct_texts[0]))])
    nodes = scored([distinct_texts[0], edited(distinct_texts[0]), distinct_texts[1]])
    pp = DedupPostprocessor(index=index, top_n=2, threshold=0.7)
    expected = [n.node_id for n in pp.postprocess_nodes(nodes)]
    deep = copy.deepcopy(pp)  # it remembers shingles under a lock, which cannot be copied
    assert deep.index is index and (deep.top_n, deep.threshold) == (2, 0.7)
    assert deep._similarity is not pp._similarity and len(deep._similarity) == 0
    again = pickle.loads(pickle.dumps(pp))
    assert again.index is not None and again.index.resolve("b") == index.resolve("b")
    for clone in (deep, again, copy.copy(pp)):
        assert [n.node_id for n in clone.postprocess_nodes(nodes)] == expected == ["n0", "n2"]
    with_store = pickle.loads(pickle.dumps(DedupPostprocessor(docstore=SimpleDocumentStore(), show="representative")))
    assert isinstance(with_store._docstore, SimpleDocumentStore) and with_store.show == "representative"


def test_an_item_that_is_not_a_node_with_score_is_named_by_position():
    """A None among the results raised a bare AttributeError ('NoneType' object has no attribute 'node')."""
    from llama_index.core.schema import NodeWithScore, TextNode

    from rag_dedup import DedupPostprocessor

    nodes = [NodeWithScore(node=TextNode(text="Permission is hereby granted, free of charge.", id_="n"), score=1.0), None]
    with pytest.raises(TypeError, match=r"nodes\[1\] is a NoneType, not a NodeWithScore"):
        DedupPostprocessor().postprocess_nodes(nodes)


def test_a_joined_passage_links_to_the_windows_around_it_not_to_those_inside_it():
    """merge_overlaps joined three overlapping windows but kept the middle one's PREVIOUS/NEXT, which
    pointed at windows now inside the passage: PrevNextNodePostprocessor then added one of them again."""
    from llama_index.core import Document
    from llama_index.core.postprocessor import PrevNextNodePostprocessor
    from llama_index.core.storage.docstore import SimpleDocumentStore

    from rag_dedup import DedupPostprocessor, SentenceChunker

    text = (CORPUS / "licenses" / "GPL-3.txt").read_text(encoding="utf-8")
    nodes = SentenceChunker().get_nodes_from_documents([Document(text=text, id_="gpl")])
    i = next(i for i in range(1, len(nodes) - 3) if nodes[i].end_char_idx > nodes[i + 1].start_char_idx
             and nodes[i + 1].end_char_idx > nodes[i + 2].start_char_idx and nodes[i + 2].end_char_idx <= nodes[i + 3].start_char_idx)
    hits = [NodeWithScore(node=nodes[i + 1], score=3.0), NodeWithScore(node=nodes[i], score=2.0),
            NodeWithScore(node=nodes[i + 2], score=1.0)]
    (joined,) = DedupPostprocessor(merge_overlaps=True).postprocess_nodes(hits)
    links = joined.node.relationships
    assert links[NodeRelationship.PREVIOUS].node_id == nodes[i].relationships[NodeRelationship.PREVIOUS].node_id
    assert links[NodeRelationship.NEXT].node_id == nodes[i + 2].relationships[NodeRelationship.NEXT].node_id
    assert nodes[i + 1].relationships[NodeRelationship.PREVIOUS].node_id == nodes[i].node_id  # the input untouched
    store = SimpleDocumentStore()
    store.add_documents(nodes)
    out = PrevNextNodePostprocessor(docstore=store, num_nodes=1, mode="next").postprocess_nodes([joined])
    start, end = joined.node.start_char_idx, joined.node.end_char_idx
    assert not [n for n in out[1:] if start <= n.node.start_char_idx and n.node.end_char_idx <= end]
