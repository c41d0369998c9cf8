"""rag_dedup.atomic: a reader sees the old file or the new one, and a failed write leaves no trace."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rag_dedup import atomic


def test_write_replaces_the_file_whole_with_ordinary_permissions(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("old")
    atomic.write_text(target, "new ü")
    assert target.read_text(encoding="utf-8") == "new ü"
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~atomic.umask()  # not mkstemp's 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "manifest.json"
    target.write_bytes(b"old")

    def fail(src: object, dst: object) -> None:
        raise KeyboardInterrupt  # Ctrl-C between the fsync and the rename

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


def test_a_missing_folder_is_an_error_not_a_partial_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        atomic.write_bytes(tmp_path / "absent" / "x.json", b"{}")
    assert not (tmp_path / "absent").exists()


def test_check_writable_leaves_nothing_and_raises_where_nothing_can_be_created(tmp_path: Path) -> None:
    """The test entry is removed; a file, a missing folder and /proc (refused even to root) raise OSError."""
    atomic.check_writable(tmp_path)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "file").write_text("x")
    for folder in (tmp_path / "file", tmp_path / "missing", Path("/proc")):
        with pytest.raises(OSError):
            atomic.check_writable(folder)
    assert [p.name for p in tmp_path.iterdir()] == ["file"]
