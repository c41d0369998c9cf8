"""What a ``DedupTransform`` remembers besides its index, and the file it is saved in.

* ``sources``: the documents (``ref_doc_id``) whose chunks the transform put in the index, so that a
  document that left the pipeline's docstore can leave the index too;
* ``ledger`` (``mode="drop"``): the :class:`~rag_dedup.ingest.Ledger` that :class:`~rag_dedup.ingest.Ingestor`
  keeps: the node ids passed on (the copies the user's stores hold), and the nodes not passed on, kept
  so that one can be passed on later (*promoted*) when no copy of its passage is left in the stores
  (the rule is :mod:`rag_dedup.ingest`'s);
* ``token``: the cache token (see :mod:`rag_dedup.llama_index.transform`).

A dropped node is kept as what promoting it needs, not as a full copy: its id, text, positions,
embedding if it has one, and its ``PREVIOUS``/``NEXT``/``PARENT``/``CHILD`` relationships as
``[node_id, node_type]`` pairs, without the copies of the related nodes' metadata and hashes that
LlamaIndex puts there (each of a chunk's relationships carries the document's metadata again). The
rest of a node (its metadata without the dedup stamps, the excluded-key lists, templates, class, and
its ``SOURCE`` relationship) is the same for every chunk of a document, so it is stored once per
distinct value and referenced by number. A promoted node equals the dropped one but for the
metadata and hashes of its non-``SOURCE`` relationships.

The file (``dedup_transform.json``, format ``rag-dedup-transform`` version 2) is written atomically
(by :mod:`rag_dedup.atomic`: a temporary file, fsynced, renamed over the old one) and every field is validated when read: a
damaged or foreign file raises :class:`TransformStateError` naming the file and the field.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc

from rag_dedup import atomic, settings
from rag_dedup.errors import TransformStateError
from rag_dedup.ingest import Ledger
from rag_dedup.llama_index.metadata import STAMP_KEYS

__all__ = ["FORMAT", "FORMAT_VERSION", "TransformState"]

FORMAT = settings.TRANSFORM_STATE_FORMAT
FORMAT_VERSION = settings.TRANSFORM_STATE_VERSION

# Fields of a node's data kept per node; everything else goes into the shared part.
_OWN = ("id_", "text", "text_resource", "start_char_idx", "end_char_idx", "embedding")
_SOURCE = "1"  # NodeRelationship.SOURCE: the document, the same for every chunk of it


class TransformState:
    """The sources, drop-mode ledger and cache token of one DedupTransform (see the module docstring)."""

    def __init__(self) -> None:
        self.sources: set[str] = set()
        self.token: str = uuid.uuid4().hex
        self._dropped: dict[str, dict[str, Any]] = {}
        self._shared: list[str] = []  # JSON of each distinct shared part
        self._shared_id: dict[str, int] = {}
        self.ledger: Ledger[BaseNode] = Ledger(set(), _DroppedNodes(self))

    @property
    def passed(self) -> set[str]:
        """The node ids passed on in drop mode."""
        return self.ledger.passed

    def renew_token(self) -> None:
        self.token = uuid.uuid4().hex

    # --- dropped nodes ------------------------------------------------------------------------
    def drop(self, node: BaseNode) -> None:
        """Keep ``node`` (not passed on) as a compact record."""
        data = doc_to_json(node)
        body = data["__data__"]
        own = {name: body.pop(name) for name in _OWN if body.get(name) is not None}
        relationships = body.pop("relationships", None) or {}
        if _SOURCE in relationships:
            body["relationships"] = {_SOURCE: relationships.pop(_SOURCE)}
        if relationships:
            own["rel"] = {kind: _pair(info) for kind, info in relationships.items()}
        body["metadata"] = {k: v for k, v in body.get("metadata", {}).items() if k not in STAMP_KEYS}
        shared = json.dumps({"type": data["__type__"], "data": body}, sort_keys=True)
        number = self._shared_id.get(shared)
        if number is None:
            number = self._shared_id[shared] = len(self._shared)
            self._shared.append(shared)
        own["shared"] = number
        self._dropped[node.node_id] = own

    def dropped_ids(self) -> list[str]:
        return list(self._dropped)

    def _rebuild(self, record: dict[str, Any]) -> BaseNode:
        own = dict(record)
        shared = json.loads(self._shared[own.pop("shared")])
        data = {**shared["data"], **own}
        related = {kind: _related(pair) for kind, pair in own.pop("rel", {}).items()}
        data.pop("rel", None)
        data["relationships"] = {**shared["data"].get("relationships", {}), **related}
        return json_to_doc({"__type__": shared["type"], "__data__": data})

    def __len__(self) -> int:
        return len(self._dropped)

    # --- the file -----------------------------------------------------------------------------
    def write(self, target: Path, settings: dict[str, Any]) -> None:
        """Write ``settings`` and this state to ``target`` atomically."""
        used = sorted({rec["shared"] for rec in self._dropped.values()})
        renumber = {old: new for new, old in enumerate(used)}
        payload = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            **settings,
            "token": self.token,
            "sources": sorted(self.sources),
            "passed": sorted(self.passed),
            "shared": [json.loads(self._shared[i]) for i in used],
            "dropped": [{**rec, "shared": renumber[rec["shared"]]} for rec in self._dropped.values()],
        }
        atomic.write_text(target, json.dumps(payload, ensure_ascii=False, separators=(",", ":")))

    @classmethod
    def read(cls, target: Path) -> tuple[TransformState, dict[str, Any]]:
        """Read a file written by :meth:`write`: the state, and the whole payload (for the settings).

        Raises:
            FileNotFoundError: ``target`` does not exist.
            TransformStateError: It is not valid JSON, not a saved DedupTransform, from a newer or an
                older format, or a field has the wrong type (the message names the file and field).
        """
        where = os.fspath(target)
        try:
            payload = json.loads(target.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TransformStateError(f"{where!r} is damaged: not valid UTF-8 JSON ({exc})") from exc
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise TransformStateError(f"{where!r} is not a saved DedupTransform (no format {FORMAT!r})")
        version = payload.get("format_version")
        if type(version) is not int:
            raise TransformStateError(f"{where!r} is not a saved DedupTransform (format_version {version!r})")
        if version > FORMAT_VERSION:
            raise TransformStateError(
                f"{where!r} has format version {version}, newer than this rag-dedup reads ({FORMAT_VERSION}); "
                "upgrade rag-dedup"
            )
        if version < FORMAT_VERSION:
            raise TransformStateError(
                f"{where!r} has format version {version}, written by an older rag-dedup that kept no record "
                "of the nodes passed on; ingest again into a new persist dir"
            )
        state = cls()
        state.token = _field(payload, "token", str, where)
        state.sources = set(_strings(payload, "sources", where))
        state.ledger.passed = set(_strings(payload, "passed", where))
        shared = _field(payload, "shared", list, where)
        for i, part in enumerate(shared):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str) or not isinstance(
                part.get("data"), dict
            ):
                raise TransformStateError(f"{where!r}: shared[{i}] is not a {{type, data}} object")
            text = json.dumps(part, sort_keys=True)
            state._shared_id[text] = len(state._shared)
            state._shared.append(text)
        for i, rec in enumerate(_field(payload, "dropped", list, where)):
            if not isinstance(rec, dict):
                raise TransformStateError(f"{where!r}: dropped[{i}] is not an object")
            key, number = rec.get("id_"), rec.get("shared")
            if not isinstance(key, str) or not key:
                raise TransformStateError(f"{where!r}: dropped[{i}] has no node id (id_)")
            if type(number) is not int or not 0 <= number < len(shared):
                raise TransformStateError(f"{where!r}: dropped[{i}] ({key!r}) refers to shared part {number!r}")
            if not isinstance(rec.get("rel", {}), dict):
                raise TransformStateError(f"{where!r}: dropped[{i}] ({key!r}) has malformed relationships")
            if key in state._dropped:
                raise TransformStateError(f"{where!r}: node {key!r} is recorded as dropped twice")
            state._dropped[key] = rec
            try:
                state._rebuild(rec)  # rebuilds it: a record LlamaIndex cannot read fails here, not at promotion
            except (TypeError, ValueError, KeyError) as exc:
                raise TransformStateError(f"{where!r}: dropped[{i}] ({key!r}) is not a readable node: {exc}") from exc
        return state, payload


class _DroppedNodes(MutableMapping[str, BaseNode]):
    """A state's dropped nodes as the ledger's mapping (node id -> node), kept as compact records.

    Reading a node rebuilds it from its record; membership, iteration and deletion do not.
    """

    def __init__(self, state: TransformState) -> None:
        self._state = state

    def __getitem__(self, key: str) -> BaseNode:
        return self._state._rebuild(self._state._dropped[key])

    def __setitem__(self, key: str, node: BaseNode) -> None:
        if key != node.node_id:
            raise ValueError(f"a dropped node is kept under its own id ({node.node_id!r}), not {key!r}")
        self._state.drop(node)

    def __delitem__(self, key: str) -> None:
        del self._state._dropped[key]

    def __contains__(self, key: object) -> bool:
        return key in self._state._dropped

    def __iter__(self) -> Iterator[str]:
        return iter(self._state._dropped)

    def __len__(self) -> int:
        return len(self._state._dropped)


def _pair(info: Any) -> Any:
    """A relationship as ``[node_id, node_type]`` (a list of them for ``CHILD``)."""
    if isinstance(info, list):
        return [_pair(i) for i in info]
    return [info["node_id"], info.get("node_type")]


def _related(pair: Any) -> Any:
    """The inverse of :func:`_pair`: a ``RelatedNodeInfo`` dict (or a list of them)."""
    if isinstance(pair, list) and all(isinstance(p, list) for p in pair):  # CHILD: a list of pairs (maybe empty)
        return [_related(p) for p in pair]
    if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
        raise ValueError(f"a relationship must be [node_id, node_type], got {pair!r}")
    return {"node_id": pair[0], "node_type": pair[1]}


def _field(payload: dict[str, Any], name: str, kind: type, where: str) -> Any:
    value = payload.get(name)
    if not isinstance(value, kind):
        raise TransformStateError(f"{where!r}: field {name!r} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def _strings(payload: dict[str, Any], name: str, where: str) -> list[str]:
    values = _field(payload, name, list, where)
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise TransformStateError(f"{where!r}: {name}[{i}] must be a str, got {type(value).__name__}")
    return values
