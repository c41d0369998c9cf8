"""The command's corpus: which files under a path are read, their names, their chunks, their index.

Discovery: a folder is walked recursively in name order; hidden files and folders (a name starting
with ``.``) are left out; symbolic links to folders are not followed, and a folder that is a
rag-dedup save (``scan --save``) is not read, both listed as skipped. By default the files read are
those matching :data:`DEFAULT_GLOBS`, the same names compressed (``*.txt.gz``, ...), and files whose
name has no extension (``copyright``, ``README``); ``--glob`` replaces that choice and ``--exclude``
removes matches (patterns match the path relative to the folder, or the file name). A selected entry
that is not a regular file (a FIFO, a socket, a device, a broken link) and a sub-folder that cannot be
listed are *skipped* with the reason, never opened, so a scan neither hangs nor loses them silently.

Names: a file's *source* is its path relative to the root, passed through :func:`escape_name`: bytes
that are not UTF-8 (which Python gives as lone surrogates) become ``\\xNN`` and control or invisible
characters (ANSI escapes, newlines, bidi overrides) become ``\\xNN``/``\\uNNNN``. Sources are then
plain printable text, safe in a terminal, in JSON, in HTML and as index keys.

Chunks: each document is cut with :class:`~rag_dedup.llama_index.chunking.SentenceChunker`; a chunk's
key is ``"<source>#<n>"``, ``n`` counted per source and zero-padded, so keys are the same on every run
over the same files and say where the chunk is.
"""

from __future__ import annotations

import fnmatch
import os
import stat
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_dedup.app.progress import Phase, track
from rag_dedup.app.readers import Unreadable, pdf_reader_available, read_text, text_format
from rag_dedup.app.report import Chunk, Skipped
from rag_dedup.app.saved import is_save

if TYPE_CHECKING:  # pragma: no cover
    from rag_dedup.index import DedupIndex
    from rag_dedup.llama_index.chunking import SentenceChunker

__all__ = [
    "DEFAULT_GLOBS",
    "Corpus",
    "CorpusError",
    "build_index",
    "chunk_corpus",
    "discover",
    "escape_name",
    "read_corpus",
]

#: Files read from a folder when no ``--glob`` is given (also gzipped, and names without extension).
DEFAULT_GLOBS: tuple[str, ...] = ("*.txt", "*.md", "*.rst", "*.html", "*.htm", "*.json", "*.pdf")
_PDF_HINT = "no PDF reader installed: pip install llama-index-readers-file pypdf"
#: Items per ``DedupIndex.add_many`` call: a progress step, small against the index's own batching.
INDEX_BATCH = 4096


class CorpusError(ValueError):
    """The path cannot give a corpus: missing, nothing selected, nothing readable."""


def escape_name(name: str) -> str:
    """``name`` as printable text: undecodable bytes as ``\\xNN``, control and format characters escaped.

    Printable names are returned unchanged. ``"caf\\udce9.txt"`` (a Latin-1 ``é`` on disk) gives
    ``"caf\\\\xe9.txt"``; ``"a\\nb"`` gives ``"a\\\\x0ab"``; ``"\\x1b[31mred"`` gives ``"\\\\x1b[31mred"``.
    """
    if name.isprintable():
        try:
            name.encode("utf-8")
            return name
        except UnicodeEncodeError:
            pass
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(
        c if c.isprintable() else (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}") for c in text
    )


@dataclass
class Corpus:
    """Documents read from ``root``, each with its source, and the files skipped with their reason."""

    root: Path
    documents: list[tuple[str, Any]] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    files: int = 0


def _matches(rel: str, patterns: Sequence[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(rel, p) or fnmatch.fnmatchcase(name, p) for p in patterns)


def _default_choice(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    plain = name[:-3] if name.lower().endswith(".gz") else name
    return "." not in plain or _matches(plain, DEFAULT_GLOBS)


def _not_regular(mode: int) -> str:
    """Why an entry of this mode is skipped: ``not a regular file``, with its kind when it has a name."""
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device")):
        if test(mode):
            return f"not a regular file ({what})"
    return "not a regular file"


#: Why a sub-folder that is a save is not read (its chunks.json holds every chunk of an earlier scan).
SAVE_SKIPPED = "a rag-dedup save (written by scan --save), not part of the corpus"


def discover(path: Path, globs: Sequence[str] | None, excludes: Sequence[str]) -> tuple[Path, list[tuple[str, str]],
                                                                                        list[Skipped]]:
    """The files to read under ``path``: ``(root, [(source, file path)], skipped)``, in name order.

    ``globs=None`` is the default choice (see the module docstring). ``path`` may be one file.

    Raises:
        CorpusError: ``path`` does not exist, or the folder holds no file at all.
    """
    path = Path(os.path.abspath(path))
    if not os.path.lexists(path):
        raise CorpusError(f"path not found: {escape_name(str(path))}")
    if not path.is_dir():
        return path.parent, [(escape_name(path.name), str(path))], []
    if is_save(path):
        name = escape_name(str(path))
        raise CorpusError(f"{name} is a rag-dedup save (written by scan --save), not a corpus: ask it with "
                          f"rag-dedup query {name} \"your question\", or scan the folder it was made from")

    def chosen(rel: str) -> bool:
        picked = _default_choice(rel) if globs is None else _matches(rel, globs)
        return picked and not _matches(rel, excludes)

    files: list[tuple[str, str]] = []
    skipped: list[Skipped] = []
    seen_any = False
    stack = [("", str(path))]
    while stack:
        prefix, folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            if not prefix:
                raise CorpusError(f"cannot read folder {escape_name(folder)}: {e.strerror or e}") from None
            skipped.append(Skipped(escape_name(prefix), f"unreadable folder: {e.strerror or e}"))
            continue
        subfolders = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            rel = prefix + entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if is_save(Path(entry.path)):
                        seen_any = True
                        skipped.append(Skipped(escape_name(rel + "/"), SAVE_SKIPPED))
                    else:
                        subfolders.append((rel + "/", entry.path))
                    continue
                seen_any = True
                if entry.is_symlink() and entry.is_dir():
                    if _matches(rel, excludes):
                        continue
                    skipped.append(Skipped(escape_name(rel), "a symbolic link to a folder, not followed (give the folder "
                                                             "it points to as a path of its own to read it)"))
                    continue
                if not chosen(rel):
                    continue
                if entry.is_file():
                    files.append((escape_name(rel), entry.path))
                elif entry.is_symlink() and not os.path.exists(entry.path):
                    skipped.append(Skipped(escape_name(rel), "broken symbolic link"))
                else:
                    skipped.append(Skipped(escape_name(rel), _not_regular(entry.stat().st_mode)))
            except OSError as e:
                skipped.append(Skipped(escape_name(rel), f"unreadable: {e.strerror or e}"))
        stack.extend(reversed(subfolders))  # depth first, in name order
    if not seen_any and not files:
        raise CorpusError(f"no files found in {escape_name(str(path))}")
    files.sort()
    return path, files, skipped


def _load(source: str, file: str) -> list[Any]:
    """The non-empty LlamaIndex Documents of one file; :class:`Unreadable` with the reason if none."""
    from llama_index.core.schema import Document

    metadata = {"file_path": source, "file_name": source.rsplit("/", 1)[-1]}
    fmt, gz = text_format(os.path.basename(file))
    if fmt == "pdf":
        if gz:
            raise Unreadable("gzipped PDF is not read; decompress it first")
        if not pdf_reader_available():
            raise Unreadable(_PDF_HINT)
        from llama_index.readers.file import PDFReader

        try:
            docs = PDFReader().load_data(Path(file), extra_info=metadata)
        except Exception as e:  # a reader failing on one file must not stop the scan
            raise Unreadable(f"reader failed: {type(e).__name__}: {e}") from None
    else:
        # SimpleDirectoryReader's convention: file_name is kept out of embed and LLM text (so out of
        # SentenceChunker's metadata budget); a pipeline reading the same folder cuts the same chunks.
        hidden = ["file_name"]
        docs = [Document(text=read_text(file), metadata=metadata, excluded_embed_metadata_keys=hidden,
                         excluded_llm_metadata_keys=list(hidden))]
    docs = [d for d in docs if d.text.strip()]
    if not docs:
        raise Unreadable("no text")
    return docs


def read_corpus(path: Path, globs: Sequence[str] | None = None, excludes: Sequence[str] = ()) -> Corpus:
    """Read every selected file under ``path`` (or the file ``path``) into LlamaIndex Documents.

    A file that cannot be read is skipped with a warning (``skipped <source>: <reason>``) and listed in
    :attr:`Corpus.skipped`, never a crash.

    Raises:
        CorpusError: ``path`` does not exist, or no file is selected.
    """
    root, files, skipped = discover(path, globs, excludes)
    for s in skipped:
        warnings.warn(f"skipped {s.path}: {s.reason}", stacklevel=2)
    if not files:
        chosen = " ".join(globs) if globs is not None else " ".join(DEFAULT_GLOBS) + " (or no extension)"
        raise CorpusError(
            f"no files to read in {escape_name(str(path))}: none matches {chosen}"
            + (f" outside {' '.join(excludes)}" if excludes else "")
            + " (use --glob to choose files)"
            + (f"; {len(skipped)} skipped (each named in a 'skipped' warning)" if skipped else "")
        )
    corpus = Corpus(root=root, files=len(files), skipped=list(skipped))
    current = Phase("reading")
    for source, file in track(files, desc="reading", unit="file", phase=current):
        try:
            docs = _load(source, file)
        except Unreadable as e:
            corpus.skipped.append(Skipped(source, str(e)))
            warnings.warn(f"skipped {source}: {e}", stacklevel=2)
        else:
            corpus.documents.extend((source, d) for d in docs)
        current.detail = f"({len(corpus.documents):,} documents, {len(corpus.skipped):,} skipped)"
    return corpus


def chunk_corpus(corpus: Corpus, chunker: SentenceChunker) -> list[Chunk]:
    """Cut every document into :class:`~rag_dedup.app.report.Chunk` objects with stable keys."""
    counters: dict[str, int] = {}
    chunks: list[Chunk] = []
    current = Phase("chunking")
    for rel, doc in track(corpus.documents, desc="chunking", unit="document", phase=current):
        for node in chunker.get_nodes_from_documents([doc]):
            text = node.text
            if not text.strip():
                continue
            n = counters.get(rel, 0)
            counters[rel] = n + 1
            chunks.append(Chunk(f"{rel}#{n:04d}", rel, text, node.start_char_idx, node.end_char_idx))
        current.detail = f"({len(chunks):,} chunks)"
    return chunks


def build_index(chunks: Sequence[Chunk], index: DedupIndex) -> DedupIndex:
    """Add ``chunks`` to the empty ``index`` (in steps of :data:`INDEX_BATCH`, with progress)."""
    current = Phase("indexing")
    starts = range(0, len(chunks), INDEX_BATCH)
    for i in track(starts, desc="indexing", unit="batch", phase=current):
        index.add_many({"key": c.key, "text": c.text, "source": c.source} for c in chunks[i:i + INDEX_BATCH])
        current.detail = f"({min(i + INDEX_BATCH, len(chunks)):,} chunks)"
    return index

