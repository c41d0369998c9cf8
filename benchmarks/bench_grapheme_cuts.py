"""Grapheme-safe cuts: chunking throughput and chunk counts against a baseline's ``units.py``, side by side.

The baseline is ``rag_dedup/chunking/units.py`` as of ``--baseline REV`` (default ``4459a64``, before the
cuts of runs without spaces moved to grapheme boundaries), loaded from git into its own module and put in
place of this tree's ``build_units`` for its rounds; everything else is this tree's. Corpus: real files
of this machine, the first 300 ``/usr/share/doc/*/changelog.Debian.gz`` and 600 ``/usr/share/doc/*/copyright``
(sorted paths). Printed per side: MB, chunks, best of ``--rounds`` alternating rounds, MB/s, and the ratio.
Then, for text without spaces, how many chunk starts and ends fall inside a grapheme (the ``regex``
module's ``\\X``) on a Thai sentence repeated and on a run of ZWJ emoji families.

Run: python benchmarks/bench_grapheme_cuts.py [--baseline REV] [--rounds N]
"""

from __future__ import annotations

import argparse
import glob
import gzip
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import regex
from llama_index.core.utils import get_tokenizer

import rag_dedup.chunking.chunker as chunker_module
from rag_dedup.chunking import Chunker

ROOT = Path(__file__).resolve().parents[1]


def baseline_build_units(rev: str):  # type: ignore[no-untyped-def]
    source = subprocess.run(["git", "show", f"{rev}:rag_dedup/chunking/units.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "baseline_units.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("baseline_units", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_units


def corpus() -> list[str]:
    files = sorted(glob.glob("/usr/share/doc/*/changelog.Debian.gz"))[:300] + sorted(glob.glob("/usr/share/doc/*/copyright"))[:600]
    texts = []
    for f in files:
        raw = Path(f).read_bytes()
        texts.append((gzip.decompress(raw) if f.endswith(".gz") else raw).decode("utf-8", "replace"))
    return texts


def inside_graphemes(text: str) -> tuple[int, int]:
    boundaries = {0} | {m.end() for m in regex.finditer(r"\X", text)}
    spans = Chunker(get_tokenizer()).chunk_spans(text)
    return sum((s not in boundaries) + (e not in boundaries) for s, e in spans), len(spans)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="4459a64")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sides = {"this tree": chunker_module.build_units, f"baseline {args.baseline}": baseline_build_units(args.baseline)}
    texts = corpus()
    mb = sum(len(t.encode()) for t in texts) / 1e6
    best = {side: float("inf") for side in sides}
    chunks = {}
    for _ in range(args.rounds):
        for side, build in sides.items():
            chunker_module.build_units = build
            chunker = Chunker(get_tokenizer())
            start = time.perf_counter()
            chunks[side] = sum(len(chunker.chunk_spans(t)) for t in texts)
            best[side] = min(best[side], time.perf_counter() - start)
    for side in sides:
        print(f"{side}: {len(texts)} files, {mb:.1f} MB, {chunks[side]:,} chunks, best {best[side]:.2f} s, "
              f"{mb / best[side]:.2f} MB/s")
    this, base = list(sides)
    print(f"throughput this / baseline: {best[base] / best[this]:.3f}x; same chunk count: {chunks[this] == chunks[base]}")
    samples = {"Thai sentence x200": "ภาษาไทยเป็นภาษาที่ไม่มีการเว้นวรรคระหว่างคำ" * 200,
               "ZWJ families x5000": "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466" * 5000}
    for side, build in sides.items():
        chunker_module.build_units = build
        for name, text in samples.items():
            bad, n = inside_graphemes(text)
            print(f"{side}, {name}: {bad} chunk starts/ends inside a grapheme, {n} chunks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
