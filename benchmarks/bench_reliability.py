"""What the reliability checks cost: this tree against the commit before them, side by side in one run.

Run: ``python benchmarks/bench_reliability.py [--n 20000] [--rounds 3] [--baseline 24a97d1]``

The baseline's ``rag_dedup`` is taken from git (``git archive <commit>``) into a temporary directory;
each side runs in its own child process (so each imports its own package and reports its own peak
RSS), alternating sides over ``--rounds`` rounds; the median of each measure is printed with the
ratio this tree / baseline (for times: > 1 means slower). Measured on real text (``realtext``):

1. ``canonical`` over the chunks that are not ASCII (there the Unicode folding runs: v2 removes every
   default-ignorable code point and checks that the folding is stable);
2. ``add_many`` of all chunks into a new in-memory index (keys, sources and texts are now checked for
   lone surrogates);
3. ``save`` and ``load`` of that index (the load now validates every column and array).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = r"""
import gc, json, resource, sys, tempfile, time
sys.path.insert(0, {bench!r})
from realtext import planted_chunks
import rag_dedup
from rag_dedup import DedupIndex, canonical
items, _, _ = planted_chunks({n})
wide = [t for _, t in items if not t.isascii()]
out = {{"package": rag_dedup.__file__, "non_ascii": len(wide)}}
start = time.perf_counter()
for t in wide:
    canonical(t)
out["canonical_s"] = time.perf_counter() - start
batch = [{{"key": k, "text": t, "source": k.split("#")[0]}} for k, t in items]
gc.collect()
start = time.perf_counter()
index = DedupIndex()
index.add_many(batch)
out["add_many_s"] = time.perf_counter() - start
with tempfile.TemporaryDirectory() as tmp:
    start = time.perf_counter()
    index.save(tmp)
    out["save_s"] = time.perf_counter() - start
    start = time.perf_counter()
    loaded = DedupIndex.load(tmp)
    out["load_s"] = time.perf_counter() - start
assert len(loaded) == len(index)
out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def run(package_root: Path, n: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    script = CHILD.format(bench=str(HERE), n=n)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True, cwd="/")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default="24a97d1")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline, "rag_dedup"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        sides = {"this tree": ROOT, f"baseline {args.baseline}": Path(tmp)}
        results: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        for _ in range(args.rounds):
            for name, root in sides.items():
                results[name].append(run(root, args.n))
    (this, base) = (results[name] for name in sides)
    for side in (this, base):
        assert len({r["package"] for r in side}) == 1
    assert this[0]["package"] != base[0]["package"]
    print(f"{args.n} real chunks, {this[0]['non_ascii']} of them not ASCII; median of {args.rounds} rounds per side")
    for measure, unit in (("canonical_s", "s"), ("add_many_s", "s"), ("save_s", "s"), ("load_s", "s"), ("rss_mb", "MB")):
        ours = statistics.median(r[measure] for r in this)
        theirs = statistics.median(r[measure] for r in base)
        print(f"  {measure[:-2] if unit == 's' else measure[:-3]:<10} this tree {ours:8.3f} {unit}   baseline {theirs:8.3f} {unit}   ratio {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
