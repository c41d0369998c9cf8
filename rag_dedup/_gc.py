"""Pausing CPython's cyclic garbage collector over a call that builds many objects without cycles.

Chunking a batch of documents, and stamping and passing on its nodes, allocate several small
containers per node (the node's ``__dict__``, its relationships and metadata dicts, its lists of
excluded keys, its fields-set ``set``): ~160,000 for the 22,000 nodes of ``benchmarks/bench_ingest.py``.
None of them forms a reference cycle, so the collector finds nothing in them, but every 700
allocations it runs, and every tenth and hundredth run walks the older generations, which hold the
caller's whole heap (their documents, the nodes built so far, the imported frameworks). That was a
third of ``SentenceChunker``'s time and a quarter of ``DedupTransform``'s in that benchmark.

:func:`gc_paused` disables the collector for a block and re-enables it afterwards (also on error)
if it was enabled on entry, so that nested and already-paused callers keep their state, the way
``timeit`` times. The objects allocated meanwhile are examined at the first collection after it,
once. Garbage cycles created in the block (none in these paths) wait for that collection too.
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
