"""The switch between the compiled kernels and the numpy reference (``rag_dedup.compiled``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _compiled_in_fresh_process(value: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAG_DEDUP_KERNELS"}
    if value is not None:
        env["RAG_DEDUP_KERNELS"] = value
    return subprocess.run(
        [sys.executable, "-c", "from rag_dedup import compiled; print(compiled.COMPILED)"],
        env=env, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize(
    ("value", "printed"),
    [
        pytest.param(None, "True", id="default-compiled"),
        pytest.param("compiled", "True", id="compiled"),
        pytest.param("reference", "False", id="reference"),
        pytest.param(" Reference ", "False", id="case-and-spaces"),
    ],
)
def test_the_environment_chooses_the_path(value: str | None, printed: str) -> None:
    done = _compiled_in_fresh_process(value)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == printed


def test_an_unknown_choice_is_refused_by_name() -> None:
    done = _compiled_in_fresh_process("fast")
    assert done.returncode != 0
    assert "RAG_DEDUP_KERNELS='fast' is not a kernel choice" in done.stderr


def test_the_reference_fixture_switches_the_path(reference_kernels: None) -> None:
    from rag_dedup import compiled

    assert compiled.COMPILED is False
