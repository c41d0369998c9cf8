"""Text rendering for the terminal: the ``scan`` summary, ``tune`` pairs and ``query`` columns.

Pure functions from report objects to strings; the command prints them. Names reaching this module
are already printable (:func:`rag_dedup.app.corpus.escape_name`), so no file name can move the cursor
or forge a row. Word differences are marked ``[-only left-]`` and ``{+only right+}``, or red and green
with ``colour``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rag_dedup.app.report import Chunk, ScanSummary, TuneReport, word_diff
from rag_dedup.app.retrieval import FETCH_FACTOR, METHODS, QuestionReport, RetrievalReport

__all__ = ["cluster_ids", "format_queries", "format_query", "format_summary", "format_tune", "side_by_side"]


def cluster_ids(index: Any, keys: Sequence[str]) -> dict[str, str]:
    """Each key's cluster id in ``index`` (a ``DedupIndex``), the key itself where it is not indexed.

    Two storage calls for all the keys (``contains_many``, then ``matches``), not two per key.
    """
    keys = list(dict.fromkeys(keys))
    present = [k for k, here in zip(keys, index.contains_many(keys)) if here]
    out = {k: k for k in keys}
    out.update((m.key, m.cluster_id) for m in index.matches(present))
    return out


def _pct(x: float) -> str:
    return f"{x:.1%}"


def _floor(settings: Any) -> str:
    floor = settings.get("drift_floor")
    return f" (drift floor {floor:g})" if floor is not None and floor != settings["threshold"] else ""


def format_summary(summary: ScanSummary, path: str, *, top: int = 10) -> str:
    """The human summary of ``rag-dedup scan``."""
    s = summary.settings
    b, r = s["bands"]
    lines = [
        f"rag-dedup scan {path}",
        f"  documents          {summary.documents:>7}"
        + (f"   ({len(summary.skipped)} file(s) skipped, see below)" if summary.skipped else ""),
        f"  chunks             {summary.chunks:>7}   (chunk_size {s.get('chunk_size')}, "
        f"overlap {s.get('chunk_overlap')} tokens)",
        f"  exact duplicates   {summary.exact_duplicates:>7}",
        f"  near duplicates    {summary.near_duplicates:>7}",
        f"  clusters (2+)      {len(summary.clusters):>7}",
        f"  suppressed         {summary.suppressed:>7}   ({_pct(summary.suppressed_share)} of chunks; "
        f"{summary.kept} kept)",
        f"  threshold {s['threshold']:g}{_floor(s)}, num_perm {s['num_perm']}, ngram {s['ngram']}: "
        f"LSH bands b={b} x rows r={r}, knee {s['knee']:.3f}",
    ]

    def table(title: str, rows: Sequence[Any], name: str) -> None:
        rows = [x for x in rows if x.removed] or []
        lines.append("")
        if not rows:
            lines.append(f"{title}: none removed")
            return
        shown = rows[:top]
        width = max(len(name), *(len(x.name) for x in shown))
        lines.append(f"{title}" + (f" (top {top} of {len(rows)})" if len(rows) > top else "") + ":")
        lines.append(f"    {name:<{width}}  chunks  removed   share")
        for x in shown:
            flag = "!" if x.flagged else " "
            lines.append(f"  {flag} {x.name:<{width}}  {x.chunks:>6}  {x.removed:>7}  {x.share:>6.0%}")

    table("Removals per folder", summary.by_folder, "folder")
    table("Removals per source", summary.by_source, "source")
    if summary.findings:
        n = len(summary.findings)
        lines += ["", f"Findings: {n} source(s) lose most of their chunks to copies elsewhere"
                  + (f" (first {top} shown; all in --json and --html)" if n > top else "") + ":"]
        lines += [f"  ! {f}" for f in summary.findings[:top]]
    if summary.clusters:
        lines += ["", "Largest clusters:"]
        for c in summary.clusters[:5]:
            n = len({c.representative.source, *(m.source for m in c.members)})
            lines.append(f"  {c.size:>3} chunks from {n} source(s), kept {c.representative.key}")
    if summary.skipped:
        lines += ["", f"Skipped files ({len(summary.skipped)}):"]
        lines += [f"  {k.path}: {k.reason}" for k in summary.skipped]
    return "\n".join(lines)


# --- terminal side-by-side diffs ------------------------------------------------------------------------

_COLOURS = {"del": "\x1b[1;31m", "ins": "\x1b[1;32m"}
_MARKS = {"del": ("[-", "-]"), "ins": ("{+", "+}")}
_RESET = "\x1b[0m"


def _tokens(runs: Sequence[tuple[str, str, str]], side: str, colour: bool) -> list[tuple[str, str | None]]:
    """One side of a word diff as (word, colour style or None); without colour, changed runs get marks."""
    out: list[tuple[str, str | None]] = []
    style = "del" if side == "a" else "ins"
    for tag, pa, pb in runs:
        words = (pa if side == "a" else pb).split()
        if not words:
            continue
        if tag == "equal":
            out += [(w, None) for w in words]
        elif colour:
            out += [(w, style) for w in words]
        else:
            o, c = _MARKS[style]
            words[0] = o + words[0]
            words[-1] = words[-1] + c
            out += [(w, None) for w in words]
    return out


def _wrap(tokens: Sequence[tuple[str, str | None]], width: int) -> list[tuple[str, int]]:
    """Fill lines of at most ``width`` visible characters: (rendered line, visible width)."""
    lines: list[tuple[str, int]] = []
    cur: list[str] = []
    n = 0
    for word, style in tokens:
        pieces = [word[i:i + width] for i in range(0, len(word), width)]  # a word longer than a line
        for piece in pieces:
            if cur and n + 1 + len(piece) > width:
                lines.append((" ".join(cur), n))
                cur, n = [], 0
            cur.append(f"{_COLOURS[style]}{piece}{_RESET}" if style else piece)
            n += len(piece) + (1 if len(cur) > 1 else 0)
    if cur:
        lines.append((" ".join(cur), n))
    return lines


def side_by_side(a: str, b: str, *, width: int, colour: bool, head_a: str = "", head_b: str = "") -> str:
    """Two texts in columns with word differences marked: ``[-only in a-]``, ``{+only in b+}``
    (or red and green when ``colour``)."""
    col = max(20, (width - 3) // 2)
    runs = word_diff(a, b)
    left, right = _wrap(_tokens(runs, "a", colour), col), _wrap(_tokens(runs, "b", colour), col)
    left = [(head_a[:col], len(head_a[:col])), *left]
    right = [(head_b[:col], len(head_b[:col])), *right]
    out = []
    for i in range(max(len(left), len(right))):
        la, wa = left[i] if i < len(left) else ("", 0)
        rb, _ = right[i] if i < len(right) else ("", 0)
        out.append(f"{la}{' ' * (col - wa)} │ {rb}".rstrip())
    return "\n".join(out)




def _where(c: Chunk) -> str:
    return f"{c.source} [{c.start}:{c.end}]" if c.start is not None else c.source


def _preview(text: str, n: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: max(0, n - 1)] + "…"


def format_tune(report: TuneReport, by_key: Mapping[str, Chunk], path: str, *, width: int, colour: bool) -> str:
    """The ``rag-dedup tune`` text: per threshold the counts, then the pairs near it side by side."""
    lines = [f"rag-dedup tune {path}: {report.chunks} chunks, {len(report.similarities)} candidate pairs "
             f"with similarity >= {report.floor:g}", "",
             "  threshold  suppressed   share  clusters  pairs near"]
    for t in report.thresholds:
        share = t.suppressed / report.chunks if report.chunks else 0.0
        lines.append(f"  {t.threshold:>9g}  {t.suppressed:>10}  {share:>6.1%}  {t.clusters:>8}  {t.pairs_near:>10}")
    marks = "red = only on the left, green = only on the right" if colour else \
        "[-text-] only on the left, {+text+} only on the right"
    lines += ["", f"Pairs near each threshold ({marks}). 'merged' pairs would count as one passage.",
              "Choose the lowest threshold whose merged pairs you would accept as the same passage."]
    for t in report.thresholds:
        lines += ["", "=" * min(width, 100), f"threshold {t.threshold:g}: suppresses {t.suppressed} of "
                  f"{report.chunks} chunks; {t.pairs_near} pairs within ±{report.window:g}"]
        if not t.pairs:
            lines.append("  (no pairs of chunks this close to the threshold)")
        for p in t.pairs:
            a, b = by_key[p.a], by_key[p.b]
            side = "merged" if p.similarity >= t.threshold else "kept apart"
            lines += ["", f"similarity {p.similarity:.3f} ({side} at {t.threshold:g})",
                      side_by_side(a.text, b.text, width=width, colour=colour,
                                   head_a=_where(a), head_b=_where(b))]
    return "\n".join(lines)


def _ratio_line(q: QuestionReport) -> str:
    return "    ".join(f"{METHODS[m]}: {r.distinct}/{r.k} distinct ({r.ratio:.0%}), {r.removed} removed"
                       for m, r in q.results.items())


def format_query(report: RetrievalReport, by_key: Mapping[str, Chunk], index: Any, path: str, *,
                 width: int) -> str:
    """One question: the plain top k beside the DedupPostprocessor's, and the three ratios."""
    from rag_dedup.llama_index.metadata import DEDUP_COLLAPSED

    q = report.questions[0]
    k = report.k
    col = max(30, (width - 3) // 2)
    plain, post = q.nodes["plain"], q.nodes["postprocessor"]

    cluster = cluster_ids(index, [n.node.node_id for n in (*plain, *post)]).__getitem__

    lines = [f"rag-dedup query {path}: {q.question!r}, top {k} of {report.chunks} chunks (BM25)",
             f"without dedup: {len(plain)} results, {len({cluster(n.node.node_id) for n in plain})} distinct "
             f"passages    with DedupPostprocessor: {len(post)} results, "
             f"{len({cluster(n.node.node_id) for n in post})} distinct",
             f"distinct evidence (pairwise Jaccard < {report.threshold:g}): {_ratio_line(q)}", ""]
    if len(plain) < k:
        lines.insert(1, f"only {len(plain)} chunk(s) hold a word of the question (BM25 score > 0)"
                     if plain else "no chunk matches the question (every BM25 score is 0; BM25 leaves out stopwords such as "
                     "'the'): nothing retrieved")
    seen: dict[str, int] = {}
    for i in range(max(len(plain), len(post))):
        cells = []
        for side in (plain, post):
            if i >= len(side):
                cells.append(("", ""))
                continue
            n = side[i]
            key = n.node.node_id
            dup = ""
            if side is plain:
                first = seen.setdefault(cluster(key), i + 1)
                dup = f" = #{first}" if first != i + 1 else ""
            elif n.node.metadata.get(DEDUP_COLLAPSED):
                dup = f" (+{len(n.node.metadata[DEDUP_COLLAPSED])} folded)"
            head = f"{i + 1:>2}. {float(n.score or 0.0):.2f} {key}{dup}"
            cells.append((head[:col], "    " + _preview(by_key[key].text, col - 4)))
        lines.append(f"{cells[0][0]:<{col}} │ {cells[1][0]}".rstrip())
        lines.append(f"{cells[0][1]:<{col}} │ {cells[1][1]}".rstrip())
    lines += ["", "'= #n': the same passage (same duplicate cluster) as result n; "
              "'+n folded': duplicates of it folded into its metadata[\"dedup_collapsed\"]."]
    return "\n".join(lines)


def format_queries(report: RetrievalReport, path: str) -> str:
    """Many questions: per question and on average, the distinct-evidence ratio of each list."""
    k = report.k
    heads = [METHODS[m] for m in METHODS]
    lines = [f"rag-dedup query {path}: {len(report.questions)} questions, top {k} of {report.chunks} chunks (BM25)",
             f"distinct evidence = passages with pairwise Jaccard < {report.threshold:g} (ngram {report.ngram}) "
             f"in the top {k}; DedupPostprocessor over the top {FETCH_FACTOR * k}", "",
             "   #  " + "  ".join(f"{h:>22}" for h in heads) + "  question"]

    def cell(r: Any) -> str:
        return f"{r.ratio:>5.0%} ({r.removed:>2} removed)"

    for i, q in enumerate(report.questions, 1):
        lines.append(f"{i:>4}  " + "  ".join(f"{cell(q.results[m]):>22}" for m in METHODS)
                     + f"  {_preview(q.question, 60)}")
    means = []
    for m in METHODS:
        means.append(f"{report.mean(m):.0%} ({report.mean(m, 'removed'):.1f} removed)")
    means_text = "  ".join(f"{x:>22}" for x in means)
    lines += ["", f"mean  {means_text}"]
    return "\n".join(lines)
