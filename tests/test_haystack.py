"""The Haystack adapter in Haystack's real Pipeline: InMemoryDocumentStore, DocumentWriter,
InMemoryBM25Retriever; serialisation through YAML; run_async; warm_up."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

pytest.importorskip("haystack", reason='the Haystack adapter needs pip install "rag-dedup[haystack]"')

from adapter_corpus import paragraphs
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
