"""What ``DocumentDeduplicator`` in drop mode remembers besides its index, in a file beside it.

Drop mode passes each passage on once across calls (:mod:`rag_dedup.ingest`): it must remember which
documents it passed (the copies the document store holds) and keep the dropped ones (a dropped copy is
passed on later when its passage loses the copy the store held). Without that record, a component
reloaded from ``index_path`` would take every cluster for one the store holds no copy of, and pass
another copy. :meth:`DocumentDeduplicator.save <rag_dedup.haystack.DocumentDeduplicator.save>` writes it
with the index, as ``haystack_ledger.json`` inside ``index_path`` (the index's own files are named apart),
and ``warm_up`` reads it back.

The file (format ``rag-dedup-haystack-ledger`` version 1) holds the passed ids and each dropped
document as Haystack's ``Document.to_dict()``; it is written atomically (:mod:`rag_dedup.atomic`) and
every field is validated when read: a damaged or foreign file raises
:class:`~rag_dedup.errors.CorruptIndexError` naming the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from haystack import Document

from rag_dedup import atomic
from rag_dedup.errors import CorruptIndexError
from rag_dedup.ingest import Ledger

__all__ = ["LEDGER_FILE", "encode_ledger", "load_ledger", "save_ledger"]

LEDGER_FILE = "haystack_ledger.json"
_FORMAT = "rag-dedup-haystack-ledger"
_VERSION = 1


def encode_ledger(ledger: Ledger[Document]) -> str:
    """``ledger`` as the file's text.

    Raises:
        TypeError: A dropped document's ``meta`` holds a value JSON cannot hold (named).
    """
    body = {
        "format": _FORMAT,
        "format_version": _VERSION,
        "passed": sorted(ledger.passed),
        "dropped": {key: doc.to_dict() for key, doc in ledger.dropped.items()},
    }
    try:
        return json.dumps(body, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"drop mode keeps the dropped documents to promote them later, and one of them cannot be saved "
            f"({_unsavable(ledger) or exc}); give documents meta values JSON can hold (str, numbers, lists, dicts)"
        ) from None


def _unsavable(ledger: Ledger[Document]) -> str | None:
    """Which dropped document, and which of its meta values, JSON cannot hold (for the error)."""
    for key, doc in ledger.dropped.items():
        for name, value in doc.meta.items():
            try:
                json.dumps(value, ensure_ascii=False)
            except (TypeError, ValueError) as exc:
                return f"document {key!r}, meta[{name!r}]: {exc}"
    return None


def save_ledger(index_path: str | Path, text: str) -> None:
    """Write the ledger's text (:func:`encode_ledger`) into the directory ``index_path`` (atomically)."""
    atomic.write_text(Path(index_path) / LEDGER_FILE, text)


def load_ledger(index_path: str | Path) -> Ledger[Document] | None:
    """The ledger saved in ``index_path``, or None when there is none (an index saved in tag mode, or by
    an older release).

    Raises:
        CorruptIndexError: The file is not one this writes, or a field is damaged (named).
    """
    path = Path(index_path) / LEDGER_FILE
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CorruptIndexError(f"{path}: not a rag-dedup ledger ({exc})") from None
    if not isinstance(body, dict) or body.get("format") != _FORMAT:
        raise CorruptIndexError(f"{path}: not a rag-dedup ledger (format {_field(body, 'format')!r})")
    if body.get("format_version") != _VERSION:
        raise CorruptIndexError(
            f"{path}: ledger format version {_field(body, 'format_version')!r}; this release reads {_VERSION}: "
            "upgrade rag-dedup, or index again"
        )
    passed, dropped = body.get("passed"), body.get("dropped")
    if not isinstance(passed, list) or not all(isinstance(k, str) for k in passed):
        raise CorruptIndexError(f"{path}: 'passed' is not a list of document ids")
    if not isinstance(dropped, dict):
        raise CorruptIndexError(f"{path}: 'dropped' is not an object of documents by id")
    documents: dict[str, Document] = {}
    for key, raw in dropped.items():
        try:
            if not isinstance(raw, dict):
                raise TypeError(f"a {type(raw).__name__}, not an object")
            doc = Document.from_dict(raw)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise CorruptIndexError(f"{path}: dropped document {key!r} is damaged ({exc})") from None
        if doc.id != key:
            raise CorruptIndexError(f"{path}: dropped document {key!r} holds a document of id {doc.id!r}")
        documents[key] = doc
    return Ledger(set(passed), documents)


def _field(body: Any, name: str) -> Any:
    return body.get(name) if isinstance(body, dict) else None
