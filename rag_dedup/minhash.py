"""Batch MinHash signatures in numpy, value-for-value equal to datasketch's ``affine32`` scheme.

For a set of 32-bit shingle hashes ``x``, permutation ``k`` of datasketch 2.0's ``affine32`` scheme is
``π_k(x) = a_k · fmix32(x) + b_k mod 2^32`` with ``a_k`` odd (so ``π_k`` is a bijection), and the
signature is ``sig_k = min_x π_k(x)``. For two sets, ``P[sig_k(A) = sig_k(B)] ≈ J(A, B)``, so the
fraction of equal positions estimates Jaccard similarity with standard error
``sqrt(J (1 - J) / num_perm)`` (about 0.035 at J = 0.8 with 128 permutations).

``MinHasher(num_perm, seed).signatures(sets)`` equals, row for row,
``datasketch.MinHash(num_perm, seed=seed, scheme="affine32", hashfunc=int).update_batch(set)``; the
permutation parameters are taken from datasketch itself. One pass computes a whole batch: the
shingles of many texts are concatenated, permuted as one ``(shingles, num_perm)`` matrix, and reduced
per text with ``np.minimum.reduceat``. That numpy code is the reference; with
:data:`rag_dedup.compiled.COMPILED` the kernel :func:`rag_dedup.compiled.signature.signatures` computes the
same values in one pass (no ``(num_perm, shingles)`` temporary).

Example:
    >>> from rag_dedup.shingles import shingle_hashes
    >>> hasher = MinHasher(num_perm=128, seed=1)
    >>> sig = hasher.signatures([shingle_hashes("a b c d e f g"), shingle_hashes("")])
    >>> sig.shape, sig.dtype.name, bool((sig[1] == EMPTY_VALUE).all())
    ((2, 128), 'uint32', True)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rag_dedup import compiled, lsh
from rag_dedup.compiled import signature as _kernels
from rag_dedup.settings import check_num_perm, check_seed

__all__ = ["EMPTY_VALUE", "SCHEME", "MinHasher"]

#: The datasketch permutation scheme these signatures follow (stored with every saved index).
SCHEME = "affine32"
#: A signature position of an empty set (datasketch's empty sentinel for affine32).
EMPTY_VALUE = np.uint32(0xFFFFFFFF)
# Shingles permuted per block: bounds the (block, num_perm) temporary to about 4 MB at 128 permutations.
_BLOCK_SHINGLES = 4096


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finaliser on a uint32 array (datasketch's affine32 pre-mix)."""
    h = h ^ (h >> np.uint32(16))
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h


class MinHasher:
    """Computes MinHash signatures of shingle-hash sets, many at a time.

    Args:
        num_perm: Number of permutations (signature length), at least 2.
        seed: The permutation seed; signatures with different seeds are not comparable.

    Raises:
        TypeError: ``num_perm`` or ``seed`` is not an int.
        ValueError: ``num_perm`` outside [2, 8192] (:func:`rag_dedup.settings.check_num_perm`).
    """

    def __init__(self, num_perm: int = 128, seed: int = 1) -> None:
        check_num_perm(num_perm)
        check_seed(seed)
        from datasketch import MinHash

        a, b = MinHash(num_perm=num_perm, seed=seed, scheme=SCHEME).permutations
        self.num_perm = num_perm
        self.seed = seed
        self._a = np.ascontiguousarray(a, dtype=np.uint32)
        self._b = np.ascontiguousarray(b, dtype=np.uint32)
        self._b_column = self._b[:, None]

    def signatures(self, sets: Sequence[np.ndarray]) -> np.ndarray:
        """Signatures of many shingle-hash sets: a ``(len(sets), num_perm)`` uint32 array.

        An empty set's row is all :data:`EMPTY_VALUE`. With :data:`rag_dedup.compiled.COMPILED`, one
        compiled pass (:func:`rag_dedup.compiled.signature.signatures`) computes the same values.
        """
        if compiled.COMPILED:
            return self._compiled_signatures(sets)
        if len(sets) == 1 and 0 < len(sets[0]) <= _BLOCK_SHINGLES:
            # One set (DedupIndex.add): the same values with a handful of numpy calls, not ~20.
            permuted = self._permute(_fmix32(sets[0].astype(np.uint32, copy=False)))
            return permuted.min(axis=1)[None, :]
        out = np.full((len(sets), self.num_perm), EMPTY_VALUE, dtype=np.uint32)
        sizes = np.fromiter((len(s) for s in sets), dtype=np.int64, count=len(sets))
        rows = np.flatnonzero(sizes)
        if len(rows) == 0:
            return out
        # All shingles pre-mixed at once; then blocks of whole sets, cut where the running size
        # passes a multiple of the block size.
        mixed = _fmix32(np.concatenate([sets[i] for i in rows.tolist()]).astype(np.uint32, copy=False))
        ends = np.cumsum(sizes[rows])
        starts = ends - sizes[rows]
        cuts = np.flatnonzero(np.diff(ends // _BLOCK_SHINGLES, prepend=0)) + 1
        bounds = [0, *cuts.tolist()]
        if bounds[-1] != len(rows):
            bounds.append(len(rows))
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            first, last = int(starts[lo]), int(ends[hi - 1])
            if hi - lo == 1 and last - first > _BLOCK_SHINGLES:
                # One large set (a whole long document): minimum over column slices of bounded size.
                for a in range(first, last, _BLOCK_SHINGLES):
                    part = self._permute(mixed[a : min(a + _BLOCK_SHINGLES, last)]).min(axis=1)
                    np.minimum(out[rows[lo]], part, out=out[rows[lo]])
                continue
            permuted = self._permute(mixed[first:last])
            out[rows[lo:hi]] = np.minimum.reduceat(permuted, starts[lo:hi] - first, axis=1).T
            del permuted  # before the next block's is allocated: one block's matrix alive at a time
        return out

    def band_keys(self, sets: Sequence[np.ndarray], b: int, r: int) -> np.ndarray:
        """The ``(len(sets), b)`` uint64 LSH band keys of the sets' signatures:
        ``lsh.band_keys(self.signatures(sets), b, r)``, value for value.

        With :data:`rag_dedup.compiled.COMPILED`, one compiled pass
        (:func:`rag_dedup.compiled.signature.signature_band_keys`) computes them a set at a time, without
        the ``(len(sets), num_perm)`` signatures.

        Raises:
            ValueError: ``b * r`` exceeds ``num_perm``.
        """
        if not compiled.COMPILED:
            return lsh.band_keys(self.signatures(sets), b, r)
        a, b_perm, multipliers, _, _ = self.band_parameters(b, r)
        values, offsets = self._concatenated(sets)
        out = np.empty((len(sets), b), dtype=np.uint64)
        _kernels.signature_band_keys(values, offsets, a, b_perm, multipliers, b, r, out)
        return out

    def band_parameters(self, b: int, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
        """What the compiled band keys of :meth:`band_keys` take: ``(a, b_perm, multipliers, b, r)``, the
        uint32 permutation parameters, the uint64 band multipliers of :func:`rag_dedup.lsh.band_keys`
        and the bands and rows (the arrays are shared: not to be written).

        Raises:
            ValueError: ``b * r`` exceeds ``num_perm`` (as :func:`rag_dedup.lsh.band_keys`).
        """
        if b * r > self.num_perm:
            raise ValueError(f"b * r ({b} * {r} = {b * r}) exceeds the signature length ({self.num_perm})")
        return self._a, self._b, lsh._constants(b, r)[0], b, r

    def _concatenated(self, sets: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The sets' values one after another (uint32) and the ``len(sets) + 1`` offsets of the sets in them."""
        if len(sets) == 1:
            values = np.ascontiguousarray(sets[0], dtype=np.uint32)
            return values, np.array([0, len(values)], dtype=np.int64)
        sizes = np.fromiter((len(s) for s in sets), dtype=np.int64, count=len(sets))
        offsets = np.zeros(len(sets) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        values = np.concatenate(sets).astype(np.uint32, copy=False) if int(offsets[-1]) else np.empty(0, np.uint32)
        return values, offsets

    def _compiled_signatures(self, sets: Sequence[np.ndarray]) -> np.ndarray:
        """:meth:`signatures` by the compiled kernel: the sets concatenated, with their offsets."""
        values, offsets = self._concatenated(sets)
        out = np.empty((len(sets), self.num_perm), dtype=np.uint32)
        _kernels.signatures(values, offsets, self._a, self._b, out)
        return out

    def _permute(self, mixed: np.ndarray) -> np.ndarray:
        """``a_k * h + b_k mod 2^32`` for every permutation k (rows) and pre-mixed hash h (columns).

        The (num_perm, shingles) layout keeps each permutation's row contiguous: reducing along rows
        is faster than along the columns of the transposed matrix.
        """
        permuted = np.multiply.outer(self._a, mixed)
        permuted += self._b_column
        return permuted
