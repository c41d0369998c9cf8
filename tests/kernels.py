"""The ``kernels`` fixture: run a test once on the compiled kernels and once on the numpy reference;
``numpy_reference()``: one block of a test on the reference.

Import it into a test module (``from tests.kernels import kernels``) and name it in a test's arguments;
the ``reference`` run sets ``rag_dedup.compiled.COMPILED = False`` for the test (as ``reference_kernels``
in ``tests/conftest.py`` does), so the important end-to-end tests hold on both paths.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

__all__ = ["kernels", "numpy_reference"]


@contextlib.contextmanager
def numpy_reference() -> Iterator[None]:
    """Run the ``with`` block on the numpy reference (``rag_dedup.compiled.COMPILED = False``), and
    restore the flag after it, also on error: for a test that compares the two paths in one run."""
    from rag_dedup import compiled

    previous = compiled.COMPILED
    compiled.COMPILED = False
    try:
        yield
    finally:
        compiled.COMPILED = previous


@pytest.fixture(params=["compiled", "reference"])
def kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test on the path named by the parameter (``compiled`` or ``reference``)."""
    from rag_dedup import compiled

    if request.param == "reference":
        monkeypatch.setattr(compiled, "COMPILED", False)
    return str(request.param)
