"""The house: the core imports no framework, and each framework door imports only the core and its own."""

from __future__ import annotations

import subprocess
import sys

import pytest

FRAMEWORKS = ("llama_index", "langchain_core", "langchain_text_splitters", "haystack", "pyspark")


def loaded_after(module: str) -> list[str]:
    """The framework packages in ``sys.modules`` after importing ``module`` in a fresh interpreter."""
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        f"print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({FRAMEWORKS!r}))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return out.split()


@pytest.mark.parametrize(
    "module",
    ["rag_dedup", "rag_dedup.index", "rag_dedup.ingest", "rag_dedup.collapse", "rag_dedup.chunking", "rag_dedup.stamps"],
)
def test_the_core_imports_no_framework(module: str) -> None:
    assert loaded_after(module) == []


@pytest.mark.parametrize(
    ("door", "own"),
    [
        pytest.param("rag_dedup.langchain.compressor", {"langchain_core"}, id="langchain"),
        pytest.param("rag_dedup.langchain.splitter", {"langchain_core", "langchain_text_splitters"}, id="langchain-splitter"),
        pytest.param("rag_dedup.haystack.components", {"haystack"}, id="haystack"),
        pytest.param("rag_dedup.llama_index.postprocessor", {"llama_index"}, id="llama_index"),
    ],
)
def test_a_framework_door_imports_only_its_own_framework(door: str, own: set[str]) -> None:
    for framework in own:
        pytest.importorskip(framework, reason=f"{door} needs {framework} (its extra)")
    assert set(loaded_after(door)) <= own
