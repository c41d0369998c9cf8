"""Corpus-scale dedup on Apache Spark with exactly :class:`~rag_dedup.index.DedupIndex`'s answer.

Needs ``pip install "rag-dedup[spark]"`` (pyspark with pyarrow and pandas) and Java 17
(``apt-get install openjdk-17-jre-headless``). See :mod:`rag_dedup.spark.job` for the phases.

Example (not run here: it needs a JVM)::

    from rag_dedup.spark import dedup_dataframe, session
    spark = session("local[2]")
    clusters = dedup_dataframe(spark.read.parquet("chunks/"), key="key", text="text", source="source")
"""

from rag_dedup.spark.session import require_pyspark

require_pyspark()  # before the modules that import pyarrow: a missing one is named with its fix

from rag_dedup.spark.job import COLUMNS, DedupResult, dedup_dataframe, dedup_job, write_result  # noqa: E402
from rag_dedup.errors import CorruptResultError, SparkSetupError  # noqa: E402
from rag_dedup.spark.load import load_index  # noqa: E402
from rag_dedup.spark.session import session  # noqa: E402

__all__ = [
    "COLUMNS",
    "CorruptResultError",
    "DedupResult",
    "SparkSetupError",
    "dedup_dataframe",
    "dedup_job",
    "load_index",
    "session",
    "write_result",
]
