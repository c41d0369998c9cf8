"""The ``kernels`` fixture: run a test once on the compiled kernels and once on the numpy reference.

Import it into a test module (``from tests.kernels import kernels``) and name it in a test's arguments;
the ``reference`` run sets ``rag_dedup.compiled.COMPILED = False`` for the test (as ``reference_kernels``
in ``tests/conftest.py`` does), so the important end-to-end tests hold on both paths.
"""

from __future__ import annotations

import pytest

__all__ = ["kernels"]


@pytest.fixture(params=["compiled", "reference"])
def kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test on the path named by the parameter (``compiled`` or ``reference``)."""
    from rag_dedup import compiled

    if request.param == "reference":
        monkeypatch.setattr(compiled, "COMPILED", False)
    return str(request.param)
