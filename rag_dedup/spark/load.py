"""From batch to incremental: the job's Parquet output becomes a :class:`DedupIndex`, nothing re-hashed.

:func:`~rag_dedup.spark.job.write_result` writes, beside each item's cluster, everything the index
keeps: per exact group its digest, shingle set, LSH band keys and component; per item its group,
length, source, authority and first_seen. :func:`load_index` files them into an empty index (in
memory, to be saved with :meth:`DedupIndex.save`, or in Redis) through the storage interface, so the
index then stands exactly where ``DedupIndex().add_many(items)`` would, and goes on with ``add``,
``add_many`` or ``DedupTransform`` at ingest.

Everything read is validated: the manifest's format and parameters, every column's presence and
type, digest, shingle and band sizes, and that every item's group and representative exist.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rag_dedup.errors import CorruptResultError
from rag_dedup.index import DedupIndex, IndexMismatchError
from rag_dedup.policy import Policy
from rag_dedup.spark.job import RESULT_FORMAT as _FORMAT
from rag_dedup.spark.job import RESULT_VERSION as _VERSION
from rag_dedup.storage.base import EMPTY_GROUP, ClusterEntry, ItemRecord, Storage

__all__ = ["CorruptResultError", "load_index"]

_DIGEST_BYTES = 16
_GROUP_COLUMNS = ("gid", "digest", "shingles", "bands", "component")
_ITEM_COLUMNS = (
    "key", "representative", "duplicate_of", "similarity", "cluster_size", "source", "gid", "length", "authority", "first_seen",
)
# Groups filed per create_groups call (one Redis round trip each).
_BATCH = 4096


def load_index(
    path: str | os.PathLike[str],
    storage: Storage | str | None = None,
    *,
    namespace: str = "rag-dedup",
    policy: Policy | None = None,
) -> DedupIndex:
    """A :class:`DedupIndex` holding a job result written by :func:`~rag_dedup.spark.job.write_result`.

    Args:
        path: The result directory (``manifest.json``, ``items/``, ``groups/``).
        storage: Where the index lives, as :class:`DedupIndex` takes it (None: memory; a Redis URL);
            it must be empty.
        namespace: The Redis key prefix.
        policy: The representative policy, required when the job ran with a custom one.

    Raises:
        FileNotFoundError: No manifest at ``path``.
        CorruptResultError: A file or value is missing or wrong (named in the message).
        IndexMismatchError: The storage holds an index with other parameters, or the policy differs.
        ValueError: The storage already holds items.
    """
    import pyarrow.parquet as pq

    root = Path(path)
    manifest_path = root / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{manifest_path} does not exist; write the job's result with write_result() first")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptResultError(f"{manifest_path}: not a readable JSON manifest ({e})") from e
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT or not isinstance(manifest.get("index"), dict):
        raise CorruptResultError(f"{manifest_path} is not a rag-dedup Spark result (format {_FORMAT!r})")
    if manifest.get("format_version") != _VERSION:
        raise CorruptResultError(f"{manifest_path}: format_version {manifest.get('format_version')!r}, this rag-dedup reads {_VERSION}")
    meta: dict[str, Any] = manifest["index"]
    try:
        index = DedupIndex(
            threshold=meta["threshold"], num_perm=meta["num_perm"], ngram=meta["ngram"], storage=storage,
            namespace=namespace, policy=policy, seed=meta["seed"], drift_floor=meta["drift_floor"],
        )
    except KeyError as e:
        raise CorruptResultError(f"{manifest_path}: the index parameters lack {e}") from e
    for name, value in index._meta().items():
        if meta.get(name) != value:
            raise IndexMismatchError(
                f"{manifest_path} was made with {name}={meta.get(name)!r}, but this index has {name}={value!r}"
                + ("; pass policy= the function the job used" if name == "policy" else "")
            )
    if len(index):
        raise ValueError(f"{index.storage!r} already holds {len(index)} items; load a job result into an empty index")
    groups = _read(pq, root / "groups", _GROUP_COLUMNS)
    items = _read(pq, root / "items", _ITEM_COLUMNS)
    b = index.bands[0]
    with index.storage.lock():
        gid_of = _file_groups(index.storage, groups, b, root / "groups")
        _file_items(index.storage, items, gid_of, root / "items")
    return index


def _read(pq: Any, where: Path, columns: Sequence[str]) -> dict[str, list[Any]]:
    if not where.is_dir():
        raise CorruptResultError(f"{where} is missing; the result directory is incomplete")
    try:
        table = pq.read_table(where)
    except Exception as e:  # pyarrow raises ArrowInvalid / OSError variants for damaged files
        raise CorruptResultError(f"{where}: unreadable Parquet ({type(e).__name__}: {e})") from e
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise CorruptResultError(f"{where} lacks column(s) {missing}")
    return {c: table.column(c).to_pylist() for c in columns}


def _file_groups(storage: Storage, groups: dict[str, list[Any]], b: int, where: Path) -> dict[int, int]:
    """Create every group in the storage; return job group id -> storage group id."""
    gid_of: dict[int, int] = {}
    n = len(groups["gid"])
    for lo in range(0, n, _BATCH):
        digests, sets, keys, job_gids = [], [], [], []
        for i in range(lo, min(n, lo + _BATCH)):
            gid, digest, sh, bands = groups["gid"][i], groups["digest"][i], groups["shingles"][i], groups["bands"][i]
            if not isinstance(gid, int) or gid in gid_of or gid in job_gids:
                raise CorruptResultError(f"{where}: row {i} has a missing or repeated gid {gid!r}")
            if not isinstance(digest, bytes) or len(digest) != _DIGEST_BYTES:
                raise CorruptResultError(f"{where}: group {gid} has a digest that is not {_DIGEST_BYTES} bytes")
            if not isinstance(sh, bytes) or len(sh) % 4:
                raise CorruptResultError(f"{where}: group {gid} has a shingle set that is not whole uint32 values")
            if not isinstance(bands, list) or len(bands) != b or any(not isinstance(v, int) for v in bands):
                raise CorruptResultError(f"{where}: group {gid} has {len(bands) if isinstance(bands, list) else 0} band keys, not {b}")
            arr = np.frombuffer(sh, dtype="<u4").astype(np.uint32)
            if len(arr) > 1 and not bool((arr[1:] > arr[:-1]).all()):
                raise CorruptResultError(f"{where}: group {gid} has a shingle set that is not sorted and unique")
            job_gids.append(gid)
            digests.append(digest)
            sets.append(arr)
            keys.append(bands)
        band_keys = np.array(keys, dtype=np.int64).reshape(len(keys), b).view(np.uint64)
        gid_of.update(zip(job_gids, storage.create_groups(digests, sets, band_keys)))
    components: dict[int, list[int]] = {}
    for gid, comp in zip(groups["gid"], groups["component"]):
        if comp is not None:
            components.setdefault(comp, []).append(gid_of[gid])
    storage.set_components([c for c in components.values() if len(c) > 1])
    return gid_of


def _file_items(storage: Storage, items: dict[str, list[Any]], gid_of: dict[int, int], where: Path) -> None:
    records: dict[str, ItemRecord] = {}
    clusters: dict[str, list[tuple[str, float]]] = {}
    sizes: dict[str, int] = {}  # the cluster_size each item states for its cluster
    rows = zip(*(items[c] for c in _ITEM_COLUMNS))
    for i, (key, rep, dup, sim, size, source, gid, length, authority, first_seen) in enumerate(rows):
        if not isinstance(key, str) or not key or key in records:
            raise CorruptResultError(f"{where}: row {i} has a missing, empty or repeated key {key!r}")
        if gid is not None and gid not in gid_of:
            raise CorruptResultError(f"{where}: item {key!r} names group {gid}, which is not in the groups")
        if not isinstance(length, int) or length < 0 or not isinstance(authority, float) or not math.isfinite(authority):
            raise CorruptResultError(f"{where}: item {key!r} has an invalid length or authority")
        seen = None if first_seen is None or math.isnan(first_seen) else float(first_seen)
        records[key] = ItemRecord(EMPTY_GROUP if gid is None else gid_of[gid], length, source, authority, seen)
        if dup is not None:
            if dup != rep or not isinstance(sim, float) or not 0.0 <= sim <= 1.0:
                raise CorruptResultError(f"{where}: item {key!r} has an invalid duplicate_of or similarity")
            clusters.setdefault(rep, []).append((key, sim))
        if not isinstance(size, int) or size < 1 or sizes.setdefault(rep, size) != size:
            raise CorruptResultError(f"{where}: item {key!r} has a cluster_size {size!r} that differs from its cluster's")
    for rep, size in sizes.items():
        if rep not in records:
            raise CorruptResultError(f"{where}: representative {rep!r} is not one of the items")
        if size != 1 + len(clusters.get(rep, ())):
            raise CorruptResultError(f"{where}: cluster {rep!r} states cluster_size {size}, but has {1 + len(clusters.get(rep, ()))} items")
    storage.put_items(records)
    entries: list[ClusterEntry] = [(rep, [(rep, 1.0), *sorted(members)]) for rep, members in sorted(clusters.items())]
    storage.set_clusters([k for _, ms in entries for k, _ in ms], entries)
