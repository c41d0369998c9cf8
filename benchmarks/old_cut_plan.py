"""The cut plan SentenceChunker used at d3968e5, kept for benchmarks/bench_chunking.py only.

Its differences from :func:`rag_dedup.chunking.cuts.plan_chunks`: a chunk's overlap is whole trailing
units of the previous *body* only (the whole previous body when it fits), so in running text a chunk
is two consecutive bodies of mean ``max(target - overlap, target / 2)`` (48 tokens at the default
96); a run of short blocks is one body up to four mean bodies; every heading starts a body; a block
is chunked on its own only when it holds ``min_block`` tokens.
"""

from __future__ import annotations

from rag_dedup.chunking.blocks import CONTINUES, STARTS_HEADING
from rag_dedup.chunking.cuts import _cut_probability, _forced_cut
from rag_dedup.chunking.units import Units

__all__ = ["plan_chunks"]

_GROUP_BODIES = 4
_TAIL_FRACTION = 0.5


def plan_chunks(
    units: Units,
    chunk_size: int,
    chunk_overlap: int,
    mean_body: float,
    min_block: int,
) -> list[tuple[int, int, int]]:
    """The cut plan of d3968e5 (see the module docstring); the same arguments and result as
    :func:`rag_dedup.chunking.cuts.plan_chunks`."""
    tokens, gaps, kinds, block_tokens = units.tokens, units.gaps, units.kinds, units.block_tokens
    score = units.score
    n = len(tokens)
    body_max = chunk_size - chunk_overlap
    hard = [False] * n  # a body must end before unit i
    free = [False] * n  # a content-defined cut may follow unit i
    last_block = 0
    long_block = False
    for i in range(n):
        if kinds[i] != CONTINUES or i == 0:
            hard[i] = i > 0 and (
                kinds[i] == STARTS_HEADING or block_tokens[i] >= min_block or last_block >= min_block
            )
            last_block = block_tokens[i]
            long_block = last_block >= min_block
        free[i] = long_block
    tail_min = mean_body * _TAIL_FRACTION
    following = 0.0  # the tokens of unit i's block after unit i
    for i in range(n - 1, -1, -1):
        if following < tail_min:
            free[i] = False
        following = 0.0 if kinds[i] != CONTINUES else following + tokens[i] + gaps[i]
    group_max = max(1, min(body_max, int(_GROUP_BODIES * mean_body)))
    plan: list[tuple[int, int, int]] = []
    prev_body = 0
    prev_first = 0
    s = 0
    while s < n:
        limit = body_max if free[s] else group_max
        if tokens[s] > limit:
            end, body = s + 1, tokens[s]  # fits the chunk only without (most of) the overlap
        else:
            acc, i, end = 0, s, -1
            while i < n:
                if i > s and hard[i]:
                    end = i
                    break
                cost = tokens[i] if i == s else tokens[i] + gaps[i]
                if acc + cost > limit:
                    break
                acc += cost
                i += 1
                if free[i - 1] and score(i - 1) < _cut_probability(tokens[i - 1], mean_body):
                    end = i
                    break
            body = acc  # the cost of units [s, i), and i == end unless the cut is forced
            if end < 0:
                if i < n:
                    end = _forced_cut(tokens, gaps, score, s, i, limit)
                    body = tokens[s] + sum(tokens[k] + gaps[k] for k in range(s + 1, end))
                else:
                    end = n
        first = s
        if plan and kinds[s] == CONTINUES:
            room = min(chunk_overlap, chunk_size - body)
            rest = gaps[s]  # what the overlap adds besides its first unit's tokens
            while first > prev_body and tokens[first - 1] + rest <= room:
                first -= 1
                rest += tokens[first] + gaps[first]
                if kinds[first] != CONTINUES:  # the block's first unit: go no further back
                    break
            if first == prev_body == prev_first:  # the previous chunk is a prefix of this one: one chunk
                plan.pop()
                plan.append((first, first, end))
                prev_body, prev_first, s = s, first, end
                continue
        plan.append((first, s, end))
        prev_body, prev_first, s = s, first, end
    return plan
