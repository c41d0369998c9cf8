"""A named baseline in the same run: another checkout's rag_dedup, imported beside this one.

``import_baseline("/path/to/worktree", "rag_dedup.llama_index.postprocessor")`` imports the named
modules of the ``rag_dedup`` package found under that directory (for example a ``git worktree`` of the
commit to compare with) as a package of its own, ``rag_dedup_baseline``: each of its modules is
loaded from its file with the name ``rag_dedup`` read as ``rag_dedup_baseline``, so its imports, lazy
ones included, stay inside the baseline, and ``import rag_dedup`` keeps meaning this checkout. Timing
both in one process, alternately, exposes them to the same machine load. (The baseline's classes are
its own: a baseline ``DedupPostprocessor`` takes a baseline ``DedupIndex``.)
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["ALIAS", "baseline_label", "import_baseline"]

#: The package name the baseline's rag_dedup is imported under.
ALIAS = "rag_dedup_baseline"
_NAME = re.compile(rb"\brag_dedup\b")


class _Loader(importlib.abc.SourceLoader):
    """Loads one baseline module from its file, with ``rag_dedup`` read as :data:`ALIAS` (no bytecode cache)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def get_filename(self, fullname: str) -> str:
        return str(self.path)

    def get_data(self, path: str) -> bytes:
        return _NAME.sub(ALIAS.encode(), Path(path).read_bytes())


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != ALIAS and not fullname.startswith(ALIAS + "."):
            return None
        where = self.root.joinpath("rag_dedup", *fullname.split(".")[1:])
        if (where / "__init__.py").is_file():
            file = where / "__init__.py"
            return importlib.util.spec_from_file_location(
                fullname, file, loader=_Loader(file), submodule_search_locations=[str(where)]
            )
        if where.with_suffix(".py").is_file():
            file = where.with_suffix(".py")
            return importlib.util.spec_from_file_location(fullname, file, loader=_Loader(file))
        return None


def import_baseline(root: str | Path, *modules: str) -> dict[str, ModuleType]:
    """The named ``rag_dedup`` modules of the checkout at ``root``, keyed by the names given.

    Raises:
        FileNotFoundError: ``root`` holds no ``rag_dedup`` package.
    """
    root = Path(root).resolve()
    if not (root / "rag_dedup" / "__init__.py").is_file():
        raise FileNotFoundError(f"{root} holds no rag_dedup package (give a checkout of the baseline commit)")
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(root))
    return {name: importlib.import_module(ALIAS + name[len("rag_dedup") :]) for name in modules}


def baseline_label(root: str | Path) -> str:
    """``"<short commit> (<root>)"`` for the printed header, or ``root`` alone outside git."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(root)
    return f"{commit} ({root})"
