"""DedupTransform inside real IngestionPipelines: stamps, drop mode, cache, upserts, workers, persistence."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from llama_index.core import Document
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.schema import ImageNode, MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.utils import node_to_metadata_dict

from rag_dedup.llama_index.chunking import SentenceChunker
from rag_dedup.index import DedupIndex
from rag_dedup.ingest import Ingestor
from rag_dedup.llama_index.metadata import DEDUP_CLUSTER, DEDUP_DUPLICATE_OF
from rag_dedup.llama_index.transform import DEFAULT_SETTINGS_FILENAME, DedupTransform, SharedIndexRequired
from tests.adapter_corpus import paragraphs

CORPUS = Path(__file__).parents[1] / "data" / "corpus"
LICENSES = CORPUS / "licenses"


@pytest.fixture(scope="module")
def documents() -> list[Document]:
    return [
        Document(text=p.read_text(encoding="utf-8", errors="replace"), id_=p.relative_to(CORPUS).as_posix())
        for p in sorted(CORPUS.rglob("*.txt"))
    ]


def licence(name: str) -> str:
    return (LICENSES / name).read_text(encoding="utf-8")


def pipeline(transform: DedupTransform, **kwargs) -> IngestionPipeline:
    return IngestionPipeline(transformations=[SentenceChunker(), transform], **kwargs)


def upsert_pipeline(transform: DedupTransform) -> IngestionPipeline:
    # UPSERTS applies when both stores are set; the nodes carry no embeddings, so nothing is embedded.
    return pipeline(
        transform,
        docstore=SimpleDocumentStore(),
        vector_store=SimpleVectorStore(),
        docstore_strategy=DocstoreStrategy.UPSERTS,
    )


# --- stamps and modes ---------------------------------------------------------------------------


def test_every_text_node_is_indexed_and_stamped_with_its_current_cluster(documents):
    transform = DedupTransform()
    nodes = pipeline(transform).run(documents=documents)
    index = transform.index
    assert len(index) == len(nodes)
    for node in nodes:
        match = index.match(node.node_id)
        assert node.metadata[DEDUP_CLUSTER] == match.cluster_id
        assert node.metadata[DEDUP_DUPLICATE_OF] == match.duplicate_of
        assert index.keys_of_source(node.ref_doc_id).count(node.node_id) == 1
    assert sum(n.metadata[DEDUP_DUPLICATE_OF] is not None for n in nodes) > 50  # the corpus repeats itself
    assert transform.counts["exact"] + transform.counts["near"] + transform.counts["unique"] == len(nodes)


def test_stamps_change_neither_embedding_text_nor_llm_text_and_are_flat(documents):
    plain = SentenceChunker().get_nodes_from_documents(documents[:5])
    stamped = DedupTransform()(SentenceChunker().get_nodes_from_documents(documents[:5]))
    for before, after in zip(plain, stamped):
        for mode in (MetadataMode.EMBED, MetadataMode.LLM):
            assert after.get_content(metadata_mode=mode) == before.get_content(metadata_mode=mode)
        node_to_metadata_dict(after)  # raises if a value is not flat (str, int, float, None)


def test_drop_mode_passes_representatives_only_and_records_every_node(documents):
    transform = DedupTransform(mode="drop")
    nodes = pipeline(transform).run(documents=documents)
    index = transform.index
    passed = {n.node_id for n in nodes}
    every_key = [k for _, members in index.clusters() for k in members]
    assert len(every_key) == len(index) > len(passed)
    assert passed == {k for k in every_key if index.resolve(k) == k}
    assert all(index.resolve(k) in passed for k in every_key)  # a dropped node names a passed-on one
    assert all(n.metadata[DEDUP_DUPLICATE_OF] is None for n in nodes)
    assert transform.counts["dropped"] == len(index) - len(passed) == len(transform.dropped)


def test_drop_mode_decides_as_the_shared_ingest_rule_call_by_call_and_on_deletion():
    """One rule in one place: the transform's drop decisions are rag_dedup.ingest's, fed the same items
    (real paragraphs, a few documents a call, then a deletion that promotes dropped copies)."""
    rows = list(paragraphs())[:400]
    transform = DedupTransform(mode="drop", replace_documents=False)
    ingestor: Ingestor[None] = Ingestor(DedupIndex(), "drop")
    for start in range(0, len(rows), 37):
        batch = rows[start : start + 37]
        nodes = [
            TextNode(text=t, id_=k, relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=s)})
            for k, t, s in batch
        ]
        ours = [n.node_id for n in transform(nodes)]
        assert ours == [v.key for v in ingestor.run([(k, t, s, None) for k, t, s in batch]).passed()]
    index, source_of = transform.index, {k: s for k, _, s in rows}
    dropped = set(transform.dropped)
    source = next(  # a document holding the passed copy of a passage that another document repeats
        source_of[k]
        for k in sorted(ingestor.ledger.passed)
        if any(m in dropped and source_of[m] != source_of[k] for m in index.members(index.resolve(k)))
    )
    promoted = [n.node_id for n in transform.delete_ref_doc(source)]
    assert promoted and promoted == [v.key for v in ingestor.remove([k for k, _, s in rows if s == source])]
    assert set(transform.dropped) == set(ingestor.ledger.dropped)
    assert transform.counts["dropped"] > 0


def test_drop_mode_called_again_with_the_same_nodes_passes_the_same_nodes(documents):
    """Re-submission: a node passed before passes again (an upsert replaces it in the stores)."""
    transform = DedupTransform(mode="drop")
    nodes = SentenceChunker().get_nodes_from_documents(documents[:20])
    first = [n.node_id for n in transform(nodes)]
    assert len(first) < len(nodes)
    assert [n.node_id for n in transform(SentenceChunker().get_nodes_from_documents(documents[:20]))] == first


def test_nodes_without_text_pass_through_unindexed():
    image = ImageNode(image_url="file:///figure.png", text="Figure 1: the same caption", id_="img")
    empty = TextNode(text="  \n ", id_="empty")
    text = TextNode(text=licence("BSD.txt")[:400], id_="text")
    transform = DedupTransform(mode="drop")
    out = transform([image, empty, text])
    assert out == [image, empty, text]
    assert image.metadata == {} and empty.metadata == {}
    assert "img" not in transform.index and "text" in transform.index


def test_duplicate_node_ids_in_one_call_are_refused_before_anything_changes():
    transform = DedupTransform()
    transform([TextNode(text="Earlier text about licences and notices.", id_="a")])
    with pytest.raises(ValueError, match="'b' appears twice"):
        transform([TextNode(text="one", id_="b"), TextNode(text="two", id_="b")])
    assert len(transform.index) == 1


def test_reingesting_unchanged_documents_leaves_the_same_clusters(documents):
    transform = DedupTransform()
    first = {n.node_id: dict(n.metadata) for n in pipeline(transform).run(documents=documents[:40])}
    second = {n.node_id: dict(n.metadata) for n in pipeline(transform).run(documents=documents[:40])}
    assert second == first
    assert len(transform.index) == len(first)


# --- the pipeline's transformation cache --------------------------------------------------------


def test_a_fresh_transform_is_not_served_another_transforms_cached_output(documents):
    """Regression: the cache key is the input nodes plus to_dict(); without a state token a new transform
    (new, empty index) got the old transform's output from the cache and its index stayed empty."""
    first = pipeline(DedupTransform())
    first.run(documents=documents[:20])
    fresh = DedupTransform()
    nodes = pipeline(fresh, cache=first.cache).run(documents=documents[:20])
    assert len(fresh.index) == len(nodes) > 0


def test_a_second_run_with_the_cache_gets_current_decisions_not_replayed_ones():
    """Regression: a cached DedupTransform output replayed the stamps of the first run after a later,
    longer copy had become the cluster's representative."""
    paragraph = next(p for p in licence("GPL-3.txt").split("\n\n") if 80 < len(p.split()) < 150)
    transform = DedupTransform()
    index = transform.index
    pipe = pipeline(transform)
    short = Document(text=paragraph, id_="short")
    first = {n.node_id: dict(n.metadata) for n in pipe.run(documents=[short])}
    assert all(m[DEDUP_DUPLICATE_OF] is None for m in first.values())
    # a longer copy that is still one chunk: words before the paragraph (a sentence appended after it
    # would let a content-defined cut fall before the paragraph's last sentence, under the tail rule)
    pipe.run(documents=[Document(text="In this longer copy: " + paragraph, id_="longer")])
    taken_over = [k for k in first if index.resolve(k) != k]
    assert taken_over  # the longer copy's last chunk represents that cluster now

    again = pipe.run(documents=[short])  # the chunker's output comes from the cache: the same node ids

    assert {n.node_id for n in again} == set(first)
    for node in again:
        match = index.match(node.node_id)
        assert (node.metadata[DEDUP_CLUSTER], node.metadata[DEDUP_DUPLICATE_OF]) == (
            match.cluster_id,
            match.duplicate_of,
        )
    assert any(node.metadata != first[node.node_id] for node in again)


def test_index_state_in_to_dict_changes_with_every_call_that_changes_the_index():
    transform = DedupTransform()
    before = transform.to_dict()["index_state"]
    transform([TextNode(text="A sentence about software licences.", id_="a")])
    after = transform.to_dict()["index_state"]
    assert after != before
    transform([TextNode(text="A sentence about software licences.", id_="a")])  # changes nothing
    assert transform.to_dict()["index_state"] == after


# --- docstore upserts -----------------------------------------------------------------------------


def test_upsert_of_a_changed_document_removes_its_old_chunks_and_reelects():
    transform = DedupTransform()
    pipe = upsert_pipeline(transform)
    gpl3 = licence("GPL-3.txt")
    excerpt = Document(text=gpl3[: int(len(gpl3) * 0.6)], id_="excerpt")
    pipe.run(documents=[Document(text=gpl3, id_="full"), excerpt])
    index = transform.index
    old_full = set(index.keys_of_source("full"))
    represented_by_full = [k for k in index.keys_of_source("excerpt") if index.resolve(k) in old_full]
    assert represented_by_full  # the excerpt's chunks are copies, some represented by the full text's

    out = pipe.run(documents=[Document(text=licence("Apache-2.0.txt"), id_="full"), excerpt])

    new_full = set(index.keys_of_source("full"))
    assert new_full == {n.node_id for n in out}  # the unchanged excerpt was skipped by the docstore
    assert not old_full & new_full
    live = {k for _, members in index.clusters() for k in members}
    assert live == new_full | set(index.keys_of_source("excerpt"))
    assert all(index.resolve(k) == k for k in represented_by_full)  # re-elected among the survivors


def test_upsert_in_drop_mode_passes_on_dropped_nodes_that_became_representatives():
    """Regression: a node dropped as a copy was never embedded; when its representative's document changed,
    the cluster re-elected it but it was in no store, and its passage vanished from retrieval."""
    transform = DedupTransform(mode="drop")
    pipe = upsert_pipeline(transform)
    gpl3 = licence("GPL-3.txt")
    excerpt = Document(text=gpl3[: int(len(gpl3) * 0.6)], id_="excerpt")
    first = pipe.run(documents=[Document(text=gpl3, id_="full"), excerpt])
    index = transform.index
    dropped_excerpt = set(index.keys_of_source("excerpt")) - {n.node_id for n in first}
    assert dropped_excerpt

    out = pipe.run(documents=[Document(text=licence("Apache-2.0.txt"), id_="full"), excerpt])

    promoted = {n.node_id for n in out} - set(index.keys_of_source("full"))
    assert promoted == dropped_excerpt
    assert all(n.metadata[DEDUP_DUPLICATE_OF] is None for n in out)
    assert transform.counts["promoted"] == len(dropped_excerpt)
    assert not set(transform.dropped) & promoted


def test_deleting_a_document_removes_its_chunks_and_returns_promoted_copies():
    transform = DedupTransform(mode="drop")
    gpl3 = licence("GPL-3.txt")
    pipe = pipeline(transform)
    first = pipe.run(documents=[Document(text=gpl3, id_="full"), Document(text=gpl3[: len(gpl3) // 2], id_="half")])
    index = transform.index
    dropped_half = set(index.keys_of_source("half")) - {n.node_id for n in first}
    assert dropped_half

    promoted = transform.delete_ref_doc("full")

    assert index.keys_of_source("full") == []
    assert {n.node_id for n in promoted} == dropped_half
    assert all(index.resolve(n.node_id) == n.node_id and n.metadata[DEDUP_DUPLICATE_OF] is None for n in promoted)
    assert transform.delete_ref_doc("never-ingested") == []


# --- async, workers, serialisation, persistence ----------------------------------------------------


def test_async_pipeline_gives_the_stamps_of_the_sync_pipeline(documents):
    sync = {n.node_id: dict(n.metadata) for n in pipeline(DedupTransform()).run(documents=documents[:30])}
    transform = DedupTransform()
    nodes = asyncio.run(pipeline(transform).arun(documents=documents[:30]))
    assert {n.node_id: dict(n.metadata) for n in nodes} == sync
    assert asyncio.run(transform.acall([])) == []


def test_workers_with_an_in_memory_index_are_refused_not_silently_wrong(documents):
    """Regression: with num_workers=2 each worker got a pickled copy of the index and cross-batch duplicates
    were silently missed."""
    transform = DedupTransform()
    with pytest.raises(SharedIndexRequired, match="num_workers") as caught:
        pipeline(transform).run(documents=documents[:4], num_workers=2)
    assert "redis://" in str(caught.value)
    assert len(transform.index) == 0


def test_serialises_like_other_components():
    transform = DedupTransform(threshold=0.7, mode="drop", replace_documents=False)
    data = transform.to_dict()
    assert data["class_name"] == "DedupTransform"
    assert {k: data[k] for k in ("threshold", "mode", "replace_documents")} == {
        "threshold": 0.7,
        "mode": "drop",
        "replace_documents": False,
    }
    again = DedupTransform.from_json(transform.to_json())
    assert (again.threshold, again.mode, again.replace_documents) == (0.7, "drop", False)
    assert again.index.threshold == 0.7 and len(again.index) == 0


def test_persists_next_to_the_pipeline_and_resumes(tmp_path, documents):
    copyright_docs = [d for d in documents if d.id_.startswith("copyright/")]
    part1, part2 = copyright_docs[:30], copyright_docs[30:]
    transform = DedupTransform(mode="drop")
    pipe = pipeline(transform, docstore=SimpleDocumentStore(), docstore_strategy=DocstoreStrategy.DUPLICATES_ONLY)
    pipe.run(documents=part1)
    pipe.persist(str(tmp_path))
    transform.persist(tmp_path)
    assert (tmp_path / DEFAULT_SETTINGS_FILENAME).is_file() and (tmp_path / "docstore.json").is_file()

    resumed = DedupTransform.from_persist_dir(tmp_path)
    assert resumed.mode == "drop" and set(resumed.dropped) == set(transform.dropped)
    assert sorted(resumed.index.clusters()) == sorted(transform.index.clusters())
    pipe2 = pipeline(resumed, docstore_strategy=DocstoreStrategy.DUPLICATES_ONLY)
    pipe2.load(str(tmp_path))
    pipe2.run(documents=part2)
    earlier = {k for d in part1 for k in resumed.index.keys_of_source(d.id_)}
    later = {k for d in part2 for k in resumed.index.keys_of_source(d.id_)}
    assert later and any(resumed.index.resolve(k) in earlier for k in later)  # found across the restart


def test_from_persist_dir_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(FileNotFoundError, match=DEFAULT_SETTINGS_FILENAME):
        DedupTransform.from_persist_dir(tmp_path)
    (tmp_path / DEFAULT_SETTINGS_FILENAME).write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ValueError, match="not a saved DedupTransform"):
        DedupTransform.from_persist_dir(tmp_path)
    (tmp_path / DEFAULT_SETTINGS_FILENAME).write_text(
        json.dumps({"format": "rag-dedup-transform", "format_version": 99})
    )
    with pytest.raises(ValueError, match="newer"):
        DedupTransform.from_persist_dir(tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        pytest.param({"threshold": 0.0}, ValueError, id="threshold-zero"),
        pytest.param({"threshold": 1.01}, ValueError, id="threshold-above-one"),
        pytest.param({"mode": "delete"}, ValueError, id="unknown-mode"),
        pytest.param({"index": "redis://localhost"}, TypeError, id="index-type"),
        pytest.param(
            {"index": DedupIndex(threshold=0.8), "threshold": 0.9}, ValueError, id="threshold-contradicts-index"
        ),
    ],
)
def test_bad_arguments_are_refused(kwargs, error):
    with pytest.raises(error):
        DedupTransform(**kwargs)


def test_bad_assignment_is_refused():
    transform = DedupTransform()
    with pytest.raises(ValueError, match="mode"):
        transform.mode = "delete"  # type: ignore[assignment]


def test_threshold_defaults_to_the_index():
    assert DedupTransform(index=DedupIndex(threshold=0.9)).threshold == 0.9


@pytest.mark.parametrize("mode", ["tag", "drop"])
def test_identical_documents_run_again_unchanged_keep_their_chunks(mode):
    """Two documents with equal text and metadata have equal hashes, and the docstore's
    get_all_document_hashes() (keyed by hash) names one of them: the other was read as deleted on the
    next run, its chunks removed from the index (tag) or the other's copies promoted into the vector
    store beside its own (drop)."""
    text = licence("Apache-2.0.txt")
    docs = [Document(text=text, id_="a"), Document(text=text, id_="b"), Document(text=licence("BSD.txt"), id_="c")]
    transform = DedupTransform(mode=mode)
    pipe = pipeline(transform, docstore=SimpleDocumentStore(), vector_store=SimpleVectorStore(),
                    docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)
    pipe.run(documents=docs)
    before = {doc: sorted(transform.index.keys_of_source(doc)) for doc in ("a", "b")}
    assert before["a"] and before["b"]
    assert pipe.run(documents=docs) == []  # nothing changed: nothing to pass on
    assert {doc: sorted(transform.index.keys_of_source(doc)) for doc in ("a", "b")} == before
    assert transform.counts["removed"] == 0 and transform.counts["promoted"] == 0
    pipe.run(documents=docs[:2])  # c left the input: the pipeline deletes it, and so does the transform
    assert transform.index.keys_of_source("c") == []
    assert {doc: sorted(transform.index.keys_of_source(doc)) for doc in ("a", "b")} == before


@pytest.mark.parametrize("strategy", [DocstoreStrategy.UPSERTS, DocstoreStrategy.DUPLICATES_ONLY])
def test_documents_missing_from_a_docstore_that_deletes_nothing_are_not_taken_for_deleted(strategy):
    """A transform shared by two pipelines (each with its own docstore), or fed outside a pipeline
    first: every document missing from the running pipeline's docstore was removed from the index,
    under every strategy. Only UPSERTS_AND_DELETE (with a vector store) deletes documents."""
    transform = DedupTransform()
    first = pipeline(transform, docstore=SimpleDocumentStore(), vector_store=SimpleVectorStore(),
                     docstore_strategy=strategy)
    second = pipeline(transform, docstore=SimpleDocumentStore(), vector_store=SimpleVectorStore(),
                      docstore_strategy=strategy)
    first.run(documents=[Document(text=licence("Apache-2.0.txt"), id_="wiki/apache")])
    kept = sorted(transform.index.keys_of_source("wiki/apache"))
    out = second.run(documents=[Document(text=licence("Apache-2.0.txt"), id_="ticket/1")])
    assert sorted(transform.index.keys_of_source("wiki/apache")) == kept and transform.counts["removed"] == 0
    assert all(transform.index.resolve(n.node_id) == transform.index.resolve(n.metadata[DEDUP_CLUSTER]) for n in out)
    assert any(n.metadata[DEDUP_DUPLICATE_OF] is not None for n in out)  # the ticket's copies found


def test_items_that_are_not_nodes_are_refused_by_position():
    """DedupTransform()(["a str", None, 42]) returned its input unchanged, saying nothing."""
    with pytest.raises(TypeError, match=r"nodes\[1\] is a NoneType, not a LlamaIndex node"):
        DedupTransform()([TextNode(text="Permission is hereby granted, free of charge.", id_="n"), None, 42])


def test_the_callers_documents_are_stamped_on_copies_outside_a_pipeline_too():
    """VectorStoreIndex.from_documents(docs, transformations=[DedupTransform()]) hands the transform the
    user's Documents: they were stamped in place, their metadata and hash changed."""
    text = licence("BSD.txt")
    docs = [Document(text=text, id_="a"), Document(text=text.upper(), id_="b")]
    hashes = [d.hash for d in docs]
    out = DedupTransform()(docs)
    assert [d.metadata for d in docs] == [{}, {}] and [d.hash for d in docs] == hashes
    assert [n.metadata[DEDUP_DUPLICATE_OF] for n in out] == [None, "a"] and all(n is not d for n, d in zip(out, docs))
