"""Paragraphs of the shipped real corpus (tests/data/corpus) as (key, text, source), shared by the adapter tests."""

from __future__ import annotations

import re
from functools import lru_cache

from tests.corpus import documents


@lru_cache(maxsize=1)
def paragraphs() -> tuple[tuple[str, str, str], ...]:
    """Every paragraph of 12 words or more, keyed ``<path>#<n>``, with its file as source."""
    out = []
    for path, text in documents().items():
        for n, para in enumerate(p for p in re.split(r"\n\s*\n", text) if len(p.split()) >= 12):
            out.append((f"{path}#{n}", para, path))
    return tuple(out)


# Boilerplate that the corpus restates many times (licence grants, warranty disclaimers, notices).
QUERIES = [
    "THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS AS IS AND ANY EXPRESS OR IMPLIED WARRANTIES",
    "IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY",
    "Licensed under the Apache License, Version 2.0; you may not use this file except in compliance",
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this software",
    "Redistributions of source code must retain the above copyright notice, this list of conditions",
    "On Debian systems, the complete text of the GNU General Public License can be found in /usr/share/common-licenses",
    "This program is distributed in the hope that it will be useful, but WITHOUT ANY WARRANTY",
    "You should have received a copy of the GNU Lesser General Public License along with this library",
]


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
