"""One door for optional dependencies: import a framework or say which extra installs it."""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

__all__ = ["require"]


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
