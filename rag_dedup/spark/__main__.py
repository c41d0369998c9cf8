"""``python -m rag_dedup.spark IN OUT``: dedup chunks in JSONL or Parquet, write the result as Parquet.

Runs the same under ``spark-submit`` (``spark-submit -m``-style: ``spark-submit --master yarn
$(python -c 'import rag_dedup.spark.__main__ as m; print(m.__file__)') IN OUT``). ``IN`` is a JSONL
file or directory (``.jsonl``/``.json``) or Parquet; each row needs the key and text columns. ``OUT``
receives ``items/``, ``groups/`` and ``manifest.json`` (see :func:`~rag_dedup.spark.job.write_result`);
``--index DIR`` also saves it as a :class:`DedupIndex` directory, ``--redis URL`` loads it into Redis.
Exit status: 0 done, 2 bad input or setup (the message says what and how to fix it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

__all__ = ["main"]


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
    if "://" not in args.output and os.path.exists(args.output):
        print(f"error: {args.output} already exists; name a new directory for the result", file=sys.stderr)
        return 2
    try:
        from rag_dedup.spark import dedup_job, load_index, session, write_result
        from rag_dedup.errors import SparkSetupError
    except ImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        # Under spark-submit (which sets PYSPARK_GATEWAY_PORT) the master is the one it was given.
        submitted = "PYSPARK_GATEWAY_PORT" in os.environ
        spark = session(args.master or (None if submitted else "local[2]"))
        lower = args.input.rstrip("/").lower()
        reader = spark.read.json if lower.endswith((".jsonl", ".json")) else spark.read.parquet
        df = reader(args.input)
        result = dedup_job(
            df, key=args.key, text=args.text, source=args.source, threshold=args.threshold,
            num_perm=args.num_perm, ngram=args.ngram,
        )
        manifest = write_result(result, args.output)
        if args.index:
            load_index(args.output).save(args.index)
        if args.redis:
            load_index(args.output, args.redis, namespace=args.namespace).close()
    except (ValueError, TypeError, SparkSetupError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: manifest[k] for k in ("items", "groups", "clusters")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
