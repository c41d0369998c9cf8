"""The cut plan: which units form each chunk, decided by the text next to each cut.

Passage-level dedup needs a copied passage to be cut the same way wherever it appears. A splitter
that fills chunks up to a size cuts a passage wherever the running size runs out, which depends on
everything before the passage. Here every boundary is decided by the units next to it
(content-defined chunking, as rsync and backup tools do over bytes, here over sentences), so a
shared passage is cut the same way in every document that contains it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence

from rag_dedup.chunking.blocks import CONTINUES, STARTS_HEADING
from rag_dedup.chunking.units import Units
from rag_dedup.normalize import token_form

__all__ = ["plan_chunks", "unit_hash"]

# blake2b with an 8-byte digest read as an unsigned integer, divided by 2**64: a uniform number in
# [0, 1) that is the same on every machine and every run (Python's hash() is salted per process).
_BLAKE2B = hashlib.blake2b(digest_size=8, person=b"rag-dedup-cdc1")
_TWO_64 = float(2**64)
# A block of this many units (sentences) or more gets chunks of its own, however few tokens it holds.
_PARAGRAPH_UNITS = 5
# No content-defined cut leaves fewer than this share of a mean body of its block after it.
_TAIL_FRACTION = 0.5


def _cut_probability(tokens: int, mean: float) -> float:
    """Probability that a body ends after a unit of ``tokens`` tokens: 1 - exp(-tokens / mean).

    Token-weighted, so cuts fall at a rate of one per ``mean`` tokens whatever the sentence lengths
    (a Poisson process on the token axis, sampled at sentence ends).
    """
    return -math.expm1(-tokens / mean)


def plan_chunks(
    units: Units,
    chunk_size: int,
    chunk_overlap: int,
    mean_body: float,
    min_block: int,
) -> list[tuple[int, int, int]]:
    """Group units into chunks by the content-defined rules: numbers in, unit indices out.

    A body (a chunk without its overlap) starts where the previous one ended, and ends

    * before a heading, and before a block when that block or the block before it has at least
      ``min_block`` tokens (such a block gets chunks of its own);
    * inside a block of ``min_block`` tokens or more, after unit ``i`` when
      ``scores[i] < 1 - exp(-tokens[i] / mean_body)`` and at least ``mean_body / 2`` tokens of the
      block follow it: a decision of that unit and the text right after it, whatever came before
      it (no minimum body size, which would make each cut depend on the previous one and leave the
      cuts inside a shared passage to resynchronise; the tail rule keeps a block's last chunk from
      being a sliver);
    * otherwise at :func:`_forced_cut` when the next unit would take it past
      ``chunk_size - chunk_overlap`` tokens. So a run of short blocks (list items, short
      paragraphs, each under ``min_block``) is one body up to that budget instead of a chunk per
      block or per few sentences.

    A body's size is its first unit's tokens plus the tokens and gaps of the others, so it does not
    depend on the whitespace before it. A unit of more than ``chunk_size - chunk_overlap`` tokens is
    a body of its own. A body that continues a block is preceded by whole trailing units of the
    previous body, within the same block, whose tokens (with the gaps between them and the gap
    before the body) fit in ``min(chunk_overlap, chunk_size - body)``: the whole previous body when
    it fits, so in running text a chunk is mostly two consecutive bodies and each cut ends one
    chunk and starts the overlap of the next. When that whole previous body was a chunk without
    overlap of its own, that chunk would be a prefix of this one: the two are one chunk, whose body
    is both bodies. So no two chunks start at the same unit.

    Returns:
        ``(first, body_first, end)`` per chunk: units ``[first, end)`` form the chunk, of which
        ``[first, body_first)`` repeat the end of the previous body. The bodies tile the units.
    """
    tokens, gaps, kinds, block_tokens = units.tokens, units.gaps, units.kinds, units.block_tokens
    score = units.score
    n = len(tokens)
    body_max = chunk_size - chunk_overlap
    long_blocks = _long_blocks(kinds, block_tokens, min_block)
    hard = [False] * n  # a body must end before unit i
    free = [False] * n  # a content-defined cut may follow unit i
    last_long = last_heading = False
    long_block = False
    for i in range(n):
        if kinds[i] != CONTINUES or i == 0:
            long_block = long_blocks[i]
            heading = kinds[i] == STARTS_HEADING
            hard[i] = i > 0 and ((heading and not last_heading) or long_block or last_long)
            last_long, last_heading = long_block, heading
        free[i] = long_block
    tail_min = mean_body * _TAIL_FRACTION
    following = 0.0  # the tokens of unit i's block after unit i
    for i in range(n - 1, -1, -1):
        if following < tail_min:
            free[i] = False
        following = 0.0 if kinds[i] != CONTINUES else following + tokens[i] + gaps[i]
    plan: list[tuple[int, int, int]] = []
    prev_first = 0
    s = 0
    while s < n:
        if tokens[s] > body_max:
            end, body = s + 1, tokens[s]  # fits the chunk only without (most of) the overlap
        else:
            acc, i, end = 0, s, -1
            while i < n:
                if i > s and hard[i]:
                    end = i
                    break
                cost = tokens[i] if i == s else tokens[i] + gaps[i]
                if acc + cost > body_max:
                    break
                acc += cost
                i += 1
                if free[i - 1] and score(i - 1) < _cut_probability(tokens[i - 1], mean_body):
                    end = i
                    break
            body = acc  # the cost of units [s, i), and i == end unless the cut is forced
            if end < 0:
                if i < n:
                    end = _forced_cut(tokens, gaps, score, s, i, body_max)
                    body = tokens[s] + sum(tokens[k] + gaps[k] for k in range(s + 1, end))
                else:
                    end = n
        first = s
        if plan and kinds[s] == CONTINUES:
            room = min(chunk_overlap, chunk_size - body)
            rest = gaps[s]  # what the overlap adds besides its first unit's tokens
            while first > prev_first and tokens[first - 1] + rest <= room:
                first -= 1
                rest += tokens[first] + gaps[first]
                if kinds[first] != CONTINUES:  # the block's first unit: go no further back
                    break
            if first == prev_first:  # the previous chunk is a prefix of this one: one chunk
                prev_body = plan.pop()[1]
                plan.append((first, prev_body, end))
                s = end
                continue
        plan.append((first, s, end))
        prev_first, s = first, end
    return plan


def _long_blocks(kinds: Sequence[int], block_tokens: Sequence[int], min_block: int) -> list[bool]:
    """Per unit that starts a block: whether the block gets chunks of its own (``min_block`` tokens
    or more, or ``_PARAGRAPH_UNITS`` units or more: a paragraph of prose however short)."""
    n = len(kinds)
    long_blocks = [False] * n
    start = count = 0
    for i in range(n + 1):
        if i == n or kinds[i] != CONTINUES or i == 0:
            if i > 0:
                long_blocks[start] = block_tokens[start] >= min_block or count >= _PARAGRAPH_UNITS
            start, count = i, 0
        count += 1
    return long_blocks


def _forced_cut(
    tokens: Sequence[int], gaps: Sequence[int], score_of: Callable[[int], float], s: int, stop: int, body_max: int
) -> int:
    """End of a body that reached ``body_max`` at unit ``stop`` with no content-defined cut before.

    Cuts after the unit with the smallest score among those that leave the body at least half full
    (any unit if none does): the most cut-like sentence in range, so copies agree where their
    ranges overlap.
    """
    best, best_score = stop, 2.0
    fallback, fallback_score = stop, 2.0
    acc = -gaps[s]
    half = body_max / 2
    for j in range(s, stop):
        acc += tokens[j] + gaps[j]
        score = score_of(j)
        if score < fallback_score:
            fallback, fallback_score = j + 1, score
        if acc >= half and score < best_score:
            best, best_score = j + 1, score
    return best if best_score <= 1.0 else fallback


def unit_hash(text: str) -> float:
    """``blake2b`` of the words of ``canonical(text)`` (single spaces between them) as a uniform
    number in [0, 1): the same for every copy, however its lines are wrapped or spaced."""
    h = _BLAKE2B.copy()
    h.update(" ".join(token_form(text).split()).encode("utf-8"))
    return int.from_bytes(h.digest(), "big") / _TWO_64
