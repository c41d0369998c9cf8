"""The shipped test corpus (tests/data/corpus, provenance in tests/data/README.md) and chunks of it."""

from __future__ import annotations

import random
from functools import lru_cache
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "data" / "corpus"


@lru_cache(maxsize=1)
def documents() -> dict[str, str]:
    """Every corpus file as {relative path: text}, in sorted order."""
    return {str(p.relative_to(CORPUS)): p.read_text(encoding="utf-8") for p in sorted(CORPUS.rglob("*.txt"))}


@lru_cache(maxsize=4)
def chunks(words: int = 120, stride: int = 120) -> tuple[tuple[str, str], ...]:
    """Word windows of every document as (key, text); keys are "<path>#<first word>"."""
    out = []
    for path, text in documents().items():
        ws = text.split()
        for start in range(0, max(1, len(ws) - words + 1), stride):
            out.append((f"{path}#{start}", " ".join(ws[start : start + words])))
    return tuple(out)


def edited(text: str, rate: float, seed: int) -> str:
    """``text`` with about ``rate`` of its words replaced by another word of the same text."""
    rng = random.Random(seed)
    ws = text.split()
    return " ".join(rng.choice(ws) if rng.random() < rate else w for w in ws)
