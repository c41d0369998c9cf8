"""The one door to nltk punkt's private names (``nltk.tokenize.punkt``).

:class:`rag_dedup.chunking.sentences.Punkt` re-traces punkt's boundary decision for the common
contexts, which needs punkt's orthographic-context flags, its language variables' compiled
patterns, and a tokenizer built around already-loaded parameters. Those are private in nltk; every
use goes through this module, which checks them at import and fails with an ``ImportError`` naming
the nltk version and what is missing, so an nltk upgrade that moves them breaks loudly here (and in
``tests/chunking/test_internals.py``), never as a wrong sentence boundary.
"""

from __future__ import annotations

from typing import Any

import nltk
from nltk.tokenize import punkt as _punkt

__all__ = [
    "ORTHO_BEG_LC",
    "ORTHO_LC",
    "ORTHO_MID_UC",
    "ORTHO_UC",
    "PunktParameters",
    "boundary_realignment_re",
    "load_punkt_params",
    "period_context_re",
    "tokenizer_with_params",
]


def _require(name: str) -> Any:
    try:
        return getattr(_punkt, name)
    except AttributeError:
        raise ImportError(
            f"nltk {nltk.__version__} has no nltk.tokenize.punkt.{name}, which rag_dedup's sentence "
            f"splitter relies on; install an nltk release that has it (3.9 and 3.10 do) or report it to rag-dedup"
        ) from None


ORTHO_BEG_LC: int = _require("_ORTHO_BEG_LC")
ORTHO_LC: int = _require("_ORTHO_LC")
ORTHO_MID_UC: int = _require("_ORTHO_MID_UC")
ORTHO_UC: int = _require("_ORTHO_UC")
PunktParameters = _require("PunktParameters")
load_punkt_params = _require("load_punkt_params")
_PunktSentenceTokenizer = _require("PunktSentenceTokenizer")
for _attr in ("_params", "_lang_vars", "text_contains_sentbreak"):
    if not hasattr(_PunktSentenceTokenizer(), _attr):
        raise ImportError(
            f"nltk {nltk.__version__}'s PunktSentenceTokenizer has no {_attr!r}, which rag_dedup's "
            f"sentence splitter relies on; install nltk 3.9 or 3.10, or report it to rag-dedup"
        )


def tokenizer_with_params(params: Any) -> Any:
    """A ``PunktSentenceTokenizer`` using ``params`` (punkt's constructor would retrain on a text)."""
    tokenizer = _PunktSentenceTokenizer()
    tokenizer._params = params
    return tokenizer


def period_context_re(tokenizer: Any) -> Any:
    """The compiled pattern of candidate sentence ends, with groups ``after_tok`` and ``next_tok``."""
    return tokenizer._lang_vars.period_context_re()


def boundary_realignment_re(tokenizer: Any) -> Any:
    """The compiled pattern of closing marks that stay with the sentence before them."""
    return tokenizer._lang_vars.re_boundary_realignment
