"""The executor side of the Spark job: Arrow record batches in, Arrow record batches out.

Every function here runs inside ``mapInArrow`` on an executor, on whole batches, with the kernels
:class:`~rag_dedup.index.DedupIndex` uses: :func:`~rag_dedup.shingles.shingles_and_digests` for
shingle hashes and exact digests, :class:`~rag_dedup.minhash.MinHasher` and
:func:`~rag_dedup.lsh.band_keys` for signatures and buckets, :func:`~rag_dedup.shingles.jaccard_pairs`
for verification, and :func:`cluster_component` (the one adapter to the library's cluster rule,
:func:`rag_dedup.clusters.cluster_component`) for each connected component. So every value the job computes is the value the index computes.

Shingle sets travel as ``binary`` columns: the sorted unique uint32 array's little-endian bytes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from rag_dedup import lsh
from rag_dedup import clusters
from rag_dedup.minhash import MinHasher
from rag_dedup.policy import Member, Policy
from rag_dedup.shingles import shingles_and_digests
from rag_dedup.similarity import jaccard_pairs
from rag_dedup.storage.base import ClusterEntry

__all__ = [
    "CLUSTER_SCHEMA",
    "HASHED_SCHEMA",
    "VERIFIED_SCHEMA",
    "cluster_batches",
    "cluster_component",
    "group_id",
    "hash_batches",
    "kind_of",
    "verify_batches",
]

#: Phases 1-2 output: one row per input row; ``shingles`` and ``bands`` (the LSH band keys, uint64
#: bits as signed longs) only on the first row of a digest in a batch (the others are its copies).
HASHED_SCHEMA = (
    "key string, source string, length long, authority double, first_seen double, "
    "digest binary, gid long, shingles binary, bands array<long>"
)
#: Phase 4 output: a verified candidate pair of groups and the exact Jaccard of their shingle sets.
VERIFIED_SCHEMA = "a long, b long, sim double"
#: Phase 6 output: where each item of a component of two or more items stands.
CLUSTER_SCHEMA = (
    "key string, cluster_id string, representative string, duplicate_of string, similarity double, "
    "kind string, cluster_size long, source string, gid long, length long, authority double, first_seen double"
)


def group_id(digest: bytes) -> int:
    """The group id of an exact-text digest: its first 8 bytes as a signed 64-bit integer.

    The job checks that no two distinct digests share one (probability about N²/2^65 for N groups).
    """
    return int.from_bytes(digest[:8], "little", signed=True)


def kind_of(cluster_size: int, copies: int) -> str:
    """``Match.kind`` as :meth:`DedupIndex.matches` derives it, representatives included.

    ``unique`` for a cluster of one, ``exact`` when another member has the same canonical text (the
    item's group holds ``copies`` > 1 items, all of them in its cluster), ``near`` otherwise.
    """
    if cluster_size == 1:
        return "unique"
    return "exact" if copies > 1 else "near"


def _sets(column: pa.Array) -> list[np.ndarray]:
    return [np.frombuffer(v, dtype="<u4").astype(np.uint32) for v in column.to_pylist()]


def hash_batches(
    batches: Iterator[pa.RecordBatch], *, text: str, key: str, source: str | None, authority: str | None,
    first_seen: str | None, ngram: int, num_perm: int, seed: int, bands: tuple[int, int],
) -> Iterator[pa.RecordBatch]:
    """Phases 1-2 per batch: canonical form, exact digest, shingle hashes, and for each new digest its
    MinHash signature and LSH band keys (as ``DedupIndex._band_keys``)."""
    hasher = MinHasher(num_perm=num_perm, seed=seed)
    b, r = bands
    for batch in batches:
        texts = batch.column(text).to_pylist()
        n = len(texts)
        sets, digests = shingles_and_digests(texts, ngram)
        seen: set[bytes] = set()
        first: list[int] = []
        for i, d in enumerate(digests):
            if d is not None and d not in seen:
                seen.add(d)
                first.append(i)
        shingles: list[bytes | None] = [None] * n
        for i in first:
            shingles[i] = sets[i].astype("<u4").tobytes()
        keys = lsh.band_keys(hasher.signatures([sets[i] for i in first]), b, r).view(np.int64)
        # One list of b keys per first row, an empty (null) list elsewhere.
        valid = np.zeros(n, dtype=bool)
        valid[first] = True
        offsets = np.concatenate(([0], np.cumsum(valid * b))).astype(np.int32)
        band_lists = pa.ListArray.from_arrays(pa.array(offsets), pa.array(keys.reshape(-1), pa.int64()), mask=pa.array(~valid))
        yield pa.RecordBatch.from_arrays(
            [
                batch.column(key),
                batch.column(source) if source else pa.nulls(n, pa.string()),
                pa.array([len(t) for t in texts], pa.int64()),
                batch.column(authority) if authority else pa.array(np.zeros(n)),
                batch.column(first_seen) if first_seen else pa.nulls(n, pa.float64()),
                pa.array(digests, pa.binary()),
                pa.array([None if d is None else group_id(d) for d in digests], pa.int64()),
                pa.array(shingles, pa.binary()),
                band_lists,
            ],
            names=["key", "source", "length", "authority", "first_seen", "digest", "gid", "shingles", "bands"],
        )


def verify_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Phase 4: the exact Jaccard of each candidate pair's shingle sets (``jaccard_pairs``, as the index)."""
    for batch in batches:
        n = batch.num_rows
        sets = _sets(batch.column("sa")) + _sets(batch.column("sb"))
        idx = np.arange(n, dtype=np.int64)
        sims = jaccard_pairs(sets, idx, idx + n)
        yield pa.RecordBatch.from_arrays([batch.column("a"), batch.column("b"), pa.array(sims, pa.float64())], names=["a", "b", "sim"])


def cluster_component(
    members: Sequence[tuple[Member, int]], shingles: Mapping[int, np.ndarray], *, drift_floor: float, policy: Policy
) -> list[ClusterEntry]:
    """The library's cluster rule on one connected component: the one call both engines share.

    Args:
        members: The component's items, each with its group id.
        shingles: The shingle set of each group of the component.
        drift_floor, policy: As :class:`~rag_dedup.index.DedupIndex`.

    Returns:
        ``[(representative, [(member, similarity to it), ...]), ...]``, as
        :func:`~rag_dedup.clusters.cluster_component` returns it inside ``DedupIndex``.
    """
    return clusters.cluster_component(members, shingles, drift_floor, policy)


#: Output columns of phase 6, as :data:`CLUSTER_SCHEMA` names them, with their Arrow types.
_CLUSTER_FIELDS = (
    ("key", pa.string()), ("cluster_id", pa.string()), ("representative", pa.string()), ("duplicate_of", pa.string()),
    ("similarity", pa.float64()), ("kind", pa.string()), ("cluster_size", pa.int64()), ("source", pa.string()),
    ("gid", pa.int64()), ("length", pa.int64()), ("authority", pa.float64()), ("first_seen", pa.float64()),
)
# Output rows gathered before a batch is sent back: one batch per component (most have 2-3 items)
# would make Arrow's per-batch cost the stage's cost.
_OUT_ROWS = 8192


def cluster_batches(batches: Iterator[pa.RecordBatch], *, drift_floor: float, policy: Policy) -> Iterator[pa.RecordBatch]:
    """Phase 6: the cluster rule per component, over rows sorted by component.

    Two kinds of rows arrive, each with its ``comp``: items (``key`` set) and groups (``shingles``
    set). A component's rows are contiguous but may straddle two batches, so a component is
    processed once a row of the next one (or the end of the partition) arrives. The rows out are
    sent in batches of about ``_OUT_ROWS``.
    """
    rows: dict[str, list] = {}
    out: dict[str, list] = {name: [] for name, _ in _CLUSTER_FIELDS}
    current: int | None = None
    for batch in batches:
        cols = batch.to_pydict()
        comps = cols["comp"]
        start = 0
        for i in range(len(comps) + 1):
            if i < len(comps) and (current is None or comps[i] == current):
                current = comps[i]
                continue
            for name, values in cols.items():
                rows.setdefault(name, []).extend(values[start:i])
            start = i
            if i < len(comps):
                _cluster_rows(rows, drift_floor, policy, out)
                rows = {}
                current = comps[i]
                if len(out["key"]) >= _OUT_ROWS:
                    yield _batch(out)
                    out = {name: [] for name, _ in _CLUSTER_FIELDS}
    if rows and rows.get("comp"):
        _cluster_rows(rows, drift_floor, policy, out)
    if out["key"]:
        yield _batch(out)


def _batch(out: Mapping[str, list]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(out[name], t) for name, t in _CLUSTER_FIELDS], names=[n for n, _ in _CLUSTER_FIELDS])


def _cluster_rows(rows: Mapping[str, list], drift_floor: float, policy: Policy, out: Mapping[str, list]) -> None:
    """Cluster one component's rows; append its items' output rows to ``out``'s columns."""
    members: list[tuple[Member, int]] = []
    group_of: dict[str, int] = {}
    shingles: dict[int, np.ndarray] = {}
    info: dict[str, tuple[str | None, int, int, float, float | None]] = {}
    for key, gid, length, source, authority, first_seen, sh in zip(
        rows["key"], rows["gid"], rows["length"], rows["source"], rows["authority"], rows["first_seen"], rows["shingles"]
    ):
        if key is not None:
            members.append((Member(key, length, source, authority, first_seen), gid))
            group_of[key] = gid
            info[key] = (source, gid, length, authority, first_seen)
        else:
            shingles[gid] = np.frombuffer(sh, dtype="<u4").astype(np.uint32)
    copies = Counter(group_of.values())
    for rep, cluster in cluster_component(members, shingles, drift_floor=drift_floor, policy=policy):
        for key, sim in cluster:
            source, gid, length, authority, first_seen = info[key]
            out["key"].append(key)
            out["cluster_id"].append(rep)
            out["representative"].append(rep)
            out["duplicate_of"].append(None if key == rep else rep)
            out["similarity"].append(1.0 if key == rep else float(sim))
            out["kind"].append(kind_of(len(cluster), copies[gid]))
            out["cluster_size"].append(len(cluster))
            out["source"].append(source)
            out["gid"].append(gid)
            out["length"].append(length)
            out["authority"].append(authority)
            out["first_seen"].append(first_seen)
