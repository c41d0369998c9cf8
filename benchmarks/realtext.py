"""Real text found on this machine, cut into chunks, with planted near-duplicates (benchmarks only).

Sources, in this order, each in sorted path order: the Debian package documentation under
``/usr/share/doc`` (copyright files, READMEs, NEWS and changelogs, gunzipped), then ``.rst``/``.md``/
``.txt`` files under the running and the base Python installation's ``site-packages`` (package
documentation), then the manual pages under ``/usr/share/man`` (gunzipped, groff requests and font
escapes stripped: English sections first, then the translations), then the GNU info manuals under
``/usr/share/info``, then the Rust books shipped with rustup toolchains (``share/doc/rust/html/*/
print.html``, tags, code and scripts stripped), then the triple-quoted strings (docstrings, mostly) of
the Python source files under ``/usr/lib/python3*``, ``/usr/lib/google-cloud-sdk`` and
``~/.pyenv/versions``, then the repository's own test corpus (so something is always there). The
sources after the man pages are read only by the largest benchmarks (160k chunks need about 37
million words). Files that are byte-identical to one already read are skipped, so the base chunks are as distinct as the sources allow (real text still
repeats itself: licence paragraphs, changelog entries).

Near-duplicates are planted by copying a base chunk and editing a few percent of its words
(replace, delete or insert a word drawn from the corpus), the way a paragraph drifts between two
versions of a document.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import random
import re
import sys
import sysconfig
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_DOC_NAMES = ("copyright", "README", "NEWS", "changelog", "AUTHORS", "TODO", "FAQ")


#: Chunks :func:`warm_up` adds: enough that every kernel of ``add_many`` runs before a timing. With 200,
#: ``batch.merge_entries`` and ``index.intersection_matrix`` first ran (and, in a fresh tree, compiled)
#: inside the timed run: with ``--rounds 1``, bench_redis.py's first in-memory run of a freshly exported
#: baseline took 2.15x the time of the same code warmed. WARM_ONES more go in one ``add()`` at a time:
#: with one, ``index.shared_count`` and ``index._merge_count`` (an ``add()`` that finds a near-duplicate)
#: still first ran in a timed run.
WARM_CHUNKS = 2000
WARM_ONES = 100


def warm_up(index_type: Any, items: list[tuple[str, str]]) -> None:
    """Load (or compile) the compiled kernels before anything is timed, untimed: ``add_many`` of the first
    :data:`WARM_CHUNKS` of ``items`` (planted chunks: near-duplicates and exact copies among them, so
    that verification and reclustering run too), then ``add`` of the next :data:`WARM_ONES` one at a
    time, into a private in-memory index of ``index_type`` (the ``DedupIndex`` of the tree being
    measured), thrown away after. With fewer items than that, those there (and fewer kernels warmed)."""
    index = index_type()
    index.add_many(items[:WARM_CHUNKS])
    for key, text in items[WARM_CHUNKS : WARM_CHUNKS + WARM_ONES]:
        index.add(key, text)


def source_files() -> Iterator[Path]:
    """Text files on this machine, in a fixed order (see the module docstring)."""
    doc = Path("/usr/share/doc")
    if doc.is_dir():
        for path in sorted(doc.rglob("*")):
            if path.is_file() and not path.is_symlink() and path.name.startswith(_DOC_NAMES):
                yield path
    sites = [Path(sysconfig.get_paths()["purelib"])]
    base = Path(sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})["purelib"])
    if base != sites[0] and base.is_dir():
        sites.append(base)
    for site in sites:
        for pattern in ("*.rst", "*.md", "*.txt"):
            yield from sorted(p for p in site.rglob(pattern) if p.is_file() and p.stat().st_size > 2000)
    man = Path("/usr/share/man")
    if man.is_dir():
        english = sorted(man.glob("man*/*.gz"))
        yield from english
        yield from sorted(p for p in man.rglob("*.gz") if p.parent.parent != man)
    info = Path("/usr/share/info")
    if info.is_dir():
        yield from sorted(info.glob("*.gz"))
    yield from sorted(Path.home().glob(".rustup/toolchains/*/share/doc/rust/html/*/print.html"))
    roots = sorted(Path("/usr/lib").glob("python3*")) + [Path("/usr/lib/google-cloud-sdk"), Path.home() / ".pyenv/versions"]
    for root in roots:
        if root.is_dir():
            yield from sorted(p for p in root.rglob("*.py") if p.is_file() and p.stat().st_size > 4000)
    yield from sorted((REPO / "tests" / "data" / "corpus").rglob("*.txt"))


_GROFF_ESCAPE = re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)|\\\(..|\\[-&e|^]")
_HTML_SKIP = re.compile(r"(?s)<(script|style|pre|code)\b[^>]*>.*?</\1>")
_HTML_TAG = re.compile(r"<[^>]+>")
_TRIPLE_QUOTED = re.compile(r'(?s)"""(.*?)"""|\'\'\'(.*?)\'\'\'')


def read_text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return None
    if "/man/" in str(path):
        lines = (line for line in text.splitlines() if not line.startswith((".", "'")))
        text = _GROFF_ESCAPE.sub("", "\n".join(lines))
    elif path.suffix == ".html":
        text = html.unescape(_HTML_TAG.sub(" ", _HTML_SKIP.sub(" ", text)))
    elif path.suffix == ".py":
        text = "\n\n".join(a or b for a, b in _TRIPLE_QUOTED.findall(text))
    return text


#: For each ``limit`` that :func:`machine_words` read: where each file's words start, and its path.
_SPANS: dict[int, tuple[list[int], list[Path]]] = {}


def machine_words(limit: int) -> tuple[list[str], int]:
    """Up to ``limit`` words of real text, and the number of files they came from."""
    words: list[str] = []
    seen: set[bytes] = set()
    files = 0
    starts: list[int] = []
    paths: list[Path] = []
    _SPANS[limit] = (starts, paths)
    for path in source_files():
        text = read_text(path)
        if not text:
            continue
        digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
        if digest in seen:
            continue
        seen.add(digest)
        files += 1
        starts.append(len(words))
        paths.append(path)
        words.extend(text.split())
        if len(words) >= limit:
            break
    return words[:limit], files


def source_kind(path: Path) -> str:
    """The kind of source a file of :func:`source_files` is (the order of the module docstring)."""
    text = str(path)
    if text.startswith("/usr/share/doc/"):
        return "Debian package docs"
    if "/man/" in text:
        return "gcloud man pages" if path.name.startswith("gcloud") else "other man pages"
    if text.startswith("/usr/share/info/"):
        return "info manuals"
    if "/share/doc/rust/" in text:
        return "Rust books"
    if path.suffix == ".py":
        return "Python docstrings"
    if "site-packages" in text or "dist-packages" in text:
        return "site-packages docs"
    return "the test corpus"


def source_mix(limit: int, chunks: list[int], words_per_chunk: int) -> list[tuple[str, float]]:
    """The share of ``chunks`` (chunk numbers in the words :func:`machine_words` read for ``limit``)
    from each kind of source, largest first."""
    starts, paths = _SPANS[limit]
    kinds = Counter(source_kind(paths[bisect_right(starts, i * words_per_chunk) - 1]) for i in chunks)
    return [(kind, count / max(1, len(chunks))) for kind, count in kinds.most_common()]


def edit(words: list[str], rate: float, rng: random.Random, vocabulary: list[str]) -> list[str]:
    """Copy ``words`` with about ``rate`` of them replaced, deleted or inserted."""
    out: list[str] = []
    for w in words:
        if rng.random() < rate:
            op = rng.randrange(3)
            if op == 0:
                out.append(rng.choice(vocabulary))
            elif op == 1:
                continue
            else:
                out.extend((w, rng.choice(vocabulary)))
        else:
            out.append(w)
    return out


_DISTINCT: dict[tuple[int, int], list[int]] = {}


def distinct_chunks(words: list[str], words_per_chunk: int) -> list[int]:
    """Indices of the chunks that have no near-duplicate (Jaccard >= 0.8) among all the chunks.

    Real text repeats itself (changelogs of sibling packages, licence texts); a benchmark that wants
    a known share of duplicates starts from chunks with none, found here with rag-dedup itself.
    """
    key = (len(words), words_per_chunk)
    if key not in _DISTINCT:
        from rag_dedup import DedupIndex

        count = len(words) // words_per_chunk
        index = DedupIndex(threshold=0.8)
        index.add_many(
            (str(i), " ".join(words[i * words_per_chunk : (i + 1) * words_per_chunk])) for i in range(count)
        )
        in_clusters = {k for _, ms in index.clusters(include_singletons=False) for k in ms}
        _DISTINCT[key] = [i for i in range(count) if str(i) not in in_clusters]
    return _DISTINCT[key]


def planted_chunks(
    n: int,
    words_per_chunk: int = 180,
    dup_share: float = 0.2,
    seed: int = 7,
    max_rate: float = 0.06,
    pool: int | None = None,
    distinct: bool = False,
) -> tuple[list[tuple[str, str]], dict[str, str], str]:
    """``n`` chunks of real text, ``dup_share`` of them near-duplicates of another chunk.

    With ``pool``, the base chunks are a random sample of the first ``pool`` chunks of text, so that
    benchmarks of different sizes draw from the same mix of sources. With ``distinct``, only chunks
    without a near-duplicate in that pool are used as base chunks, so the share of duplicates is the
    planted one at every size (real text's own repetition otherwise grows with the sample).

    Returns:
        (items as (key, text), {planted key: key it was copied from}, a line saying where the text came from)
    """
    rng = random.Random(seed)
    n_dup = int(n * dup_share)
    n_base = n - n_dup
    pool = max(pool or n_base, n_base)
    limit = int(pool * (1.6 if distinct else 1.0)) * words_per_chunk
    words, files = machine_words(limit)
    candidates = distinct_chunks(words, words_per_chunk) if distinct else list(range(len(words) // words_per_chunk))
    candidates = candidates[:pool]
    picked = sorted(rng.sample(candidates, min(n_base, len(candidates))))
    n_base = len(picked)
    base = [words[i * words_per_chunk : (i + 1) * words_per_chunk] for i in picked]
    vocabulary = words[: 200_000]
    items = [(f"c{i:07d}", " ".join(ws)) for i, ws in enumerate(base)]
    planted: dict[str, str] = {}
    for j in range(n - n_base):
        src = rng.randrange(n_base)
        key = f"d{j:07d}"
        items.append((key, " ".join(edit(base[src], rng.uniform(0.0, max_rate), rng, vocabulary))))
        planted[key] = f"c{src:07d}"
    origin = (
        f"{len(words):,} words from {files:,} files (/usr/share/doc copyright/README/NEWS/changelog files, "
        f"then .rst/.md/.txt under site-packages, then man pages, then, for the largest sizes, info manuals, "
        f"the Rust books and Python docstrings) on {sys.platform}; the base chunks by source: "
        + ", ".join(f"{kind} {share:.0%}" for kind, share in source_mix(limit, picked, words_per_chunk))
    )
    return items, planted, origin
