"""Drop mode in incremental ingestion: nodes passed on, and the size of the saved state file.

Real documents, read by LlamaIndex's SimpleDirectoryReader (so each carries its file metadata): the
Debian copyright files under /usr/share/doc/*/copyright and the licences under
/usr/share/common-licenses (the shipped tests/data/corpus where those are missing). They go through
IngestionPipeline([SentenceChunker(), DedupTransform(mode="drop")]) with a docstore, --batch documents
per run, as an application feeding a stream would, and once in one run.

Printed, both sides from this run:

* nodes passed on (embedded) when fed in batches vs in one run (goal: the same, within 1%);
* ``dedup_transform.json`` as written now vs the named baseline "format 1", which stored every
  dropped node in full (``doc_to_json`` of the node as dropped), and the pipeline's docstore.json;
* the process's peak RSS.

Run: python benchmarks/bench_transform_state.py [--batch 25] [--max-kb 64]
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
from pathlib import Path

from llama_index.core import SimpleDirectoryReader
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.docstore.utils import doc_to_json

from rag_dedup.llama_index.chunking import SentenceChunker
from rag_dedup.llama_index.transform import DEFAULT_SETTINGS_FILENAME, DedupTransform

ROOT = Path(__file__).resolve().parent.parent


def corpus(max_kb: int) -> tuple[list[Path], str]:
    paths = [
        p
        for p in sorted(Path("/usr/share/doc").glob("*/copyright"))
        if p.is_file() and p.stat().st_size <= max_kb * 1024
    ]
    licences = Path("/usr/share/common-licenses")
    if licences.is_dir():
        paths += [p for p in sorted(licences.iterdir()) if p.is_file()]
    if len(paths) < 50:
        return sorted((ROOT / "tests" / "data" / "corpus").rglob("*.txt")), "tests/data/corpus"
    return paths, f"/usr/share/doc/*/copyright (<= {max_kb} KB) and /usr/share/common-licenses"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--max-kb", type=int, default=64)
    args = parser.parse_args()
    paths, where = corpus(args.max_kb)
    documents = SimpleDirectoryReader(input_files=[str(p) for p in paths]).load_data()
    for doc, path in zip(documents, paths):
        doc.id_ = str(path)

    one = DedupTransform(mode="drop")
    in_one_run = len(IngestionPipeline(transformations=[SentenceChunker(), one]).run(documents=documents))

    transform = DedupTransform(mode="drop")
    chunker = SentenceChunker()
    pipeline = IngestionPipeline(
        transformations=[chunker, transform],
        docstore=SimpleDocumentStore(),
        docstore_strategy=DocstoreStrategy.DUPLICATES_ONLY,
    )
    passed = 0
    for start in range(0, len(documents), args.batch):
        passed += len(pipeline.run(documents=documents[start : start + args.batch]))
    # The baseline: format 1 kept each dropped node in full, as it was when dropped (the chunker's node).
    dropped = set(transform.dropped)
    chunks = {n.node_id: n for n in chunker.get_nodes_from_documents(documents) if n.node_id in dropped}
    baseline = len(json.dumps({"dropped": [doc_to_json(n) for n in chunks.values()]}))
    with tempfile.TemporaryDirectory() as tmp:
        pipeline.persist(tmp)
        transform.persist(tmp)
        size = (Path(tmp) / DEFAULT_SETTINGS_FILENAME).stat().st_size
        docstore = (Path(tmp) / "docstore.json").stat().st_size
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"corpus: {len(documents)} documents from {where}; {len(transform.index)} chunks; batches of {args.batch}")
    print(
        f"passed on: {passed:,} in batches vs {in_one_run:,} in one run "
        f"(ratio {passed / in_one_run:.3f}; goal <= 1.01)"
    )
    print(
        f"dedup_transform.json: {size / 1e6:.2f} MB for {len(dropped):,} dropped nodes vs format 1 (full copies) "
        f"{baseline / 1e6:.2f} MB: {baseline / size:.1f}x smaller; docstore.json {docstore / 1e6:.2f} MB"
    )
    print(f"peak RSS {rss:.0f} MB")


if __name__ == "__main__":
    main()
