"""The Haystack adapter in Haystack's real Pipeline: InMemoryDocumentStore, DocumentWriter,
InMemoryBM25Retriever; serialisation through YAML; run_async; warm_up."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys

import pytest

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # no telemetry calls from the test machine

pytest.importorskip("haystack", reason='the Haystack adapter needs pip install "rag-dedup[haystack]"')

from tests.adapter_corpus import paragraphs
from haystack import Document, Pipeline
from haystack.components.writers import DocumentWriter
from haystack.document_stores.in_memory import InMemoryDocumentStore

from rag_dedup.index import DedupIndex
from rag_dedup.haystack import DocumentDeduplicator
from rag_dedup.stamps import DEDUP_CLUSTER, DEDUP_DUPLICATE_OF


def corpus_documents() -> list[Document]:
    return [Document(content=t, meta={"file_path": s, "key": k}) for k, t, s in paragraphs()]


def ingest_pipeline(dedup: DocumentDeduplicator, store: InMemoryDocumentStore) -> Pipeline:
    pipeline = Pipeline()
    pipeline.add_component("dedup", dedup)
    pipeline.add_component("writer", DocumentWriter(document_store=store))
    pipeline.connect("dedup.documents", "writer.documents")
    return pipeline


def test_tag_mode_in_a_pipeline_writes_every_document_stamped_as_the_index_does() -> None:
    docs = corpus_documents()
    store = InMemoryDocumentStore()
    result = ingest_pipeline(DocumentDeduplicator(), store).run({"dedup": {"documents": docs}})
    assert result["writer"]["documents_written"] == len(docs)
    reference = DedupIndex().add_many([{"key": d.id, "text": d.content, "source": d.meta["file_path"]} for d in docs])
    written = {d.id: d for d in store.filter_documents()}
    assert [(written[m.key].meta[DEDUP_CLUSTER], written[m.key].meta[DEDUP_DUPLICATE_OF]) for m in reference] == [
        (m.cluster_id, m.duplicate_of) for m in reference
    ]
    assert all(DEDUP_CLUSTER not in d.meta for d in docs), "the caller's documents were modified"


def test_drop_mode_writes_one_copy_of_each_passage() -> None:
    docs = corpus_documents()
    store = InMemoryDocumentStore()
    dedup = DocumentDeduplicator(mode="drop")
    ingest_pipeline(dedup, store).run({"dedup": {"documents": docs}})
    clusters = [d.meta[DEDUP_CLUSTER] for d in store.filter_documents()]
    assert len(clusters) == len(set(clusters)) < len(docs)
    assert len(dedup.index) == len(docs)


def test_pipeline_round_trips_through_yaml(tmp_path) -> None:  # type: ignore[no-untyped-def]
    dedup = DocumentDeduplicator(threshold=0.85, mode="drop", index_path=str(tmp_path / "idx"), source_key="src")
    pipeline = ingest_pipeline(dedup, InMemoryDocumentStore())
    # Haystack loads only allowlisted modules: name ours, as a user does.
    loaded = Pipeline.loads(pipeline.dumps(), allowed_modules=["rag_dedup.haystack"])
    again = loaded.get_component("dedup")
    assert isinstance(again, DocumentDeduplicator)
    assert again.to_dict() == dedup.to_dict()
    assert (again.threshold, again.mode, again.index_path, again.source_key) == (0.85, "drop", str(tmp_path / "idx"), "src")


def test_index_opens_in_warm_up_and_save_reloads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "idx")
    docs = corpus_documents()[:120]
    dedup = DocumentDeduplicator(index_path=path)
    assert dedup._ingestor is None  # nothing heavy in __init__
    dedup.run(docs)
    dedup.save()
    later = DocumentDeduplicator(index_path=path)
    later.warm_up()
    assert len(later.index) == len(docs)
    assert later.index.resolve(docs[0].id) == dedup.index.resolve(docs[0].id)


def test_run_async_matches_run() -> None:
    docs = corpus_documents()[:150]
    sync = DocumentDeduplicator().run(docs)["documents"]
    result = asyncio.run(DocumentDeduplicator().run_async(docs))["documents"]
    assert [d.meta for d in result] == [d.meta for d in sync]


def test_concurrent_async_runs_over_one_index_pass_a_passage_once() -> None:
    """Regression: run_async runs in executor threads over one in-memory index, which is not safe for two
    writers at once: 32 concurrent runs of copies of one passage raised "... is in no cluster of its
    component" most times, or passed two copies."""
    text = corpus_documents()[0].content
    dedup = DocumentDeduplicator(mode="drop")

    async def run_all() -> list[dict[str, list[Document]]]:
        return await asyncio.gather(
            *(dedup.run_async([Document(content=text, id=f"copy-{i}", meta={"file_path": f"f{i}"})]) for i in range(32))
        )

    passed = [d for out in asyncio.run(run_all()) for d in out["documents"]]
    assert len(passed) == 1 and len(dedup.index) == 32
    assert {dedup.index.resolve(f"copy-{i}") for i in range(32)} == {passed[0].id}


def test_empty_input_and_documents_without_text() -> None:
    dedup = DocumentDeduplicator()
    assert dedup.run([]) == {"documents": []}
    out = dedup.run([Document(content=None, meta={"a": 1}), Document(content="   ")])["documents"]
    assert [d.meta for d in out] == [{"a": 1}, {}]
    assert len(dedup.index) == 0


def test_deleting_the_written_copy_promotes_a_dropped_one() -> None:
    (_, text, _), *_ = paragraphs()
    dedup = DocumentDeduplicator(mode="drop")
    first, second = Document(content=text, meta={"file_path": "a"}), Document(content=text.upper(), meta={"file_path": "b"})
    assert [d.id for d in dedup.run([first, second])["documents"]] == [first.id]
    promoted = dedup.delete([first.id])["documents"]
    assert [(d.id, d.meta[DEDUP_DUPLICATE_OF]) for d in promoted] == [(second.id, None)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"threshold": 0}, "threshold", id="threshold"),
        pytest.param({"mode": "keep"}, "mode", id="mode"),
        pytest.param({"storage": "redis://localhost/0", "index_path": "x"}, "not both", id="two-indexes"),
    ],
)
def test_bad_parameters_fail_at_construction(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DocumentDeduplicator(**kwargs)


def test_missing_extra_names_the_pip_command() -> None:
    code = (
        "import sys; sys.modules['haystack'] = None\n"
        "try:\n    import rag_dedup.haystack\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 'pip install "rag-dedup[haystack]"' in out


# --- query time and chunking --------------------------------------------------------------------
from tests.adapter_corpus import QUERIES, distinct_ratio, max_pair_similarity  # noqa: E402
from tests.corpus import documents as corpus_files  # noqa: E402
from tests.kernels import kernels  # noqa: E402,F401  (a fixture)
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever  # noqa: E402

from rag_dedup.haystack import DuplicateCollapser, SentenceChunker  # noqa: E402
from rag_dedup.stamps import DEDUP_COLLAPSED  # noqa: E402


def file_documents() -> list[Document]:
    return [Document(content=text, meta={"file_path": path}) for path, text in corpus_files().items()]


def chunked_ingest_pipeline(store: InMemoryDocumentStore) -> Pipeline:
    """SentenceChunker -> DocumentDeduplicator (tag) -> DocumentWriter into ``store``."""
    pipeline = Pipeline()
    pipeline.add_component("chunker", SentenceChunker())
    pipeline.add_component("dedup", DocumentDeduplicator())
    pipeline.add_component("writer", DocumentWriter(document_store=store))
    pipeline.connect("chunker.documents", "dedup.documents")
    pipeline.connect("dedup.documents", "writer.documents")
    return pipeline


@pytest.fixture(scope="module")
def store() -> InMemoryDocumentStore:
    """The corpus through SentenceChunker -> DocumentDeduplicator (tag) -> DocumentWriter."""
    store = InMemoryDocumentStore()
    chunked_ingest_pipeline(store).run({"chunker": {"documents": file_documents()}})
    return store


def query_pipeline(store: InMemoryDocumentStore, collapse: bool) -> Pipeline:
    pipeline = Pipeline()
    pipeline.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=30 if collapse else 10))
    if collapse:
        pipeline.add_component("collapse", DuplicateCollapser(top_k=10))
        pipeline.connect("retriever.documents", "collapse.documents")
    return pipeline


def test_chunker_meta_follows_document_splitter_and_offsets_are_exact() -> None:
    from llama_index.core import Document as LlamaDocument

    from rag_dedup.llama_index.chunking import SentenceChunker as LlamaChunker

    doc = max(file_documents(), key=lambda d: len(d.content or ""))
    chunks = SentenceChunker().run([doc])["documents"]
    assert [c.meta["split_id"] for c in chunks] == list(range(len(chunks)))
    assert all(c.meta["source_id"] == doc.id and c.meta["file_path"] == doc.meta["file_path"] for c in chunks)
    text = doc.content or ""
    assert all(text[c.meta["split_idx_start"] :].startswith(c.content or "") for c in chunks)
    nodes = LlamaChunker().get_nodes_from_documents([LlamaDocument(text=text)])
    assert [c.content for c in chunks] == [n.text for n in nodes]  # one engine, one cut plan
    overlaps = [o for c in chunks for o in c.meta["_split_overlap"]]
    ids = {c.id: c for c in chunks}
    for c in chunks:
        for o in c.meta["_split_overlap"]:
            lo, hi = o["range"]
            assert (ids[o["doc_id"]].content or "")[lo:hi] in (c.content or "")
    assert overlaps
    # Every pair of chunks that shares text is listed, both ways, not only neighbours (an overlap can
    # reach back past a short chunk): the pairs were missing from each other's lists.
    sharing = {(a.id, b.id) for a in chunks for b in chunks if a is not b
               and max(a.meta["split_idx_start"], b.meta["split_idx_start"])
               < min(a.meta["split_idx_start"] + len(a.content or ""), b.meta["split_idx_start"] + len(b.content or ""))}
    listed = {(c.id, o["doc_id"]) for c in chunks for o in c.meta["_split_overlap"]}
    assert listed == sharing


def test_chunker_refuses_a_document_without_text() -> None:
    with pytest.raises(ValueError, match="content of document"):
        SentenceChunker().run([Document(content=None)])


def test_collapser_after_bm25_keeps_no_duplicates_and_keeps_citations(store: InMemoryDocumentStore, kernels: str) -> None:
    collapsed, plain = query_pipeline(store, True), query_pipeline(store, False)
    ratios, ratios_plain = [], []
    for query in QUERIES:
        out = collapsed.run({"retriever": {"query": query}})["collapse"]["documents"]
        assert len(out) <= 10
        texts = [d.content or "" for d in out]
        assert max_pair_similarity(texts) < 0.8, query
        assert all(e["id"] and e["reason"] for d in out for e in d.meta.get(DEDUP_COLLAPSED, []))
        scores = [d.score for d in out]
        assert scores == sorted(scores, reverse=True), "input order (best first) was not kept"
        ratios.append(distinct_ratio(texts, len(texts)))
        ratios_plain.append(distinct_ratio([d.content or "" for d in plain.run({"retriever": {"query": query}})["retriever"]["documents"]], 10))
    assert min(ratios) == 1.0 and sum(ratios_plain) < len(ratios_plain)


def test_collapser_run_async_and_top_k_override(store: InMemoryDocumentStore) -> None:
    fetched = InMemoryBM25Retriever(document_store=store, top_k=30).run(query=QUERIES[0])["documents"]
    collapser = DuplicateCollapser(top_k=10)
    sync = collapser.run(fetched, top_k=3)["documents"]
    result = asyncio.run(collapser.run_async(fetched, top_k=3))["documents"]
    assert len(sync) == 3 and [d.id for d in result] == [d.id for d in sync]
    assert all(DEDUP_COLLAPSED not in d.meta for d in fetched), "the retriever's documents were modified"


def test_a_folded_copy_cites_its_file_not_its_parent_documents_hash() -> None:
    """Regression: the collapser cited meta["source_id"] (the parent document's id, which every chunk of a
    splitter carries) ahead of file_path / source_key, unlike the deduplicator and the README."""
    text = " ".join((corpus_documents()[0].content or "").split()[:60])  # one chunk
    store = InMemoryDocumentStore()
    ingest = chunked_ingest_pipeline(store)
    originals = [Document(content=text, meta={"file_path": "a.txt"}), Document(content=text, meta={"file_path": "copy.txt"})]
    ingest.run({"chunker": {"documents": originals}})
    fetched = sorted(store.filter_documents(), key=lambda d: d.meta["file_path"])
    assert all(d.meta["source_id"] in {o.id for o in originals} for d in fetched)
    fetched = [dataclasses.replace(d, score=2.0 - i) for i, d in enumerate(fetched)]
    (kept,) = DuplicateCollapser().run(fetched)["documents"]
    assert kept.meta["file_path"] == "a.txt"
    assert [e["source"] for e in kept.meta[DEDUP_COLLAPSED]] == ["copy.txt"]
    urls = [Document(content=text, score=2.0, meta={"url": "http://a", "source_id": "p1"}),
            Document(content=text.upper(), score=1.0, meta={"url": "http://b", "source_id": "p2"})]
    (kept,) = DuplicateCollapser(source_key="url").run(urls)["documents"]
    assert [e["source"] for e in kept.meta[DEDUP_COLLAPSED]] == ["http://b"]


def test_query_pipeline_round_trips_through_yaml(store: InMemoryDocumentStore) -> None:
    pipeline = Pipeline()
    pipeline.add_component("chunker", SentenceChunker(chunk_size=128, chunk_overlap=16))
    pipeline.add_component("collapse", DuplicateCollapser(top_k=5, threshold=0.9, merge_overlaps=True))
    loaded = Pipeline.loads(pipeline.dumps(), allowed_modules=["rag_dedup.haystack"])
    for name in ("chunker", "collapse"):
        assert loaded.get_component(name).to_dict() == pipeline.get_component(name).to_dict()


def test_the_collapsers_copies_equal_dataclasses_replace() -> None:
    """The collapser's copy of a keeper (components._with_meta) against dataclasses.replace: equal
    documents, every field the same, the input unchanged; documents that replace would change (no id,
    an ndarray embedding) go through replace itself."""
    import dataclasses

    import numpy as np

    from rag_dedup.haystack.components import _with_meta

    meta = {"file_path": "f", DEDUP_COLLAPSED: [{"id": "b"}]}
    for doc in (
        Document(content="Permission is hereby granted", meta={"file_path": "f"}, score=1.5, embedding=[0.1, 0.2]),
        Document(content=None, id="x"),
    ):
        ours, theirs = _with_meta(doc, meta), dataclasses.replace(doc, meta=meta)
        assert ours == theirs and ours.to_dict() == theirs.to_dict() and ours is not doc
        assert DEDUP_COLLAPSED not in doc.meta
    odd = Document(content="text", id="y")
    object.__setattr__(odd, "embedding", np.array([1.0, 2.0]))
    assert _with_meta(odd, meta).embedding == [1.0, 2.0]  # converted, as replace converts it


def test_nested_meta_is_not_shared_and_a_bad_source_key_is_refused() -> None:
    """Regression: the stamped copies shared nested meta with the caller's documents (editing the output
    changed the input), and a non-str source_key was accepted."""
    text = corpus_documents()[0].content or ""
    meta = {"loader": {"page": 1}}
    (out,) = DocumentDeduplicator().run([Document(content=text, meta=meta)])["documents"]
    out.meta["loader"]["page"] = 99
    assert meta == {"loader": {"page": 1}}
    with pytest.raises(TypeError, match="source_key must be a str"):
        DocumentDeduplicator(source_key=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="source_key must be a str"):
        DuplicateCollapser(source_key=1)  # type: ignore[arg-type]


def test_drop_mode_saved_and_reloaded_still_passes_each_passage_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Regression: save() wrote only the index: a component reloaded from index_path took every cluster
    for one the store held no copy of, and wrote a second copy; nor could it promote a copy dropped before."""
    path = str(tmp_path / "idx")
    text = corpus_documents()[0].content or ""
    store = InMemoryDocumentStore()
    writer = DocumentWriter(document_store=store)
    first = DocumentDeduplicator(mode="drop", index_path=path)
    written = first.run([Document(content=text, id="a", meta={"file_path": "a"}),
                         Document(content=text.upper(), id="b", meta={"file_path": "b"})])["documents"]
    writer.run(written)
    first.save()
    later = DocumentDeduplicator(mode="drop", index_path=path)
    later.warm_up()
    writer.run(later.run([Document(content=" " + text, id="c", meta={"file_path": "c"})])["documents"])
    assert [d.id for d in store.filter_documents()] == ["a"]  # one copy, as before the reload
    promoted = later.delete(["a"])["documents"]  # the stored copy leaves: a dropped one takes its place
    (one,) = promoted  # b, dropped before the save, or c, dropped after: whichever represents them now
    assert one.id == later.index.resolve("b") and one.content == {"b": text.upper(), "c": " " + text}[one.id]


def test_a_damaged_ledger_is_refused_naming_the_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from rag_dedup.errors import CorruptIndexError

    path = tmp_path / "idx"
    dedup = DocumentDeduplicator(mode="drop", index_path=str(path))
    dedup.run(corpus_documents()[:20])
    dedup.save()
    ledger = path / "haystack_ledger.json"
    body = json.loads(ledger.read_text())
    body["passed"] = [1, 2]
    ledger.write_text(json.dumps(body))
    with pytest.raises(CorruptIndexError, match=r"haystack_ledger\.json: 'passed' is not a list of document ids"):
        DocumentDeduplicator(mode="drop", index_path=str(path)).warm_up()


def test_an_id_written_again_with_new_content_is_overwritten_as_the_writer_does() -> None:
    """Regression: re-ingesting a stable id with new content raised ValueError (and named a remove() the
    component does not have), where DocumentWriter(policy=DuplicatePolicy.OVERWRITE) replaces it."""
    from haystack.document_stores.types import DuplicatePolicy

    docs = corpus_documents()
    first, second = docs[0].content or "", docs[40].content or ""
    store = InMemoryDocumentStore()
    writer = DocumentWriter(document_store=store, policy=DuplicatePolicy.OVERWRITE)
    dedup = DocumentDeduplicator()
    writer.run(dedup.run([Document(id="readme#0", content=first)])["documents"])
    writer.run(dedup.run([Document(id="readme#0", content=second)])["documents"])
    (stored,) = store.filter_documents()
    assert stored.content == second and stored.meta[DEDUP_CLUSTER] == "readme#0"
    assert len(dedup.index) == 1 and dedup.index.query(second)[0][0] == "readme#0"


def test_a_save_whose_record_cannot_be_written_fails_before_anything_is_written(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Regression (review): save() wrote the index, then failed on the record (a meta value JSON cannot
    hold), leaving the new index beside the old record."""
    import datetime

    path = tmp_path / "idx"
    text = corpus_documents()[0].content or ""
    dedup = DocumentDeduplicator(mode="drop", index_path=str(path))
    dedup.run([Document(content=text, id="a"), Document(content=text.upper(), id="b", meta={"day": datetime.date(2026, 1, 1)})])
    with pytest.raises(TypeError, match=r"one of them cannot be saved \(document 'b', meta\['day'\]: Object of type "
                                        r"date is not JSON serializable\)"):
        dedup.save()
    assert not path.exists()


def test_an_empty_index_path_folder_starts_a_new_index_that_save_fills(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An existing empty directory as index_path (made for the index) made warm_up fail with 'no saved
    rag-dedup index (missing manifest.json)'; a path that is not a str is refused at construction."""
    folder = tmp_path / "idx"
    folder.mkdir()
    text = corpus_documents()[0].content or ""
    dedup = DocumentDeduplicator(mode="drop", index_path=str(folder))
    assert len(dedup.run([Document(content=text, id="a"), Document(content=text.upper(), id="b")])["documents"]) == 1
    dedup.save()
    again = DocumentDeduplicator(mode="drop", index_path=str(folder))
    again.warm_up()
    assert len(again.index) == 2 and again.run([Document(content=text.upper(), id="c")])["documents"] == []
    assert DocumentDeduplicator(index_path=folder).to_dict()["init_parameters"]["index_path"] == str(folder)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="index_path must be a directory"):
        DocumentDeduplicator(index_path=3)  # type: ignore[arg-type]


def test_tag_mode_does_not_read_the_drop_record(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "idx"
    dedup = DocumentDeduplicator(mode="drop", index_path=str(path))
    dedup.run(corpus_documents()[:10])
    dedup.save()
    (path / "haystack_ledger.json").write_text("{damaged")
    tag = DocumentDeduplicator(index_path=str(path))
    tag.warm_up()
    assert len(tag.index) == 10


@pytest.mark.parametrize("merge_overlaps", [False, True])
def test_a_document_retrieved_twice_is_one_document_not_a_copy_of_itself(store: InMemoryDocumentStore, merge_overlaps: bool) -> None:
    fetched = InMemoryBM25Retriever(store, top_k=3).run(query=QUERIES[0])["documents"]
    doubled = [fetched[0], *fetched, dataclasses.replace(fetched[1])]  # the same id twice more
    collapser = DuplicateCollapser(merge_overlaps=merge_overlaps)
    got = collapser.run(doubled)["documents"]
    assert [d.id for d in got] == [d.id for d in collapser.run(fetched)["documents"]]
    for d in got:
        assert d.id not in {e["id"] for e in d.meta.get(DEDUP_COLLAPSED, [])}


def test_a_nan_scored_copy_is_read_last_and_folded_into_the_scored_one() -> None:
    """The adapter turned a NaN score into None (unscored), so the NaN copy, first in the list, kept
    its scored copy out; the core reads a NaN-scored passage last, as LlamaIndex's postprocessor does."""
    text = paragraphs()[0][1]
    out = DuplicateCollapser().run([Document(content=text, score=float("nan"), meta={"file_path": "nan.txt"}),
                                    Document(content=text, score=0.93, meta={"file_path": "good.txt"})])["documents"]
    assert [(d.meta["file_path"], d.score) for d in out] == [("good.txt", 0.93)]
    assert [e["source"] for e in out[0].meta["dedup_collapsed"]] == ["nan.txt"]
