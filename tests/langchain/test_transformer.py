"""``DedupDocumentTransformer`` with LangChain's real parts: InMemoryVectorStore and the indexing API with
InMemoryRecordManager and SQLRecordManager on SQLite; and the package's missing-extra message."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Sequence

import pytest

pytest.importorskip("langchain_core", reason='the LangChain adapter needs pip install "rag-dedup[langchain]"')

from tests.adapter_corpus import paragraphs
from tests.corpus import documents as corpus_files
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.indexing import InMemoryRecordManager, index
from langchain_core.vectorstores import InMemoryVectorStore

from rag_dedup.index import DedupIndex
from rag_dedup.langchain import DedupDocumentTransformer, SentenceChunker
from rag_dedup.langchain.transformer import document_key
from rag_dedup.stamps import DEDUP_CLUSTER, DEDUP_DUPLICATE_OF


def corpus_documents() -> list[Document]:
    return [Document(page_content=t, metadata={"source": s, "key": k}) for k, t, s in paragraphs()]


def test_tag_mode_stamps_every_document_as_the_index_does_and_leaves_the_input_alone() -> None:
    docs = corpus_documents()
    before = [d.model_copy(deep=True) for d in docs]
    out = DedupDocumentTransformer().transform_documents(docs)
    assert docs == before, "the caller's documents were modified"
    reference = DedupIndex().add_many(
        [{"key": document_key(d), "text": d.page_content, "source": d.metadata["source"]} for d in docs]
    )
    assert [(d.metadata[DEDUP_CLUSTER], d.metadata[DEDUP_DUPLICATE_OF]) for d in out] == [
        (m.cluster_id, m.duplicate_of) for m in reference
    ]
    assert [d.page_content for d in out] == [d.page_content for d in docs]
    assert all(d.metadata["source"] == b.metadata["source"] for d, b in zip(out, before))


def test_drop_mode_keeps_one_copy_and_remembers_the_rest() -> None:
    docs = corpus_documents()
    dedup = DedupDocumentTransformer(mode="drop")
    out = dedup.transform_documents(docs)
    clusters = [d.metadata[DEDUP_CLUSTER] for d in out]
    assert len(clusters) == len(set(clusters)) < len(docs)
    assert len(dedup.index) == len(docs)
    dropped = next(d for d in docs if document_key(d) not in {document_key(o) for o in out})
    assert dedup.index.resolve(document_key(dropped)) in {document_key(o) for o in out} | set(clusters)


def test_document_ids_are_the_keys() -> None:
    (k, t, s), *_ = paragraphs()
    out = DedupDocumentTransformer(mode="drop").transform_documents(
        [Document(t, id="first", metadata={"source": s}), Document(t.upper(), id="second", metadata={"source": "b"})]
    )
    assert [(d.id, d.metadata[DEDUP_DUPLICATE_OF]) for d in out] == [("first", None)]


def test_empty_input_and_documents_without_text() -> None:
    dedup = DedupDocumentTransformer()
    assert dedup.transform_documents([]) == []
    out = dedup.transform_documents([Document(page_content="", metadata={"source": "x"})])
    assert [(d.page_content, d.metadata) for d in out] == [("", {"source": "x"})]
    assert len(dedup.index) == 0


def test_async_transform_matches_sync() -> None:
    docs = corpus_documents()[:200]
    sync = DedupDocumentTransformer().transform_documents(docs)
    result = asyncio.run(DedupDocumentTransformer().atransform_documents(docs))
    assert [d.metadata for d in result] == [d.metadata for d in sync]


def test_concurrent_async_ingests_of_one_passage_pass_it_once() -> None:
    """Regression: atransform_documents runs in executor threads, and an in-memory index is not safe
    for two writers at once: asyncio.gather of 32 ingests of copies of one passage raised "... is in no
    cluster of its component" most times, or passed two copies."""
    (k, text, s), *_ = paragraphs()
    dedup = DedupDocumentTransformer(mode="drop")

    async def ingest_all() -> list[Sequence[Document]]:
        return await asyncio.gather(
            *(dedup.atransform_documents([Document(text, id=f"copy-{i}", metadata={"source": f"s{i}"})]) for i in range(32))
        )

    passed = [d for out in asyncio.run(ingest_all()) for d in out]
    assert len(passed) == 1 and len(dedup.index) == 32
    assert {dedup.index.resolve(f"copy-{i}") for i in range(32)} == {passed[0].id}


def test_an_edited_file_indexed_again_with_cleanup_keeps_its_passages_in_the_store() -> None:
    """Regression: in drop mode, a file's edited paragraph was dropped as a near-duplicate of its earlier
    version, which the indexing API's incremental cleanup then deleted: the paragraph was in the store in
    no version. replace_sources=True follows the cleanup."""
    text = next(t for t in corpus_files().values() if len(t.split()) > 400)
    words = text.split()
    middle = len(words) // 2
    edited = " ".join(words[:middle] + ["(amended)"] + words[middle:])
    chunker = SentenceChunker(add_start_index=True)
    dedup = DedupDocumentTransformer(mode="drop", replace_sources=True)
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    manager = InMemoryRecordManager("edit")
    manager.create_schema()

    def ingest(version: str) -> dict[str, int]:
        chunks = chunker.split_documents([Document(version, metadata={"source": "LICENSE"})])
        return index(dedup.transform_documents(chunks), manager, store, cleanup="incremental", source_id_key="source")

    ingest(text)
    again = ingest(text)
    assert (again["num_added"], again["num_deleted"]) == (0, 0)  # the same file: nothing changes
    changed = ingest(edited)
    assert changed["num_added"] >= 1
    new_chunks = chunker.split_text(edited)
    assert len(dedup.index.keys_of_source("LICENSE")) == len(new_chunks)  # none of the old version's left
    stored = [d["text"] for d in store.store.values()]
    assert set(stored) <= set(new_chunks)
    # Every passage of the new version is in the store in one copy: the amended one too.
    clusters = [d["metadata"][DEDUP_CLUSTER] for d in store.store.values()]
    assert len(clusters) == len(set(clusters))
    assert set(clusters) == {dedup.index.cluster_of(k) for k in dedup.index.keys_of_source("LICENSE")}
    assert any("(amended)" in t for t in stored)


def test_a_copy_freed_by_a_replaced_source_and_given_again_in_the_call_is_returned_once() -> None:
    """Regression (review): the copy that the removal of a replaced source's chunk promoted, given again in
    the same call, came back twice: passed by the call and promoted, with its old metadata."""
    (_, text, _), (_, other, _), *_ = paragraphs()
    dedup = DedupDocumentTransformer(mode="drop", replace_sources=True)
    dedup.transform_documents([Document(text, id="a", metadata={"source": "S"}), Document(text, id="f", metadata={"source": "T"})])
    out = dedup.transform_documents(
        [Document(other, id="b", metadata={"source": "S"}), Document(text, id="f", metadata={"source": "T", "v": 2})]
    )
    assert sorted(d.id for d in out) == ["b", "f"]
    assert [d.metadata.get("v") for d in out if d.id == "f"] == [2]  # the call's version


def test_not_a_document_is_named() -> None:
    with pytest.raises(TypeError, match=r"documents\[1\] is a str"):
        DedupDocumentTransformer().transform_documents([Document("x"), "y"])  # type: ignore[list-item]


def _record_managers(tmp_path):  # type: ignore[no-untyped-def]
    yield InMemoryRecordManager(namespace="inmemory")
    sql = pytest.importorskip("langchain_classic.indexes", reason="SQLRecordManager ships with langchain-classic")
    manager = sql.SQLRecordManager("sqlite-test", db_url=f"sqlite:///{tmp_path / 'records.db'}")
    manager.create_schema()
    yield manager


@pytest.mark.parametrize("manager_kind", ["in-memory", "sqlite"])
def test_indexing_api_after_the_transformer_writes_one_copy_and_rerun_skips_everything(tmp_path, manager_kind) -> None:  # type: ignore[no-untyped-def]
    managers = list(_record_managers(tmp_path))
    manager = managers[0] if manager_kind == "in-memory" else managers[1]
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    dedup = DedupDocumentTransformer(mode="drop")
    docs = corpus_documents()
    # One batch: LangChain's incremental cleanup deletes and re-adds the documents of a source that
    # spans two of its batches (its own behaviour, with or without rag-dedup).
    kwargs = {"cleanup": "incremental", "source_id_key": "source", "batch_size": len(docs), "key_encoder": "blake2b"}
    first = index(dedup.transform_documents(docs), manager, store, **kwargs)
    passed = first["num_added"]
    assert 0 < passed < len(docs)
    assert len(store.store) == passed
    again = index(dedup.transform_documents(docs), manager, store, **kwargs)
    assert again == {"num_added": 0, "num_updated": 0, "num_skipped": passed, "num_deleted": 0}


def test_missing_extra_names_the_pip_command() -> None:
    code = (
        "import sys; sys.modules['langchain_core'] = None\n"
        "try:\n    import rag_dedup.langchain\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 'pip install "rag-dedup[langchain]"' in out


def test_chunk_dedup_store_pipeline_embeds_each_passage_once(chunks: list[Document]) -> None:
    files = [Document(text, metadata={"source": path}) for path, text in corpus_files().items()]
    split = SentenceChunker().split_documents(files)
    kept = DedupDocumentTransformer(mode="drop").transform_documents(split)
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    store.add_documents(list(kept))
    assert len(store.store) == len(kept) < len(split)
    assert len({d.metadata[DEDUP_CLUSTER] for d in kept}) == len(kept)


def _stored(store: InMemoryVectorStore, names: dict[str, str]) -> list[tuple[str, str]]:
    return sorted((v["metadata"]["source"], names[v["text"]]) for v in store.store.values())


def test_a_copy_of_another_source_promoted_by_an_edit_does_not_make_the_cleanup_delete_that_source() -> None:
    """Source a holds P1 and P2, source b a longer copy of P1 and P3; a is edited and loses P1. b's copy
    was promoted and returned with a's documents, so index(cleanup="incremental") took b for re-indexed
    and deleted b's P3. Now it is held for take_promoted(), indexed with cleanup=None."""
    texts = [text for _, text, _ in paragraphs() if len(text.split()) > 40][:3]
    names = {texts[0]: "P1", texts[0] + " Indeed.": "P1'", texts[1]: "P2", texts[2]: "P3"}
    dedup = DedupDocumentTransformer(mode="drop", replace_sources=True)
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    records = InMemoryRecordManager("promoted")
    records.create_schema()

    def run(docs: list[Document]) -> None:
        index(dedup.transform_documents(docs), records, store, cleanup="incremental", source_id_key="source")
        index(dedup.take_promoted(), records, store, cleanup=None, source_id_key="source")

    run([Document(texts[0], metadata={"source": "a"}), Document(texts[1], metadata={"source": "a"})])
    run([Document(texts[0] + " Indeed.", metadata={"source": "b"}), Document(texts[2], metadata={"source": "b"})])
    assert _stored(store, names) == [("a", "P1"), ("a", "P2"), ("b", "P3")]  # b's P1' dropped as a copy
    run([Document(texts[1], metadata={"source": "a"})])  # a edited: it no longer holds P1
    assert _stored(store, names) == [("a", "P2"), ("b", "P1'"), ("b", "P3")]
    assert dedup.take_promoted() == []  # each held document is returned once


def test_delete_refuses_one_str_for_a_list_of_keys() -> None:
    """delete("id") iterated the characters of the id, removed nothing and said nothing."""
    dedup = DedupDocumentTransformer(mode="drop")
    dedup.transform_documents([Document("Permission is hereby granted, free of charge, to any person.", id="abc")])
    with pytest.raises(TypeError, match=r"keys must be a list of keys, got the single str 'abc': pass \['abc'\]"):
        dedup.delete("abc")
    assert dedup.index.contains_many(["abc"]) == [True]


def test_document_keys_are_the_same_in_every_process_and_mixed_metadata_keys_are_keyed() -> None:
    """A set in the metadata was written by its repr, whose order follows the hash seed: another key in
    each process. Metadata keys of mixed types made json's sort_keys raise, naming no document. An
    object's default repr (its address) is refused by name."""
    code = ("from langchain_core.documents import Document; from rag_dedup.langchain.transformer import document_key;"
            "print(document_key(Document('Permission is hereby granted.', metadata={'source': 'bsd',"
            " 'tags': {'legal', 'bsd', 'license', 'text', 'copying'}})))")
    keys = {subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed},
                           capture_output=True, text=True, check=True).stdout.strip() for seed in ("1", "2", "3")}
    assert len(keys) == 1 and next(iter(keys)).startswith("sha256:"), keys
    mixed = Document("Permission is hereby granted.", metadata={"source": "x", 2: "page"})
    assert document_key(mixed) == document_key(Document(mixed.page_content, metadata={2: "page", "source": "x"}))

    class Opaque:
        pass

    docs = [Document("Some text.", metadata={"source": "a"}), Document("Other text.", metadata={"o": Opaque()})]
    with pytest.raises(ValueError, match=r"documents\[1\]: a document without an id has a metadata value of type "
                                         r"Opaque whose repr names its memory address"):
        DedupDocumentTransformer().transform_documents(docs)


@pytest.mark.parametrize("mode", ["tag", "drop"])
def test_a_blank_document_with_metadata_that_cannot_be_copied_passes_through(mode: str) -> None:
    """A blank document was deep-copied whole, and a lock in its metadata made the whole call raise
    `cannot pickle '_thread.lock' object`; it is copied as a stamped document is (the lock shared,
    nested values copied), and needs no key (it is not indexed)."""
    import threading

    meta = {"source": "a.txt", "handle": threading.Lock(), "nested": {"pages": [1]}}
    docs = [Document("Permission is hereby granted, free of charge.", metadata=meta, id="k"), Document("", metadata=meta)]
    out = DedupDocumentTransformer(mode=mode).transform_documents(docs)
    assert [d.page_content for d in out] == [d.page_content for d in docs]
    assert out[1].metadata["handle"] is meta["handle"] and out[1].metadata["nested"] == meta["nested"]
    assert out[1].metadata["nested"] is not meta["nested"] and out[1].id is None
