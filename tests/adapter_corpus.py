"""Paragraphs of the shipped real corpus (tests/data/corpus) as (key, text, source), shared by the adapter tests."""

from __future__ import annotations

import re
from functools import lru_cache

from corpus import documents


@lru_cache(maxsize=1)
def paragraphs() -> tuple[tuple[str, str, str], ...]:
    """Every paragraph of 12 words or more, keyed ``<path>#<n>``, with its file as source."""
    out = []
    for path, text in documents().items():
        for n, para in enumerate(p for p in re.split(r"\n\s*\n", text) if len(p.split()) >= 12):
            out.append((f"{path}#{n}", para, path))
    return tuple(out)
