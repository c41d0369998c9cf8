"""A :class:`DedupIndex` built by the Spark job: what ``rag-dedup scan --engine spark`` uses."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

from rag_dedup.index import DedupIndex
from rag_dedup.spark.job import dedup_job, write_result
from rag_dedup.spark.load import load_index
from rag_dedup.spark.session import session

__all__ = ["spark_index"]


def spark_index(
    items: Iterable[tuple[str, str, str | None]],
    *,
    master: str | None = "local[2]",
    threshold: float = 0.8,
    num_perm: int = 128,
    ngram: int = 5,
) -> DedupIndex:
    """Run the Spark job on ``(key, text, source)`` items and load its result into an in-memory index.

    The index answers as ``DedupIndex(...).add_many(items)`` would (see :mod:`rag_dedup.spark.job`).

    Raises:
        ImportError, SparkSetupError: pyspark or Java is missing (the message names the fix).
        ValueError, TypeError: Bad items (as :func:`~rag_dedup.spark.job.dedup_dataframe`).
    """
    spark = session(master)
    df = spark.createDataFrame(list(items), "key string, text string, source string")
    with tempfile.TemporaryDirectory(prefix="rag-dedup-spark-") as tmp:
        out = Path(tmp) / "result"
        write_result(
            dedup_job(df, source="source", threshold=threshold, num_perm=num_perm, ngram=ngram), out
        )
        return load_index(out)
