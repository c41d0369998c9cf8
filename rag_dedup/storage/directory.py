"""Save an in-memory index to a directory and load it back: JSON and numpy files, never pickle.

Layout of a saved index::

    manifest.json            format, format_version, the index parameters, for every data file its
                             name, size and SHA-256, and the SHA-256 of the manifest itself
    items-<gen>.json         keys, group ids, lengths, sources, authorities, first_seen (columns)
    groups-<gen>.npz         digests, shingle arrays (concatenated + offsets), LSH bucket table
    clusters-<gen>.json      components of two or more groups, clusters of two or more items

Group ids are written compacted to ``0 .. n-1`` (in their order), so a saved index holds no gaps that
loading would have to allocate; ids are internal, and no answer of the index depends on their values.

**Writes are atomic** (each file by :mod:`rag_dedup.atomic`). Data files of a new generation are
written under fresh names, flushed and fsynced; then ``manifest.json`` is replaced in one
``os.replace`` (and the directory fsynced); then every file of a generation older than the previous
one, and every temporary that an interrupted save left behind, is removed (the previous generation
stays until the next save, for a load that read the previous manifest just before the swap).
A crash leaves either the old index or the new one, never a mix. One process saves into a directory at
a time.

**Reads are checked.** Loading verifies the manifest's own checksum and every file's size and checksum,
then the types, ranges and lengths of everything read (columns of equal length, group ids in range,
sorted shingle arrays, every group filed in every band, clusters over known keys), so a damaged or a
crafted file raises :class:`~rag_dedup.errors.CorruptIndexError` naming the file, never another error.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import secrets
import tempfile
import zipfile
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from rag_dedup import atomic, settings
from rag_dedup.errors import CorruptIndexError, InvalidTextError
from rag_dedup.finite import is_finite_number
from rag_dedup.storage.base import EMPTY_GROUP, ItemRecord
from rag_dedup.storage.memory import MemoryStorage, Snapshot
from rag_dedup.surrogates import check_unicode

__all__ = ["MANIFEST", "load_directory", "save_directory"]

MANIFEST = "manifest.json"
_FORMAT = settings.INDEX_FORMAT
_VERSION = settings.DIRECTORY_FORMAT_VERSION
_DIGEST_BYTES = 16  # BLAKE2b-128 of the canonical text (rag_dedup.shingles)
_ROLES = {"items": ".json", "groups": ".npz", "clusters": ".json"}
# Data files of any generation, and the temporaries of rag_dedup.atomic.write_bytes (".<name>.<random>.tmp").
_DATA_FILE = re.compile(r"(?:items|groups|clusters)-[0-9a-f]{8}\.(?:json|npz)")
_TEMPORARY = re.compile(r"\.(?:manifest\.json|(?:items|groups|clusters)-[0-9a-f]{8}\.(?:json|npz))\..+\.tmp")
_ARRAYS = {  # name -> (dtype, number of dimensions)
    "gids": (np.int64, 1),
    "digests": (np.uint8, 2),
    "shingle_offsets": (np.int64, 1),
    "shingles": (np.uint32, 1),
    "band_keys": (np.uint64, 1),
    "band_gids": (np.int32, 1),
}
_ITEM_COLUMNS = ("keys", "gid", "length", "source", "authority", "first_seen")


def save_directory(path: str | os.PathLike[str], meta: dict[str, Any], storage: MemoryStorage) -> None:
    """Write ``storage`` with its parameters ``meta`` to directory ``path`` (created if needed)."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    gen = secrets.token_hex(4)
    files: dict[str, dict[str, Any]] = {}

    snap = storage.export()
    recs = list(snap.items.values())
    items = {
        "keys": list(snap.items),
        "gid": [r.gid for r in recs],
        "length": [r.length for r in recs],
        "source": [r.source for r in recs],
        "authority": [r.authority for r in recs],
        "first_seen": [r.first_seen for r in recs],
    }
    _write(root, f"items-{gen}.json", json.dumps(items, ensure_ascii=False).encode("utf-8"), files, "items")

    n = len(snap.digests)
    lengths = np.array([len(s) for s in snap.shingles], dtype=np.int64)
    arrays = {
        "gids": np.arange(n, dtype=np.int64),
        "digests": np.frombuffer(b"".join(snap.digests), dtype=np.uint8).reshape(n, -1)
        if n
        else np.zeros((0, _DIGEST_BYTES), dtype=np.uint8),
        "shingle_offsets": np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        "shingles": np.concatenate(snap.shingles) if n else np.zeros(0, dtype=np.uint32),
        "band_keys": snap.band_keys,
        "band_gids": snap.band_gids,
    }
    with tempfile.SpooledTemporaryFile() as buf:
        np.savez(buf, **arrays)  # type: ignore[arg-type]
        buf.seek(0)
        _write(root, f"groups-{gen}.npz", buf.read(), files, "groups")

    clusters = {
        "components": [list(c) for c in snap.components],
        "clusters": [[rep, [[k, s] for k, s in members]] for rep, members in snap.clusters],
    }
    _write(root, f"clusters-{gen}.json", json.dumps(clusters, ensure_ascii=False).encode("utf-8"), files, "clusters")

    body = {"format": _FORMAT, "format_version": _VERSION, "meta": meta, "files": files}
    manifest = {**body, "sha256": _manifest_digest(body)}
    previous = _named_files(root / MANIFEST)
    atomic.write_bytes(root / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8"))
    atomic.fsync_directory(root)
    # The previous generation stays until the next save: a load that read the previous manifest just
    # before the swap still finds its files.
    kept = {entry["name"] for entry in files.values()} | previous
    for entry in root.iterdir():
        name = entry.name
        if name not in kept and (_DATA_FILE.fullmatch(name) or _TEMPORARY.fullmatch(name)):
            entry.unlink(missing_ok=True)


def _named_files(manifest: Path) -> set[str]:
    """The data file names a manifest lists (none if it is missing or unreadable: nothing is kept for it)."""
    try:
        body = json.loads(manifest.read_bytes())
        return {entry["name"] for entry in body["files"].values() if _DATA_FILE.fullmatch(str(entry["name"]))}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return set()


def load_directory(path: str | os.PathLike[str]) -> tuple[dict[str, Any], MemoryStorage]:
    """Read a directory written by :func:`save_directory`: (index parameters, storage).

    Raises:
        FileNotFoundError: ``path`` holds no saved index.
        CorruptIndexError: The manifest or a data file is damaged, truncated, missing, crafted
            inconsistently, or of another format version; the message names the file.
    """
    root = Path(path)
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        raise FileNotFoundError(f"no saved rag-dedup index at {str(root)!r} (missing {MANIFEST})")
    manifest = _parse_json(manifest_path, manifest_path.read_bytes())
    meta, files = _check_manifest(manifest_path, manifest)
    data = {role: _read_checked(root, files[role]) for role in _ROLES}

    groups_path = root / files["groups"]["name"]
    arrays = _read_arrays(groups_path, data["groups"])
    n = _check_groups(groups_path, arrays, meta["b"])

    offsets = arrays["shingle_offsets"].tolist()
    shingles = arrays["shingles"]

    items_path = root / files["items"]["name"]
    records = _check_items(items_path, _parse_json(items_path, data["items"]), n)
    filled = np.zeros(n, dtype=bool)
    filled[[r.gid for r in records.values() if r.gid != EMPTY_GROUP]] = True
    empty = np.flatnonzero(~filled)
    if len(empty):
        _corrupt(items_path, f"group {empty[0]} has no item ({len(empty)} such groups)")

    clusters_path = root / files["clusters"]["name"]
    components, clusters = _check_clusters(clusters_path, _parse_json(clusters_path, data["clusters"]), n, records)
    storage = MemoryStorage.restore(
        Snapshot(
            meta=meta,
            items=records,
            digests=[d.tobytes() for d in arrays["digests"]],
            shingles=[shingles[offsets[g] : offsets[g + 1]] for g in range(n)],
            band_keys=arrays["band_keys"],
            band_gids=arrays["band_gids"],
            components=components,
            clusters=clusters,
        )
    )
    return meta, storage


# --- writing ---------------------------------------------------------------------------------------
def _write(root: Path, name: str, data: bytes, files: dict[str, dict[str, Any]], role: str) -> None:
    atomic.write_bytes(root / name, data)
    files[role] = {"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _manifest_digest(body: dict[str, Any]) -> str:
    """SHA-256 of the manifest without its ``sha256`` field, as compact sorted ASCII JSON."""
    encoded = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(encoded.encode("ascii")).hexdigest()


# --- reading ---------------------------------------------------------------------------------------
def _corrupt(path: Path, what: str) -> NoReturn:
    raise CorruptIndexError(f"{path}: {what}; the saved index is damaged (save it again from its source)")


def _parse_json(path: Path, data: bytes) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CorruptIndexError(f"{path} is not valid JSON ({str(exc)[:200]}); the index is damaged") from None


def _check_manifest(path: Path, manifest: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        raise CorruptIndexError(f"{path} is not a rag-dedup index manifest")
    version = manifest.get("format_version")
    if type(version) is not int:
        raise CorruptIndexError(f"{path} has format_version {version!r}, not a number: the manifest is damaged; "
                                "save the index again from its source")
    if version != _VERSION:
        older = version < _VERSION
        raise CorruptIndexError(
            f"{path} has format_version {version}; this rag-dedup reads {_VERSION}. "
            + ("Rebuild the index from its texts (it was saved by an older rag-dedup)" if older else "Upgrade rag-dedup")
        )
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    try:
        digest = _manifest_digest(body)
    except ValueError:  # NaN or infinity in the parameters
        _corrupt(path, "the manifest holds a non-finite number")
    if manifest.get("sha256") != digest:
        _corrupt(path, "the manifest fails its checksum (it was edited or damaged)")
    meta, files = manifest.get("meta"), manifest.get("files")
    if not isinstance(meta, dict):
        _corrupt(path, "'meta' is not an object")
    if type(meta.get("b")) is not int or meta["b"] < 1:
        _corrupt(path, f"meta 'b' is {meta.get('b')!r}, not a positive int")
    if not isinstance(files, dict) or set(files) != set(_ROLES):
        _corrupt(path, f"'files' must name exactly {sorted(_ROLES)}")
    for role, suffix in _ROLES.items():
        entry = files[role]
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("name"), str)
            or not _DATA_FILE.fullmatch(entry["name"])
            or not entry["name"].startswith(f"{role}-")
            or not entry["name"].endswith(suffix)
            or type(entry.get("bytes")) is not int
            or not isinstance(entry.get("sha256"), str)
        ):
            _corrupt(path, f"the entry of the {role} file is malformed: {str(entry)[:200]}")
    return meta, files


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


def _read_arrays(path: Path, data: bytes) -> dict[str, np.ndarray]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            # np.savez stores its members uncompressed: anything that expands is not ours.
            if sum(info.file_size for info in archive.infolist()) > len(data):
                _corrupt(path, "its members expand beyond the file's size")
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            if set(npz.files) != set(_ARRAYS):
                _corrupt(path, f"holds arrays {sorted(npz.files)}, expected {sorted(_ARRAYS)}")
            arrays = {name: npz[name] for name in _ARRAYS}
    except (ValueError, OSError, EOFError, MemoryError, zipfile.BadZipFile) as exc:
        raise CorruptIndexError(f"{path} is not a valid array file ({str(exc)[:200]})") from None
    for name, (dtype, ndim) in _ARRAYS.items():
        if arrays[name].dtype != dtype or arrays[name].ndim != ndim:
            _corrupt(path, f"array {name!r} is {arrays[name].dtype} with {arrays[name].ndim} dimensions, expected {np.dtype(dtype)} with {ndim}")
    return arrays


def _check_groups(path: Path, arrays: dict[str, np.ndarray], b: int) -> int:
    """Validate the group arrays; return the number of groups."""
    n = len(arrays["gids"])
    if not np.array_equal(arrays["gids"], np.arange(n)):
        _corrupt(path, "group ids are not 0 .. n-1")
    if arrays["digests"].shape != (n, _DIGEST_BYTES):
        _corrupt(path, f"digests have shape {arrays['digests'].shape}, expected ({n}, {_DIGEST_BYTES})")
    if len({d.tobytes() for d in arrays["digests"]}) != n:
        _corrupt(path, "two groups have the same digest")
    offsets, shingles = arrays["shingle_offsets"], arrays["shingles"]
    if len(offsets) != n + 1 or offsets[0] != 0 or offsets[-1] != len(shingles) or (np.diff(offsets) < 0).any():
        _corrupt(path, f"shingle offsets do not cut {len(shingles)} shingles into {n} groups")
    # unsorted[i]: shingle i + 1 does not exceed shingle i; the first of a group may (a boundary).
    unsorted = shingles[1:] <= shingles[:-1]
    unsorted[offsets[1:-1] - 1] = False
    if unsorted.any():
        _corrupt(path, "a group's shingles are not sorted and distinct")
    keys, gids = arrays["band_keys"], arrays["band_gids"]
    if len(keys) != len(gids) or len(keys) != n * b:
        _corrupt(path, f"the bucket table has {len(keys)} keys and {len(gids)} group ids, expected {n} groups x {b} bands")
    if n and ((gids < 0).any() or (gids >= n).any() or (np.bincount(gids, minlength=n) != b).any()):
        _corrupt(path, f"the bucket table does not file every group in each of the {b} bands")
    if (keys[1:] < keys[:-1]).any():
        _corrupt(path, "the bucket table is not sorted by key")
    return n


def _check_items(path: Path, items: Any, n: int) -> dict[str, ItemRecord]:
    if not isinstance(items, dict) or set(items) != set(_ITEM_COLUMNS):
        _corrupt(path, f"expected an object with the columns {list(_ITEM_COLUMNS)}")
    columns = [items[c] for c in _ITEM_COLUMNS]
    if not all(isinstance(c, list) for c in columns) or len({len(c) for c in columns}) != 1:
        _corrupt(path, "the columns are not lists of equal length: " + ", ".join(f"{c} {_size(items[c])}" for c in _ITEM_COLUMNS))
    records: dict[str, ItemRecord] = {}
    for i, (key, gid, length, source, authority, first_seen) in enumerate(zip(*columns)):
        where = f"item {i}"
        _check_str(path, key, f"{where}: key")
        if key in records:
            _corrupt(path, f"{where}: key {key!r} appears twice")
        if type(gid) is not int or not EMPTY_GROUP <= gid < n:
            _corrupt(path, f"{where} ({key!r}): group id {gid!r} is not an int in [-1, {n})")
        if type(length) is not int or length < 0:
            _corrupt(path, f"{where} ({key!r}): length {length!r} is not a non-negative int")
        if source is not None:
            _check_str(path, source, f"{where} ({key!r}): source", empty=True)
        _check_number(path, authority, f"{where} ({key!r}): authority")
        if first_seen is not None:
            _check_number(path, first_seen, f"{where} ({key!r}): first_seen")
        records[key] = ItemRecord(gid, length, source, float(authority), None if first_seen is None else float(first_seen))
    return records


def _check_clusters(
    path: Path, found: Any, n: int, records: dict[str, ItemRecord]
) -> tuple[list[list[int]], list[tuple[str, list[tuple[str, float]]]]]:
    if not isinstance(found, dict) or set(found) != {"components", "clusters"}:
        _corrupt(path, "expected an object with 'components' and 'clusters'")
    components, raw_clusters = found["components"], found["clusters"]
    if not isinstance(components, list) or not isinstance(raw_clusters, list):
        _corrupt(path, "'components' and 'clusters' must be lists")
    placed: set[int] = set()
    for i, comp in enumerate(components):
        if not isinstance(comp, list) or len(comp) < 2 or not all(type(g) is int and 0 <= g < n for g in comp):
            _corrupt(path, f"component {i} is not a list of two or more group ids in [0, {n})")
        if len(set(comp)) != len(comp) or placed.intersection(comp):
            _corrupt(path, f"component {i} repeats a group")
        placed.update(comp)
    clusters: list[tuple[str, list[tuple[str, float]]]] = []
    members_seen: set[str] = set()
    for i, entry in enumerate(raw_clusters):
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], list):
            _corrupt(path, f"cluster {i} is not [representative, [[key, similarity], ...]]")
        rep, members = entry
        _check_known(path, rep, records, f"cluster {i}: representative")
        out = []
        for m in members:
            if not isinstance(m, list) or len(m) != 2:
                _corrupt(path, f"cluster {i} ({rep!r}): a member is not [key, similarity]")
            key, sim = m
            _check_known(path, key, records, f"cluster {i} ({rep!r}): member")
            _check_number(path, sim, f"cluster {i} ({rep!r}): similarity of {key!r}")
            if not 0.0 <= sim <= 1.0:
                _corrupt(path, f"cluster {i} ({rep!r}): similarity {sim!r} of {key!r} is not in [0, 1]")
            if key in members_seen:
                _corrupt(path, f"cluster {i} ({rep!r}): {key!r} is a member of two clusters")
            members_seen.add(key)
            out.append((key, float(sim)))
        if len(out) < 2 or not any(k == rep for k, _ in out):
            _corrupt(path, f"cluster {i} ({rep!r}) has fewer than two members or lacks its representative")
        clusters.append((rep, out))
    return components, clusters


def _check_str(path: Path, value: Any, what: str, *, empty: bool = False) -> None:
    if not isinstance(value, str) or (not value and not empty):
        _corrupt(path, f"{what} {str(value)[:80]!r} is not a {'' if empty else 'non-empty '}string")
    try:
        check_unicode(value, what)
    except InvalidTextError as exc:
        _corrupt(path, str(exc).split(", so it is")[0])


def _check_known(path: Path, key: Any, records: dict[str, ItemRecord], what: str) -> None:
    if not isinstance(key, str) or key not in records:
        _corrupt(path, f"{what} {str(key)[:80]!r} is not a stored key")


def _check_number(path: Path, value: Any, what: str) -> None:
    if type(value) not in (int, float) or not is_finite_number(value):
        _corrupt(path, f"{what} {str(value)[:80]!r} is not a finite number")


def _size(column: Any) -> str:
    return f"({len(column)})" if isinstance(column, list) else f"({type(column).__name__})"

