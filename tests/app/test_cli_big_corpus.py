"""The command on a corpus of a few thousand real files: progress in logs, report size, the first screen.

The corpus is built in a temporary folder from this machine's files: the 500 smallest Debian
``copyright`` files (``/usr/share/doc/*/copyright``, no extension) and the 1,700 smallest gzipped man
pages over 300 bytes (``/usr/share/man/man[1-8]/*.gz``): 2,200 files, about 8,000 chunks, hundreds of
clusters (the licence texts repeat). The command runs as a user runs it, in a subprocess whose stderr
is a pipe (a log), so each phase must write its plain line.
"""

from __future__ import annotations

import glob
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.app.test_html import _chromium

ROOT = Path(__file__).resolve().parents[2]
COPYRIGHTS, MAN_PAGES = 500, 1700
#: A phase's closing line in a log: "rag-dedup: chunking: 2,200 documents in 4.4 s (8,297 chunks)".
PHASE = re.compile(r"^rag-dedup: (?P<desc>[a-zA-Z][a-zA-Z0-9 ]*): (?:(?P<count>[\d,]+) (?P<unit>\w+)|done) "
                   r"in \d+\.\d s")


def _real_files() -> tuple[list[str], list[str]]:
    copyrights = sorted(glob.glob("/usr/share/doc/*/copyright"), key=lambda p: (os.path.getsize(p), p))
    pages = sorted((p for p in glob.glob("/usr/share/man/man[1-8]/*.gz") if os.path.getsize(p) > 300),
                   key=lambda p: (os.path.getsize(p), p))
    return copyrights[:COPYRIGHTS], pages[:MAN_PAGES]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rag_dedup", *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, check=False)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    copyrights, pages = _real_files()
    if len(copyrights) < COPYRIGHTS or len(pages) < MAN_PAGES:
        pytest.skip("needs the Debian docs and man pages of a full install (/usr/share/doc, /usr/share/man)")
    out = tmp_path_factory.mktemp("big")
    root = out / "corpus"
    for p in copyrights:
        (root / "copyright" / p.split("/")[4]).mkdir(parents=True)
        shutil.copyfile(p, root / "copyright" / p.split("/")[4] / "copyright")
    for p in pages:
        folder = root / "man" / p.split("/")[4]
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, folder / os.path.basename(p))
    scan = _run("scan", str(root), "--glob", "*", "--json", "--html", str(out / "r.html"), "--save", str(out / "saved"))
    assert scan.returncode == 0, scan.stderr[-3000:]
    return root, out, scan


def _phases(stderr: str) -> dict[str, str]:
    found = {}
    for line in stderr.splitlines():
        m = PHASE.match(line)
        if m:
            found[m["desc"]] = line
    return found


def test_every_scan_phase_writes_a_line_in_logs(big):
    """Regression (issue 19 item 2): a run writing to a file showed nothing at all, and the last
    phases of scan nothing even on a terminal."""
    _, _, scan = big
    phases = _phases(scan.stderr)
    assert list(phases) == ["reading", "chunking", "indexing", "summarizing", "writing the HTML report",
                            "building BM25", "saving"]
    assert f"reading: {COPYRIGHTS + MAN_PAGES:,} files in" in phases["reading"]
    report = json.loads(scan.stdout)
    assert f"({report['chunks']:,} chunks)" in phases["chunking"]
    assert "\r" not in scan.stderr and "\x1b" not in scan.stderr  # no bar drawn into a log
    assert report["documents"] == COPYRIGHTS + MAN_PAGES and report["skipped"] == []  # gzip and no-extension read


def test_tune_reports_its_pair_phase(big):
    """Regression (issue 19 item 2): the ~85 s pair phase of tune showed nothing."""
    root, _, _ = big
    tune = _run("tune", str(root / "copyright"), "--glob", "copyright", "--thresholds", "0.8,0.9", "--json")
    assert tune.returncode == 0, tune.stderr[-3000:]
    phases = _phases(tune.stderr)
    chunks = json.loads(tune.stdout)["chunks"]
    assert f"candidate pairs: {chunks:,} chunks in" in phases["candidate pairs"]
    assert "indexing at each threshold: 2 thresholds in" in phases["indexing at each threshold"]


def test_query_from_the_save_loads_bm25_instead_of_rebuilding_it(big, tmp_path):
    """Regression (issue 19 item 4): query rebuilt BM25 from chunks.json on every call."""
    _, out, _ = big
    questions = tmp_path / "questions.txt"
    questions.write_text("warranty of merchantability\n\nGNU General Public License version 2\nprint help and exit\n")
    query = _run("query", str(out / "saved"), "--queries", str(questions), "--json")
    assert query.returncode == 0, query.stderr[-3000:]
    phases = _phases(query.stderr)
    assert list(phases) == ["loading the save", "retrieving"]
    assert "retrieving: 3 questions in" in phases["retrieving"]
    d = json.loads(query.stdout)
    assert [q["question"] for q in d["questions"]][1] == "GNU General Public License version 2"
    assert all(q["distinct"]["ratio"] == 1.0 for q in d["questions"])  # DistinctRetriever always fills k


def test_the_html_report_stays_small_and_shows_each_representative_once(big):
    """Regression (issue 19 item 3): 757 findings first, "150 of 150 clusters shown" of 15,397, and the
    representative's text repeated beside each of 790 members (a 2.3 MB page)."""
    _, out, scan = big
    report = json.loads(scan.stdout)
    page = (out / "r.html").read_text(encoding="utf-8")
    assert report["cluster_count"] > 150
    assert f"largest 150 of {report['cluster_count']:,} clusters" in page
    assert page.count('<pre class="text">') == 150  # one representative text per cluster shown
    biggest = report["clusters"][0]
    saved = json.loads((out / "saved" / "chunks.json").read_text(encoding="utf-8"))
    text = {c["key"]: c["text"] for c in saved["chunks"]}[biggest["representative"]["key"]]
    assert page.count(html.escape(text)) == 1
    assert len(page.encode("utf-8")) < 2_000_000
    findings = page.split('<section id="findings">', 1)[1].split("</section>", 1)[0]
    assert "<details" in findings and " open" not in findings  # collapsed, by folder


def test_first_screen_shows_the_summary_and_the_histogram(big, tmp_path):
    """The page's first 1280x900 screen in headless Chromium holds the summary and the histogram bars."""
    image = pytest.importorskip("PIL.Image")
    _, out, _ = big
    shot = tmp_path / "first-screen.png"
    proc = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,900", f"--screenshot={shot}",
         (out / "r.html").as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    img = image.open(shot).convert("RGB")
    assert img.size == (1280, 900)
    pixels = img.load()
    bars = [(x, y) for x in range(0, 1280, 2) for y in range(0, 900, 2) if pixels[x, y] == (0x4F, 0x81, 0xBD)]
    assert len(bars) > 200, "no histogram bars on the first screen"
    left = min(x for x, _ in bars)
    # The summary table sits left of the histogram: dark text in that column, within the first screen.
    ink = sum(1 for x in range(0, left, 2) for y in range(100, 900, 2) if sum(pixels[x, y]) < 200)
    assert ink > 300, "no summary text left of the histogram"
