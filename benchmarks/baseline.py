"""A named baseline in the same run: another checkout's rag_dedup, imported beside this one.

``import_baseline("/path/to/worktree", "rag_dedup.llama_index.postprocessor")`` imports the named
modules of the ``rag_dedup`` package found under that directory (for example a ``git worktree`` of the
commit to compare with), then takes every ``rag_dedup`` module out of ``sys.modules`` again and puts
back the ones that were there, so that ``import rag_dedup`` keeps meaning this checkout. The baseline's
functions and classes keep working: each refers to the globals of its own modules, not to
``sys.modules``. Timing both in one process, alternating, exposes them to the same machine load.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["baseline_label", "import_baseline"]


def _ours() -> dict[str, ModuleType]:
    return {name: m for name, m in sys.modules.items() if name == "rag_dedup" or name.startswith("rag_dedup.")}


def import_baseline(root: str | Path, *modules: str) -> dict[str, ModuleType]:
    """The named modules of the ``rag_dedup`` under ``root``, imported without replacing this checkout's.

    Raises:
        FileNotFoundError: ``root`` holds no ``rag_dedup`` package.
    """
    root = Path(root).resolve()
    if not (root / "rag_dedup" / "__init__.py").is_file():
        raise FileNotFoundError(f"{root} holds no rag_dedup package (give a checkout of the baseline commit)")
    saved = _ours()
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        loaded = {name: importlib.import_module(name) for name in modules}
    finally:
        sys.path.remove(str(root))
        for name in _ours():
            del sys.modules[name]
        sys.modules.update(saved)
    return loaded


def baseline_label(root: str | Path) -> str:
    """``"<short commit> (<root>)"`` for the printed header, or ``root`` alone outside git."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(root)
    return f"{commit} ({root})"
