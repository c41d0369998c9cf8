"""LlamaIndex's default tokenizer, for adapters that must not import LlamaIndex.

LlamaIndex counts tokens with tiktoken's ``gpt-3.5-turbo`` encoding (``cl100k_base``), whose data file
llama-index-core ships (``llama_index/core/_static/tiktoken_cache``), so nothing is downloaded. The
LangChain and Haystack chunkers use the same tokenizer by default, so one text gives the same chunks
in every framework.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from typing import Any

__all__ = ["default_tokenizer"]


def _bundled_tiktoken_dir() -> str | None:
    spec = importlib.util.find_spec("llama_index")
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = os.path.join(root, "core", "_static", "tiktoken_cache")
        if os.path.isdir(candidate):
            return candidate
    return None


@lru_cache(maxsize=1)
def default_tokenizer() -> Callable[[str], Sequence[Any]]:
    """tiktoken's ``gpt-3.5-turbo`` encoder, loaded from llama-index-core's bundled cache when no
    ``TIKTOKEN_CACHE_DIR`` is set (as ``llama_index.core.utils.get_tokenizer`` does).

    Raises:
        ImportError: tiktoken is not installed.
    """
    try:
        import tiktoken
    except ImportError as exc:
        raise ImportError("the default tokenizer needs tiktoken: pip install tiktoken, or pass tokenizer=") from exc
    bundled = _bundled_tiktoken_dir()
    set_here = "TIKTOKEN_CACHE_DIR" not in os.environ and bundled is not None
    if set_here:
        os.environ["TIKTOKEN_CACHE_DIR"] = bundled  # type: ignore[assignment]
    try:
        encoding = tiktoken.encoding_for_model("gpt-3.5-turbo")
    finally:
        if set_here:
            del os.environ["TIKTOKEN_CACHE_DIR"]
    return partial(encoding.encode, allowed_special="all")
