"""``rag-dedup query``: distinct evidence of the plain top k, DedupPostprocessor and DistinctRetriever.

Over the bundled examples/data (licences, Debian notices and documentation that repeat each other) with
the real BM25 retriever; questions are ones a user of that corpus would ask.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rag_dedup.app.cli import main
from rag_dedup.app.retrieval import distinct_count
from rag_dedup.shingles import shingle_hashes
from rag_dedup.similarity import jaccard

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "data"
CORPUS = ROOT / "tests" / "data" / "corpus"
QUESTIONS = [
    "warranty of merchantability fitness for a particular purpose",
    "permission to use copy modify distribute and sell this software",
    "How to Apply These Terms to Your New Programs",
]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("saved") / "saved"
    assert main(["scan", str(EXAMPLES), "--save", str(out), "--json"]) == 0
    assert (out / "bm25").is_dir()
    return out


@pytest.fixture
def questions(tmp_path) -> Path:
    path = tmp_path / "questions.txt"
    path.write_text("\n".join(QUESTIONS[:1] + [""] + QUESTIONS[1:]) + "\n", encoding="utf-8")
    return path


def _brute_distinct(texts: list[str], threshold: float) -> int:
    kept: list = []
    for t in texts:
        s = shingle_hashes(t)
        if all(jaccard(s, k) < threshold for k in kept):
            kept.append(s)
    return len(kept)


def test_distinct_count_is_the_greedy_set_of_pairwise_jaccard_below_the_threshold():
    gpl = (CORPUS / "licenses" / "GPL-2.txt").read_text(encoding="utf-8")
    paragraphs = [p for p in gpl.split("\n\n") if len(p.split()) > 30][:12]
    texts = paragraphs + paragraphs[:4] + [p.replace("Program", "program") for p in paragraphs[4:8]]
    assert distinct_count(texts, threshold=0.8, ngram=5) == _brute_distinct(texts, 0.8) == len(paragraphs)
    assert distinct_count([], threshold=0.8, ngram=5) == 0


def test_queries_json_measures_each_list_per_question_and_on_average(saved, questions, capsys):
    assert main(["query", str(saved), "--queries", str(questions), "-k", "8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema"] == "rag-dedup.queries/1" and d["k"] == 8 and d["fetch_factor"] == 3
    assert [q["question"] for q in d["questions"]] == QUESTIONS  # the blank line is not a question
    for q in d["questions"]:
        plain, post, distinct = q["plain"], q["postprocessor"], q["distinct"]
        assert plain["returned"] == 8 and plain["removed"] == 8 - plain["distinct"]
        assert plain["ratio"] == pytest.approx(plain["distinct"] / 8, abs=1e-4)
        assert distinct["returned"] == distinct["distinct"] == 8 and distinct["ratio"] == 1.0
        assert post["distinct"] <= post["returned"] <= 8
    warranty = d["questions"][0]
    assert warranty["plain"]["ratio"] < 1.0  # the bundled corpus repeats the MIT/GPL warranty disclaimers
    assert warranty["plain"]["removed"] > 0 and warranty["distinct"]["removed"] > 0
    for method in ("plain", "postprocessor", "distinct"):
        ratios = [q[method]["ratio"] for q in d["questions"]]
        assert d["mean"][method]["ratio"] == pytest.approx(sum(ratios) / len(ratios), abs=1e-4)


def test_queries_text_has_a_row_per_question_and_the_mean(saved, questions, capsys):
    assert main(["query", str(saved), "--queries", str(questions)]) == 0
    out = capsys.readouterr().out
    assert "3 questions, top 10 of" in out
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 3 and all("removed)" in r for r in rows)
    assert out.splitlines()[-1].startswith("mean ")


def test_queries_html_page(saved, questions, tmp_path, capsys):
    page = tmp_path / "queries.html"
    assert main(["query", str(saved), "--queries", str(questions), "--html", str(page)]) == 0
    capsys.readouterr()
    text = page.read_text(encoding="utf-8")
    assert 'data-report="queries"' in text and text.count('<details class="cluster"') == 3
    assert "DistinctRetriever" in text and "mean" in text


def test_one_question_shows_the_ratios_and_the_distinct_list_in_json(saved, capsys):
    assert main(["query", str(saved), QUESTIONS[0], "-k", "6", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["distinct_retriever"]) == 6 and d["evidence"]["distinct"]["ratio"] == 1.0
    assert d["evidence"]["plain"]["returned"] == len(d["without_dedup"]) == 6
    assert main(["query", str(saved), QUESTIONS[0], "-k", "6"]) == 0
    assert "distinct evidence (pairwise Jaccard < 0.8): plain top k:" in capsys.readouterr().out


def _damage_chunks(saved: Path) -> None:
    (saved / "chunks.json").write_text('{"schema": "rag-dedup.chunks/1", "chunks": [{"key": 1}]}')


def _truncate_chunks(saved: Path) -> None:
    raw = (saved / "chunks.json").read_bytes()
    (saved / "chunks.json").write_bytes(raw[: len(raw) // 2])


def _damage_index(saved: Path) -> None:
    manifest = saved / "index" / "manifest.json"
    manifest.write_text(manifest.read_text()[:-20])


def _damage_bm25(saved: Path) -> None:
    for p in (saved / "bm25").glob("params*.json"):
        p.write_text("{not json")


def _reverse_bm25_indptr(saved: Path) -> None:
    """A damage BM25 loads without an error of its own, then scores every chunk 0 (exit 0 before)."""
    import numpy as np

    (path,) = (saved / "bm25").glob("indptr*.npy")
    np.save(path, np.load(path)[::-1].copy())


def _bm25_params_wrong_type(saved: Path) -> None:
    """Loads, then fails deep inside bm25s at the first query (a traceback before)."""
    for p in (saved / "bm25").glob("params*.json"):
        p.write_text('{"k1": "x"}')


@pytest.mark.parametrize("damage", [_damage_chunks, _truncate_chunks, _damage_index, _damage_bm25,
                                    _reverse_bm25_indptr, _bm25_params_wrong_type],
                         ids=["chunk-record", "truncated-chunks", "index-manifest", "bm25-params",
                              "bm25-indptr-reversed", "bm25-params-wrong-type"])
def test_query_on_a_damaged_save_is_one_line_and_exit_2(damage, saved, tmp_path, capsys):
    """Regression (issue 17 item 6): `query` on a damaged save printed a traceback and exited 1."""
    import shutil

    copy = tmp_path / "saved"
    shutil.copytree(saved, copy)
    damage(copy)
    code = main(["query", str(copy), QUESTIONS[0]])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("rag-dedup: error: ") and "Traceback" not in err
    assert str(copy) in err


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param(["--threshold", "0.5"], "was saved with --threshold 0.8, which a save fixes; query it without --threshold",
                     id="another-threshold"),
        pytest.param(["--thresh=0.5"], "was saved with --threshold 0.8", id="abbreviated"),
        pytest.param(["--chunk-size", "128", "--chunk-overlap", "16"], "was saved with --chunk-size 256", id="another-chunk-size"),
        pytest.param(["--threshold", "5"], "threshold (5.0) must be in (0, 1]", id="refused-value"),
        pytest.param(["--num-perm", "1"], "num_perm (1) must be at least 2", id="refused-num-perm"),
    ],
)
def test_query_on_a_save_refuses_settings_the_save_fixes(saved, options, message, capsys):
    """Regression: `query SAVE --threshold 0.5` measured at the save's 0.8, and values the library refuses
    (--threshold 5, --num-perm 1) passed with exit 0: the save's index and chunks were used, the options unread."""
    code = main(["query", str(saved), QUESTIONS[0], *options])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err.splitlines()[-1] and err.splitlines()[-1].startswith("rag-dedup: error: ")
    assert "Traceback" not in err


def test_query_on_a_save_with_its_own_settings_runs(saved, capsys):
    assert main(["query", str(saved), QUESTIONS[0], "--threshold", "0.8", "--chunk-size", "256"]) == 0


def test_query_on_a_save_with_its_own_chunk_settings_runs(tmp_path, capsys):
    """Regression (review): the check built a chunker from the given --chunk-size and the default overlap,
    so a save made with --chunk-size 48 --chunk-overlap 0 refused --chunk-size 48."""
    out = tmp_path / "small"
    assert main(["scan", str(EXAMPLES), "--save", str(out), "--chunk-size", "48", "--chunk-overlap", "0", "--json"]) == 0
    capsys.readouterr()
    assert main(["query", str(out), QUESTIONS[0], "--chunk-size", "48"]) == 0
    assert main(["query", str(out), QUESTIONS[0], "--chunk-target", "30"]) == 2
    assert "whose chunks are fixed; query it without --chunk-target" in capsys.readouterr().err


def test_a_file_the_save_did_not_write_in_its_bm25_folder_is_not_an_error(saved, tmp_path, capsys):
    import shutil

    copy = tmp_path / "saved"
    shutil.copytree(saved, copy)
    (copy / "bm25" / ".DS_Store").write_bytes(b"\x00\x01")
    assert main(["query", str(copy), QUESTIONS[0]]) == 0


def test_chunks_that_match_no_word_of_the_question_are_not_evidence(saved, capsys):
    """BM25Retriever fills its top k with chunks scored 0 (no term of the question in them); the command
    counted them as distinct evidence. A question of words found nowhere, or of stopwords only, now gets
    empty lists; a rare word gets only the chunks that hold it."""
    for question in ("zebra quagga", "the"):
        assert main(["query", str(saved), question, "--json", "-k", "5"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["without_dedup"] == d["with_dedup"] == d["distinct_retriever"] == [], question
        assert {r["distinct"] for r in d["evidence"].values()} == {0}
    assert main(["query", str(saved), "zebra quagga", "-k", "5"]) == 0
    captured = capsys.readouterr()
    assert "no chunk matches the question" in captured.out and "INFO:bm25s" not in captured.err
    # BM25 reads a node's metadata with its text: a chunk holds the word in its text or its source.
    chunks = json.loads((saved / "chunks.json").read_text(encoding="utf-8"))["chunks"]
    holding = sum("fakeroot" in (c["text"] + c["source"]).lower() for c in chunks)
    assert 0 < holding < 10
    assert main(["query", str(saved), "fakeroot", "--json", "-k", "10"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert 0 < len(d["without_dedup"]) == holding and len(d["distinct_retriever"]) <= holding
    assert all(r["score"] > 0 for r in d["without_dedup"])


def test_a_question_that_is_not_utf8_is_refused_up_front(saved, tmp_path, capsys):
    """A byte that is not UTF-8 in argv arrives as a lone surrogate; --html and --json then failed after the
    work (UnicodeEncodeError) or wrote invalid UTF-8. Refused before any work, exit 2, one line."""
    question = b"caf\xe9 warranty".decode("utf-8", "surrogateescape")
    for extra in ([], ["--json"], ["--html", str(tmp_path / "q.html")]):
        assert main(["query", str(saved), question, *extra]) == 2
        err = capsys.readouterr().err
        assert "the question is not UTF-8 text (character 4" in err and "Traceback" not in err, err
    assert not (tmp_path / "q.html").exists()


def test_a_damaged_setting_in_a_save_is_named(saved, tmp_path, capsys):
    """A chunk_size that is not a number in chunks.json, with --chunk-size given: it was a ValueError
    traceback from formatting it; now one line naming the setting, exit 2."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(saved, copy)
    sidecar = copy / "chunks.json"
    meta = json.loads(sidecar.read_text(encoding="utf-8"))
    meta["settings"]["chunk_size"] = "x"
    sidecar.write_text(json.dumps(meta), encoding="utf-8")
    assert main(["query", str(copy), "warranty", "--chunk-size", "100"]) == 2
    err = capsys.readouterr().err
    assert "settings are damaged (chunk_size 'x', not a whole number)" in err and "Traceback" not in err, err
