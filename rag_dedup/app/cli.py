"""The ``rag-dedup`` command: ``scan``, ``tune`` and ``query`` over a folder of documents.

A thin layer over the library: files are read with LlamaIndex's ``SimpleDirectoryReader``, cut with
:class:`~rag_dedup.llama_index.chunking.SentenceChunker`, indexed with :class:`~rag_dedup.index.DedupIndex`, and
reported with :mod:`rag_dedup.app.report` and :mod:`rag_dedup.app.html`.

Exit codes: 0 success; 2 bad usage or input (missing path, no readable files, a threshold outside
(0, 1], ...) with one clear message on stderr; 130 interrupted (Ctrl-C). Files are written only once
all the work is done, each through a temporary file renamed into place, so an interrupted run leaves
no half-written report or index behind.

Reading (the readers are in :mod:`rag_dedup.app.readers`): a folder is read recursively (hidden files and folders skipped). By default the files
matching ``*.txt *.md *.rst *.html *.htm *.json *.pdf`` are read; ``--glob`` replaces that list and
``--exclude`` removes matches (patterns are matched against the path relative to the folder and
against the file name). HTML is reduced to its text; JSON to its string values that contain prose;
PDF needs ``llama-index-readers-file`` and ``pypdf``. A file that is binary, not UTF-8, unreadable,
or has no reader is skipped with a warning and counted, never a crash.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NoReturn

from rag_dedup.app.readers import make_readers, pdf_reader_available

__all__ = ["main"]

#: Files read from a folder when no ``--glob`` is given.
DEFAULT_GLOBS: tuple[str, ...] = ("*.txt", "*.md", "*.rst", "*.html", "*.htm", "*.json", "*.pdf")
#: Name of the chunk sidecar that ``scan --save DIR`` writes beside the index (in ``DIR/index``).
CHUNKS_FILE = "chunks.json"
INDEX_DIR = "index"
_PDF_HINT = "no PDF reader installed: pip install llama-index-readers-file pypdf"

EXIT_OK, EXIT_USAGE, EXIT_INTERRUPTED = 0, 2, 130


class UsageError(Exception):
    """Bad arguments or input: reported on stderr with exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would print usage and sys.exit(2)
        raise UsageError(f"{message} (see: {self.prog} --help)")


# --- the corpus ----------------------------------------------------------------------------------------


@dataclass
class Corpus:
    """Documents read from PATH, each with its source (POSIX path relative to the root)."""

    root: Path
    documents: list[tuple[str, Any]] = field(default_factory=list)
    skipped: list[Any] = field(default_factory=list)
    files: int = 0


def _matches(rel: str, patterns: Sequence[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(rel, p) or fnmatch.fnmatchcase(name, p) for p in patterns)


def _list_files(path: Path, globs: Sequence[str], excludes: Sequence[str]) -> tuple[Path, list[Path]]:
    from llama_index.core import SimpleDirectoryReader

    path = Path(os.path.abspath(path))
    if path.is_file():
        return path.parent, [path]
    try:
        # Hidden files are skipped below, by their path *inside* the folder: SimpleDirectoryReader's
        # exclude_hidden looks at the whole absolute path and would skip everything under ~/.cache/...
        reader = SimpleDirectoryReader(input_dir=str(path), recursive=True, exclude_hidden=False)
    except ValueError as e:  # "No files found in ..."
        raise UsageError(f"no files found in {path}") from e
    files = []
    for f in reader.input_files:
        rel = Path(os.path.abspath(f)).relative_to(path).as_posix()
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        if _matches(rel, globs) and not _matches(rel, excludes):
            files.append(Path(os.path.abspath(f)))
    return path, files


def _progress(iterable: Iterable[Any], *, total: int | None, desc: str, unit: str) -> Iterator[Any]:
    from tqdm import tqdm

    yield from tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr,
                    disable=not sys.stderr.isatty(), leave=False, dynamic_ncols=True)


def read_corpus(path: Path, globs: Sequence[str] = DEFAULT_GLOBS, excludes: Sequence[str] = ()) -> Corpus:
    """Read every matching file under ``path`` (or the file ``path``) into LlamaIndex Documents.

    Raises:
        UsageError: ``path`` does not exist, or no file matches.
    """
    from llama_index.core import SimpleDirectoryReader

    from rag_dedup.app.report import Skipped

    if not path.exists():
        raise UsageError(f"path not found: {path}")
    root, files = _list_files(path, globs, excludes)
    if not files:
        raise UsageError(
            f"no files to read in {path}: none matches {' '.join(globs)}"
            + (f" outside {' '.join(excludes)}" if excludes else "")
            + " (use --glob to choose files)"
        )
    extractors = make_readers()
    pdf_ok = pdf_reader_available()
    corpus = Corpus(root=root, files=len(files))

    def skip(rel: str, reason: str) -> None:
        corpus.skipped.append(Skipped(rel, reason))
        warnings.warn(f"skipped {rel}: {reason}", stacklevel=2)

    for f in _progress(files, total=len(files), desc="reading", unit="file"):
        rel = f.relative_to(root).as_posix()
        suffix = f.suffix.lower()
        if suffix == ".pdf" and not pdf_ok:
            skip(rel, _PDF_HINT)
            continue
        try:
            with open(f, "rb") as fh:
                head = fh.read(8192)
        except OSError as e:
            skip(rel, f"unreadable: {e.strerror or e}")
            continue
        if suffix != ".pdf" and b"\x00" in head:
            skip(rel, "binary file")
            continue
        try:
            docs = SimpleDirectoryReader.load_file(
                f,
                file_metadata=lambda p, rel=rel: {"file_path": rel, "file_name": Path(p).name},
                file_extractor=extractors,
                encoding="utf-8",
                errors="strict",
                raise_on_error=True,
            )
        except ImportError as e:
            skip(rel, f"no reader installed: {e}")
            continue
        except Exception as e:  # a reader failing on one file must not stop the scan
            cause = e.__cause__ or e
            if isinstance(cause, UnicodeDecodeError):
                reason = f"not UTF-8 text (byte {cause.start})"
            elif isinstance(cause, json.JSONDecodeError):
                reason = f"invalid JSON: {cause.msg} at line {cause.lineno}"
            elif isinstance(cause, OSError):
                reason = f"unreadable: {cause.strerror or cause}"
            else:
                reason = f"reader failed: {type(cause).__name__}: {cause}"
            skip(rel, reason)
            continue
        docs = [d for d in docs if d.text.strip()]
        if not docs:
            skip(rel, "no text")
            continue
        corpus.documents.extend((rel, d) for d in docs)
    return corpus


def chunk_corpus(corpus: Corpus, chunk_size: int, chunk_overlap: int) -> list[Any]:
    """Cut every document into chunks: a list of :class:`~rag_dedup.app.report.Chunk` with stable keys.

    The key of a chunk is ``"<source>#<n>"`` (n counted per source, zero-padded), so keys are the
    same on every run over the same files and say where the chunk is.
    """
    from rag_dedup.llama_index.chunking import SentenceChunker
    from rag_dedup.app.report import Chunk

    chunker = SentenceChunker(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    counters: dict[str, int] = {}
    chunks: list[Chunk] = []
    for rel, doc in _progress(corpus.documents, total=len(corpus.documents), desc="chunking", unit="doc"):
        for node in chunker.get_nodes_from_documents([doc]):
            text = node.text
            if not text.strip():
                continue
            n = counters.get(rel, 0)
            counters[rel] = n + 1
            chunks.append(Chunk(f"{rel}#{n:04d}", rel, text, node.start_char_idx, node.end_char_idx))
    return chunks


def build_index(chunks: Sequence[Any], *, threshold: float, num_perm: int, ngram: int) -> Any:
    """A :class:`DedupIndex` holding ``chunks`` (added in batches, with a progress bar on a terminal)."""
    from rag_dedup.index import DedupIndex

    index = DedupIndex(threshold=threshold, num_perm=num_perm, ngram=ngram)
    batch = 512
    starts = range(0, len(chunks), batch)
    for i in _progress(starts, total=len(starts), desc="indexing", unit="batch"):
        index.add_many({"key": c.key, "text": c.text, "source": c.source} for c in chunks[i:i + batch])
    return index


# --- output --------------------------------------------------------------------------------------------


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    Readers see the old file or the new one, never a partial one; on any exception (Ctrl-C included)
    the temporary file is removed and the exception re-raised.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a report is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def check_save_target(directory: Path) -> None:
    """Raise ``UsageError`` unless ``directory`` is absent, empty, or a previous save (holds chunks.json)."""
    if directory.exists() and (
        not directory.is_dir() or (any(directory.iterdir()) and not (directory / CHUNKS_FILE).is_file())
    ):
        raise UsageError(f"--save {directory}: exists and is not a rag-dedup save; choose a new folder")


def save_scan(directory: Path, index: Any, chunks: Sequence[Any], meta: dict[str, Any]) -> None:
    """Save the index (``DIR/index``) and the chunk sidecar (``DIR/chunks.json``), atomically.

    Everything is written into a temporary sibling folder first, then renamed into place; an existing
    ``DIR`` is replaced only if it is empty or a previous save (it holds ``chunks.json``).

    Raises:
        UsageError: ``DIR`` exists and is something else.
    """
    directory = Path(directory)
    check_save_target(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    old: Path | None = None
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        index.save(tmp / INDEX_DIR)
        sidecar = dict(meta, schema="rag-dedup.chunks/1", chunks=[c.to_dict() for c in chunks])
        (tmp / CHUNKS_FILE).write_text(json.dumps(sidecar, ensure_ascii=False), encoding="utf-8")
        if directory.exists():
            old = directory.with_name(f".{directory.name}.old.{os.getpid()}")
            os.replace(directory, old)
        os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not directory.exists():
            os.replace(old, directory)
            old = None
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def load_saved(directory: Path) -> tuple[Any, list[Any], dict[str, Any]]:
    """Load what :func:`save_scan` wrote: ``(index, chunks, meta)``. ``UsageError`` if it is not one."""
    from rag_dedup.index import DedupIndex
    from rag_dedup.app.report import Chunk

    sidecar = directory / CHUNKS_FILE
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
        chunks = [Chunk.from_dict(d) for d in meta.pop("chunks")]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{directory} is not a readable rag-dedup save ({sidecar}: {e})") from e
    if meta.get("schema") != "rag-dedup.chunks/1":
        raise UsageError(f"{sidecar}: unknown schema {meta.get('schema')!r}; re-run rag-dedup scan --save")
    index = DedupIndex.load(directory / INDEX_DIR)
    return index, chunks, meta


def _pct(x: float) -> str:
    return f"{x:.1%}"


def _floor(settings: Any) -> str:
    floor = settings.get("drift_floor")
    return f" (drift floor {floor:g})" if floor is not None and floor != settings["threshold"] else ""


def format_summary(summary: Any, path: str, *, top: int = 10) -> str:
    """The human summary of ``rag-dedup scan``."""
    s = summary.settings
    b, r = s["bands"]
    lines = [
        f"rag-dedup scan {path}",
        f"  documents          {summary.documents:>7}"
        + (f"   ({len(summary.skipped)} file(s) skipped, see below)" if summary.skipped else ""),
        f"  chunks             {summary.chunks:>7}   (chunk_size {s.get('chunk_size')}, "
        f"overlap {s.get('chunk_overlap')} tokens)",
        f"  exact duplicates   {summary.exact_duplicates:>7}",
        f"  near duplicates    {summary.near_duplicates:>7}",
        f"  clusters (2+)      {len(summary.clusters):>7}",
        f"  suppressed         {summary.suppressed:>7}   ({_pct(summary.suppressed_share)} of chunks; "
        f"{summary.kept} kept)",
        f"  threshold {s['threshold']:g}{_floor(s)}, num_perm {s['num_perm']}, ngram {s['ngram']}: "
        f"LSH bands b={b} x rows r={r}, knee {s['knee']:.3f}",
    ]

    def table(title: str, rows: Sequence[Any], name: str) -> None:
        rows = [x for x in rows if x.removed] or []
        lines.append("")
        if not rows:
            lines.append(f"{title}: none removed")
            return
        shown = rows[:top]
        width = max(len(name), *(len(x.name) for x in shown))
        lines.append(f"{title}" + (f" (top {top} of {len(rows)})" if len(rows) > top else "") + ":")
        lines.append(f"    {name:<{width}}  chunks  removed   share")
        for x in shown:
            flag = "!" if x.flagged else " "
            lines.append(f"  {flag} {x.name:<{width}}  {x.chunks:>6}  {x.removed:>7}  {x.share:>6.0%}")

    table("Removals per folder", summary.by_folder, "folder")
    table("Removals per source", summary.by_source, "source")
    if summary.findings:
        n = len(summary.findings)
        lines += ["", f"Findings: {n} source(s) lose most of their chunks to copies elsewhere"
                  + (f" (first {top} shown; all in --json and --html)" if n > top else "") + ":"]
        lines += [f"  ! {f}" for f in summary.findings[:top]]
    if summary.clusters:
        lines += ["", "Largest clusters:"]
        for c in summary.clusters[:5]:
            n = len({c.representative.source, *(m.source for m in c.members)})
            lines.append(f"  {c.size:>3} chunks from {n} source(s), kept {c.representative.key}")
    if summary.skipped:
        lines += ["", f"Skipped files ({len(summary.skipped)}):"]
        lines += [f"  {k.path}: {k.reason}" for k in summary.skipped]
    return "\n".join(lines)


# --- terminal side-by-side diffs ------------------------------------------------------------------------

_COLOURS = {"del": "\x1b[1;31m", "ins": "\x1b[1;32m"}
_MARKS = {"del": ("[-", "-]"), "ins": ("{+", "+}")}
_RESET = "\x1b[0m"


def _tokens(runs: Sequence[tuple[str, str, str]], side: str, colour: bool) -> list[tuple[str, str | None]]:
    """One side of a word diff as (word, colour style or None); without colour, changed runs get marks."""
    out: list[tuple[str, str | None]] = []
    style = "del" if side == "a" else "ins"
    for tag, pa, pb in runs:
        words = (pa if side == "a" else pb).split()
        if not words:
            continue
        if tag == "equal":
            out += [(w, None) for w in words]
        elif colour:
            out += [(w, style) for w in words]
        else:
            o, c = _MARKS[style]
            words[0] = o + words[0]
            words[-1] = words[-1] + c
            out += [(w, None) for w in words]
    return out


def _wrap(tokens: Sequence[tuple[str, str | None]], width: int) -> list[tuple[str, int]]:
    """Fill lines of at most ``width`` visible characters: (rendered line, visible width)."""
    lines: list[tuple[str, int]] = []
    cur: list[str] = []
    n = 0
    for word, style in tokens:
        pieces = [word[i:i + width] for i in range(0, len(word), width)]  # a word longer than a line
        for piece in pieces:
            if cur and n + 1 + len(piece) > width:
                lines.append((" ".join(cur), n))
                cur, n = [], 0
            cur.append(f"{_COLOURS[style]}{piece}{_RESET}" if style else piece)
            n += len(piece) + (1 if len(cur) > 1 else 0)
    if cur:
        lines.append((" ".join(cur), n))
    return lines


def side_by_side(a: str, b: str, *, width: int, colour: bool, head_a: str = "", head_b: str = "") -> str:
    """Two texts in columns with word differences marked: ``[-only in a-]``, ``{+only in b+}``
    (or red and green when ``colour``)."""
    from rag_dedup.app.report import word_diff

    col = max(20, (width - 3) // 2)
    runs = word_diff(a, b)
    left, right = _wrap(_tokens(runs, "a", colour), col), _wrap(_tokens(runs, "b", colour), col)
    left = [(head_a[:col], len(head_a[:col])), *left]
    right = [(head_b[:col], len(head_b[:col])), *right]
    out = []
    for i in range(max(len(left), len(right))):
        la, wa = left[i] if i < len(left) else ("", 0)
        rb, _ = right[i] if i < len(right) else ("", 0)
        out.append(f"{la}{' ' * (col - wa)} │ {rb}".rstrip())
    return "\n".join(out)


# --- commands ------------------------------------------------------------------------------------------


def _probability(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number; use e.g. 0.8") from None
    if not 0.0 < x <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is outside (0, 1]; use e.g. 0.8")
    return x


def _thresholds(value: str) -> tuple[float, ...]:
    parts = [p for p in value.replace(" ", "").split(",") if p]
    if not parts:
        raise argparse.ArgumentTypeError("give comma-separated thresholds, e.g. 0.6,0.7,0.8,0.9")
    out = tuple(_probability(p) for p in parts)
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"{value} repeats a threshold")
    return out


def _positive(value: str) -> int:
    try:
        x = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if x < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return x


def _non_negative(value: str) -> int:
    try:
        x = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if x < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return x


def _add_corpus_args(p: argparse.ArgumentParser, *, threshold: bool = True) -> None:
    p.add_argument("path", help="a folder (read recursively) or one file")
    p.add_argument("--glob", action="append", metavar="PATTERN",
                   help=f"read only files matching PATTERN (repeatable; default: {' '.join(DEFAULT_GLOBS)})")
    p.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                   help="skip files matching PATTERN, e.g. 'drafts/*' or '*.json' (repeatable)")
    if threshold:
        p.add_argument("--threshold", type=_probability, default=0.8,
                       help="Jaccard similarity at or above which two chunks are duplicates (default 0.8)")
    p.add_argument("--chunk-size", type=_positive, default=256, help="tokens per chunk (default 256)")
    p.add_argument("--chunk-overlap", type=_non_negative, default=64,
                   help="tokens shared by consecutive chunks (default 64)")
    p.add_argument("--num-perm", type=_positive, default=128, help="MinHash permutations (default 128)")
    p.add_argument("--ngram", type=_positive, default=5, help="words per shingle (default 5)")


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
    scan.add_argument("--save", metavar="DIR", help="keep the index and chunks in DIR for `rag-dedup query`")
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
    tune.add_argument("--window", type=_probability, default=0.05,
                      help="a pair is near t when its similarity is within t ± window (default 0.05)")
    tune.add_argument("--seed", type=int, default=1, help="seed for sampling pairs (default 1)")
    tune.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    tune.add_argument("--html", metavar="FILE", help="write the pairs as a self-contained HTML page")
    tune.add_argument("--width", type=_positive, default=None, help="terminal width (default: detected)")

    query = sub.add_parser("query", help="BM25 top k without and with deduplication, side by side",
                           description="Retrieve with BM25 from PATH (a folder, a file, or a folder "
                                       "written by `scan --save`) and show the top k without and with "
                                       "DedupPostprocessor.")
    _add_corpus_args(query)
    query.add_argument("question", help="the query text")
    query.add_argument("-k", "--top-k", type=_positive, default=10, help="results per column (default 10)")
    query.add_argument("--json", action="store_true", help="print both result lists as JSON")
    query.add_argument("--width", type=_positive, default=None, help="terminal width (default: detected)")
    return parser


def _version() -> str:
    try:
        from rag_dedup import __version__

        return __version__
    except ImportError:  # pragma: no cover
        return "unknown"


def _corpus_chunks(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    if args.chunk_overlap >= args.chunk_size:
        raise UsageError(
            f"--chunk-overlap ({args.chunk_overlap}) must be smaller than --chunk-size ({args.chunk_size})"
        )
    corpus = read_corpus(Path(args.path), tuple(args.glob or DEFAULT_GLOBS), tuple(args.exclude))
    if not corpus.documents:
        reasons = "; ".join(f"{k.path}: {k.reason}" for k in corpus.skipped[:5])
        raise UsageError(f"no readable documents in {args.path} ({len(corpus.skipped)} skipped: {reasons})")
    chunks = chunk_corpus(corpus, args.chunk_size, args.chunk_overlap)
    if not chunks:
        raise UsageError(f"the documents in {args.path} contain no text to chunk")
    return corpus, chunks


def _out(stream: IO[str], text: str) -> None:
    stream.write(text if text.endswith("\n") else text + "\n")
    stream.flush()


def cmd_scan(args: argparse.Namespace) -> int:
    from rag_dedup.app.report import summarize

    if args.html and not Path(args.html).resolve().parent.is_dir():
        raise UsageError(f"--html {args.html}: folder {Path(args.html).parent} does not exist")
    if args.save:
        check_save_target(Path(args.save))  # before the work, not after it
    corpus, chunks = _corpus_chunks(args)
    if args.engine == "spark":
        try:
            from rag_dedup.spark.engine import spark_index

            index = spark_index(((c.key, c.text, c.source) for c in chunks), master=args.master,
                                threshold=args.threshold, num_perm=args.num_perm, ngram=args.ngram)
        except (ImportError, RuntimeError) as e:  # pyspark or Java missing: the message names the fix
            raise UsageError(str(e)) from e
    else:
        index = build_index(chunks, threshold=args.threshold, num_perm=args.num_perm, ngram=args.ngram)
    settings = {"chunk_size": args.chunk_size, "chunk_overlap": args.chunk_overlap}
    summary = summarize(index, chunks, documents=len(corpus.documents), skipped=corpus.skipped,
                        settings=settings)
    if args.html:
        from rag_dedup.app.html import scan_page

        page = scan_page(summary, {c.key: c.text for c in chunks}, title=f"rag-dedup scan {args.path}")
        write_text_atomic(Path(args.html), page)
        args.written.append(args.html)
    if args.save:
        meta = {"root": str(Path(args.path).resolve()), "settings": dict(settings, threshold=args.threshold,
                num_perm=args.num_perm, ngram=args.ngram), "documents": len(corpus.documents),
                "skipped": [k.to_dict() for k in corpus.skipped]}
        save_scan(Path(args.save), index, chunks, meta)
        args.written.append(args.save)
    if args.json:
        _out(sys.stdout, json.dumps(summary.to_dict(), indent=2, ensure_ascii=False))
    else:
        text = format_summary(summary, args.path, top=args.top)
        if args.html:
            text += f"\n\nHTML report: {args.html}"
        if args.save:
            text += f"\nSaved index: {args.save}  (rag-dedup query {args.save} \"your question\")"
        _out(sys.stdout, text)
    return EXIT_OK


def _width(args: argparse.Namespace) -> int:
    return args.width or min(160, shutil.get_terminal_size((120, 24)).columns)


def cmd_tune(args: argparse.Namespace) -> int:
    from rag_dedup.app.report import sample_thresholds

    if args.html and not Path(args.html).resolve().parent.is_dir():
        raise UsageError(f"--html {args.html}: folder {Path(args.html).parent} does not exist")
    if args.window > 0.5:
        raise UsageError(f"--window {args.window} is too wide; use at most 0.5 (default 0.05)")
    _, chunks = _corpus_chunks(args)
    report = sample_thresholds(chunks, args.thresholds, per_threshold=args.pairs, window=args.window,
                               num_perm=args.num_perm, ngram=args.ngram, seed=args.seed)
    by_key = {c.key: c for c in chunks}
    if args.html:
        from rag_dedup.app.html import tune_page

        write_text_atomic(Path(args.html), tune_page(report, by_key, title=f"rag-dedup tune {args.path}"))
        args.written.append(args.html)
    if args.json:
        d = report.to_dict()
        for t in d["thresholds"]:
            for p in t["pairs"]:
                p["a"], p["b"] = by_key[p["a"]].to_dict(), by_key[p["b"]].to_dict()
        _out(sys.stdout, json.dumps(d, indent=2, ensure_ascii=False))
        return EXIT_OK
    colour = sys.stdout.isatty() and os.environ.get("NO_COLOR") is None
    width = _width(args)
    lines = [f"rag-dedup tune {args.path}: {report.chunks} chunks, {len(report.similarities)} candidate pairs "
             f"with similarity >= {report.floor:g}", "",
             "  threshold  suppressed   share  clusters  pairs near"]
    for t in report.thresholds:
        share = t.suppressed / report.chunks if report.chunks else 0.0
        lines.append(f"  {t.threshold:>9g}  {t.suppressed:>10}  {share:>6.1%}  {t.clusters:>8}  {t.pairs_near:>10}")
    marks = "red = only on the left, green = only on the right" if colour else \
        "[-text-] only on the left, {+text+} only on the right"
    lines += ["", f"Pairs near each threshold ({marks}). 'merged' pairs would count as one passage.",
              "Choose the lowest threshold whose merged pairs you would accept as the same passage."]
    for t in report.thresholds:
        lines += ["", "=" * min(width, 100), f"threshold {t.threshold:g}: suppresses {t.suppressed} of "
                  f"{report.chunks} chunks; {t.pairs_near} pairs within ±{report.window:g}"]
        if not t.pairs:
            lines.append("  (no pairs of chunks this close to the threshold)")
        for p in t.pairs:
            a, b = by_key[p.a], by_key[p.b]
            side = "merged" if p.similarity >= t.threshold else "kept apart"
            lines += ["", f"similarity {p.similarity:.3f} ({side} at {t.threshold:g})",
                      side_by_side(a.text, b.text, width=width, colour=colour,
                                   head_a=_where(a), head_b=_where(b))]
    if args.html:
        lines += ["", f"HTML: {args.html}"]
    _out(sys.stdout, "\n".join(lines))
    return EXIT_OK


def _where(c: Any) -> str:
    return f"{c.source} [{c.start}:{c.end}]" if c.start is not None else c.source


def _preview(text: str, n: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: max(0, n - 1)] + "…"


def cmd_query(args: argparse.Namespace) -> int:
    from llama_index.core.schema import QueryBundle, TextNode

    if not args.question.strip():
        raise UsageError("the question is empty")
    try:
        from llama_index.retrievers.bm25 import BM25Retriever
    except ImportError as e:
        raise UsageError("rag-dedup query needs BM25: pip install 'rag-dedup[bm25]'") from e
    from rag_dedup.llama_index.metadata import DEDUP_COLLAPSED
    from rag_dedup.llama_index.postprocessor import DedupPostprocessor

    path = Path(args.path)
    if path.is_dir() and (path / CHUNKS_FILE).is_file():
        index, chunks, _ = load_saved(path)
    else:
        _, chunks = _corpus_chunks(args)
        index = build_index(chunks, threshold=args.threshold, num_perm=args.num_perm, ngram=args.ngram)
    nodes = [TextNode(id_=c.key, text=c.text, metadata={"source": c.source}) for c in chunks]
    k = args.top_k
    fetch = min(len(nodes), max(k * 4, k + 20))
    retriever = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=fetch)
    results = retriever.retrieve(args.question)
    plain = results[:k]
    by_key = {c.key: c for c in chunks}

    def row(nws: Any) -> dict[str, Any]:
        key = nws.node.node_id
        c = by_key[key]
        folded = nws.node.metadata.get(DEDUP_COLLAPSED) or []
        return {"key": key, "source": c.source, "start": c.start, "end": c.end,
                "score": round(float(nws.score or 0.0), 4), "cluster": index.resolve(key) if key in index else key,
                "folded": [f["node_id"] for f in folded]}

    # Rows of the plain list are taken before the postprocessor folds duplicates into the nodes it keeps.
    left = [row(n) for n in plain]
    post = DedupPostprocessor(index=index, top_n=k)
    right = [row(n) for n in post.postprocess_nodes(list(results), query_bundle=QueryBundle(args.question))]
    if args.json:
        _out(sys.stdout, json.dumps({"schema": "rag-dedup.query/1", "question": args.question, "k": k,
                                     "without_dedup": left, "with_dedup": right}, indent=2, ensure_ascii=False))
        return EXIT_OK
    width = _width(args)
    col = max(30, (width - 3) // 2)
    distinct = len({r["cluster"] for r in left})
    lines = [f"rag-dedup query {args.path}: {args.question!r}, top {k} of {len(nodes)} chunks (BM25)",
             f"without dedup: {len(left)} results, {distinct} distinct passages    "
             f"with DedupPostprocessor: {len(right)} results, {len({r['cluster'] for r in right})} distinct", ""]
    seen: dict[str, int] = {}
    for i in range(max(len(left), len(right))):
        cells = []
        for side in (left, right):
            if i >= len(side):
                cells.append(("", ""))
                continue
            r = side[i]
            dup = ""
            if side is left:
                first = seen.setdefault(r["cluster"], i + 1)
                dup = f" = #{first}" if first != i + 1 else ""
            elif r["folded"]:
                dup = f" (+{len(r['folded'])} folded)"
            head = f"{i + 1:>2}. {r['score']:.2f} {r['key']}{dup}"
            cells.append((head[:col], "    " + _preview(by_key[r["key"]].text, col - 4)))
        lines.append(f"{cells[0][0]:<{col}} │ {cells[1][0]}".rstrip())
        lines.append(f"{cells[0][1]:<{col}} │ {cells[1][1]}".rstrip())
    lines += ["", "'= #n': the same passage (same duplicate cluster) as result n; "
              "'+n folded': duplicates of it folded into its metadata[\"dedup_collapsed\"]."]
    _out(sys.stdout, "\n".join(lines))
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
            return _COMMANDS[args.command](args)
    except UsageError as e:
        print(f"rag-dedup: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        done = f"only {', '.join(written)} (complete) was written" if written else "no output written"
        sys.stderr.write(f"\nrag-dedup: interrupted; {done}\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `rag-dedup scan . | head`
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return EXIT_OK


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: IO[str] | None = None, line: str | None = None) -> None:
    """Warnings from the command are one line on stderr: ``rag-dedup: warning: ...``."""
    sys.stderr.write(f"rag-dedup: warning: {message}\n")  # one write: a Ctrl-C cannot split the line


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
