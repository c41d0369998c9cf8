"""Compiled kernels for the hot loops, and the one switch between them and the numpy reference.

Each rule lives in the module that owns it (shingles, signatures, the query-time collapse) and is written
there once in numpy or plain Python: that is the **reference**. A module of this package holds a kernel
compiled with numba (``@kernel``: ``numba.njit(cache=True, nogil=True)``, compiled on first call and cached
beside its source) that computes the same values, value for value; the test suite holds every kernel equal
to its reference. numba installs as a wheel (it is a dependency of rag-dedup), so nothing is compiled at
install time.

:data:`COMPILED` says which path the library takes. It is ``True`` when numba imports, unless the
environment variable ``RAG_DEDUP_KERNELS`` is ``reference`` when rag-dedup is imported; the results are
the same either way, only the speed differs. Callers read ``compiled.COMPILED`` at call time, so a test
can switch paths.

Example:
    >>> from rag_dedup import compiled
    >>> compiled.COMPILED in (True, False)
    True
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

__all__ = ["COMPILED", "KERNELS_ENV", "inline_kernel", "kernel"]

#: The environment variable that chooses the path: ``compiled`` (the default) or ``reference``.
KERNELS_ENV = "RAG_DEDUP_KERNELS"

_F = TypeVar("_F", bound=Callable[..., object])


def _choice() -> str:
    value = os.environ.get(KERNELS_ENV, "compiled").strip().lower() or "compiled"
    if value not in ("compiled", "reference"):
        raise ValueError(f"{KERNELS_ENV}={value!r} is not a kernel choice: use 'compiled' or 'reference'")
    return value


def _load_numba() -> object | None:
    if _choice() == "reference":
        return None
    try:
        import numba
    except ImportError:  # numba is a dependency; a platform without its wheel runs the reference
        return None
    return numba


_numba = _load_numba()

#: Whether the library runs the compiled kernels (True) or the numpy reference (False).
COMPILED: bool = _numba is not None


def kernel(function: _F) -> _F:
    """Compile ``function`` with ``numba.njit(cache=True, nogil=True)``; without numba, return it unchanged.

    Without numba the returned function is the plain Python body, which callers do not call (they take
    the reference path when :data:`COMPILED` is False); it stays importable so the module loads.
    """
    if _numba is None:
        return function
    return _numba.njit(cache=True, nogil=True)(function)  # type: ignore[attr-defined,no-any-return]


def inline_kernel(function: _F) -> _F:
    """:func:`kernel`, inlined into the kernels that call it (``inline="always"``: a small step called
    once a word, which LLVM does not inline on its own); not called from Python."""
    if _numba is None:
        return function
    return _numba.njit(cache=True, nogil=True, inline="always")(function)  # type: ignore[attr-defined,no-any-return]
