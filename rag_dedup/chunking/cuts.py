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

    * before a heading that does not follow a heading, and before a block when that block or the
      block before it is *long*: ``min_block`` tokens or more, or ``_PARAGRAPH_UNITS`` (5) units
      or more (such a block, a paragraph of prose however short, gets chunks of its own);
    * inside a long block, after unit ``i`` when ``scores[i] < 1 - exp(-tokens[i] / mean_body)``
      and at least ``mean_body / 2`` tokens of the block follow it: a decision of that unit and the
      text right after it, whatever came before it (no minimum body size, which would make each cut
      depend on the previous one; the tail rule keeps a block's last chunk from being a sliver);
    * otherwise at :func:`_forced_cut` when the next unit would take it past
      ``chunk_size - chunk_overlap`` tokens. So a run of short blocks (list items, short
      paragraphs, headings) is one body up to that budget instead of a chunk per block.

    A body's size is its first unit's tokens plus the tokens and gaps of the others, so it does not
    depend on the whitespace before it. A unit of more than ``chunk_size - chunk_overlap`` tokens is
    a body of its own. A body that continues a block is preceded by the whole units before it, in
    the same block and after the previous chunk's first unit, whose tokens (with the gaps between
    them and the gap before the body) fit in ``min(chunk_overlap, chunk_size - body)``: the last
    ``chunk_overlap`` tokens before the body, however many bodies they span. When the overlap
    reaches the previous chunk's first unit, that chunk is a prefix of this one: the two are one
    chunk, with the previous chunk's overlap and both bodies. So no two chunks start at the same
    unit, and a chunk's overlap is the end of the previous chunk, never all of it.

    **Why a spliced passage is found** (issue 15). Let a passage ``P = [p, q)`` of ``L`` tokens be
    spliced into the running text of two hosts, and ``m = mean_body``, ``V = chunk_overlap``.

    1. *Cuts inside P agree at once.* A content-defined cut after unit ``i`` of P is decided by
       ``scores[i]`` (a hash of the unit's text) and ``tokens[i]`` alone, so both hosts cut after
       the same units of P, from its first sentence on: there is nothing to resynchronise. The
       exceptions are a forced cut (a body of ``B = chunk_size - chunk_overlap`` tokens without a
       content-defined cut, probability ``exp(-B / m)``, ``e**-6 = 0.25%`` at 256/64) and the last
       ``m / 2`` tokens of the host's block (the tail rule).
    2. *A chunk's start depends only on its body.* The chunk whose body is ``[c, c')`` starts at
       the first whole unit of the last ``min(V, chunk_size - body)`` tokens before ``c``. If those
       units lie inside P, they are the same in both hosts (the bounds, the previous chunk's start
       and the block start, only bind before ``p``). So the chunk is identical in both hosts and
       lies inside P when ``c - p >= V`` (about; whole sentences) and ``c' <= q``.
    3. *How long P must be.* The cuts in P are a Poisson process of rate ``1/m`` on the token axis
       (the cut probability is per token, sampled at sentence ends), memoryless: from ``p + V`` the
       wait to the next cut ``c`` is ``X ~ Exp(m)`` and the body after it ``Y ~ Exp(m)``. So
       ``P(found | L) ~ P(X + Y <= L - V) = 1 - exp(-x) (1 + x)`` with ``x = (L - V) / m``, for a
       running-text chunk of ``V + m`` tokens on average. At 256/64, ``m = 32``: 0.59 for
       ``L = 128``, 0.78 for 156, 0.93 for 200.

       An overlap made of the whole previous body instead (the rule before, chunks of two bodies
       of mean ``m' = 48`` for the same chunk size) needs three cuts inside P: a Gamma(3, m')
       wait, ``P(found | L) = P(Poisson(L / m') >= 3)``: 0.50, 0.63 and 0.79 at those lengths.
       The fixed overlap turns one random wait into a fixed ``V`` and shortens the other two: a
       chunk of ``T`` tokens needs ``V + 2 (T - V) = 2 T - V`` tokens of passage on average
       instead of ``1.5 T`` (128 instead of 144 at ``T = 96``), with less spread.

    Returns:
        ``(first, body_first, end)`` per chunk: units ``[first, end)`` form the chunk, of which
        ``[first, body_first)`` repeat the end of the previous chunk. The bodies tile the units.
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
