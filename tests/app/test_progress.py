"""Progress of the command's phases: plain lines in logs, tqdm bars on a terminal (a real pseudo-terminal)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

from rag_dedup.app.progress import Phase, phase, track

ROOT = Path(__file__).resolve().parents[2]


def test_a_loop_writes_one_line_with_its_count_and_detail_off_a_terminal(capsys):
    current = Phase("indexing")
    items = []
    for i in track(range(3), desc="indexing", unit="batch", phase=current):
        items.append(i)
        current.detail = f"({(i + 1) * 10} chunks)"
    err = capsys.readouterr().err
    assert items == [0, 1, 2]
    assert err.startswith("rag-dedup: indexing: 3 batches in ") and err.endswith(" s (30 chunks)\n")
    assert err.count("\n") == 1


def test_a_step_writes_done_and_a_failed_step_writes_nothing(capsys):
    with phase("saving") as step:
        step.detail = "(2 files)"
    assert capsys.readouterr().err.startswith("rag-dedup: saving: done in ")
    try:
        with phase("loading"):
            raise ValueError("damaged")
    except ValueError:
        pass
    assert capsys.readouterr().err == ""


def test_on_a_terminal_the_scan_draws_bars_instead_of_lines():
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a 120x24 terminal
    try:
        proc = subprocess.run([sys.executable, "-m", "rag_dedup", "scan", str(ROOT / "examples" / "data")],
                              stdout=subprocess.PIPE, stderr=follower, cwd=ROOT, timeout=300, check=False)
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the other side is closed and everything was read
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(leader)
    err = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0
    assert "chunking:" in err and "\r" in err  # tqdm redraws its bar in place
    assert "documents in" not in err  # the log lines are for logs only
