"""Paragraphs of the shipped real corpus (tests/data/corpus) as (key, text, source), shared by the adapter tests."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from tests.corpus import documents


@lru_cache(maxsize=1)
def paragraphs() -> tuple[tuple[str, str, str], ...]:
    """Every paragraph of 12 words or more, keyed ``<path>#<n>``, with its file as source."""
    out = []
    for path, text in documents().items():
        for n, para in enumerate(p for p in re.split(r"\n\s*\n", text) if len(p.split()) >= 12):
            out.append((f"{path}#{n}", para, path))
    return tuple(out)


#: The real query list (tests/data/queries.json, with its provenance): licence boilerplate that the
#: corpus restates many times (licence grants, warranty disclaimers, notices). The one list the adapter
#: tests, tests/llama_index/test_retriever.py and benchmarks/bench_query.py read.
QUERIES: list[str] = json.loads((Path(__file__).parent / "data" / "queries.json").read_text(encoding="utf-8"))["queries"]


def distinct_ratio(texts: list[str], k: int, threshold: float = 0.8) -> float:
    """Size of the greedy set of the first k texts with pairwise Jaccard < threshold, divided by k."""
    from rag_dedup.similarity import jaccard

    kept: list[str] = []
    for text in texts[:k]:
        if all(jaccard(text, other) < threshold for other in kept):
            kept.append(text)
    return len(kept) / k


def max_pair_similarity(texts: list[str]) -> float:
    """The largest Jaccard similarity between two of ``texts`` (0.0 for fewer than two)."""
    from rag_dedup.similarity import jaccard

    return max((jaccard(a, b) for i, a in enumerate(texts) for b in texts[i + 1 :]), default=0.0)
