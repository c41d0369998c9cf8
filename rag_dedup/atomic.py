"""Atomic file writes: the one way rag-dedup writes a file it will read back or a user will open.

``write_bytes(path, data)`` writes ``data`` to a temporary file in ``path``'s folder (named
``.<name>.<random>.tmp``, so a folder listing tells it from real files), flushes and fsyncs it, gives it
the permissions of an ordinary new file (``0o666`` less the umask: ``mkstemp`` makes ``0o600``) and
renames it over ``path`` with :func:`os.replace`. A reader sees the old file or the new one, never a
part of either; on any exception (Ctrl-C included) the temporary file is removed and the exception
re-raised. A rename is durable once the folder itself is fsynced: :func:`fsync_directory` does that,
for writers whose last rename commits a whole set of files (the index directory's manifest).

:func:`exchange` swaps two paths in one step (Linux's ``renameat2(RENAME_EXCHANGE)``), for a writer that
replaces a whole folder (``rag-dedup scan --save``): the folder's path then names the old folder or the
new one at every moment, a crash included.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import ctypes.util
import os
import sys
import tempfile
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2

__all__ = ["check_writable", "exchange", "fsync_directory", "umask", "write_bytes", "write_text"]


def write_bytes(path: Path | str, data: bytes) -> None:
    """Replace ``path`` by a file holding ``data``, atomically (see the module docstring)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def check_writable(folder: Path | str) -> None:
    """Raise the :class:`OSError` that creating an entry in ``folder`` would raise, if any: a hidden
    folder is made there and removed. Permission bits do not tell (root may write anywhere but in
    ``/proc``, a read-only mount refuses everyone), so a writer that must not fail after its work (a
    report, a save, a Spark job's output) tries before it starts."""
    os.rmdir(tempfile.mkdtemp(dir=folder, prefix=".rag-dedup-write-test."))


def write_text(path: Path | str, text: str) -> None:
    """:func:`write_bytes` of ``text`` in UTF-8."""
    write_bytes(path, text.encode("utf-8"))


def fsync_directory(root: Path | str) -> None:
    """Make the renames done in ``root`` durable (a directory entry lives in its directory)."""
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def umask() -> int:
    """The process's umask (read by setting it and setting it back: there is no getter)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def exchange(a: Path | str, b: Path | str) -> bool:
    """Swap the paths ``a`` and ``b`` (both must exist, on one file system) atomically, and fsync their
    folder. Returns False, having changed nothing, where the system cannot (not Linux, an old kernel or
    C library, a file system without it): the caller then falls back to two renames.

    Raises:
        OSError: The system can swap, and refused these two paths (the ``errno`` says why).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM):  # cannot swap here (EPERM: a
            return False  # sandbox's seccomp filter; a real permission error recurs in the renames)
        raise OSError(err, os.strerror(err), str(a), None, str(b))
    fsync_directory(Path(b).parent)
    return True
