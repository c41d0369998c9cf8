"""Boundary stability of real comment-form licences, this tree beside a baseline tree, in one run.

Run: ``python benchmarks/bench_comment_headers.py [--baseline-tree DIR]`` (``DIR`` holds a baseline's
``rag_dedup`` package, e.g. ``git archive <rev> | tar -x -C DIR``).

The text is real: the first ``/* ... */`` comment of each C/C++ header under ``/usr/include`` on this
machine that holds a licence line (`` * Permission``, `` * This program is free``, `` * Licensed under``,
`` * Redistribution and use``), distinct ones only. Each is chunked alone (``Chunker``, 256/64, LlamaIndex's
default tokenizer) and behind three prefixes (two paragraphs of the shipped GPL-3 and an ``#include`` line);
the figure is the share of its chunks, all but the first, that are still chunks behind a prefix (the first
chunk may take the prefix in). Each tree runs in a fresh process of its own.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LICENCE_LINE = re.compile(r"^ \* (Permission|This program is free|Licensed under|Redistribution and use)", re.M)


def headers() -> list[str]:
    """The distinct first comments of the headers under /usr/include that hold a licence line."""
    found: dict[str, None] = {}
    for path in sorted(glob.glob("/usr/include/**/*.h", recursive=True)):
        try:
            with open(path, encoding="utf-8") as fh:
                head = fh.read(20_000)
        except (OSError, UnicodeDecodeError):
            continue
        m = re.search(r"/\*.*?\*/", head, re.S)
        if m and LICENCE_LINE.search(m.group(0)):
            found.setdefault(m.group(0))
    return list(found)


def measure() -> dict[str, float]:
    """This process's tree: headers, chunks after the first, how many are still chunks behind a prefix."""
    from llama_index.core.utils import get_tokenizer

    from rag_dedup.chunking import Chunker

    chunker = Chunker(get_tokenizer(), chunk_size=256, chunk_overlap=64)
    gpl = (HERE.parent / "tests" / "data" / "corpus" / "licenses" / "GPL-3.txt").read_text(encoding="utf-8")
    paragraphs = [p for p in gpl.split("\n\n") if len(p) > 200]
    prefixes = [paragraphs[3] + "\n\n", paragraphs[7][:300] + "\n\n", "#include <stddef.h>\n\n"]
    found = headers()
    total = kept = chunks = 0
    for comment in found:
        alone = [comment[s:e] for s, e in chunker.chunk_spans(comment)]
        chunks += len(alone)
        for prefix in prefixes:
            text = prefix + comment
            got = {text[s:e] for s, e in chunker.chunk_spans(text)}
            total += len(alone) - 1
            kept += sum(c in got for c in alone[1:])
    return {"headers": len(found), "chunks": chunks, "total": total, "kept": kept}


def run(tree: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, __file__, "--measure"], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-tree", help="a directory holding the baseline's rag_dedup package")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure()))
        return
    if not glob.glob("/usr/include/**/*.h", recursive=True):
        sys.exit("no C headers under /usr/include (Debian: apt-get install libc6-dev)")
    rows = [("this tree", run(HERE.parent))]
    if args.baseline_tree:
        rows.append(("baseline", run(Path(args.baseline_tree))))
    for name, r in rows:
        share = r["kept"] / max(r["total"], 1)
        print(f"{name:10} {r['headers']} headers, {r['chunks']} chunks alone ({r['chunks'] / r['headers']:.2f} a header); "
              f"chunks after the first still chunks behind a prefix: {r['kept']}/{r['total']} = {share:.3f}")
    if len(rows) == 2:
        a, b = (r["kept"] / max(r["total"], 1) for _, r in rows)
        print(f"this / baseline: {a / b:.2f}x the share kept")


if __name__ == "__main__":
    main()
