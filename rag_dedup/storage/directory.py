"""Save an in-memory index to a directory and load it back: JSON and numpy files, never pickle.

Layout of a saved index::

    manifest.json            format, format_version, the index parameters, and for every data file
                             its name, size and SHA-256
    items-<gen>.json         keys, group ids, lengths, sources, authorities, first_seen (columns)
    groups-<gen>.npz         digests, shingle arrays (concatenated + offsets), LSH bucket table
    clusters-<gen>.json      components of two or more groups, clusters of two or more items

Writes are atomic: data files of a new generation are written under fresh names and flushed, then
``manifest.json`` is replaced in one ``os.replace``, then the previous generation's files are
removed. A crash leaves either the old index or the new one, never a mix. Loading checks the format
version and every file's size and checksum, and names the file that is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from rag_dedup.errors import CorruptIndexError
from rag_dedup.storage.base import ItemRecord
from rag_dedup.storage.memory import MemoryStorage

__all__ = ["MANIFEST", "load_directory", "save_directory"]

MANIFEST = "manifest.json"
_FORMAT = "rag-dedup-index"
_VERSION = 1


def save_directory(path: str | os.PathLike[str], meta: dict[str, Any], storage: MemoryStorage) -> None:
    """Write ``storage`` with its parameters ``meta`` to directory ``path`` (created if needed)."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    gen = secrets.token_hex(4)
    files: dict[str, dict[str, Any]] = {}

    keys = list(storage.items)
    recs = [storage.items[k] for k in keys]
    items = {
        "keys": keys,
        "gid": [r.gid for r in recs],
        "length": [r.length for r in recs],
        "source": [r.source for r in recs],
        "authority": [r.authority for r in recs],
        "first_seen": [r.first_seen for r in recs],
    }
    _write(root, f"items-{gen}.json", json.dumps(items, ensure_ascii=False).encode("utf-8"), files, "items")

    live = [g for g, d in enumerate(storage.digests) if d is not None]
    shingles = [np.frombuffer(storage.shingles[g] or b"", dtype=np.uint32) for g in live]
    lengths = np.array([len(s) for s in shingles], dtype=np.int64)
    band_keys, band_gids = storage.bands.export()
    arrays = {
        "gids": np.array(live, dtype=np.int64),
        "next_gid": np.array([len(storage.digests)], dtype=np.int64),
        "digests": np.frombuffer(b"".join(storage.digests[g] or b"" for g in live), dtype=np.uint8).reshape(len(live), -1)
        if live
        else np.zeros((0, 16), dtype=np.uint8),
        "shingle_offsets": np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        "shingles": np.concatenate(shingles) if shingles else np.zeros(0, dtype=np.uint32),
        "band_keys": band_keys,
        "band_gids": band_gids,
    }
    with tempfile.SpooledTemporaryFile() as buf:
        np.savez(buf, **arrays)  # type: ignore[arg-type]
        buf.seek(0)
        _write(root, f"groups-{gen}.npz", buf.read(), files, "groups")

    components = sorted({tuple(sorted(c)) for c in storage.component_of.values()})
    clusters = {
        "components": [list(c) for c in components],
        "clusters": [[rep, [[k, s] for k, s in members]] for rep, members in storage.clusters.items()],
    }
    _write(root, f"clusters-{gen}.json", json.dumps(clusters, ensure_ascii=False).encode("utf-8"), files, "clusters")

    manifest = {"format": _FORMAT, "format_version": _VERSION, "meta": meta, "files": files}
    previous = _read_manifest_quietly(root)
    _atomic_write(root / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8"))
    if previous:
        for entry in previous.get("files", {}).values():
            name = entry.get("name") if isinstance(entry, dict) else None
            if isinstance(name, str) and name not in {f["name"] for f in files.values()}:
                (root / name).unlink(missing_ok=True)


def load_directory(path: str | os.PathLike[str]) -> tuple[dict[str, Any], MemoryStorage]:
    """Read a directory written by :func:`save_directory`: (index parameters, storage).

    Raises:
        FileNotFoundError: ``path`` holds no saved index.
        CorruptIndexError: The manifest or a data file is damaged, truncated, missing, or newer.
    """
    root = Path(path)
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        raise FileNotFoundError(f"no saved rag-dedup index at {str(root)!r} (missing {MANIFEST})")
    try:
        manifest = json.loads(manifest_path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptIndexError(f"{manifest_path} is not valid JSON ({exc}); the index is damaged") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        raise CorruptIndexError(f"{manifest_path} is not a rag-dedup index manifest")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > _VERSION:
        raise CorruptIndexError(
            f"{manifest_path} has format_version {version!r}; this rag-dedup reads up to {_VERSION}. Upgrade rag-dedup"
        )
    try:
        meta = manifest["meta"]
        data = {role: _read_checked(root, entry) for role, entry in manifest["files"].items()}
        items = json.loads(data["items"])
        clusters = json.loads(data["clusters"])
    except (KeyError, TypeError) as exc:
        raise CorruptIndexError(f"{manifest_path} lacks an entry ({exc}); the index is damaged") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptIndexError(f"a data file of {root} is not valid JSON ({exc})") from exc

    storage = MemoryStorage()
    storage.save_meta(meta)
    try:
        with np.load(_BytesFile(data["groups"]), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise CorruptIndexError(f"{root / manifest['files']['groups']['name']} is not a valid array file ({exc})") from exc
    next_gid = int(arrays["next_gid"][0])
    storage.digests = [None] * next_gid
    storage.shingles = [None] * next_gid
    storage.members = [None] * next_gid
    offsets = arrays["shingle_offsets"]
    for i, gid in enumerate(arrays["gids"].tolist()):
        digest = arrays["digests"][i].tobytes()
        storage.digests[gid] = digest
        storage.digest_to_gid[digest] = gid
        storage.shingles[gid] = arrays["shingles"][offsets[i] : offsets[i + 1]].astype(np.uint32).tobytes()
    storage.bands.restore(arrays["band_keys"], arrays["band_gids"])
    records = {
        key: ItemRecord(gid, length, source, authority, first_seen)
        for key, gid, length, source, authority, first_seen in zip(
            items["keys"], items["gid"], items["length"], items["source"], items["authority"], items["first_seen"]
        )
    }
    storage.put_items(records)
    storage.set_components(clusters["components"])
    storage.set_clusters((), [(rep, [(k, float(s)) for k, s in members]) for rep, members in clusters["clusters"]])
    return meta, storage


class _BytesFile:
    """A minimal seekable file over bytes (np.load wants a file object)."""

    def __init__(self, data: bytes) -> None:
        import io

        self._io = io.BytesIO(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._io, name)


def _write(root: Path, name: str, data: bytes, files: dict[str, dict[str, Any]], role: str) -> None:
    _atomic_write(root / name, data)
    files[role] = {"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_checked(root: Path, entry: dict[str, Any]) -> bytes:
    path = root / entry["name"]
    if not path.is_file():
        raise CorruptIndexError(f"{path} is missing; the index is incomplete")
    data = path.read_bytes()
    if len(data) != entry["bytes"]:
        raise CorruptIndexError(f"{path} has {len(data)} bytes, expected {entry['bytes']}: truncated or damaged")
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise CorruptIndexError(f"{path} fails its checksum: the file is damaged")
    return data


def _read_manifest_quietly(root: Path) -> dict[str, Any] | None:
    try:
        found = json.loads((root / MANIFEST).read_bytes())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None
