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
