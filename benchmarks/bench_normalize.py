"""The Unicode folding of the canonical form on real chunks: the island path against the whole-text folding.

Run: ``python benchmarks/bench_normalize.py [--size 20000] [--rounds 7]``

The chunks are those of ``bench_stream.py`` (real 180-word chunks, ~20% planted near-duplicates, the same
seeds); only the chunks that hold a non-ASCII character are timed (an ASCII text is one ``lower()`` on
either path). In one process, rounds interleaved, best of ``--rounds``, CPU time: ``token_form`` and
``canonical`` by the whole-text folding (``normalize._fold_unicode_reference``, the reference, which
was the only path before the islands) and as shipped (``normalize._fold_unicode``: the islands when
the text is mostly ASCII), and the token and shingle forms the shingling takes (``token_form`` then
``shingle_form``, against ``normalize._token_and_shingle_form``). Every result is checked equal first.

``--text-side`` measures instead the whole text side of ingest on all the chunks (``--size``, the first
4,000 of them): text -> canonical form, shingle hashes, exact digest, signature and band keys, per chunk,
as ``DedupIndex.add`` takes one text (``shingles.shingles_digest_and_keys`` where the tree has it, else
``shingles_and_digests([text])`` and ``DedupIndex._band_keys``) and as ``add_many`` hashes blocks of 64
(``shingles_and_digests`` and ``_band_keys``), and blocks of 1,000. With ``--baseline-tree DIR`` the same
runs in that tree too: one fresh process per tree and round, the rounds interleaved, CPU time, best of
``--rounds``; the ratios printed are the baseline's time over this tree's. ``--split`` adds, per tree, the
CPU time of the stages of one text (after the same warm-up): the token and shingle forms, and the rest
of the call (words, decoration rule, hashes, signature, band keys and digest) by difference.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
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
    parser.add_argument("--text-side", action="store_true", help="time text -> shingles, digest and band keys instead")
    parser.add_argument("--baseline-tree", type=Path, help="with --text-side: another rag-dedup checkout, run too")
    parser.add_argument("--split", action="store_true", help="with --text-side: the stages of one text, per tree")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_text_side_worker(args.size, args.split)))
        return
    if args.text_side:
        _text_side(args)
        return
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


_TEXT_SIDE_CHUNKS = 4000


def _text_side_worker(n: int, split: bool) -> dict[str, float]:
    """One tree's CPU time per chunk of the text side (see the module docstring), best of 3 in this process."""
    from rag_dedup import DedupIndex
    from rag_dedup import shingles as S

    items = planted_chunks(n, seed=5, pool=int(n * 0.8), distinct=True, max_rate=0.025)[0]
    random.Random(14).shuffle(items)
    texts = [t for _, t in items][:_TEXT_SIDE_CHUNKS]
    index = DedupIndex(threshold=0.8)
    index.add_many(items[:40])  # warm-up: the kernels of both paths load (or compile) before the timing
    for key, text in items[40:50]:
        index.add(key + "-warm", text)
    b, r = index.bands
    hasher = index._hasher
    one_call = getattr(S, "shingles_digest_and_keys", None)

    def one() -> None:
        if one_call is not None:
            for t in texts:
                one_call(t, 5, ignore_decoration=True, short_tokens=20, hasher=hasher, b=b, r=r)
        else:
            for t in texts:
                (sh,), _ = S.shingles_and_digests([t], 5, ignore_decoration=True, short_tokens=20)
                index._band_keys([sh])

    def blocks(size: int) -> Callable[[], None]:
        def run() -> None:
            for lo in range(0, len(texts), size):
                sets, _ = S.shingles_and_digests(texts[lo : lo + size], 5, ignore_decoration=True, short_tokens=20)
                index._band_keys(sets)
        return run

    def forms() -> None:
        for t in texts:
            N._token_and_shingle_form(t, True)

    def shingled() -> None:
        for t in texts:
            S.shingles_and_digests([t], 5, ignore_decoration=True, short_tokens=20)

    sets = [S.shingles_and_digests([t], 5, ignore_decoration=True, short_tokens=20)[0][0] for t in texts]

    def keyed() -> None:
        for sh in sets:
            index._band_keys([sh])

    rows = [("one text (add)", one), ("blocks of 64 (add_many)", blocks(64)), ("blocks of 1,000", blocks(1000))]
    if split:
        rows += [("one text: token and shingle forms", forms), ("one text: shingles and digest", shingled),
                 ("one text: signature and band keys", keyed)]  # fmt: skip
    best = {name: float("inf") for name, _ in rows}
    for _ in range(3):
        for name, f in rows:
            t0 = time.process_time()
            f()
            best[name] = min(best[name], (time.process_time() - t0) / len(texts) * 1e6)
    return best


def _text_side(args: argparse.Namespace) -> None:
    trees = [("this tree", HERE.parent)]
    if args.baseline_tree:
        trees.append((args.baseline_tree.name, args.baseline_tree.resolve()))
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.rounds):
        for label, tree in trees:
            cmd = [sys.executable, __file__, "--worker", "--size", str(args.size)] + (["--split"] if args.split else [])
            env = dict(os.environ, PYTHONPATH=str(tree))
            got = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
            for name, us in got.items():
                best[(label, name)] = min(best.get((label, name), float("inf")), us)
    names = list(dict.fromkeys(name for _, name in best))
    print(f"\n== text -> shingles, digest, signature and band keys, the first {_TEXT_SIDE_CHUNKS:,} of {args.size:,} real chunks;"
          f" CPU time a chunk, best of {args.rounds} interleaved rounds (one process a tree and round)")
    for name in names:
        if name.startswith("one text:"):
            continue
        cells = [f"{label} {best[(label, name)]:6.2f} us" for label, _ in trees]
        ratio = f", {trees[1][0]}/this {best[(trees[1][0], name)] / best[(trees[0][0], name)]:.2f}x" if len(trees) > 1 else ""
        print(f"   {name:<26} " + ", ".join(cells) + ratio)
    if args.split:
        for label, _ in trees:
            parts = ", ".join(f"{name[len('one text: '):]} {best[(label, name)]:.2f} us" for name in names if name.startswith("one text:"))
            print(f"   one text, {label}: {best[(label, 'one text (add)')]:.2f} us in all; its stages called alone"
                  f" (shingles_and_digests([text]) holds the forms; the one call of this tree fuses them): {parts}")

if __name__ == "__main__":
    main()
