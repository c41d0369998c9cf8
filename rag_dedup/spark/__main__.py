"""``python -m rag_dedup.spark IN OUT``: dedup chunks in JSONL or Parquet, write the result as Parquet.

Runs the same under ``spark-submit`` (``spark-submit -m``-style: ``spark-submit --master yarn
$(python -c 'import rag_dedup.spark.__main__ as m; print(m.__file__)') IN OUT``). ``IN`` is a JSONL
file or directory (``.jsonl``/``.json``) or Parquet; each row needs the key and text columns. ``OUT``
receives ``items/``, ``groups/`` and ``manifest.json`` (see :func:`~rag_dedup.spark.job.write_result`);
``--index DIR`` also saves it as a :class:`DedupIndex` directory, ``--redis URL`` loads it into Redis.
Exit status: 0 done; 2 bad input or setup, checked before Spark starts where it can be (a missing
``IN``, ``OUT`` already there, a place where ``OUT`` or ``--index`` cannot be written), and a file Spark
cannot read as JSON or Parquet; 1 the Spark job failed for another reason. Each failure is one line that
says what and how to fix it, never a JVM traceback. A JSONL line that is not a JSON object is named (its
file and its text) rather than read as a row of nulls.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rag_dedup.atomic import check_writable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["main"]

#: The column Spark's JSON reader fills with a line it cannot parse (a name no chunk column has).
MALFORMED = "_rag_dedup_malformed_line"

#: The first bytes of every Parquet file.
PARQUET_MAGIC = b"PAR1"


class _Refused(Exception):
    """Input or setup that cannot work; ``str(e)`` is the one-line message (exit status 2)."""


def _local(path: str) -> bool:
    """Whether ``path`` is on this machine's file system (not ``hdfs://``, ``s3a://`` ...)."""
    return "://" not in path or path.startswith("file://")


def _check_writable(path: str, what: str) -> None:
    """Refuse ``path`` when it cannot be created: a directory made and removed in its nearest existing
    ancestor is the test (permission bits do not tell, e.g. for root or under ``/proc``)."""
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise _Refused(f"{what} {path} cannot be created: {parent} is not a directory")
    try:
        check_writable(parent)
    except OSError as e:
        raise _Refused(f"{what} {path} cannot be created: cannot write in {parent} ({e.strerror or e})") from None


def _check_paths(args: argparse.Namespace) -> None:
    """Refuse, before Spark starts, the paths that cannot work (see the module docstring)."""
    if _local(args.input):
        path = args.input.removeprefix("file://")
        if not os.path.exists(path):
            raise _Refused(f"{args.input} not found; IN is a JSONL (.jsonl/.json) or Parquet file or directory")
        if os.path.isfile(path) and not _is_json(path):
            with open(path, "rb") as fh:
                if fh.read(len(PARQUET_MAGIC)) != PARQUET_MAGIC:
                    raise _Refused(f"{args.input} is neither JSONL (name it .jsonl or .json) nor Parquet "
                                   f"(it does not begin with {PARQUET_MAGIC.decode()})")
    if _local(args.output):
        path = args.output.removeprefix("file://")
        if os.path.exists(path):
            raise _Refused(f"{args.output} already exists; name a new directory for the result")
        _check_writable(path, "OUT")
    if args.index:
        if os.path.exists(args.index) and not os.path.isdir(args.index):
            raise _Refused(f"--index {args.index} is a file; name a directory for the saved index")
        _check_writable(args.index, "--index")


def _is_json(path: str) -> bool:
    """Whether ``path`` is read as JSONL (by its name), else as Parquet."""
    return path.rstrip("/").lower().endswith((".jsonl", ".json"))


def _read(spark: SparkSession, path: str, columns: Sequence[str]) -> DataFrame:
    """The chunks at ``path``; a JSONL line that is not a JSON object is refused, named by file and text.
    A JSONL input without a line is no chunks, with ``columns`` (the key, text and source columns)."""
    from pyspark.sql import functions as F

    if not _is_json(path):
        return spark.read.parquet(path)
    df = spark.read.json(path, mode="PERMISSIVE", columnNameOfCorruptRecord=MALFORMED)
    if not df.columns:  # no line at all: no schema to infer; read as no chunks, as an empty Parquet is
        return spark.createDataFrame([], ", ".join(f"`{c}` string" for c in dict.fromkeys(columns)))
    if MALFORMED not in df.columns:
        return df
    # Spark refuses a query of the raw file that reads only the malformed column; a cached frame is not raw.
    df = df.cache()
    bad = df.where(F.col(MALFORMED).isNotNull())
    count = bad.count()
    if count:
        first = bad.select(F.input_file_name().alias("file"), F.col(MALFORMED).alias("line")).first()
        where = first["file"] if first is not None and first["file"] else path
        line = first["line"][:80] if first is not None else ""
        df.unpersist()
        raise _Refused(f"{where}: {count} line(s) are not JSON objects, the first: {line!r}; "
                       "each line must be one chunk, e.g. {\"key\": ..., \"text\": ...}")
    return df.drop(MALFORMED)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rag_dedup.spark", description=__doc__.splitlines()[0])
    p.add_argument("input", metavar="IN", help="chunks: JSONL (.jsonl/.json) or Parquet, a file or a directory")
    p.add_argument("output", metavar="OUT", help="result directory (must not exist)")
    p.add_argument("--master", default=None, help="Spark master (default: local[2], or the one spark-submit set)")
    p.add_argument("--key", default="key", help="key column (default key)")
    p.add_argument("--text", default="text", help="text column (default text)")
    p.add_argument("--source", default=None, help="source column (optional)")
    p.add_argument("--threshold", type=float, default=0.8, help="Jaccard threshold (default 0.8)")
    p.add_argument("--num-perm", type=int, default=128, help="MinHash permutations (default 128)")
    p.add_argument("--ngram", type=int, default=5, help="words per shingle (default 5)")
    p.add_argument("--index", metavar="DIR", default=None, help="also save the result as a DedupIndex directory")
    p.add_argument("--redis", metavar="URL", default=None, help="also load the result into the Redis index at URL")
    p.add_argument("--namespace", default="rag-dedup", help="Redis key prefix (default rag-dedup)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        _check_paths(args)
        from rag_dedup.errors import SparkSetupError
        from rag_dedup.spark import dedup_job, load_index, write_result
        from rag_dedup.spark.session import command_session, spark_errors, spark_reason
    except ImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except _Refused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # Under spark-submit (which sets PYSPARK_GATEWAY_PORT) the master and the logging are the ones it was
    # given; run by itself, the command's stderr is its own lines (Spark's logs only if FATAL).
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    master = args.master if args.master is not None else (None if submitted else "local[2]")
    try:
        with command_session(master, log_level=None if submitted else "FATAL") as spark:
            try:
                df = _read(spark, args.input, [c for c in (args.key, args.text, args.source) if c])
            except spark_errors() as e:
                kind = "JSON" if _is_json(args.input) else "Parquet"
                print(f"error: cannot read {args.input} as {kind}: {spark_reason(e)}", file=sys.stderr)
                return 2
            result = dedup_job(
                df, key=args.key, text=args.text, source=args.source, threshold=args.threshold,
                num_perm=args.num_perm, ngram=args.ngram,
            )
            manifest = write_result(result, args.output)
            if args.index:
                load_index(args.output).save(args.index)
            if args.redis:
                load_index(args.output, args.redis, namespace=args.namespace).close()
    except (_Refused, ValueError, TypeError, SparkSetupError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except spark_errors() as e:
        print(f"error: the Spark job failed: {spark_reason(e)}", file=sys.stderr)
        return 1
    print(json.dumps({k: manifest[k] for k in ("items", "groups", "clusters")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
