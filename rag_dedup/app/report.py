"""Reports on a deduplicated corpus: what was found, where it came from, what each threshold would do.

Everything here is a pure function from a :class:`~rag_dedup.index.DedupIndex` (or from chunk texts)
to frozen dataclasses with a ``to_dict()`` that is ready for :func:`json.dumps`. Nothing prints;
the command line (``rag_dedup.app.cli``) and the HTML page (``rag_dedup.app.html``) render these objects.

A *chunk* is one indexed text with where it came from (:class:`Chunk`: key, source file, character
span). A chunk is *suppressed* when its cluster elected another chunk as representative; it is an
*exact* duplicate when its canonical text equals the representative's, else a *near* duplicate.

Removals are counted per source file and per folder, and a source that loses more than half of its
chunks (``flag_share``) is reported as a *finding*: a file whose text is almost entirely kept under
another file's name is something a person should look at (which copy should be cited?), not just
something to clean up.

Example:
    >>> from rag_dedup.index import DedupIndex
    >>> text = "the quick brown fox jumps over the lazy dog near the river bank today"
    >>> chunks = [Chunk("a#0", "a.txt", text), Chunk("b#0", "b.txt", text)]
    >>> index = DedupIndex(threshold=0.8)
    >>> _ = index.add_many([(c.key, c.text) for c in chunks])
    >>> summary = summarize(index, chunks, documents=2)
    >>> summary.suppressed, summary.exact_duplicates, len(summary.clusters)
    (1, 1, 1)
"""

from __future__ import annotations

import difflib
import math
import posixpath
import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from rag_dedup import settings
from rag_dedup.normalize import canonical

if TYPE_CHECKING:  # pragma: no cover
    from rag_dedup.index import DedupIndex

__all__ = [
    "DEFAULT_THRESHOLDS",
    "Chunk",
    "ClusterReport",
    "Member",
    "PairSample",
    "Removals",
    "ScanSummary",
    "Skipped",
    "ThresholdReport",
    "TuneReport",
    "candidate_pairs",
    "histogram",
    "sample_thresholds",
    "summarize",
    "word_diff",
]

T = TypeVar("T")

#: The thresholds ``rag-dedup tune`` compares when none are given.
DEFAULT_THRESHOLDS: tuple[float, ...] = (0.6, 0.7, 0.8, 0.9)

#: Version of the dictionaries produced by ``to_dict()`` (kept in :mod:`rag_dedup.settings`).
SCHEMA_VERSION = settings.REPORT_SCHEMA_VERSION


@dataclass(frozen=True)
class Chunk:
    """One indexed text and where it came from.

    Attributes:
        key: the key the chunk was indexed under.
        source: the file it came from, as a POSIX path relative to the scanned root.
        text: the chunk's text as stored (not canonicalised).
        start: character offset of the chunk in its source document, if known.
        end: end offset (exclusive), if known: ``document_text[start:end] == text``.
    """

    key: str
    source: str
    text: str
    start: int | None = None
    end: int | None = None

    @property
    def folder(self) -> str:
        """The folder of :attr:`source` (``"."`` for a file at the root)."""
        return posixpath.dirname(self.source) or "."

    def to_dict(self, *, with_text: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {"key": self.key, "source": self.source, "start": self.start, "end": self.end}
        if with_text:
            d["text"] = self.text
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Chunk:
        """Inverse of :meth:`to_dict` (with text). Raises ``ValueError`` naming a missing field."""
        missing = [k for k in ("key", "source", "text") if k not in d]
        if missing:
            raise ValueError(f"chunk record {dict(d)!r:.80} lacks field(s) {missing}")
        return cls(str(d["key"]), str(d["source"]), str(d["text"]), d.get("start"), d.get("end"))


@dataclass(frozen=True)
class Skipped:
    """A file the reader could not use, and why (binary, not UTF-8, unreadable, no reader)."""

    path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


@dataclass(frozen=True)
class Member:
    """A chunk in a cluster, located in its source, with its similarity to the representative.

    ``kind`` is ``"representative"`` for the chunk the cluster keeps, else ``"exact"`` or ``"near"``.
    ``similarity`` is the exact Jaccard similarity of shingle sets to the representative (1.0 for the
    representative itself). It can be below the threshold (down to the index's ``drift_floor``) for a
    chunk that joined the cluster as a near duplicate of another member.
    """

    key: str
    source: str
    start: int | None
    end: int | None
    similarity: float
    kind: Literal["representative", "exact", "near"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "source": self.source,
            "start": self.start,
            "end": self.end,
            "similarity": round(self.similarity, 4),
            "kind": self.kind,
        }


@dataclass(frozen=True)
class ClusterReport:
    """A cluster of two or more chunks: the one kept and the ones suppressed (best match first)."""

    cluster_id: str
    representative: Member
    members: tuple[Member, ...]

    @property
    def size(self) -> int:
        return 1 + len(self.members)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.cluster_id,
            "size": self.size,
            "representative": {k: v for k, v in self.representative.to_dict().items()
                               if k not in ("similarity", "kind")},
            "members": [m.to_dict() for m in self.members],
        }


@dataclass(frozen=True)
class Removals:
    """How many chunks of one source (or folder) are suppressed, and to whom they are lost.

    ``lost_to`` counts, per source holding the representative, the suppressed chunks of this one.
    ``flagged`` is set when the share removed exceeds the summary's ``flag_share``.
    """

    name: str
    chunks: int
    removed: int
    flagged: bool = False
    lost_to: tuple[tuple[str, int], ...] = ()

    @property
    def share(self) -> float:
        return self.removed / self.chunks if self.chunks else 0.0

    def to_dict(self, name_field: str = "source") -> dict[str, Any]:
        return {
            name_field: self.name,
            "chunks": self.chunks,
            "removed": self.removed,
            "share": round(self.share, 4),
            "flagged": self.flagged,
            "lost_to": [{"source": s, "chunks": n} for s, n in self.lost_to],
        }


@dataclass(frozen=True)
class ScanSummary:
    """Everything ``rag-dedup scan`` reports. Build it with :func:`summarize`.

    Attributes:
        documents: documents read (a file may give several, e.g. PDF pages).
        chunks: chunks indexed.
        exact_duplicates, near_duplicates: suppressed chunks by kind.
        clusters: the clusters with two or more members, largest first.
        settings: threshold, num_perm, ngram, bands (b, r), knee, and whatever the caller adds
            (chunk_size, chunk_overlap).
        by_source, by_folder: removals, most removed first; sources without removals included.
        skipped: files not read, with the reason.
        findings: sentences for a person: sources losing most of their chunks.
        similarities: similarity of each suppressed chunk to its representative (for the histogram).
    """

    documents: int
    chunks: int
    exact_duplicates: int
    near_duplicates: int
    clusters: tuple[ClusterReport, ...]
    settings: Mapping[str, Any]
    by_source: tuple[Removals, ...]
    by_folder: tuple[Removals, ...]
    skipped: tuple[Skipped, ...] = ()
    findings: tuple[str, ...] = ()
    similarities: tuple[float, ...] = field(default=(), repr=False)

    @property
    def suppressed(self) -> int:
        """Chunks that would not reach retrieval: exact plus near duplicates."""
        return self.exact_duplicates + self.near_duplicates

    @property
    def suppressed_share(self) -> float:
        return self.suppressed / self.chunks if self.chunks else 0.0

    @property
    def kept(self) -> int:
        return self.chunks - self.suppressed

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (the ``rag-dedup scan --json`` output)."""
        return {
            "schema": f"rag-dedup.scan/{SCHEMA_VERSION}",
            "settings": _jsonable(self.settings),
            "documents": self.documents,
            "chunks": self.chunks,
            "kept": self.kept,
            "exact_duplicates": self.exact_duplicates,
            "near_duplicates": self.near_duplicates,
            "suppressed": self.suppressed,
            "suppressed_share": round(self.suppressed_share, 4),
            "cluster_count": len(self.clusters),
            "clusters": [c.to_dict() for c in self.clusters],
            "by_source": [r.to_dict("source") for r in self.by_source],
            "by_folder": [r.to_dict("folder") for r in self.by_folder],
            "skipped": [s.to_dict() for s in self.skipped],
            "findings": list(self.findings),
        }


def _jsonable(settings: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in settings.items():
        out[k] = list(v) if isinstance(v, tuple) else (round(v, 6) if isinstance(v, float) else v)
    return out


def _index_settings(index: DedupIndex) -> dict[str, Any]:
    b, r = index.bands
    out: dict[str, Any] = {
        "threshold": float(index.threshold),
        "num_perm": int(index.num_perm),
        "ngram": int(index.ngram),
        "bands": (int(b), int(r)),
        "knee": float(index.knee),
    }
    floor = getattr(index, "drift_floor", None)  # members joined through a chain are at least this similar
    if floor is not None:
        out["drift_floor"] = float(floor)
    return out


def summarize(
    index: DedupIndex,
    chunks: Iterable[Chunk],
    *,
    documents: int,
    skipped: Iterable[Skipped] = (),
    settings: Mapping[str, Any] | None = None,
    flag_share: float = 0.5,
) -> ScanSummary:
    """Summarise the clusters of ``index`` over the located ``chunks``.

    Args:
        index: an index holding exactly the keys of ``chunks``.
        chunks: where each key came from.
        documents: how many documents the chunks were cut from.
        skipped: files that were not read.
        settings: extra settings to report (e.g. ``chunk_size``); the index's own are added.
        flag_share: a source losing more than this share of its chunks is a finding (0 < x <= 1).

    Raises:
        ValueError: ``flag_share`` out of range, ``documents`` negative, a chunk key repeated, or a key
            of the index without a chunk (or the reverse).
    """
    if not 0.0 < flag_share <= 1.0:
        raise ValueError(f"flag_share must be in (0, 1], got {flag_share!r}")
    if documents < 0:
        raise ValueError(f"documents must be >= 0, got {documents!r}")
    by_key: dict[str, Chunk] = {}
    for c in chunks:
        if c.key in by_key:
            raise ValueError(f"chunk key {c.key!r} appears twice; keys must be unique")
        by_key[c.key] = c
    if len(by_key) != len(index):
        raise ValueError(
            f"the index holds {len(index)} keys but {len(by_key)} chunks were given; "
            "pass one Chunk per indexed key"
        )

    keys = list(by_key)
    try:
        matches = index.matches(keys)
    except KeyError as e:
        raise ValueError(f"chunk {e.args[0]} is not in the index; pass one Chunk per indexed key") from None

    exact = near = 0
    removed_src: Counter[str] = Counter()
    lost_to: dict[str, Counter[str]] = defaultdict(Counter)
    sims: list[float] = []
    grouped: dict[str, list[Member]] = defaultdict(list)
    for key, m in zip(keys, matches, strict=True):
        if m.duplicate_of is None:
            continue
        c = by_key[key]
        rep = _chunk(by_key, m.cluster_id)
        # Match.kind "exact" says the chunk has a copy in its cluster; here, whether it is a copy of the one kept.
        same = m.kind == "exact" and canonical(c.text) == canonical(rep.text)
        kind: Literal["exact", "near"] = "exact" if same else "near"
        if kind == "exact":
            exact += 1
        else:
            near += 1
        sims.append(float(m.similarity))
        removed_src[c.source] += 1
        lost_to[c.source][rep.source] += 1
        grouped[m.cluster_id].append(Member(c.key, c.source, c.start, c.end, float(m.similarity), kind))
    clusters: list[ClusterReport] = []
    for cluster_id, members in grouped.items():
        rep = by_key[cluster_id]  # a cluster's id is its representative's key
        members.sort(key=lambda m: (-m.similarity, m.key))
        rep_m = Member(rep.key, rep.source, rep.start, rep.end, 1.0, "representative")
        clusters.append(ClusterReport(cluster_id, rep_m, tuple(members)))
    clusters.sort(key=lambda c: (-c.size, c.cluster_id))

    per_source = Counter(c.source for c in by_key.values())
    per_folder = Counter(c.folder for c in by_key.values())
    folder_removed: Counter[str] = Counter()
    folder_lost: dict[str, Counter[str]] = defaultdict(Counter)
    for src, n in removed_src.items():
        folder = posixpath.dirname(src) or "."
        folder_removed[folder] += n
        folder_lost[folder].update(lost_to[src])

    def _removals(counts: Counter[str], removed: Counter[str], lost: Mapping[str, Counter[str]]):
        rows = [
            Removals(
                name,
                n,
                removed[name],
                flagged=removed[name] / n > flag_share,
                lost_to=tuple(sorted(lost[name].items(), key=lambda kv: (-kv[1], kv[0]))) if name in lost else (),
            )
            for name, n in counts.items()
        ]
        rows.sort(key=lambda r: (-r.removed, -r.share, r.name))
        return tuple(rows)

    by_source = _removals(per_source, removed_src, lost_to)
    findings = tuple(_finding(r) for r in by_source if r.flagged)
    all_settings = _index_settings(index)
    all_settings.update(settings or {})
    return ScanSummary(
        documents=documents,
        chunks=len(by_key),
        exact_duplicates=exact,
        near_duplicates=near,
        clusters=tuple(clusters),
        settings=all_settings,
        by_source=by_source,
        by_folder=_removals(per_folder, folder_removed, folder_lost),
        skipped=tuple(skipped),
        findings=findings,
        similarities=tuple(sims),
    )


def _chunk(by_key: Mapping[str, Chunk], key: str) -> Chunk:
    try:
        return by_key[key]
    except KeyError:
        raise ValueError(f"index key {key!r} has no chunk; pass one Chunk per indexed key") from None


def _finding(r: Removals) -> str:
    where = ", ".join(f"{s} ({n})" for s, n in r.lost_to[:3])
    more = f" and {len(r.lost_to) - 3} more" if len(r.lost_to) > 3 else ""
    return (
        f"{r.name} loses {r.removed} of {r.chunks} chunks ({r.share:.0%}) to copies kept in "
        f"{where}{more}: check that the copy kept is the one you want cited"
    )


def histogram(values: Iterable[float], bins: int = 20) -> list[int]:
    """Counts of ``values`` in ``bins`` equal bins over [0, 1]; 1.0 falls in the last bin.

    Raises:
        ValueError: ``bins`` < 1 or a value outside [0, 1].
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins!r}")
    counts = [0] * bins
    for v in values:
        if not 0.0 <= v <= 1.0 or math.isnan(v):
            raise ValueError(f"similarity {v!r} is outside [0, 1]")
        counts[min(int(v * bins), bins - 1)] += 1
    return counts


# --- differences -------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\S+\s*|\s+")


def word_diff(a: str, b: str) -> list[tuple[str, str, str]]:
    """Word-level differences between ``a`` and ``b``, as ``(tag, a_part, b_part)`` runs.

    Tags are difflib's: ``"equal"``, ``"delete"`` (only in ``a``), ``"insert"`` (only in ``b``) and
    ``"replace"``. Words are compared in canonical form (case, Unicode presentation and spacing do not
    count as differences), and the parts keep the original text with its whitespace, so joining the
    ``a_part`` of every run gives back ``a`` exactly, and likewise for ``b``.

    Example:
        >>> word_diff("the GNU Lesser license", "the GNU Library license")
        [('equal', 'the GNU ', 'the GNU '), ('replace', 'Lesser ', 'Library '), ('equal', 'license', 'license')]
    """
    ta, tb = _TOKEN.findall(a), _TOKEN.findall(b)
    ka, kb = [canonical(t) for t in ta], [canonical(t) for t in tb]
    sm = difflib.SequenceMatcher(None, ka, kb, autojunk=False)
    return [
        (tag, "".join(ta[i1:i2]), "".join(tb[j1:j2]))
        for tag, i1, i2, j1, j2 in sm.get_opcodes()
    ]


# --- threshold sampling (rag-dedup tune) ---------------------------------------------------------------


@dataclass(frozen=True)
class PairSample:
    """Two chunks and the exact Jaccard similarity of their shingle sets (``a < b``)."""

    a: str
    b: str
    similarity: float

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "similarity": round(self.similarity, 4)}


@dataclass(frozen=True)
class ThresholdReport:
    """What one candidate threshold would do.

    Attributes:
        threshold: the candidate.
        suppressed: chunks a :class:`DedupIndex` at this threshold suppresses (exact duplicates included).
        clusters: clusters with two or more members at this threshold.
        pairs_near: candidate pairs whose similarity lies in ``[threshold - window, threshold + window)``.
        pairs: a seeded sample of those, lowest similarity first: the pairs to read to decide.
    """

    threshold: float
    suppressed: int
    clusters: int
    pairs_near: int
    pairs: tuple[PairSample, ...]

    def to_dict(self, chunks: int) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "suppressed": self.suppressed,
            "suppressed_share": round(self.suppressed / chunks, 4) if chunks else 0.0,
            "clusters": self.clusters,
            "pairs_near": self.pairs_near,
            "pairs": [p.to_dict() for p in self.pairs],
        }


@dataclass(frozen=True)
class TuneReport:
    """The result of :func:`sample_thresholds`: one :class:`ThresholdReport` per candidate."""

    chunks: int
    window: float
    seed: int
    floor: float
    thresholds: tuple[ThresholdReport, ...]
    similarities: tuple[float, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": f"rag-dedup.tune/{SCHEMA_VERSION}",
            "chunks": self.chunks,
            "window": self.window,
            "seed": self.seed,
            "floor": self.floor,
            "candidate_pairs": len(self.similarities),
            "thresholds": [t.to_dict(self.chunks) for t in self.thresholds],
        }


#: Wraps a loop to show its progress: ``progress(items, desc=..., unit=...)`` yields the items.
Progress = Callable[..., Iterable[Any]]


def _wrap(progress: Progress | None, items: Sequence[T], desc: str, unit: str) -> Iterable[T]:
    return items if progress is None else progress(items, desc=desc, unit=unit)


def _check_thresholds(thresholds: Sequence[float]) -> tuple[float, ...]:
    ts = tuple(float(t) for t in thresholds)
    if not ts:
        raise ValueError("thresholds is empty; give at least one, e.g. (0.6, 0.7, 0.8, 0.9)")
    for t in ts:
        if not 0.0 < t <= 1.0:
            raise ValueError(f"threshold {t!r} is outside (0, 1]; use values such as 0.8")
    if len(set(ts)) != len(ts):
        raise ValueError(f"thresholds {list(ts)} repeat a value")
    return tuple(sorted(ts))


def candidate_pairs(
    chunks: Sequence[Chunk],
    *,
    floor: float,
    num_perm: int = 128,
    ngram: int = 5,
    seed: int = 1,
    progress: Progress | None = None,
) -> list[PairSample]:
    """All pairs of chunks with exact Jaccard >= ``floor`` that MinHash LSH tuned for ``floor`` finds.

    An index at threshold ``floor`` is built and queried with each chunk's text; the similarity of a
    pair is the exact Jaccard of the shingle sets (the index verifies every candidate), so no pair
    below ``floor`` is returned. Pairs just above ``floor`` may be missed (LSH recall below 1 near
    its threshold); pairs well above it are found with probability near 1.

    ``progress``, if given, wraps the loop over chunks (``progress(items, desc=, unit=)``, as
    :func:`rag_dedup.app.progress.track`).

    Returns:
        Pairs with ``a < b``, sorted by (similarity, a, b).
    """
    from rag_dedup.index import DedupIndex

    if not 0.0 < floor <= 1.0:
        raise ValueError(f"floor {floor!r} is outside (0, 1]")
    probe = DedupIndex(threshold=floor, num_perm=num_perm, ngram=ngram, seed=seed)
    probe.add_many([(c.key, c.text) for c in chunks])
    seen: dict[tuple[str, str], float] = {}
    for c in _wrap(progress, chunks, "candidate pairs", "chunk"):
        for other, sim in probe.query(c.text):
            if other == c.key:
                continue
            pair = (c.key, other) if c.key < other else (other, c.key)
            seen.setdefault(pair, float(sim))
    pairs = [PairSample(a, b, s) for (a, b), s in seen.items()]
    pairs.sort(key=lambda p: (p.similarity, p.a, p.b))
    return pairs


def sample_thresholds(
    chunks: Sequence[Chunk],
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    *,
    per_threshold: int = 3,
    window: float = 0.05,
    num_perm: int = 128,
    ngram: int = 5,
    seed: int = 1,
    progress: Progress | None = None,
) -> TuneReport:
    """For each candidate threshold: how many chunks it suppresses, and pairs to read near it.

    The suppression count is exact for the index's rule: a :class:`DedupIndex` is built at each
    threshold over all ``chunks``. The pairs come from :func:`candidate_pairs` at
    ``floor = max(0.05, min(thresholds) - window)``; for each threshold ``t`` the pairs with similarity
    in ``[t - window, t + window)`` are sampled with ``random.Random(seed)`` (same input, same pairs).
    Pairs just above ``t`` are the ones the threshold merges; pairs just below are the ones it keeps
    apart: reading both says whether ``t`` draws the line where you would. ``progress`` wraps the
    long loops, as in :func:`candidate_pairs`.

    Raises:
        ValueError: a threshold outside (0, 1], an empty or repeated list, ``per_threshold`` < 0,
            ``window`` outside (0, 0.5], or repeated chunk keys.
    """
    from rag_dedup.index import DedupIndex

    ts = _check_thresholds(thresholds)
    if per_threshold < 0:
        raise ValueError(f"per_threshold must be >= 0, got {per_threshold!r}")
    if not 0.0 < window <= 0.5:
        raise ValueError(f"window must be in (0, 0.5], got {window!r}")
    keys = [c.key for c in chunks]
    if len(set(keys)) != len(keys):
        raise ValueError("chunk keys repeat; keys must be unique")

    items = [(c.key, c.text) for c in chunks]
    floor = max(0.05, round(ts[0] - window, 6))
    pairs = candidate_pairs(chunks, floor=floor, num_perm=num_perm, ngram=ngram, seed=seed, progress=progress)
    reports: list[ThresholdReport] = []
    for t in _wrap(progress, ts, "indexing at each threshold", "threshold"):
        index = DedupIndex(threshold=t, num_perm=num_perm, ngram=ngram, seed=seed)
        matches = index.add_many(items)
        suppressed = sum(1 for m in matches if m.duplicate_of is not None)
        n_clusters = sum(1 for _, members in index.clusters() if len(members) > 1)
        near = [p for p in pairs if t - window <= p.similarity < t + window]
        rng = random.Random(f"{seed}:{t}")
        picked = rng.sample(near, min(per_threshold, len(near)))
        picked.sort(key=lambda p: (p.similarity, p.a, p.b))
        reports.append(ThresholdReport(t, suppressed, n_clusters, len(near), tuple(picked)))
    return TuneReport(
        chunks=len(items),
        window=window,
        seed=seed,
        floor=floor,
        thresholds=tuple(reports),
        similarities=tuple(p.similarity for p in pairs),
    )
