"""Self-contained HTML reports for ``rag-dedup scan --html`` and ``rag-dedup tune --html``.

One file, no external assets: inline CSS, inline SVG charts, and a short inline script (a filter box
for clusters, expand/collapse buttons). The script's last act is to set ``data-report-ready`` on the
``<html>`` element, and an error handler sets ``data-report-error``: a browser test can load the page
and read the DOM to know that the page rendered and its script ran without an error.

Every piece of corpus text is escaped with :func:`html.escape`; differences between two chunks are
marked with ``<del>`` (only in the kept chunk) and ``<ins>`` (only in the other one), computed by
:func:`rag_dedup.app.report.word_diff`.

The scan page is built for big corpora (thousands of files, tens of thousands of clusters): its first
screen is the summary beside the similarity histogram; findings are grouped by top-level folder, the
largest group first, each group collapsed; clusters are collapsed, the largest ``max_clusters`` of them
("largest 150 of 15,397 clusters"), each showing the representative's text once and every near member
as a compact diff against it (long common runs elided), exact copies as a list of locations.

The S-curve is the probability that two chunks of Jaccard similarity ``s`` share at least one LSH band:
``P(s) = 1 - (1 - s**r)**b`` (see :mod:`rag_dedup.lsh`); the threshold and the knee ``(1/b)**(1/r)`` are
marked on it.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import re

from rag_dedup.app.report import ClusterReport, Member, Removals, ScanSummary, TuneReport, histogram, word_diff
from rag_dedup.app.retrieval import FETCH_FACTOR, METHODS, RetrievalReport

__all__ = ["diff_html", "histogram_svg", "inline_diff_html", "queries_page", "s_curve_svg", "scan_page", "tune_page"]

_CSS = """
:root { --del: #ffd7d5; --ins: #ccf0d0; --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink);
       margin: 0 auto; max-width: 1280px; padding: 1rem 1.5rem 4rem; }
h1 { font-size: 1.5rem; margin: .5rem 0 1rem; } h2 { font-size: 1.2rem; margin-top: 2rem;
  border-bottom: 1px solid var(--line); padding-bottom: .25rem; }
table { border-collapse: collapse; margin: .5rem 0; }
th, td { text-align: left; padding: .2rem .7rem .2rem 0; border-bottom: 1px solid var(--line);
         vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.flagged td { background: #fff4d6; }
.findings li { margin: .3rem 0; }
.charts { display: flex; flex-wrap: wrap; gap: 2rem; }
.charts figure { margin: 0; } figcaption { color: var(--muted); font-size: .85rem; max-width: 480px; }
svg text { font: 11px system-ui, sans-serif; fill: var(--ink); }
details.cluster { border: 1px solid var(--line); border-radius: 6px; margin: .6rem 0; padding: .3rem .8rem; }
details.cluster > summary { cursor: pointer; font-weight: 600; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: .8rem; margin: .6rem 0 1rem; }
.pair .head { color: var(--muted); font-size: .85rem; margin-bottom: .2rem; }
.pair pre { white-space: pre-wrap; word-break: break-word; margin: 0; padding: .5rem;
            background: #f6f8fa; border-radius: 4px; font: 12.5px/1.45 ui-monospace, monospace; }
del { background: var(--del); text-decoration: line-through; text-decoration-color: #b42318; }
ins { background: var(--ins); text-decoration: none; }
.controls { margin: .5rem 0; } .controls input { padding: .2rem .4rem; min-width: 18rem; }
.muted { color: var(--muted); } .hidden { display: none; }
.top { display: flex; flex-wrap: wrap; gap: 2rem; align-items: flex-start; }
.top table.numbers { margin-top: 0; }
details.group { margin: .2rem 0; } details.group > summary { cursor: pointer; }
pre.text, pre.diff { white-space: pre-wrap; word-break: break-word; margin: .2rem 0 .6rem; padding: .5rem;
  background: #f6f8fa; border-radius: 4px; font: 12.5px/1.45 ui-monospace, monospace; }
.member .head { color: var(--muted); font-size: .85rem; }
.gap { color: var(--muted); background: #eaeef2; border-radius: 3px; padding: 0 .3rem; }
"""

# Runs after the page is parsed. Filter box: hide clusters whose text (sources, keys) lacks the query.
_SCRIPT = """
(function () {
  var root = document.documentElement;
  window.addEventListener('error', function (e) {
    root.setAttribute('data-report-error', String(e.message || e));
  });
  var clusters = Array.prototype.slice.call(document.querySelectorAll('details.cluster'));
  var box = document.getElementById('filter');
  var shown = document.getElementById('shown');
  function apply() {
    var q = box ? box.value.trim().toLowerCase() : '';
    var n = 0;
    clusters.forEach(function (c) {
      var hit = !q || (c.getAttribute('data-sources') || '').toLowerCase().indexOf(q) >= 0;
      c.classList.toggle('hidden', !hit);
      if (hit) { n += 1; }
    });
    if (shown) { shown.textContent = String(n); }
  }
  if (box) { box.addEventListener('input', apply); }
  function setAll(open) { clusters.forEach(function (c) { c.open = open; }); }
  var ex = document.getElementById('expand'), co = document.getElementById('collapse');
  if (ex) { ex.addEventListener('click', function () { setAll(true); }); }
  if (co) { co.addEventListener('click', function () { setAll(false); }); }
  apply();
  root.setAttribute('data-report-ready', String(clusters.length));
})();
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _page(title: str, kind: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en" data-report="' + _e(kind) + '">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<h1>{_e(title)}</h1>\n"
        f"{body}\n<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )


# --- differences ---------------------------------------------------------------------------------------


def diff_html(a: str, b: str) -> tuple[str, str]:
    """Escaped HTML for ``a`` and ``b`` with their word differences marked.

    Text only in ``a`` is wrapped in ``<del>`` on the left, text only in ``b`` in ``<ins>`` on the right;
    common text is plain. Removing the tags and unescaping gives ``a`` and ``b`` back exactly.
    """
    left: list[str] = []
    right: list[str] = []
    for tag, pa, pb in word_diff(a, b):
        if tag == "equal":
            left.append(_e(pa))
            right.append(_e(pb))
            continue
        if pa:
            left.append(f"<del>{_e(pa)}</del>")
        if pb:
            right.append(f"<ins>{_e(pb)}</ins>")
    return "".join(left), "".join(right)


_WORDS = re.compile(r"\S+\s*|\s+")


def _elide(text: str, context: int, head: bool, tail: bool) -> str:
    """Escaped ``text``, its middle replaced by a marker when it has more than ``2 * context`` words."""
    words = _WORDS.findall(text)
    if len(words) <= 2 * context + 1:
        return _e(text)
    keep_head = words[:context] if head else []
    keep_tail = words[-context:] if tail else []
    gap = len(words) - len(keep_head) - len(keep_tail)
    return f'{_e("".join(keep_head))}<span class="gap">… {gap} words …</span>{_e("".join(keep_tail))}'


def inline_diff_html(kept: str, other: str, *, context: int = 12) -> str:
    """``other`` against ``kept`` in one column: ``<del>`` only in ``kept``, ``<ins>`` only in ``other``.

    Common runs longer than ``2 * context`` words are shortened to ``context`` words on each side of a
    change (``… 180 words …``), so a near copy of a long text shows only what differs.
    """
    runs = word_diff(kept, other)
    out: list[str] = []
    for i, (tag, pa, pb) in enumerate(runs):
        if tag == "equal":
            out.append(_elide(pb, context, head=i > 0, tail=i < len(runs) - 1))
            continue
        if pa:
            out.append(f"<del>{_e(pa)}</del>")
        if pb:
            out.append(f"<ins>{_e(pb)}</ins>")
    return "".join(out)


def _span(m: Member | Any) -> str:
    if getattr(m, "start", None) is None:
        return _e(m.source)
    return f"{_e(m.source)} [{m.start}:{m.end}]"


def _pair_html(left_head: str, left: str, right_head: str, right: str) -> str:
    la, rb = diff_html(left, right)
    return (
        '<div class="pair">'
        f'<div><div class="head">{left_head}</div><pre>{la}</pre></div>'
        f'<div><div class="head">{right_head}</div><pre>{rb}</pre></div>'
        "</div>"
    )


# --- charts --------------------------------------------------------------------------------------------

_W, _H = 480, 220
_L, _R, _T, _B = 44, 12, 14, 34  # margins: left, right, top, bottom


def _x(s: float) -> float:
    return _L + s * (_W - _L - _R)


def _y(frac: float) -> float:
    return _T + (1.0 - frac) * (_H - _T - _B)


def _axes(y_label_top: str, x_label: str) -> list[str]:
    parts = [
        f'<line x1="{_L}" y1="{_y(0):.1f}" x2="{_W - _R}" y2="{_y(0):.1f}" stroke="#59636e"/>',
        f'<line x1="{_L}" y1="{_y(0):.1f}" x2="{_L}" y2="{_T}" stroke="#59636e"/>',
    ]
    for i in range(6):
        s = i / 5
        parts.append(f'<text x="{_x(s):.1f}" y="{_y(0) + 14:.1f}" text-anchor="middle">{s:.1f}</text>')
    parts.append(f'<text x="{_L - 4}" y="{_T + 4}" text-anchor="end">{_e(y_label_top)}</text>')
    parts.append(f'<text x="{_L - 4}" y="{_y(0):.1f}" text-anchor="end">0</text>')
    parts.append(f'<text x="{(_L + _W - _R) / 2:.1f}" y="{_H - 4}" text-anchor="middle">{_e(x_label)}</text>')
    return parts


def _vline(s: float, colour: str, label: str, dash: str = "5 3", dy: int = 0) -> str:
    x = _x(s)
    return (
        f'<line x1="{x:.1f}" y1="{_y(0):.1f}" x2="{x:.1f}" y2="{_T}" stroke="{colour}" stroke-dasharray="{dash}"/>'
        f'<text x="{x - 3:.1f}" y="{_T + 10 + dy}" text-anchor="end" style="fill:{colour}">{_e(label)}</text>'
    )


def histogram_svg(values: Sequence[float], thresholds: Sequence[float], *, bins: int = 20,
                  label: str = "similarity to the representative") -> str:
    """An inline SVG histogram of similarities in [0, 1] with each threshold as a dashed line."""
    counts = histogram(values, bins)
    top = max(counts) if counts and max(counts) > 0 else 1
    parts = [f'<svg class="histogram" xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
             f'viewBox="0 0 {_W} {_H}" role="img" aria-label="{_e(label)} histogram">']
    bw = (_W - _L - _R) / bins
    for i, c in enumerate(counts):
        if not c:
            continue
        x, y = _L + i * bw, _y(c / top)
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{bw - 2:.1f}" height="{_y(0) - y:.1f}" fill="#4f81bd">'
            f"<title>{i / bins:.2f}-{(i + 1) / bins:.2f}: {c}</title></rect>"
        )
    parts += _axes(str(top), label)
    for k, t in enumerate(thresholds):
        parts.append(_vline(t, "#b42318", f"{t:g}", dy=12 * k))
    parts.append("</svg>")
    return "".join(parts)


def s_curve_svg(b: int, r: int, threshold: float, knee: float) -> str:
    """An inline SVG of the LSH S-curve ``P(s) = 1 - (1 - s**r)**b`` with threshold and knee marked."""
    from rag_dedup.lsh import candidate_probability

    pts = " ".join(
        f"{_x(i / 100):.1f},{_y(float(candidate_probability(i / 100, b, r))):.1f}" for i in range(101)
    )
    p_t = float(candidate_probability(threshold, b, r))
    parts = [
        f'<svg class="s-curve" xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" role="img" aria-label="S-curve for b={b}, r={r}">',
        *_axes("1", f"Jaccard similarity s  (b={b}, r={r})"),
        f'<polyline points="{pts}" fill="none" stroke="#4f81bd" stroke-width="2"/>',
        _vline(threshold, "#b42318", f"threshold {threshold:g}"),
        _vline(knee, "#59636e", f"knee {knee:.3f}", dash="2 3", dy=12),
        f'<circle cx="{_x(threshold):.1f}" cy="{_y(p_t):.1f}" r="3.5" fill="#b42318">'
        f"<title>P(candidate | s={threshold:g}) = {p_t:.3f}</title></circle>",
        "</svg>",
    ]
    return "".join(parts)


# --- pages ---------------------------------------------------------------------------------------------


def _numbers_table(rows: Sequence[tuple[str, str]]) -> str:
    body = "".join(f'<tr><th>{_e(k)}</th><td class="num">{_e(v)}</td></tr>' for k, v in rows)
    return f'<table class="numbers">{body}</table>'


def _removals_table(rows: Sequence[Any], name: str, limit: int) -> str:
    head = (f"<tr><th>{_e(name)}</th><th class=num>chunks</th><th class=num>removed</th>"
            "<th class=num>share</th><th>kept instead in</th></tr>")
    out = []
    for r in rows[:limit]:
        lost = ", ".join(f"{_e(s)} ({n})" for s, n in r.lost_to[:3])
        cls = ' class="flagged"' if r.flagged else ""
        out.append(f"<tr{cls}><td>{_e(r.name)}</td><td class=num>{r.chunks}</td><td class=num>{r.removed}</td>"
                   f"<td class=num>{r.share:.0%}</td><td>{lost}</td></tr>")
    more = f'<p class="muted">{len(rows) - limit} more not shown.</p>' if len(rows) > limit else ""
    return f"<table>{head}{''.join(out)}</table>{more}"


def _cluster_html(c: ClusterReport, texts: Mapping[str, str], max_members: int) -> str:
    sources = sorted({c.representative.source, *(m.source for m in c.members)})
    kinds = ", ".join(f"{sum(1 for m in c.members if m.kind == k)} {k}"
                      for k in ("exact", "near") if any(m.kind == k for m in c.members))
    parts = [
        f'<details class="cluster" data-sources="{_e(" ".join(sources + [c.cluster_id]))}">',
        f"<summary>{c.size} chunks ({kinds}) from {len(sources)} source(s), kept: {_span(c.representative)}</summary>",
        f'<div class="head">kept (the representative): {_span(c.representative)}</div>',
        f'<pre class="text">{_e(texts.get(c.representative.key, ""))}</pre>',
    ]
    rep_text = texts.get(c.representative.key, "")
    exact = [m for m in c.members if m.kind == "exact"]
    near = [m for m in c.members if m.kind != "exact"]
    if exact:
        # Identical after normalisation: where the copies are, no text repeated.
        shown = ", ".join(_span(m) for m in exact[:max_members])
        more = f" and {len(exact) - max_members} more" if len(exact) > max_members else ""
        parts.append(f'<p class="exact"><strong>{len(exact)} exact cop{"y" if len(exact) == 1 else "ies"}'
                     f"</strong> (same text after normalisation) in {shown}{more}</p>")
    for m in near[:max_members]:
        parts.append(
            f'<div class="member"><div class="head">{_e(m.kind)} duplicate, similarity {m.similarity:.3f}: '
            f"{_span(m)}; differences from the kept text</div>"
            f'<pre class="diff">{inline_diff_html(rep_text, texts.get(m.key, ""))}</pre></div>'
        )
    if len(near) > max_members:
        parts.append(f'<p class="muted">{len(near) - max_members} more near duplicates not shown (see --json).</p>')
    parts.append("</details>")
    return "".join(parts)


def _findings_html(rows: Sequence[Removals], findings: Sequence[str], top: int) -> str:
    """Findings grouped by top-level folder (largest group first), each group collapsed; inside a group
    the first ``top`` findings (most chunks removed first) and the rest behind one more toggle."""
    if not findings:
        return "<p>none</p>"
    groups: dict[str, list[str]] = {}
    for r, f in zip([r for r in rows if r.flagged], findings, strict=True):
        groups.setdefault(r.name.split("/", 1)[0] + "/" if "/" in r.name else "(top folder)", []).append(f)
    order = sorted(groups, key=lambda g: (-len(groups[g]), g))

    def items(fs: Sequence[str]) -> str:
        return '<ul class="findings">' + "".join(f"<li>{_e(f)}</li>" for f in fs) + "</ul>"

    parts = [f"<p>{len(findings):,} source(s) lose more than half of their chunks to copies kept elsewhere: "
             "check that the copy kept is the one you want cited.</p>"]
    for name in order:
        fs = groups[name]
        rest = (f'<details class="group"><summary>{len(fs) - top:,} more in {_e(name)}</summary>'
                f"{items(fs[top:])}</details>") if len(fs) > top else ""
        parts.append(f'<details class="group"><summary>{_e(name)}: {len(fs):,} source{"" if len(fs) == 1 else "s"}'
                     f"</summary>{items(fs[:top])}{rest}</details>")
    return "".join(parts)


def scan_page(
    summary: ScanSummary,
    texts: Mapping[str, str],
    *,
    title: str = "rag-dedup scan report",
    max_clusters: int = 150,
    max_members: int = 12,
    max_rows: int = 200,
    max_findings: int = 20,
) -> str:
    """The ``rag-dedup scan --html`` page for ``summary``; ``texts`` maps chunk keys to their text.

    Shows the numbers beside the similarity histogram, the findings grouped by top-level folder (each
    group collapsed, ``max_findings`` shown when opened, the rest behind a toggle), the S-curve of the index's
    (b, r), the removals per source and per folder (``max_rows`` each), the skipped files, and the
    largest ``max_clusters`` clusters, each with its representative once and up to ``max_members``
    near members as diffs against it.
    """
    s = summary.settings
    b, r = s["bands"]
    numbers = _numbers_table([
        ("documents", str(summary.documents)),
        ("chunks", str(summary.chunks)),
        ("exact-duplicate chunks", str(summary.exact_duplicates)),
        ("near-duplicate chunks", str(summary.near_duplicates)),
        ("clusters (2+ chunks)", str(len(summary.clusters))),
        ("suppressed", f"{summary.suppressed} ({summary.suppressed_share:.1%})"),
        ("threshold", f"{s['threshold']:g}" + (f" (drift floor {s['drift_floor']:g})"
                                                if s.get("drift_floor", s["threshold"]) != s["threshold"] else "")),
        ("bands (b, r)", f"({b}, {r}), knee {s['knee']:.3f}"),
        ("num_perm, ngram", f"{s['num_perm']}, {s['ngram']}"),
        ("files skipped", str(len(summary.skipped))),
    ])
    skipped = ""
    if summary.skipped:
        rows = "".join(f"<tr><td>{_e(k.path)}</td><td>{_e(k.reason)}</td></tr>" for k in summary.skipped[:max_rows])
        more = f'<p class="muted">{len(summary.skipped) - max_rows} more in --json.</p>' \
            if len(summary.skipped) > max_rows else ""
        skipped = (f"<h2>Skipped files ({len(summary.skipped)})</h2><details class=\"group\"><summary>show</summary>"
                   f"<table><tr><th>file</th><th>reason</th></tr>{rows}</table>{more}</details>")
    shown = summary.clusters[:max_clusters]
    clusters = "".join(_cluster_html(c, texts, max_members) for c in shown)
    total = len(summary.clusters)
    which = f"largest {len(shown):,} of {total:,} clusters" if total > len(shown) else f"all {total:,} clusters"
    body = f"""
<section id="summary" class="top"><div><h2>Summary</h2>{numbers}</div>
<figure id="histogram">{histogram_svg(summary.similarities, [s['threshold']])}
<figcaption>Similarity (exact Jaccard of shingle sets) of each suppressed chunk to the chunk kept
in its cluster; exact duplicates are at 1.0. The dashed line is the threshold; a chunk can sit below it
(down to the drift floor) when it joined the cluster as a near duplicate of another member.</figcaption></figure>
</section>
<section id="findings"><h2>Findings</h2>{_findings_html(summary.by_source, summary.findings, max_findings)}</section>
<section id="charts"><h2>The LSH S-curve</h2><div class="charts">
<figure>{s_curve_svg(b, r, s['threshold'], s['knee'])}
<figcaption>Probability that LSH proposes a pair of chunks with similarity s as candidates, for the
chosen (b, r). Every candidate is then verified against the threshold, so pairs left of the threshold
are never merged; the curve shows how reliably pairs right of it are found.</figcaption></figure>
</div></section>
<section id="by-source"><h2>Removals per source</h2>{_removals_table(summary.by_source, "source", max_rows)}</section>
<section id="by-folder"><h2>Removals per folder</h2>{_removals_table(summary.by_folder, "folder", max_rows)}</section>
{skipped}
<section id="clusters"><h2>Clusters: {which}</h2>
<p class="controls"><input id="filter" type="search" placeholder="filter by source or key">
<button id="expand" type="button">expand all</button> <button id="collapse" type="button">collapse all</button>
<span class="muted"><span id="shown">{len(shown)}</span> of the {which} shown</span></p>
{clusters}</section>
"""
    return _page(title, "scan", body)


def tune_page(
    report: TuneReport,
    chunks: Mapping[str, Any],
    *,
    title: str = "rag-dedup tune: choosing a threshold",
) -> str:
    """The ``rag-dedup tune --html`` page: per threshold, what it suppresses and the pairs near it.

    ``chunks`` maps keys to :class:`~rag_dedup.app.report.Chunk` objects (for text and location).
    """
    ts = [t.threshold for t in report.thresholds]
    rows = "".join(
        f"<tr><td class=num>{t.threshold:g}</td><td class=num>{t.suppressed}</td>"
        f"<td class=num>{(t.suppressed / report.chunks if report.chunks else 0):.1%}</td>"
        f"<td class=num>{t.clusters}</td><td class=num>{t.pairs_near}</td></tr>"
        for t in report.thresholds
    )
    table = ("<table><tr><th class=num>threshold</th><th class=num>suppressed chunks</th><th class=num>share</th>"
             f"<th class=num>clusters</th><th class=num>pairs within ±{report.window:g}</th></tr>{rows}</table>")
    sections = []
    for t in report.thresholds:
        pairs = []
        for p in t.pairs:
            a, b = chunks[p.a], chunks[p.b]
            side = "merged" if p.similarity >= t.threshold else "kept apart"
            pairs.append(
                f'<details class="cluster" open data-sources="{_e(a.source + " " + b.source)}">'
                f"<summary>similarity {p.similarity:.3f}: {side} at {t.threshold:g}</summary>"
                + _pair_html(_span(a), a.text, _span(b), b.text) + "</details>"
            )
        body = "".join(pairs) or '<p class="muted">No pairs of chunks have a similarity this close.</p>'
        sections.append(
            f'<section class="threshold" id="t{t.threshold:g}"><h2>threshold {t.threshold:g}: suppresses '
            f"{t.suppressed} of {report.chunks} chunks</h2>{body}</section>"
        )
    body = f"""
<section id="summary"><h2>What each threshold would do</h2>{table}
<p>Read the pairs below each threshold: a pair marked <em>merged</em> would be treated as one passage,
a pair marked <em>kept apart</em> would both reach retrieval. Choose the lowest threshold whose merged
pairs you would be content to see as one.</p></section>
<section id="charts"><h2>Similarity of candidate pairs</h2><div class="charts"><figure>
{histogram_svg(report.similarities, ts, label="similarity of candidate pairs")}
<figcaption>Every pair of chunks with similarity at least {report.floor:g} that LSH proposed, by
similarity; dashed lines are the candidate thresholds.</figcaption></figure></div></section>
<p class="controls"><input id="filter" type="search" placeholder="filter by source">
<button id="expand" type="button">expand all</button> <button id="collapse" type="button">collapse all</button>
<span class="muted"><span id="shown"></span> pairs shown</span></p>
{''.join(sections)}
"""
    return _page(title, "tune", body)


def queries_page(
    report: RetrievalReport,
    *,
    title: str = "rag-dedup query: distinct evidence",
) -> str:
    """The ``rag-dedup query --html`` page: per question and on average, the distinct-evidence ratio of
    the plain top k, of ``DedupPostprocessor`` and of ``DistinctRetriever``, and the duplicates each removed.
    """
    k = report.k
    heads = "".join(f"<th class=num>{_e(label)}</th>" for label in METHODS.values())
    means = "".join(f"<td class=num>{report.mean(m):.0%} ({report.mean(m, 'removed'):.1f} removed)</td>"
                    for m in METHODS)
    rows = []
    for i, q in enumerate(report.questions, 1):
        cells = "".join(f"<td class=num>{q.results[m].ratio:.0%} ({q.results[m].removed} removed)</td>"
                        for m in METHODS)
        lists = "".join(
            f"<div><div class=\"head\">{_e(METHODS[m])}: {q.results[m].distinct} distinct of {k}</div><ol>"
            + "".join(f"<li>{_e(key)}</li>" for key in q.results[m].keys) + "</ol></div>"
            for m in METHODS
        )
        rows.append(f"<tr><td class=num>{i}</td>{cells}<td><details class=\"cluster\" "
                    f"data-sources=\"{_e(q.question)}\"><summary>{_e(q.question)}</summary>"
                    f"<div class=\"charts\">{lists}</div></details></td></tr>")
    body = f"""
<section id="summary"><h2>Distinct evidence in the top {k}</h2>
<p>Over {report.chunks:,} chunks (BM25), {len(report.questions)} question(s). A list's distinct-evidence
ratio is the size of its greedy set of passages with pairwise Jaccard similarity below
{report.threshold:g} (word {report.ngram}-grams), over {k}. DedupPostprocessor runs over the top
{FETCH_FACTOR * k}; DistinctRetriever fetches deeper until it holds {k} distinct passages. "Removed": for
the plain list the copies it carries ({k} minus distinct), for the others the retrieved nodes they folded.</p>
<table><tr><th class=num>#</th>{heads}<th>question</th></tr>
<tr><th class=num>mean</th>{means}<td></td></tr>{''.join(rows)}</table></section>
"""
    return _page(title, "queries", body)
