"""Boundary benchmark: is a passage copied into two documents chunked into duplicate chunks?

Real paragraphs of 6-15 sentences are inserted into two different real host documents at random
sentence offsets; both hosts are chunked, and the passage counts as *found* when a chunk of host A
that overlaps the passage and a chunk of host B that overlaps it are duplicates in
``DedupIndex(threshold=0.8)`` (B's chunks are added, A's are looked up with ``index.query``; only
chunks that touch the passage count, so text the two hosts happen to share cannot help). Two
insertion modes:

* ``paragraph``: the passage is a paragraph of its own (a blank line before and after), the way a
  copied paragraph sits in a document;
* ``inline``: the passage is spliced into the host's running text with a space, no break around it.

Found rates are split by the passage's own size in chunk budgets (``chunk_size`` tokens): spliced
into running text, a passage can only be found if a chunk of each host lies almost wholly inside it
(Jaccard 0.8 leaves room for about a tenth of host text in each), so short passages need small
chunks. Sizes: ``touch`` is the mean tokens of the chunks that touch the passage (chunks in running
text), ``all`` the mean tokens of all chunks of the host documents as they are (headings and short
blocks make small chunks), ``chunks`` their number, against ``SentenceSplitter(256, 64)``'s.

The inline rows form a curve of found rate against chunk size, several settings of each rule:

* ``SentenceChunker`` with ``chunk_target`` T (the default is 3/8 of ``chunk_size``);
* ``previous default (d3968e5)``, the named baseline: SentenceChunker's cut plan before issue 15's
  second round (``benchmarks/old_cut_plan.py``): the overlap is the whole previous body, so a chunk
  in running text is two bodies of mean 48 tokens; short blocks grouped up to four mean bodies;
* ``plain k=K``, the issue's reference rule: cut after each sentence whose hash is 0 mod K, cut
  before a sentence that would overflow the body budget, overlap by whole trailing sentences, no
  minimum size, paragraph breaks as SentenceChunker's;
* ``0.1 memoryless rule``, SentenceChunker's rule at 181023b: a body ends after a sentence whose
  hash says so (token-weighted, mean body 80 at 256/64), every sentence may end one, short blocks
  included; the overlap is trailing sentences of the previous body, never all of it;
* ``0.1 min-body rule``, the rule before that (a body ends at a content-defined cut only once it
  holds half the mean body, 96 tokens at 256/64);
* ``SentenceSplitter(S, S/4)`` at sizes matching the others.

``in90`` is the share of passages for which each host has a chunk lying at least 90% inside the
passage (a necessary condition for found at Jaccard 0.8). Under the table: the share of passages
that could hold such a chunk of 100 tokens at all, the best rule at a mean of 100 or more, and why
each missed passage was missed (:func:`miss_breakdown`) for the default and the previous default.

Then the throughput of SentenceChunker and SentenceSplitter on the same documents with the same
tokenizer (LlamaIndex's default), in one run, each warmed up first, with the process's peak RSS, and SentenceChunker's
time per MB on one-line documents of 0.5 to 5 MB (linear time).

Text (from this machine; tests/data/corpus if the Debian documentation is missing):

* passages: paragraphs (a single block of 6-15 punkt sentences, at most 4000 characters) of
  /usr/share/common-licenses/*, /usr/share/doc/*/README* and the GNU info manuals
  /usr/share/info/*.gz, each distinct paragraph used about equally often;
* hosts: /usr/share/doc/*/copyright and /usr/share/doc/*/NEWS* of 4-60 KB;
* byte-identical files and repeated paragraphs are read once.

Run: ``python benchmarks/bench_chunking.py [--passages 300] [--seed 7] [--quick] [--throughput-only]``
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
import resource
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the checkout's rag_dedup, not an installed one

from llama_index.core import Document  # noqa: E402
from llama_index.core.node_parser import SentenceSplitter  # noqa: E402
from llama_index.core.utils import get_tokenizer  # noqa: E402

from rag_dedup import DedupIndex  # noqa: E402
from rag_dedup.chunking import CONTINUES, STARTS_HEADING, Chunker, Units  # noqa: E402
from rag_dedup.chunking.chunker import default_chunk_target  # noqa: E402
from rag_dedup.chunking.blocks import blocks as _blocks  # noqa: E402
from rag_dedup.chunking.cuts import _cut_probability, _forced_cut  # noqa: E402
from rag_dedup.llama_index.chunking import SentenceChunker  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
import old_cut_plan  # noqa: E402

CORPUS = REPO / "tests" / "data" / "corpus"
PARAGRAPH = re.compile(r"\S(?:.|\n(?![ \t]*\n))*")  # runs of non-blank lines
BUCKETS = (("<0.5", 0.5), ("0.5-1", 1.0), ("1-2", 2.0), (">=2", float("inf")))  # passage tokens / chunk_size
Spans = Callable[[str], list[tuple[int, int]]]
Chunks = Callable[[str], list[tuple[int, int, int]]]  # (start, end, body_start) per chunk


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
    passage_docs = _unique(
        glob.glob("/usr/share/common-licenses/*") + glob.glob("/usr/share/doc/*/README*") + glob.glob("/usr/share/info/*.gz")
    )
    hosts = _unique(glob.glob("/usr/share/doc/*/copyright") + glob.glob("/usr/share/doc/*/NEWS*"), 4000, 60000)
    where = (
        "passages: /usr/share/common-licenses/*, /usr/share/doc/*/README*, /usr/share/info/*.gz; "
        "hosts: /usr/share/doc/*/{copyright,NEWS*}"
    )
    if len(passage_docs) < 5 or len(hosts) < 10:
        licences = sorted(str(p) for p in (CORPUS / "licenses").glob("*.txt"))
        copyrights = sorted(str(p) for p in (CORPUS / "copyright").glob("*.txt"))
        passage_docs, hosts = _unique(licences), _unique(copyrights, 2000)
        where = "tests/data/corpus (the Debian documentation was not found): passages from licenses/, hosts from copyright/"
    return passage_docs, hosts, where


def paragraphs(docs: list[tuple[str, str]], chunker: Chunker) -> list[str]:
    """Distinct single-block paragraphs of 6-15 sentences and at most 4000 characters."""
    out, seen = [], set()
    for _, text in docs:
        for m in PARAGRAPH.finditer(text):
            para = m.group().strip()
            if len(para) > 4000 or para in seen or len(list(_blocks(para))) != 1:
                continue
            if 6 <= len(chunker.sentence_spans(para)) <= 15:
                seen.add(para)
                out.append(para)
    return out


def make_trials(paras: list[str], hosts: list[tuple[str, str]], n: int, seed: int, mode: str, chunker: Chunker):
    rng = random.Random(seed)
    order = list(range(len(paras)))
    rng.shuffle(order)  # each paragraph once before any twice
    sentence_starts: dict[int, list[int]] = {}
    trials = []
    for t in range(n):
        para = paras[order[t % len(order)]]
        docs = []
        for h in rng.sample(range(len(hosts)), 2):
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
        trials.append((para, docs))
    return trials


def reference_spans(core: Chunker, chunk_target_mean: float, min_body: int, mod: int | None) -> Spans:
    """The reference rules on SentenceChunker's units and paragraph breaks: ``mod`` set, the plain
    rule (cut after a sentence whose hash is 0 mod ``mod``; cut before an overflowing sentence);
    else token-weighted cuts of mean ``chunk_target_mean`` once a body holds ``min_body`` tokens,
    the most cut-like sentence when the budget runs out: with ``min_body`` 0 and mean 80 the 0.1
    memoryless rule of 181023b (the same spans as that commit's SentenceChunker(256, 64)), with
    ``min_body`` 48 and mean 96 the 0.1 min-body rule. All overlap by whole trailing sentences of
    the previous body, never all of it."""
    size, overlap = core.chunk_size, core.chunk_overlap
    body_max = size - overlap
    min_block = max(1, body_max // 3)

    def spans(text: str) -> list[tuple[int, int]]:
        units: Units = core.units(text, size)
        tokens, gaps, kinds, blocks = units.tokens, units.gaps, units.kinds, units.block_tokens
        n = len(tokens)
        hard, last = [False] * n, 0
        for i in range(n):
            if kinds[i] != CONTINUES:
                hard[i] = i > 0 and (kinds[i] == STARTS_HEADING or blocks[i] >= min_block or last >= min_block)
                last = blocks[i]
        out, prev_body, s = [], 0, 0
        while s < n:
            acc, i, end = 0, s, -1
            while i < n and tokens[s] <= body_max:
                if i > s and hard[i]:
                    end = i
                    break
                cost = tokens[i] if i == s else tokens[i] + gaps[i]
                if acc + cost > body_max:
                    break
                acc += cost
                i += 1
                score = units.score(i - 1)
                cut = int(score * 2**32) % mod == 0 if mod else score < _cut_probability(tokens[i - 1], chunk_target_mean)
                if acc >= min_body and cut:
                    end = i
                    break
            if end < 0:
                if tokens[s] > body_max:
                    end = s + 1
                elif i >= n:
                    end = n
                else:
                    end = i if mod else _forced_cut(tokens, gaps, units.score, s, i, body_max)
            body = tokens[s] + sum(tokens[k] + gaps[k] for k in range(s + 1, end))
            first = s
            if out and kinds[s] == CONTINUES:
                room, rest = min(overlap, size - body), gaps[s]
                while first > prev_body + 1 and tokens[first - 1] + rest <= room:
                    first -= 1
                    rest += tokens[first] + gaps[first]
                    if kinds[first] != CONTINUES:
                        break
            out.append((units.starts[first], units.ends[end - 1]))
            prev_body, s = s, end
        return out

    return spans


def previous_chunks(core: Chunker) -> Chunks:
    """SentenceChunker's cut plan at d3968e5 (``old_cut_plan``, the named baseline) on the same
    units: chunks of two whole bodies of mean 48 tokens at 256/64."""
    size, overlap = core.chunk_size, core.chunk_overlap
    target = default_chunk_target(size)
    mean, min_block = max(target - overlap, target / 2), max(1, (size - overlap) // 3)

    def chunks(text: str) -> list[tuple[int, int, int]]:
        units = core.units(text, size)
        plan = old_cut_plan.plan_chunks(units, size, overlap, mean, min_block)
        return [(units.starts[f], units.ends[e - 1], units.starts[b]) for f, b, e in plan]

    return chunks


def current_chunks(core: Chunker) -> Chunks:
    return lambda text: [(c.start, c.end, c.body_start) for c in core.chunks(text)]


def spans_of(chunks: Chunks) -> Spans:
    return lambda text: [(s, e) for s, e, _ in chunks(text)]


MISSES = (
    "no cut inside",
    "one cut inside",
    "overlap pulls host text",
    "no chunk inside (other)",
    "cuts differ: forced",
    "cuts differ: content-defined",
    "same cuts, no duplicate",
)


def miss_breakdown(chunks: Chunks, core: Chunker, mean: float, trials, hits: list[bool]) -> Counter:
    """Why each missed passage has no duplicate chunk in both hosts, the first reason that holds:

    * ``no cut inside`` / ``one cut inside``: a host has no body starting inside the passage, or
      one (a chunk inside needs two cuts inside): the first cut inside comes too late;
    * ``overlap pulls host text``: a host has a body inside the passage but its chunk starts in the
      host's text (the overlap);
    * ``no chunk inside (other)``: a host has no chunk lying >= 90% inside for another reason;
    * ``cuts differ``: both hosts have a chunk inside but cut the passage at different sentences,
      ``forced`` when one of those cuts is not content-defined (a budget cut, or the tail rule);
    * ``same cuts, no duplicate``: the same cuts inside, and still no pair at Jaccard 0.8.
    """
    out: Counter = Counter()
    for (_, docs), hit in zip(trials, hits):
        if hit:
            continue
        per_host = []
        for text, start, end in docs:
            units = core.units(text, core.chunk_size)
            index = {s: i for i, s in enumerate(units.starts)}
            host = chunks(text)
            cuts = {b - start: b for _, _, b in host[1:] if start < b < end}
            inside = [c for c in host if min(c[1], end) - max(c[0], start) >= 0.9 * (c[1] - c[0])]
            body_inside = any(b >= start and e <= end for _, e, b in host)
            per_host.append((cuts, inside, body_inside, units, index))
        if any(len(h[0]) == 0 for h in per_host):
            out["no cut inside"] += 1
        elif any(len(h[0]) == 1 for h in per_host):
            out["one cut inside"] += 1
        elif any(not h[1] and h[2] for h in per_host):
            out["overlap pulls host text"] += 1
        elif any(not h[1] for h in per_host):
            out["no chunk inside (other)"] += 1
        else:
            differ = [(h, h[0][k]) for h in per_host for k in set(per_host[0][0]) ^ set(per_host[1][0]) if k in h[0]]
            if not differ:
                out["same cuts, no duplicate"] += 1
            elif any(
                h[3].score(h[4][b] - 1) >= _cut_probability(h[3].tokens[h[4][b] - 1], mean) for h, b in differ
            ):
                out["cuts differ: forced"] += 1
            else:
                out["cuts differ: content-defined"] += 1
    return out


def splitter_spans(splitter: SentenceSplitter) -> Spans:
    def spans(text: str) -> list[tuple[int, int]]:
        nodes = splitter.get_nodes_from_documents([Document(text=text)])
        return [(n.start_char_idx, n.end_char_idx) for n in nodes]

    return spans


def evaluate(spans: Spans, trials, tokenizer, chunk_size: int) -> dict:
    found = inside = 0
    hits: list[bool] = []
    by: dict[str, list[int]] = {}
    sizes: list[int] = []
    for para, docs in trials:
        touching = []
        hosts_inside = 0
        for text, start, end in docs:
            chunk_spans = [(s, e) for s, e in spans(text) if s < end and e > start]
            touching.append([text[s:e] for s, e in chunk_spans])
            hosts_inside += any(min(e, end) - max(s, start) >= 0.9 * (e - s) for s, e in chunk_spans)
        inside += hosts_inside == len(docs)
        index = DedupIndex(threshold=0.8)
        index.add_many((f"B{j}", chunk) for j, chunk in enumerate(touching[1]))
        hit = any(key.startswith("B") for chunk in touching[0] for key, _ in index.query(chunk))
        found += hit
        hits.append(hit)
        budgets = len(tokenizer(para)) / chunk_size
        counts = by.setdefault(next(label for label, limit in BUCKETS if budgets < limit), [0, 0])
        counts[0] += hit
        counts[1] += 1
        sizes.extend(len(tokenizer(c)) for chunk_list in touching for c in chunk_list)
    return {"found": found / len(trials), "by": by, "touch": statistics.mean(sizes), "in90": inside / len(trials), "hits": hits}


def host_sizes(spans: Spans, hosts, tokenizer) -> tuple[int, float]:
    sizes = [len(tokenizer(text[s:e])) for _, text in hosts for s, e in spans(text)]
    return len(sizes), statistics.mean(sizes)


def throughput(makers, documents, repeats: int) -> list[tuple[float, int]]:
    """Best wall time of ``repeats`` runs of get_nodes_from_documents for each of ``makers`` (a
    fresh chunker each run), the rounds interleaved (one run of each maker per round, so a change in
    the machine's load falls on both sides), garbage collection off while timing (as timeit does),
    after one untimed warm-up run of each on the first 50 documents; and the node counts."""
    for make in makers:
        make().get_nodes_from_documents(documents[:50])  # warm-up, untimed: loads punkt, fills lazy imports
    best, counts = [float("inf")] * len(makers), [0] * len(makers)
    for _ in range(repeats):
        for k, make in enumerate(makers):
            chunker = make()
            gc.collect()
            gc.disable()
            try:
                t0 = time.perf_counter()
                counts[k] = len(chunker.get_nodes_from_documents(documents))
                best[k] = min(best[k], time.perf_counter() - t0)
            finally:
                gc.enable()
    return list(zip(best, counts))


def one_line_document(words: list[str], n_chars: int, punctuated: bool, rng: random.Random) -> str:
    """A single line of shuffled real words (so sentences do not repeat), with or without full stops."""
    out, size = [], 0
    while size < n_chars:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(8, 30)))
        sentence = sentence[:1].upper() + sentence[1:] + ("." if punctuated else "")
        out.append(sentence)
        size += len(sentence) + 1
    return " ".join(out)[:n_chars]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--targets", default="128,112,104,88,80,64", help="chunk_target values for the curve")
    parser.add_argument("--quick", action="store_true", help="100 passages, fewer curve points, one timing run, scaling up to 2 MB")
    parser.add_argument("--throughput-only", action="store_true", help="skip the found-rate tables: throughput and scaling only")
    args = parser.parse_args()
    if args.quick:
        args.passages = min(args.passages, 100)
    tokenizer = get_tokenizer()
    size, overlap = 256, 64
    core = Chunker(tokenizer, chunk_size=size, chunk_overlap=overlap)

    passage_docs, hosts, where = sources()
    paras = paragraphs(passage_docs, core)
    print(f"text: {where}")
    print(f"      {len(paras)} distinct paragraphs of 6-15 sentences from {len(passage_docs)} files; {len(hosts)} host documents")
    print(f"settings: chunk_size={size} chunk_overlap={overlap}, DedupIndex(threshold=0.8), {args.passages} passages per mode, seed {args.seed}")

    if not args.throughput_only:
        def ours(target: int | None = None) -> Spans:
            return SentenceChunker(chunk_size=size, chunk_overlap=overlap, chunk_target=target).chunk_spans

        def theirs(s: int) -> Spans:
            return splitter_spans(SentenceSplitter(chunk_size=s, chunk_overlap=s // 4, tokenizer=tokenizer))

        targets = [int(t) for t in args.targets.split(",")][: 3 if args.quick else None]
        previous = previous_chunks(core)
        curve: list[tuple[str, Spans]] = [("SentenceChunker (default)", ours())]
        baseline = ("previous default (d3968e5)", spans_of(previous))
        curve += [baseline]
        curve += [(f"SentenceChunker target={t}", ours(t)) for t in targets if t != default_chunk_target(size)]
        curve += [(f"plain k={k}", reference_spans(core, 0, 0, k)) for k in ((3, 2) if args.quick else (5, 4, 3, 2))]
        memoryless = ("0.1 memoryless rule", reference_spans(core, 80.0, 0, None))
        curve += [memoryless, ("0.1 min-body rule", reference_spans(core, 96.0, 48, None))]
        curve += [(f"SentenceSplitter({s}, {s // 4})", theirs(s)) for s in ((256, 128) if args.quick else (256, 192, 128, 96, 64))]
        paragraph_rows = [curve[0], baseline, curve[-1 - (1 if args.quick else 4)], memoryless]
        explained = {"SentenceChunker (default)": (current_chunks(core), core.mean_body())}
        explained["previous default (d3968e5)"] = (previous, max(default_chunk_target(size) - overlap, default_chunk_target(size) / 2))
        baseline_chunks, _ = host_sizes(theirs(256), hosts, tokenizer)

        print()
        print(
            f"{'mode':<10} {'rule':<31} {'found':>6}   {'<0.5':>10} {'0.5-1':>10} {'1-2':>10} {'>=2':>10}   "
            f"{'in90':>5} {'touch':>5} {'all':>5} {'chunks':>7} {'vs SS256':>8}"
        )
        inline: list[tuple[str, float, float]] = []
        breakdowns: list[tuple[str, str, Counter]] = []
        for mode, rows in (("paragraph", paragraph_rows), ("inline", curve)):
            trials = make_trials(paras, hosts, args.passages, args.seed, mode, core)
            for name, spans in rows:
                r = evaluate(spans, trials, tokenizer, size)
                if name in explained:
                    breakdowns.append((mode, name, miss_breakdown(explained[name][0], core, explained[name][1], trials, r["hits"])))
                n_chunks, mean_all = host_sizes(spans, hosts, tokenizer)
                cells = " ".join(
                    f"{r['by'][k][0] / r['by'][k][1]:>4.2f} ({r['by'][k][1]:>3})" if k in r["by"] else f"{'-':>10}" for k, _ in BUCKETS
                )
                print(
                    f"{mode:<10} {name:<31} {r['found']:>6.3f}   {cells}   {r['in90']:>5.2f} {r['touch']:>5.0f} {mean_all:>5.0f} "
                    f"{n_chunks:>7} {n_chunks / baseline_chunks:>7.2f}x",
                    flush=True,
                )
                if mode == "inline":
                    inline.append((name, r["found"], mean_all))
        passage_tokens = [len(tokenizer(para)) for para, _ in trials]
        at_100 = [row for row in inline if row[2] >= 100]
        best = max(at_100, key=lambda row: row[1]) if at_100 else None
        print(
            f"passage sizes (inline): a chunk of >= 100 tokens lying >= 90% inside the passage is possible at all "
            f"for {sum(t >= 90 for t in passage_tokens) / len(passage_tokens):.2f} of the passages (>= 90 tokens), a chunk of "
            f"100 wholly inside for {sum(t >= 100 for t in passage_tokens) / len(passage_tokens):.2f}; median passage "
            f"{statistics.median(passage_tokens):.0f} tokens; found needs one such chunk in each host at the same cuts (in90). "
            + (f"Best rule with all chunks >= 100 tokens: {best[0]}, found {best[1]:.3f} at {best[2]:.0f} tokens." if best else "")
        )
        print(f"why missed ({args.passages} trials per mode; the first reason that holds, see miss_breakdown):")
        for mode, name, counts in breakdowns:
            cells = ", ".join(f"{reason} {counts[reason]}" for reason in MISSES if counts[reason]) or "none"
            print(f"  {mode:<10} {name:<31} {sum(counts.values()):>3} missed: {cells}")
        print()

    documents = [Document(text=text, id_=path) for path, text in hosts + passage_docs]
    megabytes = sum(len(d.text.encode()) for d in documents) / 1e6
    repeats = 1 if args.quick else 3
    rss_before = _rss_mb()
    (t_ours, n_ours), (t_theirs, n_theirs) = throughput(
        [
            lambda: SentenceChunker(chunk_size=size, chunk_overlap=overlap),
            lambda: SentenceSplitter(chunk_size=size, chunk_overlap=overlap, tokenizer=tokenizer),
        ],
        documents,
        repeats,
    )
    print(
        f"throughput ({len(documents)} documents, {megabytes:.1f} MB, same tokenizer, warmed up, best of {repeats} interleaved rounds): "
        f"SentenceChunker {megabytes / t_ours:.2f} MB/s ({n_ours} nodes), "
        f"SentenceSplitter(256, 64) {megabytes / t_theirs:.2f} MB/s ({n_theirs} nodes), ratio {t_theirs / t_ours:.2f}x; "
        f"peak RSS {_rss_mb():.0f} MB (before timing {rss_before:.0f} MB)"
    )

    rng = random.Random(args.seed)
    words = [w.strip(".?!") for _, text in passage_docs[:40] for w in text.split() if w.strip(".?!")]
    sizes_mb = (0.5, 1, 2) if args.quick else (0.5, 1, 2, 5)
    for punctuated in (False, True):
        cells = []
        for mb in sizes_mb:
            text = one_line_document(words, int(mb * 1e6), punctuated, rng)
            chunker = SentenceChunker(chunk_size=size, chunk_overlap=overlap)
            t0 = time.perf_counter()
            n_chunks = len(chunker.chunk_spans(text))
            elapsed = time.perf_counter() - t0
            cells.append(f"{mb:g} MB {elapsed:.2f} s ({elapsed / mb:.2f} s/MB, {n_chunks} chunks)")
        kind = "sentences" if punctuated else "no full stops"
        print(f"scaling, one-line documents ({kind}): " + "; ".join(cells))


if __name__ == "__main__":
    main()
