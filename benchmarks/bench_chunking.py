"""Boundary benchmark: is a passage copied into two documents chunked into duplicate chunks?

Real paragraphs of 6-15 sentences are inserted into two different real host documents at random
sentence offsets; both hosts are chunked, and the passage counts as *found* when a chunk of host A
that overlaps the passage and a chunk of host B that overlaps it are duplicates in
``DedupIndex(threshold=0.8)`` (B's chunks are added, A's are looked up with ``index.query``; only
chunks that touch the passage count, so text the two hosts happen to share cannot help). Reported
side by side for ``SentenceChunker`` and LlamaIndex's ``SentenceSplitter`` with the same
``chunk_size`` and ``chunk_overlap``, in two insertion modes:

* ``paragraph``: the passage is a paragraph of its own (a blank line before and after), the way a
  copied paragraph sits in a document;
* ``inline``: the passage is spliced into the host's running text with a space, no break around it.

"Spanning" passages are those that overlap two or more chunks in both hosts (a boundary falls
inside them in both). "tokens/chunk" is the mean size of the chunks that touch the passage, "host
chunks" the number of chunks of all host documents as they are (without passages). The last
column splits the spanning passages by their own size in tokens: spliced into running text, a passage
can only be found if a chunk of each host lies almost wholly inside it (Jaccard 0.8 leaves room for
about a tenth of host text in each), so passages shorter than a chunk are found far less often. The
rows ``mean_body=N`` are SentenceChunker with a smaller ``mean_body_size`` (the default is half of
``chunk_size - chunk_overlap``: 96 tokens): more, smaller chunks, and the found rate that buys. Then
the throughput of both chunkers on the same documents with the same tokenizer (LlamaIndex's
default), in one run, and SentenceChunker's time per MB on one-line documents of 0.5 to 5 MB
(linear time).

Text (from this machine; tests/data/corpus if the Debian documentation is missing):

* passages: paragraphs (a single block of 6-15 punkt sentences, at most 4000 characters) of
  /usr/share/common-licenses/* and /usr/share/doc/*/README*;
* hosts: /usr/share/doc/*/copyright and /usr/share/doc/*/NEWS* of 4-60 KB;
* byte-identical files are read once.

Run: ``python benchmarks/bench_chunking.py [--passages 300] [--seed 7] [--mean-bodies 48,32,16] [--quick]``
"""

from __future__ import annotations

import argparse
import gc
import glob
import gzip
import hashlib
import os
import random
import re
import statistics
import time
from pathlib import Path

from llama_index.core import Document
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.utils import get_tokenizer

from rag_dedup import DedupIndex
from rag_dedup.chunking.blocks import blocks as _blocks
from rag_dedup.llama_index.chunking import SentenceChunker

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "data" / "corpus"
PARAGRAPH = re.compile(r"\S(?:.|\n(?![ \t]*\n))*")  # runs of non-blank lines
# Passage sizes in tokens, against the default body budget (chunk_size - chunk_overlap = 192): a
# passage spliced into running text can only be found if some chunk lies (almost) wholly inside it.
TOKEN_BUCKETS = (("<128", 128), ("128-191", 192), ("192-255", 256), (">=256", 10**9))


def _read(path: str) -> str | None:
    try:
        data = Path(path).read_bytes()
        if path.endswith(".gz"):
            data = gzip.decompress(data)
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return None


def _unique(paths: list[str], min_chars: int = 0, max_chars: int = 10**9) -> list[tuple[str, str]]:
    seen: set[bytes] = set()
    out = []
    for path in sorted(paths):
        if not os.path.isfile(path):
            continue
        text = _read(path)
        if text is None or not min_chars <= len(text) <= max_chars:
            continue
        digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
        if digest not in seen:
            seen.add(digest)
            out.append((path, text))
    return out


def sources() -> tuple[list[tuple[str, str]], list[tuple[str, str]], str]:
    passage_docs = _unique(glob.glob("/usr/share/common-licenses/*") + glob.glob("/usr/share/doc/*/README*"))
    hosts = _unique(glob.glob("/usr/share/doc/*/copyright") + glob.glob("/usr/share/doc/*/NEWS*"), 4000, 60000)
    where = "passages: /usr/share/common-licenses/*, /usr/share/doc/*/README*; hosts: /usr/share/doc/*/{copyright,NEWS*}"
    if len(passage_docs) < 5 or len(hosts) < 10:
        licences = sorted(str(p) for p in (CORPUS / "licenses").glob("*.txt"))
        copyrights = sorted(str(p) for p in (CORPUS / "copyright").glob("*.txt"))
        passage_docs, hosts = _unique(licences), _unique(copyrights, 2000)
        where = "tests/data/corpus (the Debian documentation was not found): passages from licenses/, hosts from copyright/"
    return passage_docs, hosts, where


def paragraphs(docs: list[tuple[str, str]], chunker: SentenceChunker) -> list[tuple[str, int]]:
    out = []
    for _, text in docs:
        for m in PARAGRAPH.finditer(text):
            para = m.group().strip()
            if len(para) > 4000 or len(list(_blocks(para))) != 1:
                continue
            n = len(chunker.sentence_spans(para))
            if 6 <= n <= 15:
                out.append((para, n))
    return out


def make_trials(paras, hosts, n, seed, mode, chunker):
    rng = random.Random(seed)
    sentence_starts: dict[int, list[int]] = {}
    trials = []
    for _ in range(n):
        para, n_sentences = rng.choice(paras)
        pair = rng.sample(range(len(hosts)), 2)
        docs = []
        for h in pair:
            host = hosts[h][1]
            if h not in sentence_starts:
                sentence_starts[h] = [s for s, _ in chunker.sentence_spans(host)]
            offset = rng.choice(sentence_starts[h])
            if mode == "inline":
                prefix = host[:offset]
                text = prefix + para + " " + host[offset:]
            else:
                prefix = host[:offset].rstrip() + "\n\n" if host[:offset].strip() else ""
                text = prefix + para + "\n\n" + host[offset:]
            docs.append((text, len(prefix), len(prefix) + len(para)))
        trials.append((n_sentences, docs))
    return trials


def chunk_spans(chunker, text: str) -> list[tuple[int, int]]:
    if isinstance(chunker, SentenceChunker):
        return chunker.chunk_spans(text)
    nodes = chunker.get_nodes_from_documents([Document(text=text)])
    return [(n.start_char_idx, n.end_char_idx) for n in nodes]


def evaluate(chunker, trials, tokenizer) -> dict:
    found = spanning = found_spanning = 0
    by_length: dict[str, list[int]] = {}
    sizes: list[int] = []
    for n_sentences, docs in trials:
        touching = []
        for text, start, end in docs:
            spans = chunk_spans(chunker, text)
            touching.append([text[s:e] for s, e in spans if s < end and e > start])
        index = DedupIndex(threshold=0.8)
        index.add_many((f"B{j}", chunk) for j, chunk in enumerate(touching[1]))
        hit = any(key.startswith("B") for chunk in touching[0] for key, _ in index.query(chunk))
        spans_two = min(len(touching[0]), len(touching[1])) >= 2
        found += hit
        spanning += spans_two
        found_spanning += hit and spans_two
        text, start, end = docs[0]
        n_tokens = len(tokenizer(text[start:end]))
        bucket = next(label for label, limit in TOKEN_BUCKETS if n_tokens < limit)
        if spans_two:
            counts = by_length.setdefault(bucket, [0, 0])
            counts[0] += hit
            counts[1] += 1
        sizes.extend(len(tokenizer(c)) for c in touching[0])
    return {
        "found": found,
        "spanning": spanning,
        "found_spanning": found_spanning,
        "by_length": by_length,
        "tokens": statistics.mean(sizes) if sizes else 0.0,
    }


def throughput(make, documents, repeats: int) -> tuple[float, int]:
    """Best wall time of ``repeats`` runs of get_nodes_from_documents with a fresh chunker (garbage
    collection off while timing, as timeit does), and the node count."""
    best, count = float("inf"), 0
    for _ in range(repeats):
        chunker = make()
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter()
            count = len(chunker.get_nodes_from_documents(documents))
            best = min(best, time.perf_counter() - t0)
        finally:
            gc.enable()
    return best, count


def one_line_document(words: list[str], n_chars: int, punctuated: bool, rng: random.Random) -> str:
    """A single line of shuffled real words (so sentences do not repeat), with or without full stops."""
    out, size = [], 0
    while size < n_chars:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(8, 30)))
        sentence = sentence[:1].upper() + sentence[1:] + ("." if punctuated else "")
        out.append(sentence)
        size += len(sentence) + 1
    return " ".join(out)[:n_chars]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--chunk-overlap", type=int, default=64)
    parser.add_argument(
        "--mean-bodies", default="48,32,16", help="smaller mean_body_size values to show beside the default"
    )
    parser.add_argument("--quick", action="store_true", help="100 passages, one timing run, scaling up to 2 MB")
    args = parser.parse_args()
    mean_bodies = [int(m) for m in args.mean_bodies.split(",") if m]
    if args.quick:
        args.passages = min(args.passages, 100)
    tokenizer = get_tokenizer()
    size, overlap = args.chunk_size, args.chunk_overlap

    def ours() -> SentenceChunker:
        return SentenceChunker(chunk_size=size, chunk_overlap=overlap)

    def theirs() -> SentenceSplitter:
        return SentenceSplitter(chunk_size=size, chunk_overlap=overlap, tokenizer=tokenizer)

    passage_docs, hosts, where = sources()
    paras = paragraphs(passage_docs, ours())
    print(f"text: {where}")
    print(
        f"      {len(paras)} paragraphs of 6-15 sentences from {len(passage_docs)} files; "
        f"{len(hosts)} host documents"
    )
    print(f"settings: chunk_size={size} chunk_overlap={overlap}, DedupIndex(threshold=0.8), {args.passages} passages, seed {args.seed}")
    print()
    print(
        f"{'mode':<10} {'chunker':<17} {'found':>15} {'spanning':>9} {'found|spanning':>18} {'tokens/chunk':>13}"
        f" {'host chunks':>12}   by passage tokens (spanning)"
    )
    for mode in ("paragraph", "inline"):
        trials = make_trials(paras, hosts, args.passages, args.seed, mode, ours())
        rows = [("SentenceChunker", ours)]
        rows += [
            (f"  mean_body={m}", lambda m=m: SentenceChunker(chunk_size=size, chunk_overlap=overlap, mean_body_size=m))
            for m in mean_bodies
        ]
        rows.append(("SentenceSplitter", theirs))
        for name, make in rows:
            r = evaluate(make(), trials, tokenizer)
            n_chunks = sum(len(chunk_spans(make(), text)) for _, text in hosts)
            n = len(trials)
            spanning = r["spanning"]
            rate = r["found_spanning"] / spanning if spanning else float("nan")
            order = [label for label, _ in TOKEN_BUCKETS]
            lengths = "  ".join(f"{k}: {v[0]}/{v[1]}" for k, v in sorted(r["by_length"].items(), key=lambda kv: order.index(kv[0])))
            print(
                f"{mode:<10} {name:<17} {r['found']:>4}/{n:<4} {r['found'] / n:6.1%} {spanning:>9} "
                f"{r['found_spanning']:>5}/{spanning:<5} {rate:6.1%} {r['tokens']:>13.0f} {n_chunks:>12}   {lengths}"
            )
    print()

    documents = [Document(text=text, id_=path) for path, text in hosts + passage_docs]
    megabytes = sum(len(d.text.encode()) for d in documents) / 1e6
    repeats = 1 if args.quick else 3
    t_ours, n_ours = throughput(ours, documents, repeats)
    t_theirs, n_theirs = throughput(theirs, documents, repeats)
    print(
        f"throughput ({len(documents)} documents, {megabytes:.1f} MB, same tokenizer, best of {repeats}): "
        f"SentenceChunker {megabytes / t_ours:.2f} MB/s ({n_ours} nodes), "
        f"SentenceSplitter {megabytes / t_theirs:.2f} MB/s ({n_theirs} nodes), ratio {t_theirs / t_ours:.2f}x"
    )

    rng = random.Random(args.seed)
    words = [w.strip(".?!") for _, text in passage_docs[:40] for w in text.split() if w.strip(".?!")]
    sizes_mb = (0.5, 1, 2) if args.quick else (0.5, 1, 2, 5)
    for punctuated in (False, True):
        cells = []
        for mb in sizes_mb:
            text = one_line_document(words, int(mb * 1e6), punctuated, rng)
            chunker = ours()
            t0 = time.perf_counter()
            n_chunks = len(chunker.chunk_spans(text))
            elapsed = time.perf_counter() - t0
            cells.append(f"{mb:g} MB {elapsed:.2f} s ({elapsed / mb:.2f} s/MB, {n_chunks} chunks)")
        kind = "sentences" if punctuated else "no full stops"
        print(f"scaling, one-line documents ({kind}): " + "; ".join(cells))


if __name__ == "__main__":
    main()
