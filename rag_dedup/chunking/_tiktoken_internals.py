"""The one door to tiktoken's private ``Encoding._core_bpe``.

``Encoding.encode_ordinary(text)`` is a thin wrapper around ``encoding._core_bpe.encode_ordinary``
whose one other path handles lone surrogates; calling the core directly saves the wrapper on every
sentence the chunker counts. Without ``_core_bpe`` (a tiktoken that renamed it) the public method is
used: the same tokens, a little slower. ``tests/chunking/test_internals.py`` fails loudly when the
installed tiktoken no longer offers the fast path, so an upgrade that loses it is noticed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["core_encode_ordinary"]


def core_encode_ordinary(encoding: Any) -> Callable[[str], Sequence[int]]:
    """``encoding._core_bpe.encode_ordinary`` if tiktoken has it, else ``encoding.encode_ordinary``.

    The core raises ``UnicodeEncodeError`` on lone surrogates, where the public method would fix
    the text up first: callers fall back to the full tokenizer on that error.
    """
    core = getattr(getattr(encoding, "_core_bpe", None), "encode_ordinary", None)
    return core if callable(core) else encoding.encode_ordinary
