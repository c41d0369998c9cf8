"""DedupTransform as a drop-in for LlamaIndex ingestion (issue 16 items 4-7 and 13-16, issue 17 item 3,
issue 19 item 7), with LlamaIndex's real classes: IngestionPipeline with SimpleDocumentStore and
SimpleVectorStore, MockEmbedding (a deterministic embedding llama-index-core ships), VectorStoreIndex,
BM25Retriever, and a real redis-server."""

from __future__ import annotations

import asyncio
import json
import pickle
import warnings
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Document, SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.docstore.utils import doc_to_json
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.retrievers.bm25 import BM25Retriever

from rag_dedup.index import DedupIndex
from rag_dedup.llama_index.chunking import SentenceChunker
from rag_dedup.llama_index.metadata import DEDUP_CLUSTER, DEDUP_DUPLICATE_OF, STAMP_KEYS
from rag_dedup.llama_index.transform import DEFAULT_SETTINGS_FILENAME, DedupTransform, TransformStateError

CORPUS = Path(__file__).parents[1] / "data" / "corpus"
LICENSES = CORPUS / "licenses"


def licence(name: str) -> str:
    return (LICENSES / name).read_text(encoding="utf-8")


GPL3 = licence("GPL-3.txt")
HALF = GPL3[: GPL3.index("\n\n", len(GPL3) // 2)]  # the first half, up to a paragraph end


def index_state(index: DedupIndex) -> tuple[Any, ...]:
    """Everything observable about an index: clusters with members, and every key's match."""
    clusters = sorted(index.clusters())
    keys = sorted(k for _, members in clusters for k in members)
    return clusters, index.matches(keys)


def embedding_pipeline(transform: DedupTransform, strategy: DocstoreStrategy) -> IngestionPipeline:
    return IngestionPipeline(
        transformations=[SentenceChunker(), transform, MockEmbedding(embed_dim=8)],
        docstore=SimpleDocumentStore(),
        vector_store=SimpleVectorStore(),
        docstore_strategy=strategy,
    )


class SyncRunner:
    """A pipeline whose ``run`` is its ``arun`` under ``asyncio.run`` (the same test for both paths)."""

    def __init__(self, pipeline: IngestionPipeline, run: Any) -> None:
        self.vector_store = pipeline.vector_store
        self.run = run


def stored_ids(pipeline: IngestionPipeline) -> set[str]:
    return set(pipeline.vector_store.data.embedding_dict)


# --- item 4: the same Document twice in one run ------------------------------------------------


@pytest.mark.parametrize(("mode", "expected"), [pytest.param("tag", 3, id="tag"), pytest.param("drop", 2, id="drop")])
def test_the_same_document_twice_in_one_run_gives_what_sentence_splitter_gives(mode, expected):
    """Regression: upstream's test_save_load_pipeline_without_docstore input raised "node id ... appears
    twice in one call" after SentenceChunker (whose ids follow the document id and the span)."""
    documents = [Document(text="one", doc_id="1"), Document(text="two", doc_id="2"), Document(text="one", doc_id="1")]
    splitter = IngestionPipeline(
        transformations=[SentenceSplitter(chunk_size=25, chunk_overlap=0), DedupTransform(mode=mode)]
    )
    transform = DedupTransform(mode=mode)
    nodes = IngestionPipeline(transformations=[SentenceChunker(), transform]).run(documents=documents)
    assert len(nodes) == len(splitter.run(documents=documents)) == expected
    assert len(transform.index) == 2  # one node id, one item
    assert transform.counts["repeated"] == 1
    if mode == "tag":
        assert nodes[0].node_id == nodes[2].node_id and nodes[0].metadata == nodes[2].metadata


def test_one_node_id_with_two_texts_in_one_call_is_refused_and_changes_nothing():
    transform = DedupTransform()
    transform([TextNode(text="Earlier text about licences and notices.", id_="a")])
    before = index_state(transform.index)
    with pytest.raises(ValueError, match="'b' appears twice in one call with different texts"):
        transform([TextNode(text="one text", id_="b"), TextNode(text="another text", id_="b")])
    assert index_state(transform.index) == before


# --- item 5: the ingestion cache ------------------------------------------------------------------


def cache_size(pipeline: IngestionPipeline) -> int:
    return len(pipeline.cache.cache.get_all(collection=pipeline.cache.collection))


def test_repeated_runs_do_not_grow_the_cache_and_replay_only_current_decisions(tmp_path):
    """Regression: the transform renewed its cache token on every call, so five runs of one document left
    six cache entries (each a full copy of the nodes) where SentenceSplitter alone leaves one."""
    transform = DedupTransform()
    pipeline = IngestionPipeline(transformations=[SentenceChunker(), transform])
    document = Document(text=GPL3, id_="gpl")
    sizes = []
    for _ in range(5):
        nodes = pipeline.run(documents=[document])
        sizes.append(cache_size(pipeline))
    assert sizes[1:] == [sizes[1]] * 4  # the first run's entry is for the empty index; then no growth
    assert sizes[-1] == 3  # the chunker's entry, and the transform's before and after the first run
    for node in nodes:  # served from the cache, and current
        match = transform.index.match(node.node_id)
        stamps = (node.metadata[DEDUP_CLUSTER], node.metadata[DEDUP_DUPLICATE_OF])
        assert stamps == (match.cluster_id, match.duplicate_of)
    pipeline.persist(str(tmp_path))
    saved = json.loads((tmp_path / "llama_cache").read_text())
    assert sum(len(collection) for collection in saved.values()) == 3


def test_a_change_of_the_index_between_runs_is_never_replayed_from_the_cache():
    transform = DedupTransform(mode="drop")
    pipeline = IngestionPipeline(transformations=[SentenceChunker(), transform])
    half = Document(text=HALF, id_="half")
    pipeline.run(documents=[Document(text=GPL3, id_="full")])
    first = {n.node_id for n in pipeline.run(documents=[half])}
    half_keys = set(transform.index.keys_of_source("half"))
    assert len(first) < len(half_keys) / 4  # the full text holds nearly every passage of the half
    promoted = {n.node_id for n in transform.delete_ref_doc("full")}
    assert promoted == half_keys - first
    again = pipeline.run(documents=[half])  # the same input as before: a replay would give `first`
    assert {n.node_id for n in again} == half_keys  # every copy of the half is the stored one now
    assert transform.dropped == {}


def test_a_second_document_with_the_same_text_is_chunked_as_itself_not_answered_from_the_cache():
    """Regression: the cache key of the chunker's call hashes the documents' content and metadata, not
    their ids, so document b (a's text) got a's chunks back from the cache: a's node ids and ref_doc_id,
    b never indexed and none of its copies stamped as a duplicate."""
    transform = DedupTransform()
    pipeline = IngestionPipeline(transformations=[SentenceChunker(), transform])  # the default cache
    a = pipeline.run(documents=[Document(text=GPL3, id_="a")])
    b = pipeline.run(documents=[Document(text=GPL3, id_="b")])
    assert {n.ref_doc_id for n in b} == {"b"} and not {n.node_id for n in a} & {n.node_id for n in b}
    assert len(transform.index.keys_of_source("b")) == len(a)
    a_of_text = {n.text: n.node_id for n in a}
    index = transform.index
    assert all(index.resolve(n.node_id) == index.resolve(a_of_text[n.text]) for n in b)  # each in a's copy's cluster
    again = pipeline.run(documents=[Document(text=GPL3, id_="b")])  # the same call again: served by the cache
    assert [n.node_id for n in again] == [n.node_id for n in b]


def test_the_same_text_under_another_node_id_is_never_answered_from_the_cache():
    """Regression: the pipeline's cache key hashes the nodes' content and metadata, not their ids, so a
    chunk of another document with the same text got the first document's chunk back from the cache,
    and was never indexed."""
    text = licence("BSD.txt")[:600]
    transform = DedupTransform()
    pipeline = IngestionPipeline(transformations=[transform])

    def chunk(node_id: str, document: str) -> TextNode:
        return TextNode(text=text, id_=node_id, relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=document)})

    pipeline.run(nodes=[chunk("n1", "a")])
    pipeline.run(nodes=[chunk("n1", "a")])  # the first run's entry is for the empty index
    size = cache_size(pipeline)
    assert [n.node_id for n in pipeline.run(nodes=[chunk("n1", "a")])] == ["n1"]  # a replay of the same input
    assert cache_size(pipeline) == size
    out = pipeline.run(nodes=[chunk("n2", "b")])
    assert [(n.node_id, n.ref_doc_id) for n in out] == [("n2", "b")]
    assert transform.index.keys_of_source("b") == ["n2"]
    assert transform.index.match("n2").duplicate_of == "n1"


@pytest.mark.parametrize(
    "strategy", [DocstoreStrategy.DUPLICATES_ONLY, DocstoreStrategy.UPSERTS, DocstoreStrategy.UPSERTS_AND_DELETE]
)
def test_unchanged_documents_fed_straight_to_the_transform_are_not_run_again(strategy):
    """Regression: the transform stamped the pipeline's input documents in place, and the pipeline writes
    its input's hashes (which cover the metadata) to the docstore after the run: every unchanged document
    then looked changed at the next run, and was run, embedded and stored again."""
    bsd = licence("BSD.txt")
    # A near copy (another holder), not an exact one: DUPLICATES_ONLY drops exact copies by their hash itself.
    texts = {"bsd": bsd, "mpl": licence("MPL-2.0.txt"), "copy": bsd.replace("Regents", "Trustees", 1)}
    assert texts["copy"] != bsd

    def documents() -> list[Document]:
        return [Document(text=text, id_=name) for name, text in texts.items()]

    transform = DedupTransform()
    pipeline = IngestionPipeline(
        transformations=[transform, MockEmbedding(embed_dim=8)],
        docstore=SimpleDocumentStore(),
        vector_store=SimpleVectorStore(),
        docstore_strategy=strategy,
    )
    given = documents()
    first = pipeline.run(documents=given)
    assert sorted(n.node_id for n in first) == sorted(texts)
    clusters = {n.node_id: n.metadata[DEDUP_CLUSTER] for n in first}
    assert clusters["copy"] == clusters["bsd"] != clusters["mpl"]
    assert all(DEDUP_CLUSTER not in d.metadata for d in given)  # the input is left as it was given
    assert pipeline.run(documents=documents()) == []  # nothing changed, nothing run again
    assert stored_ids(pipeline) == set(texts)


def test_the_threshold_cannot_be_changed_on_a_built_transform():
    """Regression: an assigned threshold was shown (to_dict, persist) but not applied (the index decides
    at its own), and the directory persist() then wrote could not be loaded."""
    transform = DedupTransform(threshold=0.7)
    with pytest.raises(ValueError, match=r"threshold cannot be changed.*decides at 0\.7, got 0\.3"):
        transform.threshold = 0.3
    transform.threshold = 0.7  # the same value is no change
    assert (transform.threshold, transform.index.threshold) == (0.7, 0.7)


# --- item 6: documents the pipeline deletes -------------------------------------------------------


@pytest.mark.parametrize("mode", ["tag", "drop"])
@pytest.mark.parametrize("run", ["run", "arun"])
def test_documents_deleted_by_upserts_and_delete_leave_the_index_by_themselves(mode, run):
    """Regression: DocstoreStrategy.UPSERTS_AND_DELETE deleted documents from the docstore and the vector
    store only; their chunks stayed in the dedup index until a manual delete_ref_doc."""
    transform = DedupTransform(mode=mode)
    pipeline = embedding_pipeline(transform, DocstoreStrategy.UPSERTS_AND_DELETE)
    if run == "arun":
        arun = pipeline.arun
        pipeline = SyncRunner(pipeline, lambda **kwargs: asyncio.run(arun(**kwargs)))
    half = Document(text=HALF, id_="half")
    pipeline.run(documents=[Document(text=GPL3, id_="full"), half])
    index = transform.index
    assert index.keys_of_source("full")
    half_keys = set(index.keys_of_source("half"))
    stored_before = stored_ids(pipeline)
    if mode == "drop":
        assert len(half_keys - stored_before) > 10  # copies of the full text's passages, not embedded

    out = pipeline.run(documents=[half])  # "full" is missing: the pipeline deletes it

    assert index.keys_of_source("full") == []
    assert set(index.keys_of_source("half")) == half_keys
    assert stored_ids(pipeline) == half_keys  # nothing the user still has left the store
    if mode == "drop":
        assert {n.node_id for n in out} == half_keys - stored_before  # promoted, embedded, stored
        assert transform.counts["promoted"] == len(half_keys - stored_before)
    again = pipeline.run(documents=[half])
    assert again == [] and set(index.keys_of_source("half")) == half_keys


def test_pre_chunked_nodes_with_a_docstore_are_never_taken_for_deleted_documents():
    """The docstore of a pipeline fed chunks holds the chunks, not their documents: the documents are
    missing from it from the start, and must not be removed from the index as deleted."""
    transform = DedupTransform()
    pipeline = IngestionPipeline(
        transformations=[transform], docstore=SimpleDocumentStore(), docstore_strategy=DocstoreStrategy.DUPLICATES_ONLY
    )
    chunker = SentenceChunker()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nor is a docstore of chunks taken for documents the index lacks
        pipeline.run(nodes=chunker.get_nodes_from_documents([Document(text=GPL3, id_="gpl")]))
        pipeline.run(nodes=chunker.get_nodes_from_documents([Document(text=licence("BSD.txt"), id_="bsd")]))
    assert transform.index.keys_of_source("gpl") and transform.index.keys_of_source("bsd")


def test_a_deletion_is_seen_even_when_the_run_has_nothing_to_transform():
    """The transformation cache must not serve an empty run from an earlier empty run after a deletion."""
    transform = DedupTransform(mode="drop")
    pipeline = embedding_pipeline(transform, DocstoreStrategy.UPSERTS_AND_DELETE)
    a, b = Document(text=licence("BSD.txt"), id_="a"), Document(text=licence("MPL-2.0.txt"), id_="b")
    pipeline.run(documents=[a, b])
    pipeline.run(documents=[a, b])  # nothing new: an empty input reaches the transform
    pipeline.run(documents=[a])  # b deleted, again with an empty input
    assert transform.index.keys_of_source("b") == []
    assert transform.index.keys_of_source("a")


# --- items 7 and 15: VectorStoreIndex.delete_ref_doc in drop mode -----------------------------------


def test_deleting_the_document_holding_a_passage_promotes_the_copy_another_document_still_has():
    """Regression: after VectorStoreIndex.delete_ref_doc("A") in drop mode, B's dropped copy of a passage
    A represented was never promoted, so the passage vanished from retrieval although B still has it."""
    transform = DedupTransform(mode="drop")
    nodes = IngestionPipeline(transformations=[SentenceChunker(), transform]).run(
        documents=[Document(text=GPL3, id_="A"), Document(text=HALF + "\n\nA closing note of B.", id_="B")]
    )
    vector_index = VectorStoreIndex(nodes, embed_model=MockEmbedding(embed_dim=8))
    dropped_of_b = [n for n in transform.dropped.values() if n.ref_doc_id == "B"]
    assert len(dropped_of_b) > 10
    question = max(dropped_of_b, key=lambda n: len(n.text)).text
    bm25 = BM25Retriever.from_defaults(docstore=vector_index.docstore, similarity_top_k=1)
    assert bm25.retrieve(question)[0].node.ref_doc_id == "A"  # the store holds A's copy

    vector_index.delete_ref_doc("A", delete_from_docstore=True)
    promoted = transform.delete_ref_doc("A")  # what the README tells the user to call
    vector_index.insert_nodes(promoted)

    assert {n.node_id for n in promoted} == {n.node_id for n in dropped_of_b}
    assert all(n.metadata[DEDUP_DUPLICATE_OF] is None for n in promoted)
    found = BM25Retriever.from_defaults(docstore=vector_index.docstore, similarity_top_k=1).retrieve(question)
    assert found[0].node.ref_doc_id == "B" and found[0].node.get_content() == question
    assert set(transform.index.keys_of_source("B")) == set(vector_index.vector_store.data.embedding_dict)
    assert transform.delete_ref_doc("A") == []


# --- item 13: drop mode across calls ------------------------------------------------------------


def test_drop_mode_does_not_pass_a_later_longer_copy_of_a_passage_already_passed():
    """Regression: a later, longer copy became its cluster's representative and was passed (and embedded)
    although the store already held the first copy."""
    paragraph = next(p for p in GPL3.split("\n\n") if 80 < len(p.split()) < 150)
    transform = DedupTransform(mode="drop")
    pipeline = IngestionPipeline(transformations=[SentenceChunker(), transform])
    first = pipeline.run(documents=[Document(text=paragraph, id_="short")])
    # a longer copy that is still one chunk: words before the paragraph (a sentence appended after it
    # would let a content-defined cut fall before the paragraph's last sentence, under the tail rule)
    longer = pipeline.run(documents=[Document(text="In this longer copy: " + paragraph, id_="longer")])
    index = transform.index
    first_ids = {n.node_id for n in first}
    longer_ids = set(index.keys_of_source("longer"))
    represented = [k for k in longer_ids if index.resolve(k) == k and index.members(k) != [k]]
    assert represented  # the longer copy is the representative now (reported so) ...
    assert not {n.node_id for n in longer} & set(represented)  # ... but the store keeps the first copy
    assert all(index.resolve(k) in index.members(index.resolve(k)) for k in first_ids)
    for key in represented:
        assert transform.index.match(key).duplicate_of is None


def test_drop_mode_in_small_batches_passes_what_one_call_passes():
    """Regression: 400 documents fed 25 at a time passed nearly twice what one call passed."""
    documents = [
        Document(text=p.read_text(encoding="utf-8", errors="replace"), id_=p.relative_to(CORPUS).as_posix())
        for p in sorted(CORPUS.rglob("*.txt"))
    ]
    one = DedupTransform(mode="drop")
    in_one_call = IngestionPipeline(transformations=[SentenceChunker(), one]).run(documents=documents)
    batched = DedupTransform(mode="drop")
    pipeline = IngestionPipeline(transformations=[SentenceChunker(), batched])
    passed: list[str] = []
    for start in range(0, len(documents), 7):
        passed.extend(n.node_id for n in pipeline.run(documents=documents[::-1][start : start + 7]))
    assert len(passed) == len(set(passed))
    assert len(passed) <= len(in_one_call) * 1.01
    index = batched.index
    assert len(index) == len(one.index)
    passed_set = set(passed)
    for _, members in index.clusters():  # every passage is in the store, once per cluster but for merges
        assert passed_set & set(members)


# --- item 14: authority and first_seen from node metadata -------------------------------------------


def first_seen_first(members):
    """A stable representative for streams: the earliest first_seen, then the smallest key."""
    return min(members, key=lambda m: (m.first_seen is None, m.first_seen or 0.0, m.key))


def test_first_seen_key_with_a_first_seen_policy_keeps_the_first_copy_as_representative():
    paragraph = next(p for p in GPL3.split("\n\n") if 80 < len(p.split()) < 150)
    transform = DedupTransform(index=DedupIndex(policy=first_seen_first), first_seen_key="ingested_at")
    pipeline = IngestionPipeline(transformations=[SentenceChunker(), transform])
    stream = [
        (paragraph, "2026-01-01T00:00:00"),
        (paragraph + " A longer, later copy.", "2026-02-01T00:00:00"),
        (paragraph.upper(), 1767225600 + 86400 * 60),  # a POSIX timestamp, later still
    ]
    for i, (text, when) in enumerate(stream):
        pipeline.run(documents=[Document(text=text, id_=f"copy-{i}", metadata={"ingested_at": when})])
    index = transform.index
    first = index.keys_of_source("copy-0")
    assert all(index.resolve(k) == k for k in first)
    later = [k for doc in ("copy-1", "copy-2") for k in index.keys_of_source(doc)]
    assert any(index.resolve(k) in first for k in later)


def test_authority_key_breaks_a_length_tie_between_exact_copies():
    transform = DedupTransform(authority_key="trust")
    nodes = [
        TextNode(text=licence("BSD.txt"), id_="a-mirror", metadata={"trust": 0}),
        TextNode(text=licence("BSD.txt"), id_="z-upstream", metadata={"trust": 2.5}),
    ]
    transform(nodes)
    assert transform.index.resolve("a-mirror") == "z-upstream"  # not the smallest id


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        pytest.param({}, "has no metadata\\['trust'\\]", id="missing"),
        pytest.param({"trust": "high"}, "must be a finite number", id="not-a-number"),
        pytest.param({"trust": float("nan")}, "must be a finite number", id="nan"),
    ],
)
def test_bad_authority_metadata_is_refused_naming_the_node_and_changes_nothing(metadata, message):
    transform = DedupTransform(authority_key="trust")
    transform([TextNode(text=licence("BSD.txt"), id_="kept", metadata={"trust": 1})])
    before = index_state(transform.index)
    with pytest.raises(ValueError, match=f"node 'bad'.*{message}"):
        transform([TextNode(text=licence("MPL-2.0.txt"), id_="bad", metadata=metadata)])
    assert index_state(transform.index) == before


def test_bad_first_seen_metadata_is_refused():
    transform = DedupTransform(first_seen_key="seen")
    with pytest.raises(ValueError, match="node 'n'.*not an ISO 8601 time"):
        transform([TextNode(text="a text about licences", id_="n", metadata={"seen": "last tuesday"})])
    assert len(transform.index) == 0


# --- item 16: the drop-mode state file -------------------------------------------------------------


def test_the_state_file_keeps_what_promotion_needs_not_full_copies(tmp_path):
    """Regression: dedup_transform.json held every dropped node in full (with the document's metadata
    copied into each relationship), larger than the docstore."""
    documents = SimpleDirectoryReader(str(CORPUS), recursive=True).load_data()
    chunks = SentenceChunker().get_nodes_from_documents(documents)
    full_copies = {n.node_id: json.dumps(doc_to_json(n)) for n in chunks}
    transform = DedupTransform(mode="drop")
    passed = {n.node_id for n in transform([c.model_copy(deep=True) for c in chunks])}
    dropped = set(full_copies) - passed
    assert len(dropped) > 100
    transform.persist(tmp_path)

    size = (tmp_path / DEFAULT_SETTINGS_FILENAME).stat().st_size
    baseline = sum(len(full_copies[k]) for k in dropped)  # what format 1 stored
    assert size < 0.6 * baseline
    resumed = DedupTransform.from_persist_dir(tmp_path)
    originals = {n.node_id: n for n in chunks}
    for key, node in resumed.dropped.items():
        original = originals[key]
        assert node.get_content() == original.get_content()
        assert (node.ref_doc_id, node.start_char_idx, node.end_char_idx) == (
            original.ref_doc_id,
            original.start_char_idx,
            original.end_char_idx,
        )
        assert {k: v for k, v in node.metadata.items() if k not in STAMP_KEYS} == original.metadata
        assert node.excluded_embed_metadata_keys[: len(original.excluded_embed_metadata_keys)] == (
            original.excluded_embed_metadata_keys
        )
        assert {r: i.node_id for r, i in node.relationships.items()} == {
            r: i.node_id for r, i in original.relationships.items()
        }


def damage(path: Path, edit) -> None:
    payload = json.loads(path.read_text())
    edit(payload)
    path.write_text(json.dumps(payload))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        pytest.param(lambda p: p.update(passed="abc"), "'passed' must be a list", id="passed-not-a-list"),
        pytest.param(lambda p: p.update(mode="delete"), "setting 'mode'", id="bad-mode"),
        pytest.param(lambda p: p["dropped"][0].update(shared=99), "refers to shared part 99", id="shared-out-of-range"),
        pytest.param(lambda p: p["dropped"][0].update(id_=None), "has no node id", id="no-node-id"),
        pytest.param(
            lambda p: p["passed"].append("ghost"), "'ghost' is recorded but not in the index", id="unknown-node"
        ),
        pytest.param(lambda p: p.update(format_version=1), "older rag-dedup", id="format-1"),
    ],
)
def test_a_damaged_state_file_raises_naming_the_file_and_the_field(tmp_path, edit, message):
    transform = DedupTransform(mode="drop")
    transform([TextNode(text=GPL3, id_="full"), TextNode(text=GPL3.upper(), id_="copy")])
    transform.persist(tmp_path)
    target = tmp_path / DEFAULT_SETTINGS_FILENAME
    damage(target, edit)
    with pytest.raises(TransformStateError, match=message) as caught:
        DedupTransform.from_persist_dir(tmp_path)
    assert DEFAULT_SETTINGS_FILENAME in str(caught.value)


def test_a_truncated_state_file_raises_naming_it(tmp_path):
    transform = DedupTransform(mode="drop")
    transform([TextNode(text=GPL3, id_="full"), TextNode(text=GPL3.upper(), id_="copy")])
    transform.persist(tmp_path)
    target = tmp_path / DEFAULT_SETTINGS_FILENAME
    target.write_bytes(target.read_bytes()[:100])
    with pytest.raises(TransformStateError, match=f"{DEFAULT_SETTINGS_FILENAME}.*damaged"):
        DedupTransform.from_persist_dir(tmp_path)
    assert not list(tmp_path.glob("*.tmp"))


# --- issue 17 item 3: a failed call changes nothing --------------------------------------------------


def test_a_call_that_fails_when_the_redis_server_dies_leaves_the_index_and_the_records_as_before(redis_server_factory):
    """Regression: stale and replaced keys were removed before add_many ran; when it failed, the document's
    chunks were gone from the index and, in drop mode, its dropped nodes forgotten."""
    from rag_dedup.storage.redis import RedisUnavailable

    server = redis_server_factory(appendonly=True)
    index = DedupIndex(storage=server.url, namespace="atomic")
    transform = DedupTransform(index=index, mode="drop")
    chunker = SentenceChunker()
    transform(chunker.get_nodes_from_documents([Document(text=GPL3, id_="full"), Document(text=HALF, id_="half")]))
    before = index_state(index), set(transform.dropped), transform.counts
    storage = index.storage
    real = storage.set_clusters

    def kill_then_call(*args: Any, **kwargs: Any) -> Any:
        server.kill()
        return real(*args, **kwargs)

    storage.set_clusters = kill_then_call  # type: ignore[method-assign]
    changed = chunker.get_nodes_from_documents([Document(text=licence("Apache-2.0.txt"), id_="full")])
    with pytest.raises(RedisUnavailable):
        transform(changed)
    storage.set_clusters = real  # type: ignore[method-assign]
    server.start()

    assert (index_state(index), set(transform.dropped), transform.counts) == before
    out = transform(changed)  # the retry applies whole
    assert set(index.keys_of_source("full")) == {n.node_id for n in changed}
    assert {n.ref_doc_id for n in out} == {"full", "half"}  # the half's copies are promoted now


# --- issue 19 item 7: workers' counts, a fresh transform on a loaded pipeline --------------------------


def test_counts_after_worker_processes_warn_and_the_index_has_the_totals(redis_url):
    index = DedupIndex(storage=redis_url, namespace="workers")
    transform = DedupTransform(index=index, replace_documents=False)
    nodes = [TextNode(text=licence(name), id_=name) for name in ("BSD.txt", "MPL-2.0.txt", "GPL-2.txt", "GPL-3.txt")]
    nodes.append(TextNode(text=licence("BSD.txt").upper(), id_="bsd-copy"))
    out = IngestionPipeline(transformations=[transform]).run(nodes=nodes, num_workers=2)
    assert len(out) == len(nodes) == len(index)
    with pytest.warns(UserWarning, match="worker processes"):
        counts = transform.counts
    assert counts == {}
    assert index.resolve("bsd-copy") == "BSD.txt"  # found across the workers' batches


def test_drop_mode_refuses_worker_processes(redis_url):
    index = DedupIndex(storage=redis_url, namespace="drop-workers")
    with pytest.raises(RuntimeError, match="mode='drop'.*num_workers=None"):
        pickle.dumps(DedupTransform(index=index, mode="drop"))


def test_a_fresh_transform_on_a_loaded_pipeline_warns_and_a_resumed_one_does_not(tmp_path):
    """Regression: DedupTransform() with pipeline.load(d) but without from_persist_dir compared new
    documents only with each other, silently."""
    first = DedupTransform()
    strategy = DocstoreStrategy.DUPLICATES_ONLY
    pipeline = IngestionPipeline(
        transformations=[SentenceChunker(), first], docstore=SimpleDocumentStore(), docstore_strategy=strategy
    )
    pipeline.run(documents=[Document(text=GPL3, id_="full")])
    pipeline.persist(str(tmp_path))
    first.persist(tmp_path)
    later = [Document(text=HALF, id_="half")]

    fresh = IngestionPipeline(transformations=[SentenceChunker(), DedupTransform()], docstore_strategy=strategy)
    fresh.load(str(tmp_path))
    with pytest.warns(UserWarning, match="docstore holds 1 documents .*'full'.*from_persist_dir"):
        fresh.run(documents=later)

    resumed = IngestionPipeline(
        transformations=[SentenceChunker(), DedupTransform.from_persist_dir(tmp_path)], docstore_strategy=strategy
    )
    resumed.load(str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nodes = resumed.run(documents=later)
    index = resumed.transformations[1].index
    full = set(index.keys_of_source("full"))
    with_full = [n for n in nodes if full & set(index.members(index.resolve(n.node_id)))]
    assert len(with_full) >= 0.9 * len(nodes)  # found against the saved index

