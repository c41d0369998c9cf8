"""Progress of the command's phases, on a terminal and in logs.

On a terminal (stderr is a TTY) each phase shows a tqdm bar, removed when the phase ends. Otherwise
(stderr redirected to a file, a CI log, a pipe) each phase writes one plain line when it ends, with its
count and elapsed time::

    rag-dedup: reading: 4,304 files in 6.1 s (4,290 documents, 14 skipped)
    rag-dedup: candidate pairs: 143,218 chunks in 84.9 s

Every phase of ``scan``, ``tune`` and ``query`` goes through :func:`track` (a loop with a count) or
:func:`phase` (one step: writing the report, saving the index), so none runs silently.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = ["Phase", "phase", "track"]

T = TypeVar("T")


def _tty() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def _line(text: str) -> None:
    sys.stderr.write(f"rag-dedup: {text}\n")  # one write: lines from a log never interleave mid-line
    sys.stderr.flush()


def _plural(unit: str, n: int) -> str:
    if n == 1:
        return unit
    return unit + ("es" if unit.endswith(("ch", "s", "sh", "x")) else "s")


class Phase:
    """A running phase: set :attr:`detail` to add a note to its closing line (``"(14 skipped)"``)."""

    def __init__(self, desc: str) -> None:
        self.desc = desc
        self.detail = ""
        self.started = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


def track(items: Iterable[T], *, desc: str, unit: str, total: int | None = None,
          phase: Phase | None = None) -> Iterator[T]:
    """Yield ``items``, showing progress; at the end (off a terminal) one line ``desc: N units in T s``.

    ``total`` defaults to ``len(items)`` when it has one. Pass ``phase`` to set a closing detail while
    the loop runs.
    """
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    current = phase or Phase(desc)
    count = 0
    if _tty():
        from tqdm import tqdm

        for item in tqdm(items, total=total, desc=desc, unit=unit, file=sys.stderr, leave=False,
                         dynamic_ncols=True):
            count += 1
            yield item
        return
    for item in items:
        count += 1
        yield item
    detail = f" {current.detail}" if current.detail else ""
    _line(f"{desc}: {count:,} {_plural(unit, count)} in {current.elapsed():.1f} s{detail}")


@contextlib.contextmanager
def phase(desc: str) -> Iterator[Phase]:
    """One step without a count: ``desc...`` on a terminal while it runs; ``desc: done in T s`` in logs."""
    current = Phase(desc)
    tty = _tty()
    if tty:
        sys.stderr.write(f"rag-dedup: {desc}...\r")
        sys.stderr.flush()
    try:
        yield current
    finally:
        if tty:
            sys.stderr.write("\x1b[2K\r")  # erase the line, also before an error message
            sys.stderr.flush()
    if not tty:  # a phase that raised writes no "done" line
        detail = f" {current.detail}" if current.detail else ""
        _line(f"{desc}: done in {current.elapsed():.1f} s{detail}")

