"""`rag-dedup query` from a save: BM25 loaded from the save against BM25 rebuilt from chunks.json.

Corpus (real files of this machine, copied into a temporary folder with their layout): every Debian
``/usr/share/doc/*/copyright``, the first 600 ``changelog.Debian.gz`` and the first 1,500 gzipped man
pages of ``/usr/share/man/man1`` (sorted paths), read by ``rag-dedup scan DIR --glob '*'``.

Each command runs as a user runs it, in its own process (``python -m rag_dedup``); its wall time and peak
RSS (``os.wait4``) are measured. The baseline is the previous behaviour: the same save without its
``bm25/`` folder, from which ``query`` rebuilds the BM25 retriever out of ``chunks.json`` on every call.
A third side measures what checking the BM25 files costs: the same save without the sidecar's
``bm25_sha256`` field (as a save made before stop 24, whose BM25 files are loaded unchecked); the
difference of its times and the checked save's is the SHA-256 check of every BM25 file. All sides run
one question, then the same ten questions from a file (``--queries``), alternating, in the same run.

Run: python benchmarks/bench_command.py [--rounds N]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = [
    "warranty of merchantability fitness for a particular purpose",
    "GNU General Public License version 2 or later",
    "permission is hereby granted free of charge to any person obtaining a copy",
    "new upstream release",
    "print a help message and exit",
    "redistribution and use in source and binary forms",
    "the above copyright notice shall be included in all copies",
    "fix a security vulnerability",
    "display version information and exit",
    "Apache License Version 2.0",
]


def build_corpus(folder: Path) -> int:
    files = [(p, folder / "copyright" / p.split("/")[4] / "copyright") for p in sorted(glob.glob("/usr/share/doc/*/copyright"))]
    files += [(p, folder / "changelog" / p.split("/")[4] / "changelog.Debian.gz")
              for p in sorted(glob.glob("/usr/share/doc/*/changelog.Debian.gz"))[:600]]
    files += [(p, folder / "man1" / os.path.basename(p)) for p in sorted(glob.glob("/usr/share/man/man1/*.gz"))[:1500]]
    for src, dst in files:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    return len(files)


def run(*args: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of ``python -m rag_dedup ARGS``; fails loudly on an error."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "rag_dedup", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if status != 0:
        raise SystemExit(f"rag-dedup {' '.join(args)} failed:\n{err[-2000:]}")
    return elapsed, usage.ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per side (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        n = build_corpus(tmp_path / "corpus")
        save = tmp_path / "save"
        t, rss = run("scan", str(tmp_path / "corpus"), "--glob", "*", "--save", str(save))
        print(f"scan --save of {n:,} files: {t:.1f} s, peak RSS {rss:,.0f} MB")
        baseline = tmp_path / "baseline"
        shutil.copytree(save, baseline)
        shutil.rmtree(baseline / "bm25")
        unchecked = tmp_path / "unchecked"
        shutil.copytree(save, unchecked)
        sidecar = json.loads((unchecked / "chunks.json").read_text(encoding="utf-8"))
        bm25_bytes = sum(p.stat().st_size for p in (save / "bm25").iterdir() if p.is_file())
        assert sidecar.pop("bm25_sha256"), "the save has no BM25 digests to leave out"
        (unchecked / "chunks.json").write_text(json.dumps(sidecar, ensure_ascii=False), encoding="utf-8")
        print(f"the save's bm25/ folder: {bm25_bytes / 1e6:,.1f} MB")
        questions = tmp_path / "questions.txt"
        questions.write_text("\n".join(QUESTIONS) + "\n", encoding="utf-8")
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _ in range(args.rounds):
            for side, folder in (("loaded", save), ("rebuilt", baseline), ("unchecked", unchecked)):
                results.setdefault((side, "one"), []).append(run("query", str(folder), QUESTIONS[0]))
                results.setdefault((side, "ten"), []).append(run("query", str(folder), "--queries", str(questions)))
    for what, label in (("one", "1 question"), ("ten", f"{len(QUESTIONS)} questions (--queries)")):
        (t_new, m_new), (t_old, m_old) = (
            (statistics.median(x for x, _ in results[(side, what)]), max(m for _, m in results[(side, what)]))
            for side in ("loaded", "rebuilt")
        )
        print(f"query, {label}: BM25 loaded from the save {t_new:.1f} s, {m_new:,.0f} MB; "
              f"baseline BM25 rebuilt from chunks.json {t_old:.1f} s, {m_old:,.0f} MB; "
              f"{t_old / t_new:.2f}x faster, {m_old / m_new:.2f}x less memory")
        t_unchecked = statistics.median(x for x, _ in results[("unchecked", what)])
        print(f"query, {label}: the BM25 digest check: checked {t_new:.2f} s, unchecked {t_unchecked:.2f} s "
              f"(medians); the check costs {t_new - t_unchecked:+.2f} s, {t_new / t_unchecked:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
