"""The ``rag-dedup`` command: scan, tune, query, every bad-input path, and interrupted runs.

Most tests call ``main([...])`` in-process; one group runs the installed console script. Corpora are
real text: the bundled examples/data, and small folders copied from tests/data/corpus.
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rag_dedup.app import cli
from rag_dedup.app.cli import main, side_by_side
from rag_dedup.app.readers import html_to_text, json_to_text
from rag_dedup.normalize import canonical
from rag_dedup.shingles import shingle_hashes
from rag_dedup.similarity import jaccard

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "data"
CORPUS = ROOT / "tests" / "data" / "corpus"
# Two byte-identical Debian copyright files (polkit), three others that restate MIT/X11 paragraphs.
SMALL = {
    "a/gir1.2-polkit-1.0.txt": "copyright/gir1.2-polkit-1.0.txt",
    "a/libpolkit-agent-1-0.txt": "copyright/libpolkit-agent-1-0.txt",
    "a/libxcursor1.txt": "copyright/libxcursor1.txt",
    "a/libxss1.txt": "copyright/libxss1.txt",
    "b/zlib1g-dev.txt": "copyright/zlib1g-dev.txt",
    "b/LGPL-2.1.md": "licenses/LGPL-2.1.txt",
}


def _small(tmp: Path) -> Path:
    root = tmp / "docs"
    for dst, src in SMALL.items():
        (root / dst).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CORPUS / src, root / dst)
    return root


def _leftovers(folder: Path) -> list[str]:
    """Temporary files or folders left by an atomic write (they start with a dot)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    return _small(tmp_path_factory.mktemp("small"))


@pytest.fixture(scope="module")
def examples_run(tmp_path_factory):
    """One scan of examples/data with every output: JSON on stdout, an HTML report and a save."""
    out = tmp_path_factory.mktemp("examples")
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["scan", str(EXAMPLES), "--json", "--html", str(out / "report.html"), "--save", str(out / "saved")])
    return code, json.loads(buf.getvalue()), out


# --- scan ------------------------------------------------------------------------------------------------


def test_scan_json_schema_and_counts(examples_run):
    code, d, _ = examples_run
    assert code == 0
    assert d["schema"] == "rag-dedup.scan/1"
    assert d["documents"] == 26  # 25 corpus files and the README
    assert d["suppressed"] == d["exact_duplicates"] + d["near_duplicates"] > 0
    assert d["exact_duplicates"] > 0 and d["near_duplicates"] > 0
    assert d["suppressed_share"] == pytest.approx(d["suppressed"] / d["chunks"], abs=1e-4)
    assert d["cluster_count"] == len(d["clusters"])
    assert sum(len(c["members"]) for c in d["clusters"]) == d["suppressed"]
    assert sum(r["removed"] for r in d["by_source"]) == d["suppressed"]
    assert sum(r["chunks"] for r in d["by_folder"]) == d["chunks"]
    assert {k: d["settings"][k] for k in ("threshold", "num_perm", "ngram", "chunk_size", "chunk_overlap")} == {
        "threshold": 0.8, "num_perm": 128, "ngram": 5, "chunk_size": 256, "chunk_overlap": 64,
    }
    floor = d["settings"].get("drift_floor", 0.8)
    assert d["skipped"] == []
    for c in d["clusters"]:
        for m in c["members"]:
            assert m["kind"] in {"exact", "near"}
            # At least the threshold, or the drift floor for a chunk that joined through another member.
            assert m["similarity"] >= floor


def test_scan_spans_point_at_the_chunk_text(examples_run):
    """Spans are offsets into the source file for plain-text sources: exact members equal their representative."""
    _, d, _ = examples_run

    def text(m):
        return (EXAMPLES / m["source"]).read_text(encoding="utf-8")[m["start"]:m["end"]]

    checked = 0
    for c in d["clusters"]:
        rep = c["representative"]
        if not rep["source"].endswith((".txt", ".md")):
            continue
        for m in c["members"]:
            if not m["source"].endswith((".txt", ".md")):
                continue
            a, b = shingle_hashes(text(rep)), shingle_hashes(text(m))
            assert jaccard(a, b) == pytest.approx(m["similarity"], abs=1e-4)
            if m["kind"] == "exact":
                assert canonical(text(m)) == canonical(text(rep))
            checked += 1
    assert checked >= 20


def test_scan_flags_the_sources_that_lose_most_chunks(examples_run):
    _, d, _ = examples_run
    flagged = {r["source"] for r in d["by_source"] if r["flagged"]}
    # LGPL-2 is LGPL-2.1 with small edits; libexpat1's copyright file is byte-identical to libexpat1-dev's.
    assert {"licenses/LGPL-2.txt", "copyright/libexpat1.txt"} <= flagged
    assert all(r["share"] > 0.5 for r in d["by_source"] if r["flagged"])
    assert len(d["findings"]) == len(flagged)
    lgpl = next(r for r in d["by_source"] if r["source"] == "licenses/LGPL-2.txt")
    assert lgpl["lost_to"][0]["source"] == "licenses/LGPL-2.1.txt"


def test_scan_human_summary_matches_json(examples_run, capsys):
    _, d, _ = examples_run
    assert main(["scan", str(EXAMPLES)]) == 0
    out = capsys.readouterr().out
    assert f"documents          {d['documents']:>7}" in out
    assert f"exact duplicates   {d['exact_duplicates']:>7}" in out
    assert f"near duplicates    {d['near_duplicates']:>7}" in out
    assert f"suppressed         {d['suppressed']:>7}" in out
    b, r = d["settings"]["bands"]
    assert f"LSH bands b={b} x rows r={r}" in out
    assert "! licenses/LGPL-2.txt loses" in out
    assert "Removals per folder" in out and "Removals per source" in out


def test_scan_html_report_is_complete_and_atomic(examples_run):
    _, d, out = examples_run
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count('<details class="cluster"') == min(150, d["cluster_count"])
    assert "<svg" in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "").split("<body>")[0]
    assert _leftovers(out) == []


def test_saved_index_answers_queries_like_a_fresh_scan(examples_run, capsys):
    _, _, out = examples_run
    saved = out / "saved"
    assert (saved / "chunks.json").is_file() and (saved / "index").is_dir()
    question = "warranty of merchantability fitness for a particular purpose"
    assert main(["query", str(saved), question, "-k", "8", "--json"]) == 0
    from_save = json.loads(capsys.readouterr().out)
    assert main(["query", str(EXAMPLES), question, "-k", "8", "--json"]) == 0
    fresh = json.loads(capsys.readouterr().out)
    assert from_save == fresh
    without = [r["cluster"] for r in from_save["without_dedup"]]
    with_ = [r["cluster"] for r in from_save["with_dedup"]]
    assert len(without) == len(with_) == 8
    assert len(set(with_)) == 8 > len(set(without))  # the bundled corpus repeats the MIT warranty
    folded = [k for r in from_save["with_dedup"] for k in r["folded"]]
    assert folded and not set(folded) & {r["key"] for r in from_save["with_dedup"]}


def test_query_prints_both_columns(small, capsys):
    assert main(["query", str(small), "permission to use copy modify distribute", "-k", "4", "--width", "120"]) == 0
    out = capsys.readouterr().out
    assert "without dedup: 4 results" in out and "with DedupPostprocessor: 4 results, 4 distinct" in out
    assert out.count(" │ ") >= 8


def test_save_replaces_a_previous_save_and_refuses_other_folders(small, tmp_path, capsys):
    saved = tmp_path / "saved"
    assert main(["scan", str(small), "--save", str(saved)]) == 0
    first = (saved / "chunks.json").read_text()
    assert main(["scan", str(small), "--save", str(saved), "--chunk-size", "128", "--chunk-overlap", "16"]) == 0
    second = json.loads((saved / "chunks.json").read_text())
    assert second["settings"]["chunk_size"] == 128 and (saved / "chunks.json").read_text() != first
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    capsys.readouterr()
    assert main(["scan", str(small), "--save", str(other)]) == 2
    assert "not a rag-dedup save" in capsys.readouterr().err
    assert [p.name for p in other.iterdir()] == ["keep.txt"]
    assert _leftovers(tmp_path) == []


def test_a_save_replaced_is_swapped_in_one_step(small, tmp_path, monkeypatch, capsys):
    """Regression: the previous save was moved aside and the new one moved in by two renames; a kill
    between them left no save at the path. Where the system can, the two folders are swapped in one step."""
    from rag_dedup import atomic
    import rag_dedup.app.saved as saved_module

    saved = tmp_path / "saved"
    assert main(["scan", str(small), "--save", str(saved)]) == 0
    swaps: list[tuple[str, str]] = []
    real = atomic.exchange

    def spy(a, b):  # type: ignore[no-untyped-def]
        swaps.append((str(a), str(b)))
        assert (Path(a) / "chunks.json").is_file() and (Path(b) / "chunks.json").is_file()  # two whole saves
        return real(a, b)

    monkeypatch.setattr(saved_module.atomic, "exchange", spy)
    assert main(["scan", str(small), "--save", str(saved), "--chunk-size", "128", "--chunk-overlap", "16"]) == 0
    assert len(swaps) == 1 and swaps[0][1] == str(saved)
    assert json.loads((saved / "chunks.json").read_text())["settings"]["chunk_size"] == 128
    assert _leftovers(tmp_path) == []


def test_a_save_left_aside_by_a_killed_replacement_is_put_back_by_the_next_save(small, tmp_path, monkeypatch, capsys):
    """Where no atomic swap exists, a kill between the two renames leaves the previous save under
    .NAME.old.<pid> and no NAME: the next save puts it back first, and replaces it as any other."""
    from rag_dedup import atomic
    import rag_dedup.app.saved as saved_module

    saved = tmp_path / "saved"
    assert main(["scan", str(small), "--save", str(saved)]) == 0
    os.replace(saved, tmp_path / ".saved.old.4242")  # what the kill left
    (tmp_path / ".saved.old.x").mkdir()  # not ours (no pid): left alone
    monkeypatch.setattr(saved_module.atomic, "exchange", lambda a, b: False)  # the two-rename path
    renames: list[str] = []
    real = os.replace

    def replace(src, dst):  # type: ignore[no-untyped-def]
        renames.append(Path(src).name)
        return real(src, dst)

    monkeypatch.setattr(saved_module.os, "replace", replace)
    assert main(["scan", str(small), "--save", str(saved), "--chunk-size", "128", "--chunk-overlap", "16"]) == 0
    assert renames[0] == ".saved.old.4242"  # put back, then moved aside again by this save, then removed
    assert json.loads((saved / "chunks.json").read_text())["settings"]["chunk_size"] == 128
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".saved")) == [".saved.old.x"]
    assert atomic.exchange is not None


def test_glob_and_exclude_choose_files(capsys):
    assert main(["scan", str(EXAMPLES), "--glob", "*.md", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    md = {"README.md", "nodejs-api/punycode.md", "nodejs-api/string_decoder.md"}
    assert {r["source"] for r in d["by_source"]} == md
    assert main(["scan", str(EXAMPLES), "--exclude", "licenses/*", "--exclude", "*.json", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    sources = {r["source"] for r in d["by_source"]}
    assert sources and not any(s.startswith("licenses/") or s.endswith(".json") for s in sources)


def test_scan_of_one_file(capsys):
    assert main(["scan", str(EXAMPLES / "licenses" / "GPL-2.txt"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["documents"] == 1 and {r["source"] for r in d["by_source"]} == {"GPL-2.txt"}


def test_unreadable_files_are_skipped_counted_and_warned(tmp_path, capsys):
    root = tmp_path / "mixed"
    root.mkdir()
    gpl = (CORPUS / "licenses" / "GPL-2.txt").read_text(encoding="utf-8")
    (root / "gpl.txt").write_text(gpl, encoding="utf-8")
    # Failure injection: a binary file, a Latin-1 file, invalid JSON and an unparseable PDF.
    (root / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (root / "latin1.txt").write_bytes("Copyright \u00a9 1991 Free Software Foundation".encode("latin-1"))
    (root / "broken.json").write_text('{"desc": "an unterminated', encoding="utf-8")
    (root / "scan.pdf").write_bytes(b"%PDF-1.4\n% not really a pdf\n")
    (root / "empty.md").write_text("  \n", encoding="utf-8")
    assert main(["scan", str(root), "--json"]) == 0
    captured = capsys.readouterr()
    d = json.loads(captured.out)
    reasons = {s["path"]: s["reason"] for s in d["skipped"]}
    assert set(reasons) == {"image.txt", "latin1.txt", "broken.json", "scan.pdf", "empty.md"}
    assert reasons["image.txt"] == "binary file"
    assert reasons["latin1.txt"].startswith("not UTF-8 text")
    assert reasons["broken.json"].startswith("invalid JSON")
    assert reasons["empty.md"] == "no text"
    assert "pdf" in reasons["scan.pdf"].lower()
    assert d["documents"] == 1
    assert captured.err.count("rag-dedup: warning: skipped ") == 5
    assert main(["scan", str(root)]) == 0
    out = capsys.readouterr().out
    assert "(5 file(s) skipped, see below)" in out and "image.txt: binary file" in out


def test_text_with_a_byte_order_mark_is_read_in_the_encoding_it_names(tmp_path, capsys):
    # Windows tools save UTF-16 with a mark; its NUL bytes are text, not a sign of a binary file.
    root = tmp_path / "marked"
    root.mkdir()
    gpl = (CORPUS / "licenses" / "GPL-2.txt").read_text(encoding="utf-8")
    (root / "a.txt").write_text(gpl, encoding="utf-8")
    (root / "utf16.txt").write_bytes(gpl.encode("utf-16"))
    (root / "utf16be.txt").write_bytes(codecs.BOM_UTF16_BE + gpl.encode("utf-16-be"))
    (root / "utf32.txt").write_bytes(gpl.encode("utf-32"))
    (root / "utf8sig.txt").write_bytes(gpl.encode("utf-8-sig"))
    (root / "utf16.txt.gz").write_bytes(gzip.compress(gpl.encode("utf-16")))
    # Failure injection: a mark followed by a lone surrogate, and UTF-16 without a mark (binary, as before).
    (root / "bad16.txt").write_bytes(codecs.BOM_UTF16_LE + b"A\x00\x00\xd8B\x00")
    (root / "nomark16.txt").write_bytes(gpl.encode("utf-16-le"))
    assert main(["scan", str(root), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    reasons = {s["path"]: s["reason"] for s in d["skipped"]}
    assert reasons == {
        "bad16.txt": "not UTF-16-LE text though it begins with a UTF-16-LE byte order mark (byte 4)",
        "nomark16.txt": "binary file",
    }
    # Every copy decodes to the same text, the mark dropped: each chunk is an exact copy of a.txt's, at the
    # same character offsets.
    assert d["documents"] == 6 and d["near_duplicates"] == 0
    assert d["exact_duplicates"] == 5 * d["kept"] and d["cluster_count"] == d["kept"]
    for cluster in d["clusters"]:
        rep = cluster["representative"]
        assert rep["source"] == "a.txt" and len(cluster["members"]) == 5
        assert {(m["start"], m["end"]) for m in cluster["members"]} == {(rep["start"], rep["end"])}


# --- bad input -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["scan", "{missing}"], "path not found", id="missing-path"),
        pytest.param(["scan", "{empty}"], "no files found", id="empty-folder"),
        pytest.param(["scan", "{binary}"], "no readable documents", id="only-binary-files"),
        pytest.param(["scan", "{small}", "--glob", "*.docx"], "none matches *.docx", id="glob-matches-nothing"),
        pytest.param(["scan", "{small}", "--threshold", "1.5"], "must be in (0, 1]", id="threshold-above-one"),
        pytest.param(["scan", "{small}", "--threshold", "0"], "must be in (0, 1]", id="threshold-zero"),
        pytest.param(["scan", "{small}", "--threshold", "1e-300"], "no (b, r)", id="threshold-tiny"),
        pytest.param(["scan", "{small}", "--threshold", "high"], "not a number", id="threshold-not-a-number"),
        pytest.param(["scan", "{small}", "--chunk-size", "64", "--chunk-overlap", "64"], "must be smaller",
                     id="overlap-not-below-size"),
        pytest.param(["scan", "{small}", "--num-perm", "0"], "must be at least 2", id="num-perm-zero"),
        pytest.param(["scan", "{small}", "--num-perm", "1"], "must be at least 2", id="num-perm-one"),
        pytest.param(["scan", "{small}", "--ngram", "100"], "between 1 and 64", id="ngram-100"),
        pytest.param(["scan", "{small}", "--chunk-size", "7"], "--chunk-size 7: Input should be greater", id="chunk-size-7"),
        pytest.param(["scan", "{small}", "--html", "{missing}/r.html"], "does not exist", id="html-folder-missing"),
        pytest.param(["scan", "{small}", "--html", "{empty}"], "is a folder", id="html-is-a-folder"),
        pytest.param(["scan", "{small}", "--html", "/proc/x.html"], "cannot write in /proc", id="html-in-proc"),
        pytest.param(["tune", "{small}", "--seed", "-1"], "seed (-1) must be in [0, 2**32 - 1]", id="tune-negative-seed"),
        pytest.param(["query", "{small}"], "give one question or --queries", id="query-no-question"),
        pytest.param(["query", "{small}", "--queries", "{missing}"], "cannot read", id="queries-file-missing"),
        pytest.param(["query", "{small}", "--queries", "{blank}"], "no questions", id="queries-file-blank"),
        pytest.param(["scan", "{small}", "--save", "{file}"], "not a rag-dedup save", id="save-onto-a-file"),
        pytest.param(["scan"], "required: path", id="scan-without-path"),
        pytest.param([], "", id="no-command"),
        pytest.param(["dedupe", "x"], "invalid choice", id="unknown-command"),
        pytest.param(["tune", "{small}", "--thresholds", "0.6,x"], "not a number", id="tune-bad-threshold"),
        pytest.param(["tune", "{small}", "--thresholds", "0.6,0.6"], "repeats", id="tune-repeated-threshold"),
        pytest.param(["tune", "{small}", "--window", "0.7"], "outside (0, 0.5]", id="tune-window-too-wide"),
        pytest.param(["query", "{small}", "  "], "question is empty", id="query-empty-question"),
        pytest.param(["query", "{small}", "licence", "-k", "0"], "must be >= 1", id="query-k-zero"),
        pytest.param(["query", "{missing}", "licence"], "path not found", id="query-missing-path"),
    ],
)
def test_bad_input_exits_2_with_a_message(args, message, small, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "binary").mkdir()
    (tmp_path / "binary" / "a.txt").write_bytes(b"\x00\x01\x02" * 100)
    (tmp_path / "file").write_text("x")
    (tmp_path / "blank.txt").write_text("\n  \n")
    subs = {"missing": str(tmp_path / "nope"), "empty": str(tmp_path / "empty"), "binary": str(tmp_path / "binary"),
            "small": str(small), "file": str(tmp_path / "file"), "blank": str(tmp_path / "blank.txt")}
    code = main([a.format(**subs) for a in args])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    if "{small}" in args and "--glob" not in args:
        # Settings are checked before the corpus is read: no phase ran (each ends with a line in logs).
        assert "reading:" not in captured.err, captured.err
        assert len(captured.err.splitlines()) == 1
    if message:
        assert message in captured.err
        assert captured.err.splitlines()[-1].startswith("rag-dedup: error: ") and "Traceback" not in captured.err
    else:
        assert "usage: rag-dedup" in captured.err


def test_help_and_version_exit_0(capsys):
    assert main(["--help"]) == 0
    assert "scan" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("rag-dedup ")


# --- interrupted runs ------------------------------------------------------------------------------------


def _interrupt(*_args, **_kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_before_writing_leaves_nothing(small, tmp_path, monkeypatch, capsys):
    """Regression: an interrupted scan must not leave a report, a save or a temporary file behind."""
    import rag_dedup.app.html

    monkeypatch.setattr(rag_dedup.app.html, "scan_page", _interrupt)
    out = tmp_path / "out"
    out.mkdir()
    code = main(["scan", str(small), "--html", str(out / "r.html"), "--save", str(out / "saved"), "--json"])
    captured = capsys.readouterr()
    assert code == 130
    assert captured.out == "" and "interrupted" in captured.err
    assert list(out.iterdir()) == []


def test_ctrl_c_while_writing_the_report_keeps_the_old_one(small, tmp_path, monkeypatch):
    """Regression: Ctrl-C during the write leaves the previous report whole and no temporary file."""
    report = tmp_path / "r.html"
    report.write_text("previous report")
    monkeypatch.setattr(cli.os, "fsync", _interrupt)
    assert main(["scan", str(small), "--html", str(report)]) == 130
    assert report.read_text() == "previous report"
    assert _leftovers(tmp_path) == []


def test_ctrl_c_while_saving_keeps_the_previous_save(small, tmp_path, monkeypatch, capsys):
    """Regression: Ctrl-C during --save leaves the previous save whole, and says which file was completed."""
    saved = tmp_path / "saved"
    assert main(["scan", str(small), "--save", str(saved)]) == 0
    before = (saved / "chunks.json").read_bytes()
    from rag_dedup.index import DedupIndex

    monkeypatch.setattr(DedupIndex, "save", _interrupt)
    capsys.readouterr()
    report = tmp_path / "r.html"
    assert main(["scan", str(small), "--save", str(saved), "--html", str(report), "--threshold", "0.6"]) == 130
    assert f"interrupted; only {report} (complete) was written" in capsys.readouterr().err
    assert report.read_text(encoding="utf-8").rstrip().endswith("</html>")
    assert (saved / "chunks.json").read_bytes() == before
    assert _leftovers(tmp_path) == []


# --- tune ------------------------------------------------------------------------------------------------


def test_tune_text_shows_counts_and_marked_pairs(capsys):
    assert main(["tune", str(EXAMPLES / "copyright"), "--width", "120"]) == 0
    out = capsys.readouterr().out
    for t in ("0.6", "0.7", "0.8", "0.9"):
        assert f"threshold {t}: suppresses" in out
    assert "[-" in out and "{+" in out and " │ " in out
    assert "\x1b[" not in out  # no colour when stdout is not a terminal


def test_tune_json_and_html(tmp_path, capsys):
    page = tmp_path / "tune.html"
    assert main(["tune", str(EXAMPLES / "copyright"), "--thresholds", "0.9,0.7", "--pairs", "2", "--json",
                 "--html", str(page)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema"] == "rag-dedup.tune/1"
    assert [t["threshold"] for t in d["thresholds"]] == [0.7, 0.9]
    assert d["thresholds"][0]["suppressed"] >= d["thresholds"][1]["suppressed"]
    pairs = [p for t in d["thresholds"] for p in t["pairs"]]
    assert pairs
    for t in d["thresholds"]:
        assert len(t["pairs"]) == min(2, t["pairs_near"])
        for p in t["pairs"]:
            assert abs(p["similarity"] - t["threshold"]) <= 0.05 + 1e-9
            a = (EXAMPLES / "copyright" / p["a"]["source"]).read_text(encoding="utf-8")
            assert a[p["a"]["start"]:p["a"]["end"]] == p["a"]["text"]
    html = page.read_text(encoding="utf-8")
    assert html.count('class="threshold"') == 2 and "<ins>" in html and "<del>" in html


# --- readers and rendering -------------------------------------------------------------------------------


def test_html_reader_keeps_the_text_and_drops_the_markup():
    text = html_to_text((EXAMPLES / "base-passwd" / "users-and-groups.html").read_text(encoding="utf-8"))
    plain = (EXAMPLES / "base-passwd" / "users-and-groups.txt").read_text(encoding="utf-8")
    assert "<" not in text.replace("<base-passwd@", "") and "Users and Groups" in text
    assert jaccard(shingle_hashes(text), shingle_hashes(plain)) > 0.5


def test_json_reader_keeps_the_prose():
    text = json_to_text((EXAMPLES / "nodejs-api" / "string_decoder.json").read_text(encoding="utf-8"))
    assert "The node:string_decoder module provides an API for decoding" in " ".join(text.split())
    assert "<p>" not in text and '"type"' not in text
    with pytest.raises(ValueError):
        json_to_text("{not json")


def test_side_by_side_marks_without_colour():
    a = "the GNU Library General Public License applies"
    b = "the GNU Lesser General Public License applies"
    plain = side_by_side(a, b, width=80, colour=False)
    assert "[-Library-]" in plain and "{+Lesser+}" in plain and "\x1b" not in plain
    coloured = side_by_side(a, b, width=80, colour=True)
    assert "\x1b[1;31mLibrary\x1b[0m" in coloured and "\x1b[1;32mLesser\x1b[0m" in coloured


# --- the installed console script ------------------------------------------------------------------------


def _script() -> str:
    found = shutil.which("rag-dedup", path=str(Path(sys.executable).parent)) or shutil.which("rag-dedup")
    if not found:
        pytest.fail("the rag-dedup console script is not installed: pip install -e .")
    return found


def test_console_script_scan(small):
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    proc = subprocess.run([_script(), "scan", str(small), "--json"], capture_output=True, text=True,
                          timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["documents"] == len(SMALL) and d["exact_duplicates"] > 0
    polkit = {r["source"]: r for r in d["by_source"]}
    # The two polkit files are byte-identical: one of them loses every chunk.
    assert max(polkit["a/gir1.2-polkit-1.0.txt"]["share"], polkit["a/libpolkit-agent-1-0.txt"]["share"]) == 1.0


def test_console_script_bad_input():
    proc = subprocess.run([_script(), "scan", "/nonexistent/rag-dedup-test"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "rag-dedup: error: path not found: /nonexistent/rag-dedup-test"
    assert proc.stdout == ""


def test_a_folder_inside_a_hidden_folder_is_read_and_hidden_files_inside_are_not(tmp_path, capsys):
    """Regression: SimpleDirectoryReader's exclude_hidden tests the absolute path, so a corpus under
    ~/.cache/... read as empty; hidden files *inside* the folder must still be skipped."""
    root = tmp_path / ".cache" / "docs"
    (root / ".git").mkdir(parents=True)
    shutil.copyfile(CORPUS / "licenses" / "BSD.txt", root / "BSD.txt")
    shutil.copyfile(CORPUS / "licenses" / "BSD.txt", root / ".git" / "BSD.txt")
    shutil.copyfile(CORPUS / "licenses" / "BSD.txt", root / ".hidden.txt")
    assert main(["scan", str(root), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["documents"] == 1 and d["suppressed"] == 0


@pytest.mark.parametrize("colour", [pytest.param(False, id="marks"), pytest.param(True, id="colour")])
def test_side_by_side_never_overflows_its_column(colour):
    """Regression: a word longer than the column (a URL) after other words overflowed into the right column."""
    import re

    a = "see " + "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/" * 2 + " for the format"
    b = "see the format at https://example.org"
    out = side_by_side(a, b, width=60, colour=colour)
    for line in out.splitlines():
        visible = re.sub(r"\x1b\[[0-9;]*m", "", line)
        assert visible.index("│") == (60 - 3) // 2 + 1  # the separator stays in its column
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    left_column = "".join(line.split("│")[0].strip() for line in plain.splitlines())
    assert "packaging-manuals/copyright-format/1.0/" in left_column  # cut, not lost


def test_a_folder_that_may_not_be_searched_is_one_line_not_a_traceback(small, tmp_path, monkeypatch, capsys):
    """Path.is_file() and is_dir() let EACCES through (a folder of mode 000 or without x, for a user that
    is not root). Failure injection, as the suite may run as root: the stat of anything inside ``locked``
    is refused. ``scan locked`` then says it cannot read the folder, ``--html locked/r.html`` that it cannot
    write there: exit 2 and one line each."""
    from pathlib import PosixPath

    locked = tmp_path / "locked"
    shutil.copytree(small, locked)
    real_stat = PosixPath.stat

    def stat(self, *args, **kwargs):
        if str(self).startswith(str(locked) + os.sep):
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, *args, **kwargs)

    monkeypatch.setattr(PosixPath, "stat", stat)
    monkeypatch.setattr(os, "scandir", lambda path=".": (_ for _ in ()).throw(PermissionError(13, "Permission denied", str(path))))
    assert main(["scan", str(locked)]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("rag-dedup: error: ")]
    assert errors == [f"rag-dedup: error: cannot read folder {locked}: Permission denied"], err
    assert "Traceback" not in err
    monkeypatch.undo()
    monkeypatch.setattr(PosixPath, "stat", stat)
    assert main(["scan", str(small), "--html", str(locked / "r.html")]) == 2
    err = capsys.readouterr().err
    assert f"--html {locked / 'r.html'}: cannot write in {locked}: Permission denied" in err, err


def test_a_save_whose_chunks_json_is_nested_too_deeply_is_named(small, tmp_path, capsys):
    """A damaged chunks.json of nested arrays made json.loads raise RecursionError: a traceback."""
    saved = tmp_path / "saved"
    assert main(["scan", str(small), "--save", str(saved), "--json"]) == 0
    capsys.readouterr()
    (saved / "chunks.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    assert main(["query", str(saved), "warranty"]) == 2
    err = capsys.readouterr().err
    assert "chunks.json: not readable JSON" in err and "re-run rag-dedup scan --save" in err, err


def test_replacing_a_save_where_nothing_can_be_written_fails_before_the_scan(small, tmp_path, monkeypatch, capsys):
    """A previous save in a read-only folder: the replacement's new folder beside it cannot be made. It
    failed after the whole scan with a PermissionError traceback; now before reading, exit 2, one line.
    Failure injection (the suite may run as root): mkdtemp in that folder is refused."""
    import tempfile

    parent = tmp_path / "ro"
    parent.mkdir()
    saved = parent / "saved"
    assert main(["scan", str(small), "--save", str(saved), "--json"]) == 0
    capsys.readouterr()
    before = (saved / "chunks.json").read_bytes()
    real = tempfile.mkdtemp

    def mkdtemp(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == parent:
            raise PermissionError(13, "Permission denied", str(dir))
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    assert main(["scan", str(small), "--save", str(saved)]) == 2
    err = capsys.readouterr().err
    assert f"--save {saved}: cannot write in {parent}: Permission denied" in err and "reading" not in err, err
    assert (saved / "chunks.json").read_bytes() == before


def test_a_bm25_file_that_cannot_be_read_is_named(small, tmp_path, capsys):
    """A BM25 file whose read fails (EIO: a link to /proc/self/mem, which even root cannot read at 0)
    made the digest check raise OSError: a traceback. Now the file is named, exit 2."""
    saved = tmp_path / "saved"
    assert main(["scan", str(small), "--save", str(saved), "--json"]) == 0
    capsys.readouterr()
    target = saved / "bm25" / "vocab.index.json"
    target.unlink()
    target.symlink_to("/proc/self/mem")
    assert main(["query", str(saved), "warranty"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"rag-dedup: error: {target}: cannot be read (Input/output error); "
                                "re-run rag-dedup scan --save"], err


@pytest.mark.parametrize("lost", [("index",), ("index", "bm25")])
def test_a_save_that_lost_its_index_is_named_not_read_as_a_corpus(small, tmp_path, capsys, lost):
    """A save without index/ was read as a folder of documents (its chunks.json as one): a made-up
    answer. Now it is a damaged save, exit 2, whether or not bm25/ is left."""
    import shutil

    saved = tmp_path / "saved"
    assert main(["scan", str(small), "--save", str(saved), "--json"]) == 0
    capsys.readouterr()
    for name in lost:
        shutil.rmtree(saved / name)
    assert main(["query", str(saved), "warranty"]) == 2
    err = capsys.readouterr().err
    assert f"{saved / 'index'}: the index cannot be loaded" in err and "Traceback" not in err, err
    assert main(["scan", str(saved), "--json"]) == 2  # scanning it as a corpus is refused too
    capsys.readouterr()


def test_a_previous_save_that_cannot_be_deleted_is_named_not_left_hidden(small, tmp_path, monkeypatch, capsys):
    """Replacing a save whose old copy cannot be deleted left it as a hidden .saved.XXXX folder, in
    silence. Now the new save is in place and a warning names the folder left behind. Failure injection
    (the suite may run as root): unlinking the old copy's chunks.json is refused."""
    import os as os_module

    saved = tmp_path / "saved"
    assert main(["scan", str(small), "--save", str(saved), "--json"]) == 0
    capsys.readouterr()
    real_unlink = os_module.unlink

    def unlink(path, *args, dir_fd=None, **kwargs):
        if dir_fd is not None and path == "chunks.json":
            raise PermissionError(13, "Permission denied", path)
        return real_unlink(path, *args, dir_fd=dir_fd, **kwargs)

    monkeypatch.setattr(os_module, "unlink", unlink)
    assert main(["scan", str(small), "--save", str(saved), "--chunk-size", "128", "--json"]) == 0
    monkeypatch.undo()
    err = capsys.readouterr().err
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".saved.")]
    assert len(left) == 1, list(tmp_path.iterdir())
    assert f"rag-dedup: warning: the previous save could not be deleted and is left in {left[0]} (" in err, err
    assert "delete it by hand" in err and "Permission denied" in err
    assert json.loads((saved / "chunks.json").read_text())["settings"]["chunk_size"] == 128


def test_html_onto_a_fifo_or_device_is_refused_and_onto_a_link_writes_its_target(small, tmp_path, capsys):
    """--html onto an existing FIFO, device or symbolic link replaced the entry itself with a file
    (the atomic rename), exit 0: as root, `--html /dev/null` turned the device into a 164 KB file."""
    import stat

    fifo = tmp_path / "pipe.html"
    os.mkfifo(fifo)
    targets = [fifo]
    if os.geteuid() == 0:  # a null device of our own (never /dev/null itself)
        device = tmp_path / "null.html"
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        targets.append(device)
    for target in targets:
        assert main(["scan", str(small), "--html", str(target)]) == 2
        err = capsys.readouterr().err
        assert f"--html {target}: is not a regular file" in err and "reading" not in err, err
        assert not target.is_file() and not stat.S_ISREG(os.lstat(target).st_mode)
    real = tmp_path / "reports" / "scan.html"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "latest.html"
    link.symlink_to(real)
    assert main(["scan", str(small), "--html", str(link), "--json"]) == 0
    capsys.readouterr()
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux) to fill standard output")
def test_a_full_or_closed_standard_output_is_one_line_exit_1(small, tmp_path):
    """`--json > report.json` on a full disk (here /dev/full) and a closed standard output ended in
    an OSError / AttributeError traceback."""
    args = [sys.executable, "-m", "rag_dedup", "scan", str(small), "--json"]
    with open("/dev/full", "w") as full:
        done = subprocess.run(args, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if not line.startswith("rag-dedup: ") or "error" in line]
    assert lines == ["rag-dedup: error: cannot write the result to standard output: No space left on device"], done.stderr
    done = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120,
                          preexec_fn=lambda: os.close(1))
    assert done.returncode == 1 and done.stderr.splitlines()[-1] == (
        "rag-dedup: error: cannot write the result: standard output is closed"), done.stderr


def test_a_save_whose_chunks_repeat_a_key_names_the_key(small, tmp_path, capsys):
    """The message said 'chunks.json holds 548 chunks and the index 548 keys': equal numbers, no key."""
    saved = tmp_path / "saved"
    assert main(["scan", str(small), "--save", str(saved), "--json"]) == 0
    capsys.readouterr()
    sidecar = json.loads((saved / "chunks.json").read_text(encoding="utf-8"))
    sidecar["chunks"][1]["key"] = sidecar["chunks"][0]["key"]
    (saved / "chunks.json").write_text(json.dumps(sidecar), encoding="utf-8")
    assert main(["query", str(saved), "warranty"]) == 2
    err = capsys.readouterr().err
    assert f"chunk key {sidecar['chunks'][0]['key']!r} appears twice" in err, err
