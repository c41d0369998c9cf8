"""The Unicode folding of the canonical form on real chunks: the island path against the whole-text folding.

Run: ``python benchmarks/bench_normalize.py [--size 20000] [--rounds 7]``

The chunks are those of ``bench_stream.py`` (real 180-word chunks, ~20% planted near-duplicates, the same
seeds); only the chunks that hold a non-ASCII character are timed (an ASCII text is one ``lower()`` on
either path). In one process, rounds interleaved, best of ``--rounds``, CPU time: ``token_form`` and
``canonical`` by the whole-text folding (``normalize._fold_unicode_reference``, the reference, which
was the only path before the islands) and as shipped (``normalize._fold_unicode``: the islands when
the text is mostly ASCII), and the token and shingle forms the shingling takes (``token_form`` then
``shingle_form``, against ``normalize._token_and_shingle_form``). Every result is checked equal first.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from realtext import planted_chunks  # noqa: E402

from rag_dedup import normalize as N  # noqa: E402


def _reference_token_form(text: str) -> str:
    return N._fold_unicode_reference(text)


def _reference_canonical(text: str) -> str:
    return N._fold_whitespace(N._fold_unicode_reference(text).encode("utf-8")).decode("utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20000, help="chunks generated (as bench_stream.py --sizes)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    n = args.size
    items = planted_chunks(n, seed=5, pool=int(n * 0.8), distinct=True, max_rate=0.025)[0]
    random.Random(14).shuffle(items)
    texts = [t for _, t in items if not t.isascii()]
    for t in texts:
        assert N.canonical(t) == _reference_canonical(t) and N.token_form(t) == _reference_token_form(t)
    rows: list[tuple[str, Callable[[str], object]]] = [
        ("token_form, whole-text folding", _reference_token_form),
        ("token_form, islands", N.token_form),
        ("canonical, whole-text folding", _reference_canonical),
        ("canonical, islands", N.canonical),
        ("token + shingle form, whole-text folding", lambda t: N.shingle_form(_reference_token_form(t))),
        ("token + shingle form, one pass", lambda t: N._token_and_shingle_form(t, True)),
    ]
    best = {name: float("inf") for name, _ in rows}
    for _ in range(args.rounds):
        for name, f in rows:
            t0 = time.process_time()
            for t in texts:
                f(t)
            best[name] = min(best[name], time.process_time() - t0)
    print(f"\n== Unicode folding, {len(texts):,} non-ASCII chunks of {len(items):,} (mean {sum(map(len, texts)) / len(texts):.0f}"
          f" characters); CPU time, best of {args.rounds} interleaved rounds, one process")
    for name, _ in rows:
        print(f"   {name:<44} {best[name] / len(texts) * 1e6:8.2f} us/chunk")
    for i in range(0, len(rows), 2):
        print(f"   {rows[i + 1][0]}: {best[rows[i][0]] / best[rows[i + 1][0]]:.2f}x faster than {rows[i][0].split(', ')[1]}")


if __name__ == "__main__":
    main()
