"""What gets shingled: script-aware tokens, the short-text regime and the decoration rule, on real text.

Run: ``python benchmarks/bench_scripts.py [--quick] [--install]``

``--install`` first runs ``apt-get install -y manpages-zh manpages-ja`` (Debian; needs root): the
Chinese and Japanese manual pages under ``/usr/share/man/{zh_CN,zh_TW,ja}`` are the CJK corpus.

Sections, each printed against a named baseline in the same run:

1. CJK paragraphs: every paragraph (roff paragraph macros split them) of the Chinese and Japanese
   manual pages with more than ``SHORT_TOKENS`` tokens, exact copies folded, plus one single-word
   edit (two adjacent ideographs or kana replaced by two others from the corpus, as 基石 -> 基础) of
   every fifth one. Real variation is there already: ls, dir and vdir, the shadow tools and apt's
   pages repeat whole option paragraphs. Ground truth: exact Jaccard on the new tokens for *every*
   pair sharing a shingle (a sparse matrix product, no sampling). Printed: pair recall at J >= 0.8
   (goal >= 0.97), precision (same-cluster pairs with J >= 0.7), and the same true pairs as word
   shingles (the tokens before this change, from ``git show BASELINE:rag_dedup/shingles.py``) see them.
2. Short texts (3-20 tokens): English man-page NAME lines, Markdown/reST headings and list items of
   the documentation on this machine, a third each, at most PER_FAMILY from one file or command family
   (short_texts), exact copies folded; each gets one variant by a small real-world edit (a changed
   letter, a plural, a list marker or trailing full stop, and for texts of 12+ words one word
   replaced). Printed: variants found (same cluster as their original; goal >= 0.95), unrelated pairs
   merged (pairs of different originals in one cluster, goal <= 0.1%), and with the regime off; then
   by exact Jaccard of the sets, this rule beside PREVIOUS's (character trigrams up to 20 tokens).
3. Decoration on real licence paragraphs (``/usr/share/common-licenses``, ``/usr/share/doc/*/copyright``,
   licence files and source headers under site-packages): the BSD clause with ``*`` comment prefixes
   against the plain clause, and all pairs J >= 0.8 with the rule on and off; a pair the rule gains is
   *suspect* when the texts' letters and digits alone (difflib ratio) are less than 0.8 alike.
4. English throughput: text -> signature of 180-word real chunks (bench_index.py's section 2) with this
   shingling against BASELINE's ``shingle_hashes_many``, ROUNDS interleaved rounds (the order of the
   three paths turns each round), CPU time; printed: the median of the per-round ratios (and their
   range, and the best-of ratio); RSS.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import gzip
import importlib.util
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from scipy import sparse

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realtext import machine_words  # noqa: E402

from rag_dedup import DedupIndex  # noqa: E402
from rag_dedup.minhash import MinHasher  # noqa: E402
from rag_dedup.normalize import SPLIT_SCRIPTS, canonical, shingle_tokens  # noqa: E402
from rag_dedup.shingles import SHORT_TOKENS, shingle_hashes_many  # noqa: E402
from rag_dedup.similarity import jaccard  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
#: The commit whose shingling is the baseline (the last one before script-aware tokens).
BASELINE = "24a97d1"
#: The commit whose short-text rule is the baseline of section 2 (character trigrams for 3-20 tokens).
PREVIOUS = "902b820"
THRESHOLD = 0.8
#: Interleaved rounds of the throughput section (its ratio is the median of the per-round ratios; on a
#: shared machine single rounds range from about 0.75x to 1.15x, so 9 rounds left the median within a
#: few hundredths of the goal by chance alone).
ROUNDS = 21
#: Short texts taken at most from one file or one command family (short_texts).
PER_FAMILY = 40

_ROFF_ESCAPE = re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)|\\\(..|\\[-&e|^/,]|\\\*\(..|\\\*.")
_PARAGRAPH_MACRO = re.compile(r"^\.(?:PP|LP|P|TP|IP|SH|SS|sp|br|HP|RS|RE|TH|nf|fi|in)\b")


# --- corpora ---------------------------------------------------------------------------------
def man_paragraphs(root: Path) -> Iterator[tuple[str, str]]:
    """(page, paragraph) of every man page under ``root``: roff text between paragraph macros."""
    for path in sorted(root.rglob("*.gz")):
        try:
            text = gzip.decompress(path.read_bytes()).decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
            continue
        lines: list[str] = []
        for line in text.splitlines() + [".PP"]:
            if _PARAGRAPH_MACRO.match(line) or not line.strip():
                if lines:
                    yield path.name, _ROFF_ESCAPE.sub("", "\n".join(lines))
                lines = []
            elif line.startswith((".", "'")):
                if line.startswith((".B ", ".I ", ".BR ", ".BI ", ".IR ", ".RB ", ".RI ", ".IB ")):
                    lines.append(line.split(" ", 1)[1].replace('"', ""))
            else:
                lines.append(line)


_SPLIT_CHAR = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b, _ in SPLIT_SCRIPTS) + "]{2}")


def cjk_edit(text: str, rng: random.Random, pool: list[str]) -> str | None:
    """Replace one run of two adjacent split-script characters by another pair from ``pool``."""
    spots = [m.start() for m in _SPLIT_CHAR.finditer(text)]
    if not spots:
        return None
    at = rng.choice(spots)
    return text[:at] + rng.choice(pool) + text[at + 2 :]


def _read_doc(path: Path) -> str | None:
    try:
        data = path.read_bytes()
        return (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return None


_HEADING = re.compile(r"^#{1,4} (.+)$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+] |\d{1,2}[.)] )(.+)$")
_UNDERLINE = re.compile(r"[=\-~^]{3,}")


def short_texts(limit: int, seed: int = 7) -> dict[str, list[str]]:
    """Real texts of 3-20 tokens (:func:`~rag_dedup.normalize.shingle_tokens`) by source, each list shuffled (seeded), exact copies folded across all:
    ``name``: the NAME lines of the English man pages (man1, man8; roff macro lines dropped, so that
    ``.HP`` does not lead 16,000 gcloud lines); ``heading``: Markdown ``#`` and reST underlined titles;
    ``item``: Markdown/reST list items; the last two from the documentation on this machine (``*.md``,
    ``*.rst``, gzipped or not, under /usr/share/doc, /usr/share/cmake-*, /usr/lib/node_modules, the
    Python installations). At most ``limit`` of each, and at most PER_FAMILY from one file (or NAME
    lines of one command: 16,000 of the 18,000 pages are ``gcloud ...``), so that no changelog or
    command family is most of a source: their lines differ in a version or a hash, the same template."""
    seen: set[str] = set()
    found: dict[str, list[str]] = {"name": [], "heading": [], "item": []}
    per_family: Counter[tuple[str, str]] = Counter()

    def take(kind: str, text: str, family: str) -> None:
        text = " ".join(text.split())
        key = canonical(text)
        tokens = len(shingle_tokens(text))  # what the regime counts: "0.6.1 / 2016-05-02" has two
        if 3 <= tokens <= SHORT_TOKENS and len(text) < 200 and key not in seen and per_family[kind, family] < PER_FAMILY:
            seen.add(key)
            per_family[kind, family] += 1
            found[kind].append(text)

    for path in sorted(Path("/usr/share/man/man1").glob("*.gz")) + sorted(Path("/usr/share/man/man8").glob("*.gz")):
        text = _read_doc(path)
        m = re.search(r"^\.SH\s+\"?NAME\"?\s*\n(.+?)\n\.(?:SH|SS)", text or "", re.M | re.S)
        if m:
            lines = [line for line in m.group(1).splitlines() if not line.startswith((".", "'"))]
            name = _ROFF_ESCAPE.sub("", " ".join(lines)).replace("\\", "")
            take("name", name, name.split(" ", 1)[0])
    roots = [Path("/usr/share/doc"), *sorted(Path("/usr/share").glob("cmake-*")), Path("/usr/lib/node_modules")]
    roots += sorted(Path("/usr/lib").glob("python3*")) + sorted(Path(sys.prefix).glob("lib/python3*"))
    roots += sorted(Path.home().glob(".pyenv/versions/*/lib/python3*"))
    for root in roots:
        paths = [p for pattern in ("*.md", "*.md.gz", "*.rst", "*.rst.gz") for p in root.rglob(pattern)]
        for path in sorted(paths):
            lines = (_read_doc(path) or "").splitlines()
            for i, line in enumerate(lines):
                if m := _HEADING.match(line):
                    take("heading", m.group(1).strip("# "), str(path))
                elif i + 1 < len(lines) and line.strip() and _UNDERLINE.fullmatch(lines[i + 1]) and len(lines[i + 1]) >= len(line):
                    take("heading", line, str(path))
                elif m := _LIST_ITEM.match(line):
                    take("item", m.group(1), str(path))
    rng = random.Random(seed)
    for texts in found.values():
        rng.shuffle(texts)
        del texts[limit:]
    return found


def short_variant(text: str, rng: random.Random, vocabulary: list[str]) -> tuple[str, str]:
    """One small real-world edit of a short text, and its kind."""
    words = text.split()
    kinds = ["letter", "plural", "marker"] + (["word"] if len(words) >= 12 else [])
    kind = rng.choice(kinds)
    long_words = [i for i, w in enumerate(words) if len(w) >= 4 and w.isalpha()] or list(range(len(words)))
    i = rng.choice(long_words)
    if kind == "letter":
        w = words[i]
        at = rng.randrange(1, len(w)) if len(w) > 1 else 0
        words[i] = w[:at] + rng.choice("aeiourstln") + w[at + 1 :]
    elif kind == "plural":
        words[i] = words[i][:-1] if words[i].endswith("s") else words[i] + "s"
    elif kind == "marker":
        return rng.choice(["* ", "- ", "1. ", "(a) ", "# "]) + text + rng.choice(["", ".", ":"]), kind
    else:
        words[i] = rng.choice(vocabulary)
    return " ".join(words), kind


def licence_paragraphs(limit: int) -> list[str]:
    """Paragraphs of real licence and copyright text: common licences, Debian copyright files,
    licence files and comment headers of source files under site-packages (with their markers)."""
    out: list[str] = []
    paths = sorted(Path("/usr/share/common-licenses").glob("*")) + sorted(Path("/usr/share/doc").glob("*/copyright"))
    site = sorted(Path(sys.prefix).glob("lib/python3*/site-packages"))
    for root in site:
        paths += sorted(root.glob("*.dist-info/LICENSE*")) + sorted(root.glob("*.dist-info/licenses/*"))
        paths += sorted(p for p in root.rglob("*.[ch]") if p.stat().st_size < 200_000)[:400]
        paths += sorted(p for p in root.rglob("*.py") if p.stat().st_size < 200_000)[:3000]
    for path in paths:
        try:
            text = path.read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if path.suffix in (".c", ".h", ".py"):
            m = re.match(r"\s*(/\*.*?\*/|(?:#[^\n]*\n)+)", text, re.S)
            if not m or "copyright" not in m.group(1).lower():
                continue
            text = m.group(1)
        for para in re.split(r"\n\s*(?:[*#]\s*)?\n|\n \.\n", text):
            if len(para.split()) >= 25:
                out.append(para)
        if len(out) >= limit:
            break
    return out[:limit]


# --- ground truth ----------------------------------------------------------------------------
def all_pairs(sets: Sequence[np.ndarray], floor: float) -> dict[tuple[int, int], float]:
    """Exact Jaccard of every pair that shares a shingle and reaches ``floor`` (sparse product)."""
    rows = np.repeat(np.arange(len(sets)), [len(s) for s in sets])
    values, cols = np.unique(np.concatenate(sets), return_inverse=True)
    incidence = sparse.csr_matrix((np.ones(len(rows), dtype=np.int32), (rows, cols)), shape=(len(sets), len(values)))
    shared = sparse.triu(incidence @ incidence.T, k=1).tocoo()
    sizes = np.array([len(s) for s in sets])
    sims = shared.data / (sizes[shared.row] + sizes[shared.col] - shared.data)
    keep = sims >= floor
    return {(int(i), int(j)): float(s) for i, j, s in zip(shared.row[keep], shared.col[keep], sims[keep])}


def cluster_of(index: DedupIndex, keys: Sequence[str]) -> list[str]:
    return [m.duplicate_of or k for k, m in zip(keys, index.matches(list(keys)))]


def baseline_shingles(commit: str = BASELINE):
    """``commit``'s rag_dedup/shingles.py (BASELINE's by default), loaded as a module of its own."""
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{commit}:rag_dedup/shingles.py"], check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / f"shingles_{commit}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"shingles_{commit}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- 1. CJK paragraphs -----------------------------------------------------------------------
def cjk(quick: bool, old) -> None:
    rng = random.Random(20)
    roots = [Path("/usr/share/man") / d for d in ("zh_CN", "zh_TW", "ja")]
    texts: dict[str, str] = {}
    for root in roots:
        for page, para in man_paragraphs(root):
            if _SPLIT_CHAR.search(para):
                texts.setdefault(canonical(para), para)
    paras = [t for t in texts.values() if len(shingle_hashes_many([t])[0]) and len(t) >= 40]
    sets0 = shingle_hashes_many(paras)
    paras = [p for p, s in zip(paras, sets0) if len(s) > 24]  # above the short-text regime
    if quick:
        paras = paras[:3000]
    pool = [m.group() for p in paras[:500] for m in _SPLIT_CHAR.finditer(p)]
    edits = [e for p in paras[::5] if (e := cjk_edit(p, rng, pool)) is not None]
    corpus = paras + edits
    print(f"\n== 1. CJK paragraphs: {len(paras):,} real paragraphs of {len(roots)} man-page trees (zh_CN, zh_TW, ja), "
          f"+{len(edits):,} one-word edits; threshold {THRESHOLD}")
    sets = shingle_hashes_many(corpus)
    truth = all_pairs(sets, 0.7)
    index = DedupIndex(threshold=THRESHOLD)
    keys = [f"p{i}" for i in range(len(corpus))]
    t0 = time.perf_counter()
    index.add_many(list(zip(keys, corpus)))
    took = time.perf_counter() - t0
    owner = cluster_of(index, keys)
    high = [(i, j) for (i, j), s in truth.items() if s >= THRESHOLD]
    found = sum(owner[i] == owner[j] for i, j in high)
    print(f"   true pairs J >= {THRESHOLD}: {len(high):,}; same cluster: {found / max(len(high), 1):.4f} (goal >= 0.97)")
    members: dict[str, list[int]] = {}
    for i, o in enumerate(owner):
        members.setdefault(o, []).append(i)
    same = [(a, b) for m in members.values() if len(m) > 1 for x, a in enumerate(m) for b in m[x + 1 :]]
    precise = sum(truth.get((min(a, b), max(a, b)), 0.0) >= 0.7 for a, b in same)
    print(f"   same-cluster pairs: {len(same):,}; with J >= 0.7: {precise / max(len(same), 1):.4f}; "
          f"clusters: {len(members):,}; add_many {len(corpus) / took:,.0f} paragraphs/s")
    old_sets = old.shingle_hashes_many(corpus)
    seen = sum(old.jaccard(old_sets[i], old_sets[j]) >= THRESHOLD for i, j in high)
    edit_pairs = [(i, len(paras) + k) for k, i in enumerate(range(0, len(paras), 5)) if k < len(edits)]
    old_edit = sum(old.jaccard(old_sets[i], old_sets[j]) >= THRESHOLD for i, j in edit_pairs)
    new_edit = sum(owner[i] == owner[j] for i, j in edit_pairs)
    print(f"   baseline {BASELINE} word shingles: {seen / max(len(high), 1):.4f} of those pairs at J >= {THRESHOLD}; "
          f"one-word edits found: new {new_edit / max(len(edit_pairs), 1):.4f}, baseline {old_edit / max(len(edit_pairs), 1):.4f}")


# --- 2. short texts --------------------------------------------------------------------------
def short(quick: bool) -> None:
    rng = random.Random(7)
    sources = short_texts(700 if quick else 2000)
    originals = [t for texts in sources.values() for t in texts]
    vocabulary = sorted({w for t in originals for w in t.split() if w.isalpha() and len(w) >= 4})
    variants = [short_variant(t, rng, vocabulary) for t in originals]
    corpus = originals + [v for v, _ in variants]
    n = len(originals)
    counts = ", ".join(f"{len(texts):,} {kind}" for kind, texts in sources.items())
    print(f"\n== 2. short texts: {n:,} real 3-20 token texts ({counts}), one variant each; threshold {THRESHOLD}")
    for label, short_tokens in (("short-text regime (default)", SHORT_TOKENS), ("regime off (word shingles)", 0)):
        index = DedupIndex(threshold=THRESHOLD, short_tokens=short_tokens)
        keys = [f"s{i}" for i in range(len(corpus))]
        index.add_many(list(zip(keys, corpus)))
        owner = cluster_of(index, keys)
        kinds: dict[str, list[bool]] = {}
        for i, (_, kind) in enumerate(variants):
            kinds.setdefault(kind, []).append(owner[i] == owner[n + i])
        found = sum(sum(v) for v in kinds.values()) / n
        base_of = list(range(n)) * 2
        members: dict[str, list[int]] = {}
        for i, o in enumerate(owner):
            members.setdefault(o, []).append(i)
        merged = sum(base_of[a] != base_of[b] for m in members.values() for x, a in enumerate(m) for b in m[x + 1 :])
        total = n * (n - 1) // 2 * 4
        per_kind = ", ".join(f"{k} {sum(v) / len(v):.3f}" for k, v in sorted(kinds.items()))
        print(f"   {label}: variants found {found:.4f} (goal >= 0.95; {per_kind}); "
              f"unrelated pairs merged {merged:,} of {total:,} = {merged / total:.6%} (goal <= 0.1%)")
    # The same corpus under the previous short-text rule (PREVIOUS: trigrams up to SHORT_TOKENS), by
    # exact Jaccard of the shingle sets: the variants at J >= THRESHOLD, the unrelated pairs at it
    # (all pairs sharing a shingle, a sparse product), and the 12-20 token texts' one-word replacements.
    previous = baseline_shingles(PREVIOUS)
    rules = (("this rule", shingle_hashes_many), (f"{PREVIOUS} (trigrams up to {SHORT_TOKENS})", previous.shingle_hashes_many))
    for label, fn in rules:
        sets = fn(corpus)
        truth = np.array([jaccard(sets[i], sets[n + i]) for i in range(n)])
        words = np.array([kind == "word" for _, kind in variants])
        pairs = all_pairs(sets, THRESHOLD)
        unrelated = sum(i % n != j % n for i, j in pairs)
        print(f"   exact J, {label}: variants at J >= {THRESHOLD} {np.mean(truth >= THRESHOLD):.4f} (median J {np.median(truth):.3f}; "
              f"one word of 12+ replaced {np.mean(truth[words] >= THRESHOLD):.3f}); unrelated pairs at J >= {THRESHOLD}: "
              f"{unrelated:,} = {unrelated / (n * (n - 1) // 2 * 4):.6%}")


# --- 3. decoration ---------------------------------------------------------------------------
def decoration(quick: bool) -> None:
    bsd_plain = Path("/usr/share/common-licenses/BSD").read_text()
    clause = next(p for p in bsd_plain.split("\n\n") if "Redistribution and use" in p)
    starred = "/*\n" + "\n".join(" * " + line for line in clause.splitlines()) + "\n */"
    print("\n== 3. decoration: the rule on (default) against off (ignore_decoration=False)")
    for label, a, b in (("BSD clause, ' * ' comment prefixes vs plain", starred, clause),
                        ("the same with '1.'-'3.' numbering removed", clause, re.sub(r"(?m)^\s*\d\. ", "", clause))):
        on = jaccard(*shingle_hashes_many([a, b]))
        off = jaccard(*shingle_hashes_many([a, b], ignore_decoration=False))
        print(f"   {label}: J on {on:.3f}, off {off:.3f}")
    paras = list(dict.fromkeys(licence_paragraphs(4000 if quick else 12000)))
    on_sets = shingle_hashes_many(paras)
    off_sets = shingle_hashes_many(paras, ignore_decoration=False)
    on_pairs, off_pairs = all_pairs(on_sets, THRESHOLD), all_pairs(off_sets, THRESHOLD)
    gained = [p for p in on_pairs if p not in off_pairs]
    lost = [p for p in off_pairs if p not in on_pairs]

    def letters(t: str) -> str:
        return re.sub(r"[^0-9a-z]+", "", t.lower())

    suspect = [p for p in gained if difflib.SequenceMatcher(None, letters(paras[p[0]]), letters(paras[p[1]]), autojunk=False).ratio() < THRESHOLD]
    print(f"   {len(paras):,} real licence paragraphs: pairs J >= {THRESHOLD}: on {len(on_pairs):,}, off {len(off_pairs):,}; "
          f"gained {len(gained):,}, lost {len(lost):,}; gained pairs whose letters and digits are < {THRESHOLD} alike "
          f"(suspect merges): {len(suspect):,}")
    for i, j in suspect[:2]:
        print(f"     suspect: {paras[i][:70]!r} ~ {paras[j][:70]!r}")


# --- 4. English throughput -------------------------------------------------------------------
def throughput(quick: bool, old) -> None:
    words, _ = machine_words(180 * (4000 if quick else 8000))
    texts = [" ".join(words[i : i + 180]) for i in range(0, len(words) - 179, 180)]
    hasher = MinHasher(128)
    plain = functools.partial(shingle_hashes_many, ignore_decoration=False)
    runs: dict[str, list[float]] = {"new": [], "old": [], "plain": []}
    order = [("old", old.shingle_hashes_many), ("new", shingle_hashes_many), ("plain", plain)]
    hasher.signatures(shingle_hashes_many(texts[:500]))  # warm up (power tables, caches) outside the rounds
    for r in range(ROUNDS):
        # The order turns each round (old first, then new first, then plain first, ...), so that no
        # path always runs right after the same one (a machine's state drifts within a round too).
        for name, fn in order[r % 3 :] + order[: r % 3]:
            t0 = time.process_time()  # CPU time: the machine is shared, wall time is noise
            hasher.signatures(fn(texts))
            runs[name].append(time.process_time() - t0)
    old_s, new_s, plain_s = (np.array(runs[k]) for k in ("old", "new", "plain"))
    ratio, plain_ratio = old_s / new_s, old_s / plain_s  # per round: the three ran back to back
    print(f"\n== 4. English text -> signature, {len(texts):,} real 180-word chunks, 128 permutations, {ROUNDS} interleaved rounds, CPU time")
    print(f"   baseline {BASELINE}: {len(texts) / np.median(old_s):,.0f} chunks/s; this shingling: {len(texts) / np.median(new_s):,.0f} "
          f"chunks/s (medians); ratio new/baseline median {np.median(ratio):.3f} (goal >= 0.90; rounds {ratio.min():.3f}-{ratio.max():.3f}, "
          f"best-of {old_s.min() / new_s.min():.3f}); with ignore_decoration=False {len(texts) / np.median(plain_s):,.0f} chunks/s, "
          f"ratio median {np.median(plain_ratio):.3f}; peak RSS {rss_mb():,.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller corpora, for a smoke run")
    parser.add_argument("--install", action="store_true", help="apt-get install manpages-zh manpages-ja first")
    parser.add_argument("--only", default="1234", help="sections to run, e.g. 14")
    args = parser.parse_args()
    if args.install:
        subprocess.run(["apt-get", "install", "-y", "manpages-zh", "manpages-ja"], check=True)
    old = baseline_shingles()
    if "1" in args.only:
        cjk(args.quick, old)
    if "2" in args.only:
        short(args.quick)
    if "3" in args.only:
        decoration(args.quick)
    if "4" in args.only:
        throughput(args.quick, old)


if __name__ == "__main__":
    main()
