"""rag_dedup.app.report: summaries, removals per source and folder, findings, threshold sampling, word diffs.

The chunks are the paragraphs of the shipped corpus (tests/data/corpus/copyright): Debian copyright files
that restate the same licence paragraphs, so there are real exact and near duplicates. Paragraphs
(blank-line separated, 12 words or more) keep these tests independent of the chunker.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_dedup.index import DedupIndex
from rag_dedup.normalize import canonical
from rag_dedup.app.report import (
    Chunk,
    Skipped,
    candidate_pairs,
    histogram,
    sample_thresholds,
    summarize,
    word_diff,
)
from rag_dedup.shingles import shingle_hashes
from rag_dedup.similarity import jaccard

CORPUS = Path(__file__).parents[1] / "data" / "corpus"


def _paragraph_chunks(folder: str) -> list[Chunk]:
    chunks = []
    for path in sorted((CORPUS / folder).glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        n = 0
        for m in re.finditer(r"\S(?:.|\n(?!\s*\n))*", text):
            para = m.group(0)
            if len(para.split()) < 12:
                continue
            chunks.append(Chunk(f"{folder}/{path.name}#{n:04d}", f"{folder}/{path.name}", para, m.start(), m.end()))
            n += 1
    return chunks


@pytest.fixture(scope="module")
def chunks() -> list[Chunk]:
    return _paragraph_chunks("copyright")


@pytest.fixture(scope="module")
def indexed(chunks):
    index = DedupIndex(threshold=0.8)
    index.add_many([{"key": c.key, "text": c.text, "source": c.source} for c in chunks])
    return index, summarize(index, chunks, documents=60, settings={"chunk_size": 256})


def test_paragraph_chunks_locate_their_text(chunks):
    """The fixture itself: each chunk's span points at its text in the source file."""
    assert len(chunks) > 300
    for c in chunks[:50]:
        assert (CORPUS / c.source).read_text(encoding="utf-8")[c.start:c.end] == c.text


def test_counts_agree_with_the_index(chunks, indexed):
    index, summary = indexed
    suppressed = [c.key for c in chunks if index.match(c.key).duplicate_of is not None]
    assert summary.chunks == len(chunks)
    assert summary.suppressed == len(suppressed) > 0
    assert summary.exact_duplicates > 0 and summary.near_duplicates > 0
    assert summary.suppressed == sum(len(c.members) for c in summary.clusters)
    assert summary.suppressed == sum(r.removed for r in summary.by_source) == sum(r.removed for r in summary.by_folder)
    assert summary.kept == len(chunks) - len(suppressed)
    assert len(summary.clusters) == sum(1 for _, m in index.clusters() if len(m) > 1)
    assert summary.settings["bands"] == tuple(index.bands)
    assert summary.settings["knee"] == pytest.approx(index.knee)
    assert summary.settings["chunk_size"] == 256
    assert len(summary.similarities) == summary.suppressed


def test_members_carry_true_kinds_and_similarities(chunks, indexed):
    """Exact members have the representative's canonical text; near members' similarity is the exact Jaccard."""
    _, summary = indexed
    text = {c.key: c.text for c in chunks}
    for cluster in summary.clusters:
        rep = cluster.representative
        assert rep.kind == "representative" and rep.key == cluster.cluster_id
        rep_sh = shingle_hashes(text[rep.key])
        for m in cluster.members:
            if m.kind == "exact":
                assert canonical(text[m.key]) == canonical(text[rep.key])
                assert m.similarity == 1.0
            else:
                assert canonical(text[m.key]) != canonical(text[rep.key])
                assert m.similarity == pytest.approx(jaccard(shingle_hashes(text[m.key]), rep_sh))
        sims = [m.similarity for m in cluster.members]
        assert sims == sorted(sims, reverse=True)
    sizes = [c.size for c in summary.clusters]
    assert sizes == sorted(sizes, reverse=True)


def test_removals_per_folder_are_sums_of_sources(indexed):
    _, summary = indexed
    per_folder: Counter[str] = Counter()
    chunks_per_folder: Counter[str] = Counter()
    for r in summary.by_source:
        folder = r.name.rsplit("/", 1)[0] if "/" in r.name else "."
        per_folder[folder] += r.removed
        chunks_per_folder[folder] += r.chunks
    assert {r.name: r.removed for r in summary.by_folder} == dict(per_folder)
    assert {r.name: r.chunks for r in summary.by_folder} == dict(chunks_per_folder)


def test_a_source_copied_from_another_is_flagged_and_named():
    """Planted: a file that copies most of another file's paragraphs loses them, and the finding says to whom."""
    base = _paragraph_chunks("licenses")
    gpl = [c for c in base if c.source == "licenses/GPL-2.txt"][:12]
    copy = [Chunk(f"mirror/gpl.txt#{i:04d}", "mirror/gpl.txt", c.text.upper()) for i, c in enumerate(gpl[:10])]
    own = [Chunk("mirror/gpl.txt#0010", "mirror/gpl.txt",
                 "This paragraph is written for the test and appears nowhere else in the corpus at all, "
                 "so it stays with its source.")]
    chunks = gpl + copy + own
    index = DedupIndex(threshold=0.8)
    index.add_many([(c.key, c.text) for c in chunks])
    summary = summarize(index, chunks, documents=2)
    rows = {r.name: r for r in summary.by_source}
    # Equal length and authority: the smaller key ("licenses/..." < "mirror/...") is kept.
    assert rows["mirror/gpl.txt"].removed == 10 and rows["mirror/gpl.txt"].flagged
    assert rows["licenses/GPL-2.txt"].removed == 0 and not rows["licenses/GPL-2.txt"].flagged
    assert rows["mirror/gpl.txt"].lost_to == (("licenses/GPL-2.txt", 10),)
    (finding,) = summary.findings
    assert finding.startswith("mirror/gpl.txt loses 10 of 11 chunks (91%)") and "licenses/GPL-2.txt (10)" in finding


def test_to_dict_is_json_with_the_documented_schema(indexed):
    _, summary = indexed
    d = json.loads(json.dumps(summary.to_dict()))
    assert d["schema"] == "rag-dedup.scan/1"
    assert set(d) >= {"settings", "documents", "chunks", "kept", "exact_duplicates", "near_duplicates", "suppressed",
                      "suppressed_share", "cluster_count", "clusters", "by_source", "by_folder", "skipped", "findings"}
    assert set(d["settings"]) >= {"threshold", "num_perm", "ngram", "bands", "knee", "chunk_size"}
    c = d["clusters"][0]
    assert set(c) == {"id", "size", "representative", "members"}
    assert set(c["representative"]) == {"key", "source", "start", "end"}
    assert set(c["members"][0]) == {"key", "source", "start", "end", "similarity", "kind"}
    assert c["size"] == 1 + len(c["members"])
    assert set(d["by_source"][0]) == {"source", "chunks", "removed", "share", "flagged", "lost_to"}
    assert set(d["by_folder"][0]) == {"folder", "chunks", "removed", "share", "flagged", "lost_to"}
    assert d["suppressed"] == d["exact_duplicates"] + d["near_duplicates"]


def test_skipped_files_are_reported():
    chunks = [Chunk("a#0", "a.txt", "one two three four five six")]
    index = DedupIndex()
    index.add_many([("a#0", chunks[0].text)])
    summary = summarize(index, chunks, documents=1, skipped=[Skipped("b.bin", "binary file")])
    assert summary.to_dict()["skipped"] == [{"path": "b.bin", "reason": "binary file"}]
    assert summary.clusters == () and summary.suppressed_share == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"flag_share": 0.0}, "flag_share", id="flag-share-zero"),
        pytest.param({"flag_share": 1.5}, "flag_share", id="flag-share-above-one"),
        pytest.param({"documents": -1}, "documents", id="negative-documents"),
    ],
)
def test_summarize_rejects_bad_values(kwargs, message):
    chunks = [Chunk("a#0", "a.txt", "one two three four five six")]
    index = DedupIndex()
    index.add_many([("a#0", chunks[0].text)])
    with pytest.raises(ValueError, match=message):
        summarize(index, chunks, **{"documents": 1, **kwargs})


def test_summarize_rejects_chunks_that_do_not_describe_the_index():
    """Regression: a report over the wrong chunk list must fail, not silently count the wrong files."""
    a = Chunk("a#0", "a.txt", "one two three four five six seven")
    b = Chunk("b#0", "b.txt", "eight nine ten eleven twelve thirteen")
    index = DedupIndex()
    index.add_many([(a.key, a.text), (b.key, b.text)])
    with pytest.raises(ValueError, match="2 keys but 1 chunks"):
        summarize(index, [a], documents=1)
    with pytest.raises(ValueError, match="not in the index"):
        summarize(index, [a, Chunk("c#0", "c.txt", "x")], documents=1)
    with pytest.raises(ValueError, match="appears twice"):
        summarize(index, [a, a], documents=1)


# --- histogram -------------------------------------------------------------------------------------------


def test_histogram_bins_and_edges():
    assert histogram([0.0, 0.05, 0.5, 0.99, 1.0], bins=10) == [2, 0, 0, 0, 0, 1, 0, 0, 0, 2]
    assert histogram([], bins=3) == [0, 0, 0]
    with pytest.raises(ValueError, match="outside"):
        histogram([1.2])
    with pytest.raises(ValueError, match="bins"):
        histogram([0.5], bins=0)


# --- word diff -------------------------------------------------------------------------------------------


def test_word_diff_on_real_licence_variants():
    lgpl2 = (CORPUS / "licenses" / "LGPL-2.1.txt").read_text(encoding="utf-8")
    a = lgpl2[:600]
    b = a.replace("Lesser", "Library")
    runs = word_diff(a, b)
    changed = [(pa.strip(), pb.strip()) for tag, pa, pb in runs if tag != "equal"]
    assert changed and all(pa == "Lesser" and pb == "Library" for pa, pb in changed)


_words = st.lists(st.sampled_from(["the", "GNU", "Lesser", "library", "Free", "software", "\n", "  ", "FREE"]),
                  max_size=40)


@settings(max_examples=60, deadline=None)
@given(_words, _words)
def test_word_diff_partitions_both_texts(wa, wb):
    a, b = " ".join(wa), " ".join(wb)
    runs = word_diff(a, b)
    assert "".join(pa for _, pa, _ in runs) == a
    assert "".join(pb for _, _, pb in runs) == b
    for tag, pa, pb in runs:
        if tag == "equal":
            assert pa.split() == pb.split() or canonical(pa).split() == canonical(pb).split()


# --- threshold sampling ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tuned(chunks):
    return sample_thresholds(chunks, (0.6, 0.7, 0.8, 0.9), per_threshold=3, seed=7)


def test_suppression_counts_match_an_index_at_each_threshold(chunks, tuned):
    for t in tuned.thresholds:
        index = DedupIndex(threshold=t.threshold)
        index.add_many([(c.key, c.text) for c in chunks])
        assert t.suppressed == summarize(index, chunks, documents=1).suppressed
    counts = [t.suppressed for t in tuned.thresholds]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]


def test_sampled_pairs_lie_near_their_threshold_with_exact_similarity(chunks, tuned):
    text = {c.key: c.text for c in chunks}
    sampled = 0
    for t in tuned.thresholds:
        assert len(t.pairs) == min(3, t.pairs_near)
        for p in t.pairs:
            sampled += 1
            assert t.threshold - tuned.window <= p.similarity < t.threshold + tuned.window
            assert p.a < p.b
            assert p.similarity == pytest.approx(jaccard(shingle_hashes(text[p.a]), shingle_hashes(text[p.b])))
    assert sampled >= 6
    assert tuned.floor == pytest.approx(0.55)
    assert min(tuned.similarities) >= tuned.floor


def test_sampling_is_deterministic_for_a_seed(chunks, tuned):
    again = sample_thresholds(chunks, (0.9, 0.8, 0.7, 0.6), per_threshold=3, seed=7)
    assert again == tuned  # thresholds are sorted, the sample depends on the seed only


def test_candidate_pairs_find_the_clear_pairs_of_a_brute_force_search(chunks):
    sample = chunks[:150]
    found = {(p.a, p.b): p.similarity for p in candidate_pairs(sample, floor=0.5)}
    sh = [shingle_hashes(c.text) for c in sample]
    for i in range(len(sample)):
        for j in range(i + 1, len(sample)):
            s = jaccard(sh[i], sh[j])
            a, b = sorted((sample[i].key, sample[j].key))
            if s >= 0.6:  # well above the floor: LSH finds these with probability ~1
                assert found.get((a, b)) == pytest.approx(s)
            if s < 0.5:
                assert (a, b) not in found


@pytest.mark.parametrize(
    ("thresholds", "kwargs", "message"),
    [
        pytest.param((), {}, "empty", id="empty"),
        pytest.param((0.8, 1.2), {}, "outside", id="above-one"),
        pytest.param((0.0,), {}, "outside", id="zero"),
        pytest.param((0.8, 0.8), {}, "repeat", id="repeated"),
        pytest.param((0.8,), {"window": 0.0}, "window", id="zero-window"),
        pytest.param((0.8,), {"per_threshold": -1}, "per_threshold", id="negative-pairs"),
    ],
)
def test_sample_thresholds_rejects_bad_values(chunks, thresholds, kwargs, message):
    with pytest.raises(ValueError, match=message):
        sample_thresholds(chunks[:5], thresholds, **kwargs)


def test_tune_report_to_dict(chunks, tuned):
    d = json.loads(json.dumps(tuned.to_dict()))
    assert d["schema"] == "rag-dedup.tune/1"
    assert [t["threshold"] for t in d["thresholds"]] == [0.6, 0.7, 0.8, 0.9]
    assert d["candidate_pairs"] == len(tuned.similarities)
    assert set(d["thresholds"][0]) == {"threshold", "suppressed", "suppressed_share", "clusters", "pairs_near", "pairs"}
