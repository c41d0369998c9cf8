"""The HTML reports: their pieces (diff marks, escaping, SVG) and the pages loaded in headless Chromium.

The browser tests need Debian's ``chromium`` (``apt-get install chromium``). Without it they are skipped
with that hint, except when the environment variable ``CI`` is set: there a missing browser fails.
The page's script sets ``data-report-ready`` on ``<html>`` as its last act and an error handler sets
``data-report-error``; Chromium's ``--dump-dom`` shows the DOM after the scripts ran, and its console
log (on stderr) shows any uncaught error.
"""

from __future__ import annotations

import html as htmlmod
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_dedup.app.cli import main
from rag_dedup.app.html import diff_html, histogram_svg, s_curve_svg, scan_page
from rag_dedup.index import DedupIndex
from rag_dedup.app.report import Chunk, summarize

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "data"
CORPUS = ROOT / "tests" / "data" / "corpus"


def _strip(marked: str) -> str:
    return htmlmod.unescape(re.sub(r"</?(?:del|ins)>", "", marked))


# --- pieces (no browser) -----------------------------------------------------------------------------------


def test_diff_marks_the_changed_words_of_real_licence_variants():
    gpl = (CORPUS / "licenses" / "GPL-2.txt").read_text(encoding="utf-8")[:800]
    other = gpl.replace("Free Software Foundation", "FSF").replace("<", "&")
    left, right = diff_html(gpl, other)
    assert "<del>Free Software Foundation" in left and "<ins>FSF" in right
    assert _strip(left) == gpl and _strip(right) == other


_text = st.lists(st.sampled_from(list("ab <>&\"'\n") + ["GNU", "</script>", "é"]), max_size=30).map("".join)


@settings(max_examples=80, deadline=None)
@given(_text, _text)
def test_diff_html_round_trips_and_never_emits_raw_markup(a, b):
    left, right = diff_html(a, b)
    assert _strip(left) == a and _strip(right) == b
    for side in (left, right):
        assert re.sub(r"</?(?:del|ins)>", "", side).count("<") == 0


def test_svgs_are_well_formed_and_mark_the_threshold():
    svgs = (histogram_svg([0.81, 0.9, 1.0, 1.0], [0.8]), s_curve_svg(21, 6, 0.8, 0.602), histogram_svg([], [0.6, 0.9]))
    for svg in svgs:
        root = ET.fromstring(svg)
        assert root.tag.endswith("svg")
    curve = ET.fromstring(s_curve_svg(21, 6, 0.8, 0.602))
    ns = "{http://www.w3.org/2000/svg}"
    points = [tuple(map(float, p.split(","))) for p in curve.find(f"{ns}polyline").get("points").split()]
    ys = [y for _, y in points]
    assert len(points) == 101 and ys == sorted(ys, reverse=True)  # P(s) rises: SVG y falls
    assert "threshold 0.8" in s_curve_svg(21, 6, 0.8, 0.602) and "knee 0.602" in s_curve_svg(21, 6, 0.8, 0.602)


def _hostile_page() -> tuple[str, int]:
    """A report over chunks that carry markup: a script tag must arrive as text, not run."""
    base = (CORPUS / "licenses" / "BSD.txt").read_text(encoding="utf-8")[:700]
    payload = '</pre></details><script>document.documentElement.setAttribute("data-pwned", "1")</script><b>'
    chunks = [
        Chunk("a#0", "a.txt", base + payload, 0, 10),
        Chunk("b#0", "b.txt", base + payload + " extra words", 0, 12),
        Chunk("c#0", "c<x>.txt", base, 0, 5),
    ]
    index = DedupIndex(threshold=0.8)
    index.add_many([(c.key, c.text) for c in chunks])
    summary = summarize(index, chunks, documents=3)
    return scan_page(summary, {c.key: c.text for c in chunks}), len(summary.clusters)


def test_corpus_text_is_escaped():
    page, clusters = _hostile_page()
    assert clusters == 1
    assert page.count("<script>") == 1  # the page's own
    assert "&lt;/script&gt;" in page and "c&lt;x&gt;.txt" in page


# --- in a real browser ---------------------------------------------------------------------------------------


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("chromium is required in CI for the HTML report tests: apt-get install chromium")
    pytest.skip("chromium not installed; to run the browser tests: apt-get install chromium")


def _load(page: Path, tmp_path: Path) -> tuple[str, str]:
    """The DOM after load (scripts run) and Chromium's console log."""
    profile = tmp_path / "profile"
    proc = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr


def _uncaught(log: str) -> list[str]:
    return [line for line in log.splitlines() if "Uncaught" in line or ":CONSOLE" in line and "rror" in line]


def _html_attrs(dom: str) -> str:
    m = re.search(r"<html[^>]*>", dom)
    assert m, dom[:500]
    return m.group(0)


def test_scan_report_loads_in_chromium_without_errors(tmp_path, capsys):
    page = tmp_path / "report.html"
    assert main(["scan", str(EXAMPLES), "--html", str(page), "--json"]) == 0
    import json

    clusters = json.loads(capsys.readouterr().out)["cluster_count"]
    dom, log = _load(page, tmp_path)
    attrs = _html_attrs(dom)
    assert f'data-report-ready="{min(150, clusters)}"' in attrs
    assert "data-report-error" not in attrs
    assert _uncaught(log) == []
    # The script filled in the count of clusters shown, and the charts are in the DOM.
    assert f'<span id="shown">{min(150, clusters)}</span>' in dom
    assert dom.count("<svg") == 2 and "<polyline" in dom


def test_tune_report_loads_in_chromium_without_errors(tmp_path, capsys):
    page = tmp_path / "tune.html"
    assert main(["tune", str(EXAMPLES / "copyright"), "--html", str(page)]) == 0
    capsys.readouterr()
    dom, log = _load(page, tmp_path)
    attrs = _html_attrs(dom)
    assert 'data-report="tune"' in attrs and "data-report-ready=" in attrs and "data-report-error" not in attrs
    assert _uncaught(log) == []
    assert dom.count('class="threshold"') == 4


def test_hostile_corpus_text_does_not_run_in_chromium(tmp_path):
    """Regression: corpus text containing </script><script> must be shown, never executed."""
    page_text, _ = _hostile_page()
    page = tmp_path / "hostile.html"
    page.write_text(page_text, encoding="utf-8")
    dom, log = _load(page, tmp_path)
    attrs = _html_attrs(dom)
    assert 'data-report-ready="1"' in attrs and "data-pwned" not in attrs
    assert _uncaught(log) == []
