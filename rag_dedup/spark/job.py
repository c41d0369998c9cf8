"""The batch job: DedupIndex's answer for a whole DataFrame of chunks, in six named Spark stages.

::

    chunks ──0 spread by key── 1 hash (mapInArrow)──> rows: key, digest, shingles ──2 group by digest──> groups
    groups ──MinHash + bands (mapInArrow)──> band rows (bucket, group) ──3 group by bucket──> candidate pairs
    pairs ──4 verify: exact Jaccard (mapInArrow)──> edges (J >= threshold)
    edges ──5 connected components (large-star / small-star)──> component of every group
    items + groups by component ──6 cluster rule (mapInArrow, sorted by component)──> clusters

0. **spread** (``repartition=True``, the default): the chunks are hash-partitioned by key into
   ``spark.sql.shuffle.partitions`` partitions and persisted, so every core takes part in phase 1
   whatever the input's layout (see :func:`_spread`).
1. **hash**: canonical form, exact digest and shingle hashes of every row, a batch at a time, with
   :func:`~rag_dedup.shingles.shingles_and_digests` (the index's kernel).
2. **groups**: rows with the same digest form one exact group; its MinHash signature
   (:class:`~rag_dedup.minhash.MinHasher`, same scheme, seed and permutations) and its ``b`` LSH band
   keys (:func:`~rag_dedup.lsh.band_keys`, (b, r) from the same threshold) are computed once.
3. **candidates**: band rows ``(bucket, group)`` are grouped by bucket; every pair of distinct groups
   in a bucket is a candidate, each pair once however many buckets it shares, exactly the index's
   candidate set. A bucket of k groups yields k(k-1)/2 pairs: exact copies are one group already, so
   large buckets are families of near-duplicates, whose pairs the cluster rule needs anyway.
4. **verify**: every candidate pair gets the exact Jaccard of its two shingle sets
   (:func:`~rag_dedup.shingles.jaccard_pairs`); pairs with J >= threshold are edges. (The index skips
   candidates whose Jaccard *upper bound* is below the threshold first; that never drops an edge.)
5. **components** of the edge graph: :func:`~rag_dedup.spark.graph.connected_components`.
6. **clusters**: each component of two or more items is split by the library's rule
   (:func:`~rag_dedup.spark.kernels.cluster_component`), representatives by the same policy; every
   other item is a cluster of its own.

The answer is a function of the set of items only (as the index's), so the result equals
``DedupIndex(...).add_many(items)`` item for item: cluster, representative, kind and similarity.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from rag_dedup import settings
from rag_dedup.index import DedupIndex
from rag_dedup.policy import Policy
from rag_dedup.shingles import DEFAULT_NGRAM
from rag_dedup.spark import kernels
from rag_dedup.spark.graph import connected_components
from rag_dedup.spark.session import require_pyspark

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["COLUMNS", "RESULT_FORMAT", "DedupResult", "dedup_dataframe", "dedup_job", "write_result"]

#: The columns of :func:`dedup_dataframe`'s result, in order.
COLUMNS = ("key", "cluster_id", "representative", "duplicate_of", "similarity", "kind", "cluster_size", "source")
#: Name of the layout :func:`write_result` writes (``manifest.json`` beside ``items/`` and ``groups/``).
RESULT_FORMAT = settings.SPARK_RESULT_FORMAT
RESULT_VERSION = settings.SPARK_RESULT_VERSION
# Examples named in an error about bad rows.
_EXAMPLES = 5


class DedupResult(NamedTuple):
    """What the job computed, lazily (each DataFrame is evaluated when used).

    Attributes:
        items: One row per input row: the :data:`COLUMNS`, plus ``gid`` (its exact group, null for an
            empty text), ``length``, ``authority`` and ``first_seen`` (what the policy saw).
        groups: One row per exact group: ``gid``, ``digest``, ``shingles`` (uint32 little-endian
            bytes), ``bands`` (the b band keys), ``n`` (its items) and ``component`` (the id of its
            component of two or more groups, else null).
        meta: The parameters, as a saved :class:`DedupIndex` records them.
    """

    items: DataFrame
    groups: DataFrame
    meta: dict[str, Any]


def dedup_dataframe(
    df: DataFrame,
    *,
    key: str = "key",
    text: str = "text",
    source: str | None = None,
    authority: str | None = None,
    first_seen: str | None = None,
    threshold: float = 0.8,
    num_perm: int = 128,
    ngram: int = DEFAULT_NGRAM,
    seed: int = 1,
    drift_floor: float | None = None,
    policy: Policy | None = None,
    repartition: bool = True,
) -> DataFrame:
    """Exact and near-duplicate clusters of a DataFrame of chunks, equal to ``DedupIndex.add_many``.

    Args:
        df: The chunks, one row each.
        key: The column of unique string keys.
        text: The column of texts (strings, no nulls).
        source, authority, first_seen: Optional columns: where a chunk came from (string), its
            authority (number), its first_seen (number or timestamp), as :meth:`DedupIndex.add` takes them.
        threshold, num_perm, ngram, seed, drift_floor, policy: As :class:`DedupIndex` (validated by it).
            A custom policy must be picklable (it runs on the executors).
        repartition: Shuffle the chunks by key into ``spark.sql.shuffle.partitions`` partitions (at
            least Spark's default parallelism) before phase 1, so that every core hashes whatever
            the input's layout (a Parquet file of one row group, or one gzipped JSONL file, is one
            partition however many cores wait). False: hash in the input's own partitions, which
            saves one shuffle of the texts when they are already spread evenly.

    Returns:
        ``DataFrame[key, cluster_id, representative, duplicate_of, similarity, kind, cluster_size,
        source]``: one row per input row, the same values as :meth:`DedupIndex.matches` after
        ``add_many`` (``cluster_size`` is :attr:`Match.cluster_size <rag_dedup.index.Match>`).

    Raises:
        ImportError: pyspark (or pyarrow, pandas) is missing.
        ValueError: A named column is missing; a key or text is null; a key is empty or repeated;
            an authority is not finite. The message names the column and example keys.
        TypeError: A column has the wrong type.

    Example (not run here: it needs a JVM)::

        clusters = dedup_dataframe(df, key="key", text="text", source="source", threshold=0.8)
    """
    result = dedup_job(
        df, key=key, text=text, source=source, authority=authority, first_seen=first_seen, threshold=threshold,
        num_perm=num_perm, ngram=ngram, seed=seed, drift_floor=drift_floor, policy=policy, repartition=repartition,
    )
    return result.items.select(*COLUMNS)


def dedup_job(
    df: DataFrame,
    *,
    key: str = "key",
    text: str = "text",
    source: str | None = None,
    authority: str | None = None,
    first_seen: str | None = None,
    threshold: float = 0.8,
    num_perm: int = 128,
    ngram: int = DEFAULT_NGRAM,
    seed: int = 1,
    drift_floor: float | None = None,
    policy: Policy | None = None,
    repartition: bool = True,
) -> DedupResult:
    """:func:`dedup_dataframe` with everything :func:`write_result` needs to rebuild the index."""
    require_pyspark()
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    params = DedupIndex(threshold=threshold, num_perm=num_perm, ngram=ngram, seed=seed, drift_floor=drift_floor, policy=policy)
    _check_columns(df, key, text, source, authority, first_seen)

    def checkpoint(frame: DataFrame) -> DataFrame:
        return frame.localCheckpoint(eager=True, storageLevel=StorageLevel.DISK_ONLY)

    cols = [_column(key).alias("key"), _column(text).alias("text")]
    if source:
        cols.append(_column(source).alias("source"))
    if authority:
        cols.append(_column(authority).cast("double").alias("authority"))
    if first_seen:
        cols.append(_seconds(df, first_seen).alias("first_seen"))
    chunks = _spread(df.select(*cols)) if repartition else df.select(*cols)
    try:
        _check_rows(chunks, key, text, authority, first_seen)
        # 1. hash
        hashed = checkpoint(
            chunks.mapInArrow(
                functools.partial(
                    kernels.hash_batches, key="key", text="text", source="source" if source else None,
                    authority="authority" if authority else None, first_seen="first_seen" if first_seen else None,
                    ngram=params.ngram, num_perm=params.num_perm, seed=params.seed, bands=params.bands,
                ),
                kernels.HASHED_SCHEMA,
            )
        )
    finally:
        if repartition:
            chunks.unpersist()
    # 2. groups, their signatures and band keys
    grouped = hashed.where(F.col("gid").isNotNull()).groupBy("gid").agg(
        F.min("digest").alias("digest"), F.max("digest").alias("other"),
        F.first("shingles", ignorenulls=True).alias("shingles"), F.first("bands", ignorenulls=True).alias("bands"),
        F.count("*").alias("n"),
    )
    banded = checkpoint(grouped)
    if banded.where(F.col("digest") != F.col("other")).limit(1).count():
        raise RuntimeError("two distinct texts have the same 64-bit group id; please report this (it should not happen)")
    banded = banded.drop("other")
    # 3. candidates: every pair of distinct groups that share a bucket, once
    buckets = (
        banded.select("gid", F.explode("bands").alias("bucket"))
        .groupBy("bucket")
        .agg(F.collect_list("gid").alias("gs"))
        .where(F.size("gs") > 1)
    )
    pairs = buckets.select(
        F.expr(
            "inline(flatten(transform(sequence(0, size(gs) - 2), i -> transform(slice(gs, i + 2, size(gs)), "
            "y -> struct(least(gs[i], y) AS a, greatest(gs[i], y) AS b)))))"
        )
    ).where(F.col("a") != F.col("b")).distinct()
    # 4. verify
    sets = banded.select("gid", "shingles")
    verified = (
        pairs.join(sets.withColumnRenamed("gid", "a").withColumnRenamed("shingles", "sa"), "a")
        .join(sets.withColumnRenamed("gid", "b").withColumnRenamed("shingles", "sb"), "b")
        .select("a", "b", "sa", "sb")
        .mapInArrow(kernels.verify_batches, kernels.VERIFIED_SCHEMA)
    )
    # 5. components
    comp = checkpoint(connected_components(verified.where(F.col("sim") >= params.threshold)))
    # 6. clusters
    status = banded.select("gid", "n").join(comp, "gid", "left")
    items = hashed.select("key", "source", "length", "authority", "first_seen", "gid").join(status, "gid", "left")
    ruled = F.col("comp").isNotNull() | (F.col("n") > 1)
    item_rows = items.where(ruled).select(
        F.coalesce("comp", "gid").alias("comp"), "gid", "key", "length", "source", "authority", "first_seen",
        F.lit(None).cast("binary").alias("shingles"),
    )
    group_rows = banded.join(comp, "gid", "left").where(ruled).select(
        F.coalesce("comp", "gid").alias("comp"), "gid", F.lit(None).cast("string").alias("key"), F.lit(None).cast("long").alias("length"),
        F.lit(None).cast("string").alias("source"), F.lit(None).cast("double").alias("authority"),
        F.lit(None).cast("double").alias("first_seen"), "shingles",
    )
    partitions = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or 8)
    clustered = (
        item_rows.unionByName(group_rows)
        .repartition(partitions, "comp")
        .sortWithinPartitions("comp")
        .mapInArrow(
            functools.partial(
                kernels.cluster_batches, drift_floor=params.drift_floor, policy=params.policy
            ),
            kernels.CLUSTER_SCHEMA,
        )
    )
    alone = items.where(~ruled | F.col("gid").isNull()).select(
        "key", F.col("key").alias("cluster_id"), F.col("key").alias("representative"),
        F.lit(None).cast("string").alias("duplicate_of"), F.lit(1.0).alias("similarity"), F.lit("unique").alias("kind"),
        F.lit(1).cast("long").alias("cluster_size"), "source", "gid", "length", "authority", "first_seen",
    )
    out_groups = banded.join(comp.withColumnRenamed("comp", "component"), "gid", "left")
    return DedupResult(clustered.unionByName(alone), out_groups, params._meta())


def _spread(chunks: DataFrame) -> DataFrame:
    """``chunks`` hash-partitioned by key into enough partitions for every core, persisted.

    Phase 1 (the costliest, in Python) runs one task per input partition, and the input's partition
    count says little about its spread: a single Parquet file of one row group is read as one full
    split and empty ones, so one core hashes while the others wait. Persisted because both the row
    checks and phase 1 read it (the caller unpersists it once phase 1 is checkpointed).
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    spark = chunks.sparkSession
    cores = spark.sparkContext.defaultParallelism
    partitions = max(cores, int(spark.conf.get("spark.sql.shuffle.partitions") or cores))
    return chunks.repartition(partitions, F.col("key")).persist(StorageLevel.MEMORY_AND_DISK)


def _quoted(name: str) -> str:
    """``name`` as a Spark SQL identifier taken literally: in backticks, a backtick in it doubled."""
    return "`" + name.replace("`", "``") + "`"


def _column(name: str) -> Column:
    """The column named ``name``, taken literally: a dot in it is part of the name, not a struct field."""
    from pyspark.sql import functions as F

    return F.col(_quoted(name))


def _seconds(df: DataFrame, name: str) -> Column:
    """Column ``name`` (a number or a timestamp) as POSIX seconds, a double, as DedupIndex reads first_seen:
    a timestamp without a time zone (``TIMESTAMP_NTZ``, a naive datetime) is read as UTC, as the index reads a
    naive datetime; Spark refuses to cast one to a number. Null stays null."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(df.schema[name].dataType, T.TimestampNTZType):
        # Microseconds since the epoch (exact in a long), then seconds: micros / 1e6 rounded once, as
        # Python's datetime.timestamp() computes it for an aware datetime.
        micros = F.expr("timestampdiff(MICROSECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', " + _quoted(name) + ")")
        return micros.cast("double") / F.lit(1e6)
    return _column(name).cast("double")


def _check_columns(df: DataFrame, key: str, text: str, source: str | None, authority: str | None, first_seen: str | None) -> None:
    """Refuse a missing column or one of the wrong type, with the column and the fix named."""
    from pyspark.sql import types as T

    fields = {f.name: f.dataType for f in df.schema.fields}
    wanted = {"key": key, "text": text, "source": source, "authority": authority, "first_seen": first_seen}
    for arg, column in wanted.items():
        if column is None:
            continue
        if not isinstance(column, str):
            raise TypeError(f"{arg}= must be a column name (str), got {type(column).__name__}")
        if column not in fields:
            raise ValueError(
                f"column {column!r} ({arg}=) is not in the DataFrame (columns: {sorted(fields)}); "
                f"pass {arg}= the column that holds the chunk {arg}"
            )
    numeric = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType, T.DecimalType)
    expected: Mapping[str, tuple[tuple[type, ...], str]] = {
        "key": ((T.StringType,), "string"), "text": ((T.StringType,), "string"), "source": ((T.StringType,), "string"),
        "authority": (numeric, "a number"), "first_seen": ((*numeric, T.TimestampType, T.TimestampNTZType), "a number or timestamp"),
    }
    for arg, column in wanted.items():
        if column is not None and not isinstance(fields[column], expected[arg][0]):
            raise TypeError(
                f"column {column!r} ({arg}=) has type {fields[column].simpleString()}, must be {expected[arg][1]}; "
                f"cast it first, e.g. df.withColumn({column!r}, F.col({column!r}).cast('string'))"
            )


def _check_rows(chunks: DataFrame, key: str, text: str, authority: str | None, first_seen: str | None = None) -> None:
    """Refuse what DedupIndex.add_many would refuse, with the column (as the caller named it) and example keys:
    a null or empty key, a key twice, a null text, an authority that is null, NaN or infinite, a first_seen that
    is NaN or infinite (null is allowed there: unknown, which counts as latest).

    ``chunks`` has the job's column names (``key``, ``text``, ``authority`` and ``first_seen`` as doubles).
    """
    from pyspark.sql import functions as F

    def not_finite(c: Column) -> Column:  # NaN or +-inf; null for null
        return F.isnan(c) | (F.abs(c) == float("inf"))

    # One pass: each key's row count, null texts, bad authorities and bad first_seen values.
    flags = [F.count("*").alias("rows"), F.sum(F.col("text").isNull().cast("int")).alias("nulls")]
    if authority is not None:
        a = F.col("authority")
        flags.append(F.sum((a.isNull() | not_finite(a)).cast("int")).alias("infinite"))
    else:
        flags.append(F.lit(0).alias("infinite"))
    if first_seen is not None:
        flags.append(F.sum(F.coalesce(not_finite(F.col("first_seen")), F.lit(False)).cast("int")).alias("unseen"))
    else:
        flags.append(F.lit(0).alias("unseen"))
    per_key = chunks.groupBy(F.col("key").alias("k")).agg(*flags)
    bad = per_key.where(
        F.col("k").isNull() | (F.col("k") == "") | (F.col("rows") > 1) | (F.col("nulls") > 0) | (F.col("infinite") > 0)
        | (F.col("unseen") > 0)
    )
    examples = bad.orderBy(
        F.col("k").isNotNull(), F.col("k") != "", F.col("nulls") == 0, F.col("infinite") == 0, F.col("unseen") == 0, "k"
    )
    found = examples.limit(_EXAMPLES).collect()
    if not found:
        return
    k, _, nulls, infinite, unseen = found[0]
    if k is None or k == "":
        raise ValueError(f"column {key!r} (key=) holds a null or empty key; every chunk needs a unique non-empty key")
    if nulls:
        shown = [row[0] for row in found if row[2]]
        raise ValueError(f"column {text!r} (text=) is null for key(s) {shown}; drop or fill those rows (an empty string is allowed)")
    if infinite:
        shown = [row[0] for row in found if row[3]]
        raise ValueError(f"column {authority!r} (authority=) is null or not a finite number for key(s) {shown}")
    if unseen:
        shown = [row[0] for row in found if row[4]]
        raise ValueError(f"column {first_seen!r} (first_seen=) is not a finite number for key(s) {shown} (null is allowed: unknown)")
    shown_rows = ", ".join(f"{row[0]!r} ({row[1]} rows)" for row in found)
    raise ValueError(f"column {key!r} (key=) has duplicate keys: {shown_rows}; keys must be unique")


def write_result(result: DedupResult, out: str | os.PathLike[str], *, mode: str = "error") -> dict[str, Any]:
    """Write the job's result as Parquet: ``out/items``, ``out/groups`` and ``out/manifest.json``.

    :func:`~rag_dedup.spark.load.load_index` turns the directory into a :class:`DedupIndex` without
    hashing anything again. The manifest (written last, atomically) carries the parameters and counts.

    Args:
        result: From :func:`dedup_job`.
        out: A directory (local, or any path Spark can write, e.g. ``hdfs://``/``s3a://``; the manifest
            is written only for a local path).
        mode: Spark's save mode for the Parquet parts (``error`` refuses an existing directory).

    Returns:
        The manifest: ``format``, ``format_version``, ``index`` (the parameters), ``items`` and
        ``groups`` (row counts), ``clusters`` (of two or more items).
    """
    from pyspark.sql import functions as F

    path = os.fspath(out)
    result.items.write.mode(mode).parquet(f"{path.rstrip('/')}/items")
    result.groups.write.mode(mode).parquet(f"{path.rstrip('/')}/groups")
    spark = result.items.sparkSession
    items = spark.read.parquet(f"{path.rstrip('/')}/items")
    manifest = {
        "format": RESULT_FORMAT,
        "format_version": RESULT_VERSION,
        "index": result.meta,
        "items": items.count(),
        "groups": spark.read.parquet(f"{path.rstrip('/')}/groups").count(),
        "clusters": items.where(F.col("duplicate_of").isNotNull()).select("cluster_id").distinct().count(),
    }
    if "://" not in path or path.startswith("file://"):
        local = Path(path.removeprefix("file://"))
        tmp = local / "manifest.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
        os.replace(tmp, local / "manifest.json")
    return manifest
