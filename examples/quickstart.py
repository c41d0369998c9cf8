"""rag-dedup quickstart: deduplicate at ingest, return distinct evidence at query time. Offline, no API key.

    python examples/quickstart.py

The two steps that matter are marked (1) and (2). The corpus is examples/data: licence texts, Debian
copyright notices and documentation in several formats, real text that repeats itself (see its README).
Retrieval is BM25 (pip install llama-index-retrievers-bm25), so no embedding model is needed; the
response synthesizer is asked for no text, so no LLM is called (``Settings.llm`` is set to MockLLM only
so that nothing looks for an OpenAI key): set your own LLM and drop ``response_mode`` to get answers.
"""

from __future__ import annotations

import logging
from pathlib import Path

from llama_index.core import Settings, SimpleDirectoryReader
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.retrievers.bm25 import BM25Retriever

from rag_dedup import DedupPostprocessor, DedupTransform, DistinctRetriever, SentenceChunker
from rag_dedup.app.readers import file_extractor
from rag_dedup.llama_index.metadata import DEDUP_COLLAPSED

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" if (HERE / "data" / "licenses").is_dir() else HERE.parent / "tests" / "data" / "corpus"
QUERY = "What warranty comes with the software, and who is liable for damages?"


def show(title: str, nodes) -> None:
    print(f"\n{title}")
    for i, n in enumerate(nodes, 1):
        folded = n.node.metadata.get(DEDUP_COLLAPSED, [])
        name = Path(n.node.metadata.get("file_path", n.node.ref_doc_id or "?")).name
        first_line = " ".join(n.node.get_content().split())[:70]
        sources = ", ".join(sorted({Path(c["ref_doc_id"] or "?").name for c in folded}))
        more = f"  (folded in: {len(folded)} from {sources})" if folded else ""
        print(f"{i:3d}. [{n.score:5.2f}] {name}: {first_line}...{more}")


def main() -> None:
    logging.getLogger("llama_index.retrievers.bm25").setLevel(logging.ERROR)
    # The command's readers (HTML and JSON reduced to their prose) and its metadata (SentenceChunker counts
    # metadata in the chunk budget, as SentenceSplitter does), so `rag-dedup scan examples/data` and this
    # script see the same 26 documents and cut the same chunks.
    def metadata(path: str) -> dict[str, str]:
        rel = Path(path).resolve().relative_to(DATA.resolve()).as_posix()
        return {"file_path": rel, "file_name": Path(path).name}

    documents = SimpleDirectoryReader(str(DATA), recursive=True, file_extractor=file_extractor(),
                                      file_metadata=metadata, filename_as_id=True).load_data()

    # (1) Ingest: chunk, then index every chunk and stamp it with its duplicate cluster.
    dedup = DedupTransform()
    nodes = IngestionPipeline(transformations=[SentenceChunker(), dedup]).run(documents=documents)
    counts = dedup.counts
    print(
        f"{len(documents)} documents -> {len(nodes)} chunks: {counts['unique']} unique, "
        f"{counts['exact']} exact and {counts['near']} near duplicates (all stamped; mode='drop' would skip them)"
    )

    Settings.llm = MockLLM()  # no LLM is called with response_mode="no_text"; set your own for answers

    # (2) Query: k distinct passages, best first, citing the copies folded into each. DistinctRetriever
    # over-fetches 3x and fetches deeper while fewer than k distinct passages remain.
    retriever = DistinctRetriever(BM25Retriever.from_defaults(nodes=nodes), top_k=10, index=dedup.index)
    query_engine = RetrieverQueryEngine.from_args(retriever, response_mode="no_text")
    show("DistinctRetriever(top_k=10):", query_engine.query(QUERY).source_nodes)

    # The one-call variant: DedupPostprocessor over a 3x over-fetch. Cheaper (one retrieval, never a
    # second), but it returns fewer than 10 when the top 30 holds fewer than 10 distinct passages.
    over_fetch = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=30)
    postprocessor = DedupPostprocessor(top_n=10, index=dedup.index)
    show("With DedupPostprocessor(top_n=10) over the top 30:",
         postprocessor.postprocess_nodes(over_fetch.retrieve(QUERY)))

    show("Plain BM25, top 10 (for comparison):", over_fetch.retrieve(QUERY)[:10])

if __name__ == "__main__":
    main()
