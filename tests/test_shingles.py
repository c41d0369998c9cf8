"""What gets shingled: split-script tokens, the short-text regime and the decoration rule, on real text."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_dedup import DedupIndex
from rag_dedup.index import SHINGLING, IndexMismatchError
from rag_dedup.normalize import shingle_tokens, token_form
from rag_dedup.storage import directory
from rag_dedup.storage.directory import MANIFEST
from rag_dedup.shingles import (
    reference_shingle_hashes,
    shingle_hashes,
    shingle_hashes_many,
    shingle_stream,
    shingles_and_digests,
    short_measure,
)
from rag_dedup.similarity import jaccard

DATA = Path(__file__).parent / "data"
SCRIPTS = DATA / "scripts"
_ROFF = re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)|\\\(..|\\[-&e|^/,]")


def roff_paragraphs(name: str) -> list[str]:
    """The paragraphs of a shipped roff excerpt (text between paragraph macros, escapes removed)."""
    out, lines = [], []
    for line in (SCRIPTS / name).read_text("utf-8").splitlines() + [".PP"]:
        if line.startswith((".", "'")):
            if lines:
                out.append(_ROFF.sub("", "\n".join(lines)))
            lines = []
        else:
            lines.append(line)
    return out


def cjk_paragraphs() -> list[str]:
    return [p for name in ("ja-ls.1", "ja-dir.1", "zh_CN-ls.1") for p in roff_paragraphs(name)]


def stream_sets(texts: list[str], **rules: object) -> list[set[int]]:
    hashes, counts = shingle_stream(texts, **rules)  # type: ignore[arg-type]
    bounds = np.concatenate(([0], np.cumsum(counts)))
    return [set(hashes[a:b].tolist()) for a, b in zip(bounds[:-1], bounds[1:])]


# --- tokens ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        pytest.param("ls 命令列出目录", ["ls", "命", "令", "列", "出", "目", "录"], id="mixed-han"),
        pytest.param("ディレクトリの内容", ["デ", "ィ", "レ", "ク", "ト", "リ", "の", "内", "容"], id="kana-han"),
        pytest.param("ภาษาไทย ok", ["ภ", "า", "ษ", "า", "ไ", "ท", "ย", "ok"], id="thai"),
        pytest.param("한국어 텍스트", ["한국어", "텍스트"], id="hangul-words"),
        pytest.param("대한민국에서는만세", list("대한민국에서는만세"), id="hangul-unspaced-run"),
        pytest.param(" * 1. Redistributions — of\n * (a) source", ["redistributions", "of", "source"], id="markers"),
        pytest.param("see item 2. below", ["see", "item", "2.", "below"], id="number-inside-a-line"),
        pytest.param("<https://www.apache.org/licenses/>", ["<http://www.apache.org/licenses/>"], id="https"),
        pytest.param("「基石」。", ["基", "石"], id="cjk-punctuation"),
    ],
)
def test_shingle_tokens_examples(text: str, tokens: list[str]) -> None:
    assert shingle_tokens(text) == tokens


def test_decoration_can_be_turned_off() -> None:
    assert shingle_tokens(" * 1. of", ignore_decoration=False) == ["*", "1.", "of"]
    assert shingle_tokens("「基石」。https://x", ignore_decoration=False) == ["「", "基", "石", "」。https://x"]


def test_chunker_token_form_is_unchanged() -> None:
    """The chunker's cut hashing reads token_form: the new rules live in shingle_tokens only."""
    text = " * 1. 中文的基石 https://x"
    assert token_form(text) == " * 1. 中文的基石 https://x"


ALPHABET = list("ab 1.()*-#>/\n\r\t日本語のテキ한국어대민ภาษา。「」—•é:https") + ["https://", "iv) ", "(a) ", "12. ", "//"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(ALPHABET), max_size=30).map("".join), max_size=6),
    st.integers(1, 6),
    st.booleans(),
    st.sampled_from([0, 3, 20]),
)
def test_bulk_shingles_equal_the_reference_on_mixed_scripts(texts: list[str], ngram: int, deco: bool, short: int) -> None:
    """The vectorised token rule (regex split, bulk decoration, gram regime) equals the plain-Python rule."""
    rules = {"ignore_decoration": deco, "short_tokens": short}
    fast = shingle_hashes_many(texts, ngram, **rules)
    for text, got in zip(texts, fast):
        assert np.array_equal(got, reference_shingle_hashes(text, ngram, **rules))
    assert [len(s) for s in stream_sets(texts, ngram=ngram, **rules)] == [len(s) for s in fast]


@pytest.mark.parametrize(
    "text",
    [
        "2(a) (4) never produces adapted material",  # "2(a)" is no number: "(4)" does not lead its line
        "foo\nit. 2. bar baz",
        "images. 11.",
        "1.) 1. a b c d e f",
        "* 1. 2. x y z\n- - iv) a b c d e f",
        "it.\n2.  3. a\r(a)\t\t(b) iv) x. a b",
        "1.",
        "- 1.",
        "see below . 1. a b c d e",  # a number after one dropped word, on a line with a kept one
        "x . - 2. y z a b c",  # after two dropped words
        "x . - * 3. y z a b c",  # after three: past the bulk walk's steps
        "x . 1. 2. y z a b c",  # after a number that is itself open
        ". 1. a b c d e f",  # after a dropped word that leads the text
        "x .\n1. a b c d e",  # a line break in the gap
        "x .  1. a b c d e",  # a gap of two spaces
        "x . 1.\n. 2. a b c d e",
    ],
)
def test_numbers_after_a_kept_candidate_equal_the_reference(text: str) -> None:
    """A line-leading word shaped like a number but not one (kept) stops the numbers after it from leading;
    and a number after dropped words on a line with a kept word before them (settled in bulk) is kept."""
    for texts in ([text], [text, "x\n" + text, text + "\n" + text]):
        for got, one in zip(shingle_hashes_many(texts, short_tokens=0), texts):
            assert np.array_equal(got, reference_shingle_hashes(one, short_tokens=0))
        assert [len(s) for s in stream_sets(texts, short_tokens=0)] == [
            len(s) for s in shingle_hashes_many(texts, short_tokens=0)
        ]


def test_bulk_shingles_equal_the_reference_across_the_short_regime_boundaries() -> None:
    """Every measure of short_measure (one shingle, character grams, token sets, word shingles), at
    each boundary, on real lines (NAME lines, CJK, decoration): the bulk, reference and stream paths agree."""
    lines = (SCRIPTS / "name-lines.txt").read_text().splitlines()
    words = " ".join(lines).split()
    cjk = max(cjk_paragraphs(), key=len)
    texts = [" ".join(words[i : i + size]) for i, size in enumerate(range(1, 26))]
    texts += ["* " + t + "." for t in texts] + [cjk[:size] for size in (2, 3, 11, 12, 20, 21)]
    texts += [" ".join(words[:12]) + " " + cjk[:4]]
    measures = {short_measure(len(shingle_tokens(t))) for t in texts}
    assert measures == {"shingles", "chars", "tokens"}
    for short in (0, 11, 12, 20):
        fast = shingle_hashes_many(texts, short_tokens=short)
        for text, got in zip(texts, fast):
            assert np.array_equal(got, reference_shingle_hashes(text, short_tokens=short)), (short, text)
        assert [len(s) for s in stream_sets(texts, short_tokens=short)] == [len(s) for s in fast]
    sets = shingle_hashes_many(texts)
    streamed = stream_sets(texts)
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            union = len(streamed[i] | streamed[j])
            assert jaccard(sets[i], sets[j]) == pytest.approx(len(streamed[i] & streamed[j]) / union if union else 0.0)


def test_bulk_shingles_equal_the_reference_on_real_cjk_and_headers() -> None:
    texts = cjk_paragraphs() + [(SCRIPTS / "bignum-header.h").read_text(), *(SCRIPTS / "name-lines.txt").read_text().splitlines()]
    for deco in (True, False):
        for text, got in zip(texts, shingle_hashes_many(texts, ignore_decoration=deco)):
            assert np.array_equal(got, reference_shingle_hashes(text, ignore_decoration=deco))


def test_stream_similarity_equals_index_similarity_on_real_text() -> None:
    """The postprocessor's shingle_stream sees the same shingles: the same Jaccard for every pair."""
    texts = cjk_paragraphs()[:40] + (SCRIPTS / "name-lines.txt").read_text().splitlines()[:40]
    sets = shingle_hashes_many(texts)
    streamed = stream_sets(texts)
    for i in range(0, len(texts), 3):
        for j in range(len(texts)):
            union = len(streamed[i] | streamed[j])
            expected = len(streamed[i] & streamed[j]) / union if union and streamed[i] and streamed[j] else 0.0
            assert jaccard(sets[i], sets[j]) == pytest.approx(expected)


def test_digests_stay_on_the_canonical_text() -> None:
    """The exact key ignores nothing: a starred and a plain clause are near, never exact, copies."""
    header = (SCRIPTS / "bignum-header.h").read_text()
    plain = re.sub(r"(?m)^//\s?", "", header)
    sets, digests = shingles_and_digests([header, plain])
    assert digests[0] != digests[1]
    assert jaccard(sets[0], sets[1]) == 1.0


# --- what the tokens find ---------------------------------------------------------------------------
def test_cjk_paragraph_with_one_word_changed_is_a_near_duplicate() -> None:
    """Regression (issue 20): a 120-character Chinese paragraph with 基石 -> 基础 was one 'word', kind unique."""
    para = max(roff_paragraphs("zh_CN-ls.1"), key=len)
    assert len(para) >= 60
    edited = para.replace(para[20:22], "基础", 1)
    index = DedupIndex()
    index.add("a", para)
    match = index.add("b", edited)
    assert match.kind == "near" and jaccard(shingle_hashes(para), shingle_hashes(edited)) >= 0.8


def test_real_ls_and_dir_pages_share_their_option_paragraphs() -> None:
    """Real variation: the Japanese ls and dir pages translate the same options; the index finds them."""
    ls, dr = roff_paragraphs("ja-ls.1"), roff_paragraphs("ja-dir.1")
    index = DedupIndex()
    index.add_many([(f"ls{i}", t) for i, t in enumerate(ls)] + [(f"dir{i}", t) for i, t in enumerate(dr)])
    shared = [i for i in range(len(dr)) if any(k.startswith("ls") for k in index.members(index.cluster_of(f"dir{i}")))]
    assert len(shared) >= len(dr) // 2


def test_bsd_clause_with_comment_prefixes_equals_the_plain_clause() -> None:
    """Regression (issue 11 item 5): '//' and ' * ' prefixes kept the same clause at J = 0.38."""
    header = (SCRIPTS / "bignum-header.h").read_text()
    shipped = (DATA / "corpus" / "licenses" / "BSD").read_text() if (DATA / "corpus" / "licenses" / "BSD").exists() else None
    starred = "/*\n" + "\n".join(" * " + line.removeprefix("//").strip() for line in header.splitlines()) + "\n */"
    assert jaccard(shingle_hashes(header), shingle_hashes(starred)) == 1.0
    assert jaccard(shingle_hashes(header, ignore_decoration=False), shingle_hashes(starred, ignore_decoration=False)) < 0.5
    assert shipped is None or jaccard(shingle_hashes(header), shingle_hashes(shipped)) < 1.0


def test_short_texts_cluster_with_their_variants_and_not_with_each_other() -> None:
    """Real NAME lines: each variant (two letters swapped) at J >= 0.8 clusters with its line, and no two
    different lines merge unless they are near-identical themselves."""
    lines = (SCRIPTS / "name-lines.txt").read_text().splitlines()
    variants = [re.sub(r"(\w)(\w)\b", r"\2\1", line, count=1) for line in lines]  # swap two letters
    index = DedupIndex()
    index.add_many([(f"o{i}", t) for i, t in enumerate(lines)] + [(f"v{i}", t) for i, t in enumerate(variants)])
    cluster = {k: index.cluster_of(k) for k in [f"o{i}" for i in range(len(lines))] + [f"v{i}" for i in range(len(lines))]}
    sims = shingle_hashes_many(lines)
    vsims = shingle_hashes_many(variants)
    near = [i for i in range(len(lines)) if jaccard(sims[i], vsims[i]) >= 0.8]
    assert len(near) >= 0.75 * len(lines)
    assert all(cluster[f"o{i}"] == cluster[f"v{i}"] for i in near)
    originals = [cluster[f"o{i}"] for i in range(len(lines))]
    shared = len(originals) - len(set(originals))
    close = sum(jaccard(sims[i], sims[j]) >= 0.7 for i in range(len(lines)) for j in range(i + 1, len(lines)))
    assert shared <= close  # only lines that are themselves near-identical share a cluster


def test_short_regime_is_order_independent_and_survives_save_and_load(tmp_path: Path) -> None:
    lines = (SCRIPTS / "name-lines.txt").read_text().splitlines()
    items = [(f"o{i}", t) for i, t in enumerate(lines)] + [(f"v{i}", t + ".") for i, t in enumerate(lines[:30])]
    a, b = DedupIndex(), DedupIndex()
    a.add_many(items)
    b.add_many(items[::-1])
    keys = [k for k, _ in items]
    assert [m.duplicate_of for m in a.matches(keys)] == [m.duplicate_of for m in b.matches(keys)]
    a.save(tmp_path / "idx")
    loaded = DedupIndex.load(tmp_path / "idx")
    assert loaded.short_tokens == a.short_tokens and loaded.ignore_decoration == a.ignore_decoration
    assert loaded.matches(keys) == a.matches(keys)
    assert [k for k, _ in loaded.query(lines[3])][:1] == [k for k, _ in a.query(lines[3])][:1]


def test_redis_index_agrees_with_memory_on_cjk_and_short_texts(redis_url: str) -> None:
    texts = cjk_paragraphs()[:60] + (SCRIPTS / "name-lines.txt").read_text().splitlines()[:60]
    items = [(f"k{i}", t) for i, t in enumerate(texts)]
    memory, shared = DedupIndex(), DedupIndex(storage=redis_url, namespace="tokens-parity")
    memory.add_many(items)
    shared.add_many(items)
    keys = [k for k, _ in items]
    assert shared.matches(keys) == memory.matches(keys)


@pytest.mark.parametrize(
    ("built", "opened", "named"),
    [
        pytest.param({}, {"ignore_decoration": False}, "ignore_decoration", id="decoration"),
        pytest.param({"short_tokens": 0}, {}, "short_tokens", id="short-regime"),
    ],
)
def test_an_index_built_with_other_token_rules_fails_clearly_on_open(redis_url: str, built: dict, opened: dict, named: str) -> None:
    DedupIndex(storage=redis_url, namespace=f"tokens-{named}", **built).add("a", "some text here")
    with pytest.raises(IndexMismatchError, match=named):
        DedupIndex(storage=redis_url, namespace=f"tokens-{named}", **opened)


@pytest.mark.parametrize(
    "previous",
    [
        pytest.param("words-poly64-fmix64-v1", id="word-tokens"),
        pytest.param("tokens-poly64-fmix64-v2", id="trigrams-up-to-20-tokens"),
    ],
)
def test_an_index_of_a_previous_shingling_fails_clearly_on_open(redis_url: str, previous: str) -> None:
    """An index whose short texts of 12-20 tokens were stored as trigrams (v2) cannot be extended with token sets."""
    index = DedupIndex(storage=redis_url, namespace=f"tokens-{previous}")
    meta = index.storage.load_meta()
    assert meta is not None and meta["shingling"] == SHINGLING != previous
    meta["shingling"] = previous
    index.storage.save_meta(meta)
    with pytest.raises(IndexMismatchError, match=f"shingling='{previous}' but this index has shingling='{SHINGLING}'"):
        DedupIndex(storage=redis_url, namespace=f"tokens-{previous}")


def test_a_saved_index_of_the_previous_shingling_fails_clearly_on_load(tmp_path: Path) -> None:
    """The saved directory carries the shingling name: a v2 save is refused, not silently mixed."""
    index = DedupIndex()
    index.add("a", "How do I reset my password if I no longer have access to my account?")
    index.save(tmp_path / "idx")
    manifest_path = tmp_path / "idx" / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    assert manifest["meta"]["shingling"] == SHINGLING
    manifest["meta"]["shingling"] = "tokens-poly64-fmix64-v2"
    manifest["sha256"] = directory._manifest_digest({k: v for k, v in manifest.items() if k != "sha256"})
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(IndexMismatchError, match="shingling='tokens-poly64-fmix64-v2'"):
        DedupIndex.load(tmp_path / "idx")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        pytest.param({"ignore_decoration": 1}, TypeError, "ignore_decoration must be bool", id="decoration-type"),
        pytest.param({"short_tokens": 2}, ValueError, r"short_tokens \(2\)", id="short-too-small"),
        pytest.param({"short_tokens": 1.5}, TypeError, "short_tokens must be int", id="short-type"),
    ],
)
def test_token_rule_parameters_are_validated(kwargs: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        DedupIndex(**kwargs)
    with pytest.raises(error, match=match):
        shingle_hashes_many(["text"], **kwargs)
