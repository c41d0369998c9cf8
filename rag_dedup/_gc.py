"""Pausing CPython's cyclic garbage collector over a call that builds many objects without cycles.

Chunking a batch of documents, and stamping and passing on its nodes, allocate several small
containers per node (the node's ``__dict__``, its relationships and metadata dicts, its lists of
excluded keys, its fields-set ``set``): ~160,000 for the 22,800 nodes of ``benchmarks/bench_ingest.py``.
None of them forms a reference cycle, so the collector finds nothing in them, but it runs every 700
net allocations, every tenth run walks the middle generation too, and every tenth of those may walk
the whole heap: the caller's documents, the nodes they keep, the imported frameworks. One run of that
benchmark's pipeline (``[SentenceChunker, DedupTransform]``, 811 documents, a heap of ~770,000
objects) triggered 532 young, 48 middle and 1 full collection; with the pause 6, 0 and 0, and a fifth
less CPU time (the same nodes out).

:func:`gc_paused` disables the collector for a block and re-enables it afterwards (also on error)
if it was enabled on entry, so that nested and already-paused callers keep their state, the way
``timeit`` times. The objects allocated meanwhile are examined at the first collection after it,
once, and count as one young collection's worth toward the older generations' thresholds, so the
full collections become rarer, not merely later. Garbage cycles created in the block (7 to 12 objects
per run of that pipeline, none of them nodes) wait for that collection.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic garbage collector for the ``with`` block; restore it on exit (also on error)
    if it was enabled on entry. A no-op when the collector is already disabled."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
