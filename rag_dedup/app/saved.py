"""What the command writes: reports (one file each) and the ``scan --save DIR`` folder, atomically.

A report is written by :func:`rag_dedup.atomic.write_text` (a temporary file in the target's folder,
fsynced and renamed into place: a reader sees the old file or the new one). A save is a folder::

    DIR/chunks.json   schema "rag-dedup.chunks/1": root, settings, documents, skipped, chunks, and the
                      SHA-256 of each file of bm25/ (``bm25_sha256``)
    DIR/index/        the DedupIndex (DedupIndex.save: JSON and .npz, checksummed by the library)
    DIR/bm25/         the BM25 retriever over the chunks (BM25Retriever.persist: JSON and .npy)

built in a temporary sibling folder and renamed into place; an existing ``DIR`` is replaced only if it
is empty or a previous save (it holds ``chunks.json``). :func:`load_saved` validates what it reads and
raises :class:`SaveError` naming the file; nothing is unpickled. The BM25 files are checked against
their SHA-256 (a damaged array loads and scores wrongly without an error of BM25's own; a save written
before the digests were, has none, and is loaded unchecked), the corpus is memory-mapped, and
checked against the chunks by its size and its first and last node ids; every retrieved id is checked
again by the command (a result without a saved chunk is a damaged save).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag_dedup.app.report import Chunk
from rag_dedup import atomic
from rag_dedup.atomic import umask

__all__ = [
    "BM25_DIR",
    "CHUNKS_FILE",
    "CHUNKS_SCHEMA",
    "INDEX_DIR",
    "Save",
    "SaveError",
    "check_output_file",
    "check_save_target",
    "is_save",
    "load_saved",
    "save_scan",
]

CHUNKS_FILE = "chunks.json"
CHUNKS_SCHEMA = "rag-dedup.chunks/1"
INDEX_DIR = "index"
BM25_DIR = "bm25"


class SaveError(ValueError):
    """An output that cannot be written, or a save that cannot be read (the message names the file)."""


def check_output_file(path: Path, option: str) -> Path:
    """Raise :class:`SaveError` unless a file can be written at ``path`` (tried: a temporary folder);
    return where to write it: ``path``, or the file a symbolic link at ``path`` names (the file is
    replaced by an atomic rename, which would replace the link itself).

    Called before any work, so that ``--html DIR`` or ``--html /proc/x.html`` fails in a second, not
    after the scan. Something at ``path`` that is not a file (a FIFO, a device such as ``/dev/null``, a
    socket) is refused: the rename would replace it with a file.
    """
    path = Path(path)
    try:
        target = path.resolve() if path.is_symlink() else path
        is_folder, parent = target.is_dir(), target.resolve().parent
        parent_is_folder = parent.is_dir()
        special = target.exists() and not is_folder and not target.is_file()
    except OSError as e:  # a folder on the way that may not be searched (is_dir lets EACCES through)
        raise SaveError(f"{option} {path}: cannot write in {path.parent}: {e.strerror or e}") from None
    if is_folder:
        raise SaveError(f"{option} {path}: is a folder; give a file name, e.g. {path / 'report.html'}")
    if special:
        raise SaveError(f"{option} {path}: is not a regular file (a FIFO, a device or a socket), which writing the "
                        "report would replace with one; give a file name")
    if not parent_is_folder:
        raise SaveError(f"{option} {path}: folder {path.parent} does not exist")
    try:
        atomic.check_writable(parent)
    except OSError as e:
        raise SaveError(f"{option} {path}: cannot write in {parent}: {e.strerror or e}") from None
    return target


#: How far into ``chunks.json`` :func:`is_save` looks for the schema (it follows the save's settings and
#: its list of skipped files, which a corpus of many unreadable files makes long).
_SCHEMA_WITHIN = 1 << 20


def is_save(directory: Path) -> bool:
    """Whether ``directory`` is a save, whole or damaged: it holds ``chunks.json`` and the ``index`` or
    the ``bm25`` folder, as :func:`save_scan` writes them, or a ``chunks.json`` whose first MiB names the
    save's schema (a corpus folder may well hold a ``chunks.json`` of its own; a save that lost both
    folders is still a save, which loading then names as damaged, not a corpus). A folder that may not be
    searched is not a save (False): reading it as a folder then says that it cannot be read."""
    directory = Path(directory)
    try:
        if not (directory.is_dir() and (directory / CHUNKS_FILE).is_file()):
            return False
        if (directory / INDEX_DIR).is_dir() or (directory / BM25_DIR).is_dir():
            return True
        with open(directory / CHUNKS_FILE, "rb") as fh:
            head = fh.read(_SCHEMA_WITHIN)
    except OSError:  # EACCES: Path.is_file() lets it through
        return False
    return re.search(rb'"schema":\s*"' + re.escape(CHUNKS_SCHEMA.encode()) + rb'"', head) is not None


def recover_save(directory: Path) -> None:
    """Put back the previous save that a replacement moved aside (``.DIR.old.<pid>``) when ``directory``
    is missing: the replacement died between its two renames. Run by the next save only (one process
    saves into a folder at a time; a reader never renames)."""
    if directory.exists() or not directory.parent.is_dir():
        return
    pattern = re.compile(rf"\.{re.escape(directory.name)}\.old\.[0-9]+")
    aside = [p for p in directory.parent.iterdir() if pattern.fullmatch(p.name) and (p / CHUNKS_FILE).is_file()]
    aside.sort(key=lambda p: p.stat().st_mtime)
    if aside:
        os.replace(aside[-1], directory)


def check_save_target(directory: Path) -> None:
    """Raise :class:`SaveError` unless ``directory`` is absent, empty, or a previous save, and a save can
    be written there: a replacement is written into a new folder beside it (tried: one is made and
    removed), so a read-only parent fails before the scan, not after it."""
    directory = Path(directory)
    try:
        exists = directory.exists()
        if exists and (not directory.is_dir() or (any(directory.iterdir()) and not is_save(directory))):
            raise SaveError(f"--save {directory}: exists and is not a rag-dedup save; choose a new folder")
    except OSError as e:  # a folder that may not be listed or searched
        raise SaveError(f"--save {directory}: cannot read it: {e.strerror or e}") from None
    if not exists:
        check_output_file(directory, "--save")
        return
    try:
        atomic.check_writable(directory.parent)
    except OSError as e:
        raise SaveError(f"--save {directory}: cannot write in {directory.parent}: {e.strerror or e}") from None


def save_scan(directory: Path, index: Any, chunks: Sequence[Chunk], meta: dict[str, Any],
              retriever: Any | None = None) -> None:
    """Save the index, the chunks and (if given) the BM25 ``retriever`` in ``directory``, atomically.

    The save is written whole into a new folder beside ``directory``, then swapped with the previous
    save in one step (:func:`rag_dedup.atomic.exchange`) or, where the system cannot, moved in by two
    renames (a crash between them leaves the previous save aside, which :func:`recover_save` puts back).

    Raises:
        SaveError: ``directory`` exists and is something else.
    """
    directory = Path(directory)
    recover_save(directory)  # a save a killed replacement left aside is replaced like any other
    check_save_target(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    old: Path | None = None
    try:
        os.chmod(tmp, 0o777 & ~umask())
        index.save(tmp / INDEX_DIR)
        bm25_files: dict[str, str] = {}
        if retriever is not None:
            (tmp / BM25_DIR).mkdir()
            retriever.persist(str(tmp / BM25_DIR), show_progress=False)
            bm25_files = _digests(tmp / BM25_DIR)
        sidecar = dict(meta, schema=CHUNKS_SCHEMA, chunks=[c.to_dict() for c in chunks])
        if bm25_files:
            sidecar[BM25_FILES] = bm25_files
        with open(tmp / CHUNKS_FILE, "w", encoding="utf-8") as fh:
            json.dump(sidecar, fh, ensure_ascii=False)
            fh.flush()
            os.fsync(fh.fileno())
        if directory.exists() and atomic.exchange(tmp, directory):
            old = tmp  # it holds the previous save now; the path named the old one or the new one throughout
        else:
            if directory.exists():  # no atomic swap here: two renames, and a crash between them leaves
                old = directory.with_name(f".{directory.name}.old.{os.getpid()}")  # the old one aside,
                os.replace(directory, old)  # which the next save puts back first (recover_save)
            os.replace(tmp, directory)
            atomic.fsync_directory(directory.parent)
    except BaseException:
        if old is not tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and old is not tmp and not directory.exists():
            os.replace(old, directory)
            old = None
        raise
    finally:
        if old is not None:
            _remove_previous(old)


def _remove_previous(old: Path) -> None:
    """Delete the previous save that a replacement moved aside; one that cannot be deleted (a file in it
    that may not be removed) is left where it is and named in a warning, not kept hidden in silence."""
    failures: list[tuple[str, BaseException]] = []
    if sys.version_info >= (3, 12):  # onerror is deprecated there
        shutil.rmtree(old, onexc=lambda _fn, path, e: failures.append((path, e)))
    else:
        shutil.rmtree(old, onerror=lambda _fn, path, info: failures.append((path, info[1])))
    if failures and os.path.lexists(old):
        path, e = failures[0]
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        warnings.warn(f"the previous save could not be deleted and is left in {old} ({path}: {reason}); "
                      "delete it by hand", stacklevel=3)


@dataclass
class Save:
    """A loaded save: the index, the chunks, the sidecar's other fields, and the BM25 retriever if saved."""

    index: Any
    chunks: list[Chunk]
    meta: dict[str, Any]
    retriever: Any | None


def _chunks(sidecar: Path) -> tuple[list[Chunk], dict[str, Any]]:
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: JSON nested too deeply
        raise SaveError(f"{sidecar}: not readable JSON ({e}); re-run rag-dedup scan --save") from None
    if not isinstance(meta, dict) or meta.get("schema") != CHUNKS_SCHEMA:
        schema = meta.get("schema") if isinstance(meta, dict) else None
        raise SaveError(f"{sidecar}: unknown schema {schema!r}; re-run rag-dedup scan --save")
    records = meta.pop("chunks", None)
    if not isinstance(records, list):
        raise SaveError(f"{sidecar}: 'chunks' is not a list; re-run rag-dedup scan --save")
    chunks = []
    for i, d in enumerate(records):
        try:
            if not isinstance(d, dict):
                raise ValueError(f"a {type(d).__name__}, not an object")
            c = Chunk.from_dict(d)
            if not all(isinstance(x, str) for x in (d["key"], d["source"], d["text"])) or not all(
                    x is None or isinstance(x, int) for x in (c.start, c.end)):
                raise ValueError("key, source and text must be strings, start and end integers or null")
        except ValueError as e:
            raise SaveError(f"{sidecar}: chunk {i} is damaged ({e})") from None
        chunks.append(c)
    return chunks, meta


#: The sidecar's field holding the SHA-256 of every file of the BM25 folder (saves since stop 24; an
#: older save has none, and its BM25 files are loaded unchecked as before).
BM25_FILES = "bm25_sha256"


def _digests(folder: Path) -> dict[str, str]:
    """The SHA-256 of every file in ``folder`` (which ``BM25Retriever.persist`` fills), by name."""
    out = {}
    for path in sorted(folder.iterdir()):
        if path.is_file():
            digest = hashlib.sha256()
            try:
                with open(path, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        digest.update(block)
            except OSError as e:  # a read error (EIO) names no file of its own
                e.filename = e.filename or str(path)
                raise
            out[path.name] = digest.hexdigest()
    return out


def _check_digests(folder: Path, expected: object, sidecar: Path) -> None:
    """Refuse a BM25 folder whose files are not those the save wrote (a damaged array loads, and scores
    wrongly, without any error of BM25's own)."""
    if expected is None:
        return
    if not isinstance(expected, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in expected.items()):
        raise SaveError(f"{sidecar}: {BM25_FILES!r} is damaged; re-run rag-dedup scan --save")
    try:
        found = _digests(folder)  # (a file the save did not write, e.g. a .DS_Store, is not read by BM25)
    except OSError as e:  # a file that cannot be read (EIO, EACCES), a folder that cannot be listed
        raise SaveError(f"{e.filename or folder}: cannot be read ({e.strerror or e}); re-run rag-dedup scan --save") from None
    for name in sorted(expected):
        if expected[name] != found.get(name):
            what = "is missing" if name not in found else "is damaged (its SHA-256 differs)"
            raise SaveError(f"{folder / name}: {what}; re-run rag-dedup scan --save")


def load_saved(directory: Path) -> Save:
    """Load what :func:`save_scan` wrote, checking that its parts agree.

    Raises:
        SaveError: a part is missing, damaged, or does not describe the same chunks (the message names it).
    """
    from rag_dedup.index import DedupIndex

    directory = Path(directory)
    chunks, meta = _chunks(directory / CHUNKS_FILE)
    try:
        index = DedupIndex.load(directory / INDEX_DIR)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        raise SaveError(f"{directory / INDEX_DIR}: the index cannot be loaded: {e}") from None
    keys = {c.key for c in chunks}
    if len(keys) != len(chunks):
        twice = next(key for key, n in Counter(c.key for c in chunks).items() if n > 1)
        raise SaveError(f"{directory / CHUNKS_FILE}: chunk key {twice!r} appears twice ({len(chunks)} chunks, "
                        f"{len(keys)} keys); re-run rag-dedup scan --save")
    if len(index) != len(keys):
        raise SaveError(f"{directory}: {CHUNKS_FILE} holds {len(chunks)} chunks and the index {len(index)} keys; "
                        "re-run rag-dedup scan --save")
    retriever = None
    if (directory / BM25_DIR).is_dir():
        from llama_index.retrievers.bm25 import BM25Retriever

        _check_digests(directory / BM25_DIR, meta.pop(BM25_FILES, None), directory / CHUNKS_FILE)

        try:
            # mmap: the corpus stays on disk and is read per result, so a load is fast and small.
            retriever = BM25Retriever.from_persist_dir(str(directory / BM25_DIR), show_progress=False, mmap=True)
            size = len(retriever.corpus)
            ends = [retriever.corpus[i].get("node_id") for i in {0, size - 1}] if size else []
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as e:
            raise SaveError(f"{directory / BM25_DIR}: the BM25 retriever cannot be loaded: {e}") from None
        if size != len(keys) or not keys.issuperset(ends):
            raise SaveError(f"{directory / BM25_DIR}: the BM25 corpus does not hold the saved chunks; "
                            "re-run rag-dedup scan --save")
    return Save(index, chunks, meta, retriever)
