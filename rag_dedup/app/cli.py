"""The ``rag-dedup`` command: ``scan``, ``tune`` and ``query`` over a folder of documents.

This module is argparse and dispatch only. The corpus (which files, their names, chunks, the index) is
:mod:`rag_dedup.app.corpus`; files on disk are :mod:`rag_dedup.app.readers`; what is written
(reports, the ``--save`` folder) is :mod:`rag_dedup.app.saved`; terminal text is
:mod:`rag_dedup.app.text`, HTML :mod:`rag_dedup.app.html`; retrieval measurements
:mod:`rag_dedup.app.retrieval`; progress :mod:`rag_dedup.app.progress`.

Exit codes: 0 success; 2 bad usage or input with one line on stderr (a missing path, no readable files,
a setting the library rejects, an output that cannot be written, a damaged save), checked before the
corpus is read wherever it can be; 130 interrupted (Ctrl-C). Settings are validated by constructing the
library's own objects (``DedupIndex``, ``SentenceChunker``) first, so the command and the library never
disagree. Files are written only once all the work is done, each through a temporary file renamed into
place, so an interrupted run leaves no half-written report or index behind.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

from rag_dedup import atomic
from rag_dedup.app.corpus import DEFAULT_GLOBS, CorpusError, build_index, chunk_corpus, escape_name, read_corpus
from rag_dedup.app.progress import phase, track
from rag_dedup.app.saved import SaveError, check_output_file, check_save_target, is_save, load_saved, save_scan
from rag_dedup.app.text import side_by_side

__all__ = ["main", "side_by_side"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Bad arguments or input: reported on stderr with exit code 2."""


class JobFailed(Exception):
    """The input was good and the work failed (a Spark job whose worker died): stderr, exit code 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would print usage and sys.exit(2)
        raise UsageError(f"{message} (see: {self.prog} --help)")


# --- argument types: parsing only; ranges are the library's ------------------------------------------------


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number; use e.g. 0.8") from None


def _integer(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None


def _positive(value: str) -> int:
    x = _integer(value)
    if x < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return x


def _non_negative(value: str) -> int:
    x = _integer(value)
    if x < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return x


def _thresholds(value: str) -> tuple[float, ...]:
    parts = [p for p in value.replace(" ", "").split(",") if p]
    if not parts:
        raise argparse.ArgumentTypeError("give comma-separated thresholds, e.g. 0.6,0.7,0.8,0.9")
    out = tuple(_number(p) for p in parts)
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"{value} repeats a threshold")
    return out


def _add_corpus_args(p: argparse.ArgumentParser, *, threshold: bool = True) -> None:
    p.add_argument("path", help="a folder (read recursively) or one file")
    p.add_argument("--glob", action="append", metavar="PATTERN",
                   help=f"read only files matching PATTERN (repeatable; default: {' '.join(DEFAULT_GLOBS)}, "
                        "the same gzipped, and names without extension)")
    p.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                   help="skip files matching PATTERN, e.g. 'drafts/*' or '*.json' (repeatable)")
    if threshold:
        p.add_argument("--threshold", type=_number, default=0.8,
                       help="Jaccard similarity at or above which two chunks are duplicates (default 0.8)")
    p.add_argument("--chunk-size", type=_integer, default=256, help="tokens per chunk (default 256)")
    p.add_argument("--chunk-overlap", type=_integer, default=64,
                   help="tokens shared by consecutive chunks (default 64)")
    p.add_argument("--chunk-target", type=_integer, default=None,
                   help="mean tokens per chunk to aim for, at most --chunk-size (default 3/8 of it)")
    p.add_argument("--num-perm", type=_integer, default=128, help="MinHash permutations (default 128)")
    p.add_argument("--ngram", type=_integer, default=5, help="words per shingle (default 5)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rag-dedup",
        description="Find duplicated and near-duplicated passages in a corpus before they crowd your "
                    "retrieval results.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    scan = sub.add_parser("scan", help="report exact and near-duplicate chunks in a folder",
                          description="Read, chunk and deduplicate PATH; print what would be suppressed.")
    _add_corpus_args(scan)
    scan.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    scan.add_argument("--html", metavar="FILE", help="write a self-contained HTML report to FILE")
    scan.add_argument("--save", metavar="DIR", help="keep the index, chunks and BM25 in DIR for `rag-dedup query`")
    scan.add_argument("--top", type=_positive, default=10, help="rows per table in the summary (default 10)")
    scan.add_argument("--engine", choices=("memory", "spark"), default="memory",
                      help="memory: DedupIndex in this process (default); spark: the Spark job, same answer "
                           '(pip install "rag-dedup[spark]", Java)')
    scan.add_argument("--master", default="local[2]", help="Spark master for --engine spark (default local[2])")

    tune = sub.add_parser("tune", help="read pairs near candidate thresholds to choose one",
                          description="For each candidate threshold, count what it suppresses and show "
                                      "pairs of chunks whose similarity is near it, side by side.")
    _add_corpus_args(tune, threshold=False)
    tune.add_argument("--thresholds", type=_thresholds, default=(0.6, 0.7, 0.8, 0.9), metavar="T1,T2,...",
                      help="candidate thresholds (default 0.6,0.7,0.8,0.9)")
    tune.add_argument("--pairs", type=_non_negative, default=3, help="pairs shown per threshold (default 3)")
    tune.add_argument("--window", type=_number, default=0.05,
                      help="a pair is near t when its similarity is within t ± window (default 0.05)")
    tune.add_argument("--seed", type=_integer, default=1, help="seed for sampling pairs (default 1)")
    tune.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    tune.add_argument("--html", metavar="FILE", help="write the pairs as a self-contained HTML page")
    tune.add_argument("--width", type=_positive, default=None, help="terminal width (default: detected)")

    query = sub.add_parser("query", help="BM25 top k without and with deduplication, side by side",
                           description="Retrieve with BM25 from PATH (a folder, a file, or a folder "
                                       "written by `scan --save`) and compare the plain top k with "
                                       "DedupPostprocessor and DistinctRetriever.")
    _add_corpus_args(query)
    query.add_argument("question", nargs="?", help="the query text (or give --queries)")
    query.add_argument("--queries", metavar="FILE", help="questions, one per line; prints the distinct-evidence "
                                                         "ratio per question and on average")
    query.add_argument("-k", "--top-k", type=_positive, default=10, help="results per list (default 10)")
    query.add_argument("--json", action="store_true", help="print the result as JSON")
    query.add_argument("--html", metavar="FILE", help="write the measurements as a self-contained HTML page")
    query.add_argument("--width", type=_positive, default=None, help="terminal width (default: detected)")
    return parser


def _version() -> str:
    try:
        from rag_dedup import __version__

        return __version__
    except ImportError:  # pragma: no cover
        return "unknown"


# --- settings, checked before any work --------------------------------------------------------------------


def _library_error(e: Exception) -> str:
    """One line from a library validation error (pydantic's several lines become one per field)."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        parts = []
        for err in errors():
            field = ".".join(str(x) for x in err.get("loc", ())) or "value"
            msg = str(err.get("msg", "")).removeprefix("Value error, ")
            parts.append(f"--{field.replace('_', '-')} {err.get('input')!r}: {msg}")
        return "; ".join(parts)
    return str(e)


def _validated(make: Callable[[], Any]) -> Any:
    try:
        return make()
    except (TypeError, ValueError) as e:
        raise UsageError(_library_error(e)) from None


def _chunker(args: argparse.Namespace) -> Any:
    from rag_dedup.llama_index.chunking import SentenceChunker

    return _validated(
        lambda: SentenceChunker(chunk_size=args.chunk_size, chunk_overlap=args.chunk_overlap, chunk_target=args.chunk_target)
    )


def _index(args: argparse.Namespace, threshold: float, seed: int = 1) -> Any:
    from rag_dedup.index import DedupIndex

    return _validated(lambda: DedupIndex(threshold=threshold, num_perm=args.num_perm, ngram=args.ngram, seed=seed))


def _output(path: str | None, option: str) -> Path | None:
    if path is None:
        return None
    return check_output_file(Path(path), option)


def _corpus_chunks(args: argparse.Namespace, chunker: Any) -> tuple[Any, list[Any]]:
    corpus = read_corpus(Path(args.path), tuple(args.glob) if args.glob else None, tuple(args.exclude))
    if not corpus.documents:
        reasons = "; ".join(f"{k.path}: {k.reason}" for k in corpus.skipped[:5])
        raise UsageError(f"no readable documents in {escape_name(args.path)} "
                         f"({len(corpus.skipped)} skipped: {reasons})")
    chunks = chunk_corpus(corpus, chunker)
    if not chunks:
        raise UsageError(f"the documents in {escape_name(args.path)} contain no text to chunk")
    return corpus, chunks


def _out(stream: IO[str] | None, text: str) -> None:
    """Write the command's result to ``stream`` (standard output). A closed pipe is :func:`main`'s
    (exit 0, as ``| head`` expects); a full disk or a closed standard output is one line, exit 1."""
    if stream is None:  # started with standard output closed (`>&-`)
        raise JobFailed("cannot write the result: standard output is closed")
    try:
        stream.write(text if text.endswith("\n") else text + "\n")
        stream.flush()
    except BrokenPipeError:
        raise
    except OSError as e:  # ENOSPC (`> /dev/full`, a full disk), EIO
        _silence_stdout()
        raise JobFailed(f"cannot write the result to standard output: {e.strerror or e}") from None


def _silence_stdout() -> None:
    """Point standard output at /dev/null, so that the flush at exit does not fail (and print) again."""
    with contextlib.suppress(OSError):
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - open until exit


def _width(args: argparse.Namespace) -> int:
    return args.width or min(160, shutil.get_terminal_size((120, 24)).columns)


# --- commands ------------------------------------------------------------------------------------------


def _check_spark(args: argparse.Namespace) -> None:
    """Refuse ``--engine spark`` before the corpus is read when it cannot run: no pyspark, no Java, a
    ``--master`` Spark would refuse (each message names the fix)."""
    try:
        from rag_dedup.spark.session import check_master, find_java, require_pyspark

        check_master(args.master)
        require_pyspark()
        find_java()
    except (ImportError, ValueError, RuntimeError) as e:  # SparkSetupError is a RuntimeError
        raise UsageError(str(e)) from e


def _spark_index(args: argparse.Namespace, chunks: list[Any]) -> Any:
    """The index of ``chunks`` as the Spark job computes it (``--engine spark``): the same answer."""
    try:
        from rag_dedup.spark.engine import spark_index
        from rag_dedup.spark.session import command_session, spark_errors, spark_reason
    except ImportError as e:  # pyspark missing: the message names the fix
        raise UsageError(str(e)) from e
    try:
        with phase(f"indexing {len(chunks):,} chunks on Spark"), command_session(args.master):
            return spark_index(((c.key, c.text, c.source) for c in chunks), master=args.master,
                               threshold=args.threshold, num_perm=args.num_perm, ngram=args.ngram)
    except spark_errors() as e:  # a worker that failed, a master that refused the job
        raise JobFailed(f"the Spark job failed: {spark_reason(e)}") from e
    except (ImportError, RuntimeError) as e:  # Java missing: the message names the fix
        raise UsageError(str(e)) from e


def cmd_scan(args: argparse.Namespace) -> int:
    from rag_dedup.app.report import summarize
    from rag_dedup.app.text import format_summary

    chunker = _chunker(args)
    index = _index(args, args.threshold)
    html_path = _output(args.html, "--html")
    if args.save:
        check_save_target(Path(args.save))
    if args.engine == "spark":
        _check_spark(args)
    corpus, chunks = _corpus_chunks(args, chunker)
    if args.engine == "spark":
        index = _spark_index(args, chunks)
    else:
        build_index(chunks, index)
    settings = {"chunk_size": args.chunk_size, "chunk_overlap": args.chunk_overlap}
    with phase("summarizing") as step:
        summary = summarize(index, chunks, documents=len(corpus.documents), skipped=corpus.skipped,
                            settings=settings)
        step.detail = f"({len(summary.clusters):,} clusters)"
    if html_path:
        from rag_dedup.app.html import scan_page

        with phase("writing the HTML report"):
            page = scan_page(summary, {c.key: c.text for c in chunks}, title=f"rag-dedup scan {escape_name(args.path)}")
            atomic.write_text(html_path, page)
        args.written.append(args.html)
    if args.save:
        from rag_dedup.app.retrieval import bm25_retriever

        meta = {"root": escape_name(str(Path(args.path).resolve())),
                "settings": dict(settings, threshold=args.threshold, num_perm=args.num_perm, ngram=args.ngram),
                "documents": len(corpus.documents), "skipped": [k.to_dict() for k in corpus.skipped]}
        with phase("building BM25"):
            retriever = bm25_retriever(chunks)
        with phase("saving"):
            save_scan(Path(args.save), index, chunks, meta, retriever=retriever)
        args.written.append(args.save)
    if args.json:
        _out(sys.stdout, json.dumps(summary.to_dict(), indent=2, ensure_ascii=False))
    else:
        text = format_summary(summary, escape_name(args.path), top=args.top)
        if args.html:
            text += f"\n\nHTML report: {escape_name(args.html)}"
        if args.save:
            text += f"\nSaved index: {escape_name(args.save)}  (rag-dedup query {escape_name(args.save)} \"your question\")"
        _out(sys.stdout, text)
    return EXIT_OK


def cmd_tune(args: argparse.Namespace) -> int:
    from rag_dedup.app.report import sample_thresholds
    from rag_dedup.app.text import format_tune

    chunker = _chunker(args)
    for t in args.thresholds:
        _index(args, t, args.seed)
    if not 0.0 < args.window <= 0.5:
        raise UsageError(f"--window {args.window:g} is outside (0, 0.5]; too wide a window mixes thresholds "
                         "(default 0.05)")
    html_path = _output(args.html, "--html")
    _, chunks = _corpus_chunks(args, chunker)
    report = sample_thresholds(chunks, args.thresholds, per_threshold=args.pairs, window=args.window,
                               num_perm=args.num_perm, ngram=args.ngram, seed=args.seed, progress=track)
    by_key = {c.key: c for c in chunks}
    if html_path:
        from rag_dedup.app.html import tune_page

        atomic.write_text(html_path, tune_page(report, by_key, title=f"rag-dedup tune {escape_name(args.path)}"))
        args.written.append(args.html)
    if args.json:
        d = report.to_dict()
        for t in d["thresholds"]:
            for p in t["pairs"]:
                p["a"], p["b"] = by_key[p["a"]].to_dict(), by_key[p["b"]].to_dict()
        _out(sys.stdout, json.dumps(d, indent=2, ensure_ascii=False))
        return EXIT_OK
    colour = sys.stdout.isatty() and os.environ.get("NO_COLOR") is None
    text = format_tune(report, by_key, escape_name(args.path), width=_width(args), colour=colour)
    if args.html:
        text += f"\n\nHTML: {escape_name(args.html)}"
    _out(sys.stdout, text)
    return EXIT_OK


def _questions(args: argparse.Namespace) -> list[str]:
    if (args.question is None) == (args.queries is None):
        raise UsageError("give one question or --queries FILE (not both)")
    if args.question is not None:
        if not args.question.strip():
            raise UsageError("the question is empty")
        try:  # argv bytes that are not UTF-8 arrive as lone surrogates (surrogateescape)
            args.question.encode("utf-8")
        except UnicodeEncodeError as e:
            raise UsageError(f"the question is not UTF-8 text (character {e.start + 1}, {escape_name(args.question)}); "
                             "give it in UTF-8") from None
        return [args.question]
    try:
        raw = Path(args.queries).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--queries {escape_name(args.queries)}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    questions = [line.strip() for line in raw.splitlines() if line.strip()]
    if not questions:
        raise UsageError(f"--queries {escape_name(args.queries)}: no questions in the file (one per line)")
    return questions


def _row(nws: Any, by_key: dict[str, Any], clusters: Mapping[str, str], folded: bool) -> dict[str, Any]:
    from rag_dedup.llama_index.metadata import DEDUP_COLLAPSED

    key = nws.node.node_id
    c = by_key[key]
    return {"key": key, "source": c.source, "start": c.start, "end": c.end,
            "score": round(float(nws.score or 0.0), 4), "cluster": clusters[key],
            "folded": [f["node_id"] for f in (nws.node.metadata.get(DEDUP_COLLAPSED) or [])] if folded else []}


#: The settings a save fixes (its index's and its chunks'), as (attribute of args, option).
_SAVED_SETTINGS = (
    ("threshold", "--threshold"),
    ("num_perm", "--num-perm"),
    ("ngram", "--ngram"),
    ("chunk_size", "--chunk-size"),
    ("chunk_overlap", "--chunk-overlap"),
)


def _check_against_save(args: argparse.Namespace, saved: Any) -> None:
    """Refuse a setting given on the command line that differs from the one the save was made with:
    the save's index and chunks are used as they are, so it would be ignored."""
    fixed = {"threshold": saved.index.threshold, "num_perm": saved.index.num_perm, "ngram": saved.index.ngram}
    settings = saved.meta.get("settings") if isinstance(saved.meta.get("settings"), dict) else {}
    for k in ("chunk_size", "chunk_overlap"):
        if k in settings:
            value = settings[k]
            if isinstance(value, bool) or not isinstance(value, int):
                raise SaveError(f"{escape_name(args.path)}: chunks.json's settings are damaged ({k} {value!r}, "
                                "not a whole number); re-run rag-dedup scan --save")
            fixed[k] = value
    if _given(args, "--chunk-target"):  # not recorded in a save: its chunks are what they are
        raise UsageError(f"{escape_name(args.path)} is a save, whose chunks are fixed; query it without --chunk-target")
    for name, flag in _SAVED_SETTINGS:
        if name in fixed and _given(args, flag) and getattr(args, name) != fixed[name]:
            raise UsageError(
                f"{escape_name(args.path)} was saved with {flag} {fixed[name]:g}, which a save fixes; "
                f"query it without {flag}, or re-run rag-dedup scan --save with {flag} {getattr(args, name):g}"
            )


def _given(args: argparse.Namespace, flag: str) -> bool:
    """Whether ``flag`` was on the command line (whole, ``flag=value``, or a prefix argparse takes for it)."""
    for token in getattr(args, "argv", ()):
        name = token.split("=", 1)[0]
        if name == flag or (len(name) > 3 and name.startswith("--") and flag.startswith(name)):
            return True
    return False


def cmd_query(args: argparse.Namespace) -> int:
    from rag_dedup.app.retrieval import bm25_retriever, compare
    from rag_dedup.app.text import cluster_ids, format_queries, format_query

    questions = _questions(args)
    try:
        import llama_index.retrievers.bm25  # noqa: F401
    except ImportError as e:
        raise UsageError("rag-dedup query needs BM25: pip install 'rag-dedup[bm25]'") from e
    html_path = _output(args.html, "--html")
    path = Path(args.path)
    if is_save(path):
        _index(args, args.threshold)  # a setting the library refuses exits 2 here too, before the save is read
        with phase("loading the save"):
            saved = load_saved(path)
        _check_against_save(args, saved)
        index, chunks, retriever = saved.index, saved.chunks, saved.retriever
    else:
        chunker = _chunker(args)
        index = _index(args, args.threshold)
        _, chunks = _corpus_chunks(args, chunker)
        build_index(chunks, index)
        retriever = None
    if retriever is None:
        with phase("building BM25"):
            retriever = bm25_retriever(chunks)
    report = compare(retriever, index, questions, args.top_k,
                     progress=lambda qs: track(qs, desc="retrieving", unit="question"))
    by_key = {c.key: c for c in chunks}
    missing = sorted({k for q in report.questions for r in q.results.values() for k in r.keys} - by_key.keys())
    if missing:
        raise SaveError(f"{escape_name(args.path)}: BM25 returned {missing[0]!r}, which has no saved chunk; "
                        "the save is damaged: re-run rag-dedup scan --save")
    if html_path:
        from rag_dedup.app.html import queries_page

        atomic.write_text(html_path, queries_page(report, title=f"rag-dedup query {escape_name(args.path)}"))
        args.written.append(args.html)
    if args.json and args.queries is None:
        q = report.questions[0]
        clusters = cluster_ids(index, [n.node.node_id for side in ("plain", "postprocessor", "distinct")
                                       for n in q.nodes[side]])
        _out(sys.stdout, json.dumps({
            "schema": "rag-dedup.query/1", "question": q.question, "k": report.k,
            "without_dedup": [_row(n, by_key, clusters, False) for n in q.nodes["plain"]],
            "with_dedup": [_row(n, by_key, clusters, True) for n in q.nodes["postprocessor"]],
            "distinct_retriever": [_row(n, by_key, clusters, True) for n in q.nodes["distinct"]],
            "evidence": {m: {k: v for k, v in r.to_dict().items() if k != "keys"} for m, r in q.results.items()},
        }, indent=2, ensure_ascii=False))
    elif args.json:
        _out(sys.stdout, json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    elif args.queries is None:
        _out(sys.stdout, format_query(report, by_key, index, escape_name(args.path), width=_width(args)))
    else:
        _out(sys.stdout, format_queries(report, escape_name(args.path)))
    return EXIT_OK


_COMMANDS = {"scan": cmd_scan, "tune": cmd_tune, "query": cmd_query}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rag-dedup`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    parser = build_parser()
    written: list[str] = []  # files a command completed (each whole), named if Ctrl-C stops it later
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help and --version
            return int(e.code or 0)
        if not args.command:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = _show_warning
            args.written = written
            args.argv = list(sys.argv[1:] if argv is None else argv)
            return _COMMANDS[args.command](args)
    except JobFailed as e:
        print(f"rag-dedup: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except (UsageError, CorpusError, SaveError) as e:
        print(f"rag-dedup: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        done = f"only {', '.join(written)} (complete) was written" if written else "no output written"
        sys.stderr.write(f"\nrag-dedup: interrupted; {done}\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `rag-dedup scan . | head`
        _silence_stdout()
        return EXIT_OK


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: IO[str] | None = None, line: str | None = None) -> None:
    """Warnings from the command are one line on stderr: ``rag-dedup: warning: ...``."""
    sys.stderr.write(f"rag-dedup: warning: {message}\n")  # one write: a Ctrl-C cannot split the line


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
