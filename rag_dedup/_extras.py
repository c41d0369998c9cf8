"""One door for optional dependencies: import a framework or say which extra installs it, and the lazy
exports through which a package names classes that need a framework without importing it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from types import ModuleType
from typing import Any

__all__ = ["lazy_exports", "require"]


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise an ImportError naming the pip command that installs it.

    Example:
        >>> require("json", "none", "the standard library").__name__
        'json'
    """
    try:
        return import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{purpose} needs {module.split('.')[0]}, which is not installed: pip install \"rag-dedup[{extra}]\""
        ) from exc


def lazy_exports(
    namespace: dict[str, Any], where: Mapping[str, str], exported: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` (PEP 562) that import ``name`` from ``where[name]``
    on first use and keep it in ``namespace`` (the package's ``globals()``).

    Example:
        >>> ns: dict[str, Any] = {"__name__": "demo"}
        >>> getattr_, dir_ = lazy_exports(ns, {"dumps": "json"}, ["dumps"])
        >>> getattr_("dumps").__module__, "dumps" in ns, dir_()
        ('json', True, ['__name__', 'dumps'])
    """

    def __getattr__(name: str) -> Any:
        if name in where:
            value = getattr(import_module(where[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exported))

    return __getattr__, __dir__
