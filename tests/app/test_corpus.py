"""The command's corpus: which files are read and how (gzip, sniffed text), what is skipped, how names print.

Real files: the shipped corpus and this machine's man pages and Debian copyright files, copied into a
temporary folder with hostile names (non-UTF-8 bytes, ANSI escapes, newlines) and hostile entries (a
FIFO, a socket, a broken link).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import threading
from pathlib import Path

import pytest

from rag_dedup.app.cli import main
from rag_dedup.app.corpus import discover, escape_name, read_corpus
from rag_dedup.app.readers import Unreadable, read_text, text_format

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "corpus"
GPL = CORPUS / "licenses" / "GPL-2.txt"
MAN2 = Path("/usr/share/man/man2")


def _scan_json(args: list[str], capsys) -> tuple[int, dict, str]:
    code = main(["scan", *args, "--json"])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if captured.out else {}), captured.err


# --- formats ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("a.txt", ("text", False), id="txt"),
        pytest.param("intro.2.gz", ("sniff", True), id="man-page"),
        pytest.param("changelog.Debian.gz", ("sniff", True), id="changelog"),
        pytest.param("copyright", ("sniff", False), id="no-extension"),
        pytest.param("page.HTML.gz", ("html", True), id="gzipped-html"),
        pytest.param("a.pdf", ("pdf", False), id="pdf"),
    ],
)
def test_the_name_chooses_the_format(name, expected):
    assert text_format(name) == expected


def test_gzip_is_read_transparently(tmp_path):
    text = GPL.read_text(encoding="utf-8")
    (tmp_path / "GPL-2.txt.gz").write_bytes(gzip.compress(text.encode("utf-8")))
    assert read_text(str(tmp_path / "GPL-2.txt.gz")) == text


def test_a_file_named_gz_that_is_not_gzip_is_skipped_with_the_reason(tmp_path):
    (tmp_path / "fake.gz").write_text("plain text, not compressed")
    with pytest.raises(Unreadable, match="not gzip data"):
        read_text(str(tmp_path / "fake.gz"))


@pytest.mark.skipif(not MAN2.is_dir(), reason="needs the man pages in /usr/share/man/man2 (apt-get install manpages-dev)")
def test_a_gzip_bomb_is_skipped_without_decompressing_it_whole(tmp_path, monkeypatch):
    """Regression: an 8.7 MB .gz of NULs took 4.2 GB of memory: it was decompressed whole before the
    binary check. Now its first block is sniffed, and text beyond GZIP_MAX_BYTES is skipped."""
    import rag_dedup.app.readers as readers

    zeros = gzip.compress(bytes(64 << 20), compresslevel=1)
    (tmp_path / "bomb.txt.gz").write_bytes(zeros)
    with pytest.raises(Unreadable, match="binary file"):
        read_text(str(tmp_path / "bomb.txt.gz"))
    monkeypatch.setattr(readers, "GZIP_MAX_BYTES", 1 << 20)  # a smaller cap, for a small test file
    text = GPL.read_text(encoding="utf-8")
    (tmp_path / "big.txt.gz").write_bytes(gzip.compress((text * 200).encode("utf-8")))
    with pytest.raises(Unreadable, match="decompresses to more than 1 MiB"):
        read_text(str(tmp_path / "big.txt.gz"))
    (tmp_path / "GPL-2.txt.gz").write_bytes(gzip.compress(text.encode("utf-8")))
    assert read_text(str(tmp_path / "GPL-2.txt.gz")) == text  # below the cap: read as before


@pytest.mark.parametrize("depth", [995, 100_000])
def test_deeply_nested_json_is_skipped_with_the_reason(tmp_path, capsys, depth):
    """Regression: JSON nested ~1,000 deep raised RecursionError out of the scan (exit 1, a traceback)."""
    (tmp_path / "deep.json").write_text("[" * depth + '"some prose here"' + "]" * depth)
    shutil.copy(GPL, tmp_path / "GPL-2.txt")
    code, report, err = _scan_json([str(tmp_path)], capsys)
    assert code == 0 and "Traceback" not in err
    assert "deep.json" in err and "invalid JSON" in err


def test_scan_of_gzipped_man_pages_reads_them_all(tmp_path, capsys):
    """Regression (issue 19 item 6): `scan /usr/share/man/man2 --glob '*.gz'` warned 501 times and exited 2."""
    pages = sorted(MAN2.glob("*.gz"))[:40]
    folder = tmp_path / "man2"
    folder.mkdir()
    for p in pages:
        shutil.copyfile(p, folder / p.name)
    code, d, err = _scan_json([str(folder), "--glob", "*.gz"], capsys)
    assert code == 0, err
    assert d["skipped"] == [] and "warning" not in err
    assert d["documents"] == len(pages)
    assert {r["source"] for r in d["by_source"]} == {p.name for p in pages}


def test_extension_less_text_files_are_read_by_default(tmp_path, capsys):
    """Regression (issue 19 item 6): Debian `copyright` files (no extension) were reported as binary."""
    for pkg in ("libexpat1", "libexpat1-dev"):
        (tmp_path / pkg).mkdir()
        shutil.copyfile(CORPUS / "copyright" / "libxss1.txt", tmp_path / pkg / "copyright")
    (tmp_path / "tool").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(200))  # an executable: binary, skipped
    code, d, err = _scan_json([str(tmp_path)], capsys)
    assert code == 0
    assert {r["source"] for r in d["by_source"]} == {"libexpat1/copyright", "libexpat1-dev/copyright"}
    assert d["exact_duplicates"] > 0
    assert d["skipped"] == [{"path": "tool", "reason": "binary file"}]


# --- entries that are not regular files -----------------------------------------------------------------


def test_a_fifo_a_socket_and_a_broken_link_are_skipped_not_opened(tmp_path, capsys):
    """Regression (issue 17 item 2): a FIFO in the folder hung `rag-dedup scan` forever."""
    shutil.copyfile(GPL, tmp_path / "gpl.txt")
    os.mkfifo(tmp_path / "pipe.txt")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "server.txt"))
    os.symlink(tmp_path / "gone.txt", tmp_path / "dangling.txt")
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(zip(("code", "d", "err"), _scan_json([str(tmp_path)], capsys))),
                              daemon=True)
    worker.start()
    worker.join(120)
    sock.close()
    if worker.is_alive():  # unblock the reader so the test process can exit, then fail
        with open(tmp_path / "pipe.txt", "wb"):
            pass
        pytest.fail("the scan blocked on the FIFO")
    assert result["code"] == 0
    reasons = {s["path"]: s["reason"] for s in result["d"]["skipped"]}
    assert reasons == {"pipe.txt": "not a regular file (a FIFO)", "server.txt": "not a regular file (a socket)",
                       "dangling.txt": "broken symbolic link"}
    assert result["d"]["documents"] == 1


def test_a_single_fifo_path_is_refused_without_blocking(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe.txt")
    code = main(["scan", str(tmp_path / "pipe.txt")])
    err = capsys.readouterr().err
    assert code == 2 and "not a regular file" in err


def test_an_unreadable_sub_folder_gets_a_skipped_entry(tmp_path, capsys, monkeypatch):
    """Regression (issue 17 item 7): an unreadable sub-folder vanished from the report.

    The test runs as root here, which reads any folder, so the permission error is injected.
    """
    (tmp_path / "ok").mkdir()
    (tmp_path / "locked").mkdir()
    shutil.copyfile(GPL, tmp_path / "ok" / "gpl.txt")
    shutil.copyfile(GPL, tmp_path / "locked" / "gpl.txt")
    real = os.scandir

    def scandir(path):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    code, d, err = _scan_json([str(tmp_path)], capsys)
    assert code == 0
    assert {"path": "locked/", "reason": "unreadable folder: Permission denied"} in d["skipped"]
    assert "skipped locked/: unreadable folder" in err
    assert d["documents"] == 1


# --- names -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        pytest.param("plain name.txt", "plain name.txt", id="printable"),
        pytest.param("café.txt", "café.txt", id="utf-8"),
        pytest.param(os.fsdecode(b"caf\xe9.txt"), "caf\\xe9.txt", id="latin-1-bytes"),
        pytest.param("\x1b[31mred\x1b[0m.txt", "\\x1b[31mred\\x1b[0m.txt", id="ansi-escape"),
        pytest.param("a\nb.txt", "a\\x0ab.txt", id="newline"),
        pytest.param("evil\u202etxt.exe", "evil\\u202etxt.exe", id="bidi-override"),
    ],
)
def test_escape_name(name, shown):
    assert escape_name(name) == shown
    assert escape_name(shown) == shown  # what it returns is printable: escaping again changes nothing


def test_hostile_file_names_never_stop_a_scan_and_are_shown_escaped(tmp_path, capsys):
    """Regression (issue 17 items 1 and 7): a non-UTF-8 file name stopped --html and --save with a
    UnicodeEncodeError; ANSI escapes and newlines in names reached the terminal raw."""
    docs = tmp_path / "docs"
    docs.mkdir()
    names = [b"caf\xe9.txt", b"\x1b[2J\x1b[31mcleared.txt", b"forged\n  ! row.txt"]
    for raw in names:
        shutil.copyfile(GPL, os.path.join(os.fsencode(docs), raw))
    html, saved = tmp_path / "r.html", tmp_path / "saved"
    assert main(["scan", str(docs), "--html", str(html), "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "caf\\xe9.txt" in out and "\\x1b[2J\\x1b[31mcleared.txt" in out
    assert "forged\\x0a  ! row.txt" in out and not any(line.startswith("  ! row.txt") for line in out.splitlines())
    page = html.read_text(encoding="utf-8")
    assert "caf\\xe9.txt" in page and "\x1b" not in page
    sidecar = json.loads((saved / "chunks.json").read_text(encoding="utf-8"))
    assert {c["source"] for c in sidecar["chunks"]} == {escape_name(os.fsdecode(n)) for n in names}
    code, d, _ = _scan_json([str(docs)], capsys)
    assert code == 0 and d["exact_duplicates"] > 0


def test_discover_walks_in_name_order_and_leaves_hidden_entries_out(tmp_path):
    for rel in ("b/2.txt", "b/1.md", "a.txt", ".hidden/x.txt", "b/.secret.txt", "notes", "img.png"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("text of " + rel)
    root, files, skipped = discover(tmp_path, None, ())
    assert root == tmp_path and skipped == []
    assert [s for s, _ in files] == ["a.txt", "b/1.md", "b/2.txt", "notes"]
    corpus = read_corpus(tmp_path, ("*.png",), ())
    assert [s for s, _ in corpus.documents] == ["img.png"]  # chosen by --glob, sniffed as text


def test_a_save_is_not_read_as_corpus_inside_a_folder_or_as_the_path(tmp_path, capsys):
    """A save kept inside the corpus (``--save docs/.../dedup``) holds every chunk again in chunks.json:
    reading it would make each chunk a duplicate of itself; a save given as the path is a mistake."""
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copyfile(GPL, docs / "gpl.txt")
    assert main(["scan", str(docs), "--save", str(docs / "dedup")]) == 0
    capsys.readouterr()
    code, d, err = _scan_json([str(docs)], capsys)
    assert code == 0 and d["documents"] == 1
    assert [(s["path"], s["reason"]) for s in d["skipped"]] == [("dedup/", "a rag-dedup save (written by scan --save), not part of the corpus")]
    assert d["clusters"] == _scan_json([str(docs / "gpl.txt")], capsys)[1]["clusters"]  # the save changed nothing
    code = main(["scan", str(docs / "dedup")])
    err = capsys.readouterr().err
    assert code == 2 and "is a rag-dedup save" in err and f'rag-dedup query {docs / "dedup"}' in err
    (docs / "data").mkdir()  # a folder of the corpus's own that happens to hold a chunks.json is read
    (docs / "data" / "chunks.json").write_text(json.dumps({"chunks": [GPL.read_text(encoding="utf-8")[:2000]]}), encoding="utf-8")
    code, d, _ = _scan_json([str(docs)], capsys)
    assert code == 0 and d["documents"] == 2 and [s["path"] for s in d["skipped"]] == ["dedup/"]


def test_a_symbolic_link_to_a_folder_is_skipped_with_that_reason(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    shutil.copyfile(GPL, tmp_path / "a" / "gpl.txt")
    os.symlink(tmp_path / "a", tmp_path / "b")  # read, it would read gpl.txt twice
    code, d, _ = _scan_json([str(tmp_path)], capsys)
    assert code == 0 and d["documents"] == 1
    assert [s["path"] for s in d["skipped"]] == ["b"] and "symbolic link to a folder, not followed" in d["skipped"][0]["reason"]
    os.unlink(tmp_path / "a" / "gpl.txt")
    code = main(["scan", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "no files to read" in err and "1 skipped (each named in a 'skipped' warning)" in err
    shutil.copyfile(GPL, tmp_path / "a" / "gpl.txt")
    code, d, _ = _scan_json([str(tmp_path), "--exclude", "b"], capsys)
    assert code == 0 and d["skipped"] == []  # excluded: not read and not reported


def test_a_json_file_holding_a_lone_surrogate_is_skipped_not_fatal(tmp_path, capsys):
    """"\\ud800" is valid JSON and no Unicode text: the scan stopped with an InvalidTextError traceback
    (exit 1) in the chunker; the file is skipped with the reason, the others are scanned."""
    shutil.copy(Path(__file__).parents[1] / "data" / "corpus" / "licenses" / "BSD.txt", tmp_path / "bsd.txt")
    (tmp_path / "bad.json").write_text('{"note": "text with \\ud800 in it"}', encoding="utf-8")
    with pytest.raises(Unreadable, match=r"not valid Unicode: its JSON holds a lone surrogate \(\\ud800\)"):
        read_text(str(tmp_path / "bad.json"))
    assert main(["scan", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [s["path"] for s in report["skipped"]] == ["bad.json"] and report["documents"] == 1
