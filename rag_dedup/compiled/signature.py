"""Compiled MinHash signatures and LSH band keys: the values of :mod:`rag_dedup.minhash` and
:func:`rag_dedup.lsh.band_keys`, value for value, without the ``(num_perm, shingles)`` temporaries.

The rules live in those modules (their numpy code is the reference, and the test suite holds these
kernels equal to it); the kernels only compute them in one pass:

* :func:`signatures`: for each set, ``sig_k = min_x (a_k · fmix32(x) + b_k mod 2^32)`` (datasketch's
  ``affine32``), four shingles at a time with the ``num_perm`` permutations as the inner loop, which the
  compiler vectorises (a multiply, an add and a minimum per lane and shingle; one load and store of the
  running minimum per four shingles). The arithmetic is done in ``uint64``
  and masked to 32 bits, which is exactly the ``mod 2^32`` of the ``uint32`` reference. (No Mersenne
  reduction is involved: that is datasketch's ``legacy`` scheme, not ``affine32``.)
* :func:`band_keys`: ``fmix64(Σ_j sig_j · K_j + band mod 2^64)`` per band of ``r`` rows.
* :func:`signature_band_keys`: the two in one pass, a set at a time (the band keys of sets, without
  their signatures); :func:`signature_row` and :func:`band_row` are the steps of one set, which the
  one-text kernel :func:`rag_dedup.compiled.shingle.shingle_one` takes too.

Every integer in these bodies is a ``uint64`` (numba turns ``uint64`` mixed with a plain ``int`` into a
float), so the constants below are typed.
"""

from __future__ import annotations

import numpy as np

from rag_dedup.compiled import kernel

__all__ = ["band_keys", "band_row", "signature_band_keys", "signature_row", "signatures"]

_M32 = np.uint64(0xFFFFFFFF)
_EMPTY = np.uint32(0xFFFFFFFF)
_S16 = np.uint64(16)
_S13 = np.uint64(13)
_S33 = np.uint64(33)
_F32_K1 = np.uint64(0x85EBCA6B)
_F32_K2 = np.uint64(0xC2B2AE35)
_F64_K1 = np.uint64(0xFF51AFD7ED558CCD)
_F64_K2 = np.uint64(0xC4CEB9FE1A85EC53)


@kernel
def fmix32(h: np.uint64) -> np.uint64:
    """MurmurHash3's 32-bit finaliser of the low 32 bits of ``h`` (returned in a uint64)."""
    h = h & _M32
    h ^= h >> _S16
    h = (h * _F32_K1) & _M32
    h ^= h >> _S13
    h = (h * _F32_K2) & _M32
    h ^= h >> _S16
    return h


@kernel
def fmix64(x: np.uint64) -> np.uint64:
    """MurmurHash3's 64-bit finaliser (uint64 arithmetic wraps modulo 2^64)."""
    x ^= x >> _S33
    x *= _F64_K1
    x ^= x >> _S33
    x *= _F64_K2
    x ^= x >> _S33
    return x


@kernel
def signature_row(values: np.ndarray, a: np.ndarray, b: np.ndarray, best: np.ndarray) -> None:
    """Write to ``best`` (uint32, ``len(a)`` entries) the signature of the one set ``values`` (see
    :func:`signatures`); an empty set's is all ``0xFFFFFFFF``."""
    num_perm = a.shape[0]
    best[:] = _EMPTY
    j, end = 0, values.shape[0]
    # Four shingles a pass over the permutations: one load and store of best[k] for four values.
    while j + 4 <= end:
        h0 = np.uint32(fmix32(np.uint64(values[j])))
        h1 = np.uint32(fmix32(np.uint64(values[j + 1])))
        h2 = np.uint32(fmix32(np.uint64(values[j + 2])))
        h3 = np.uint32(fmix32(np.uint64(values[j + 3])))
        for k in range(num_perm):
            ak, bk = a[k], b[k]
            # Truncated to 32 bits (the mod 2^32), so the compiler multiplies in 32-bit lanes.
            v = min(min(np.uint32(ak * h0 + bk), np.uint32(ak * h1 + bk)), min(np.uint32(ak * h2 + bk), np.uint32(ak * h3 + bk)))
            if v < best[k]:
                best[k] = v
        j += 4
    while j < end:
        h = np.uint32(fmix32(np.uint64(values[j])))
        for k in range(num_perm):
            v = np.uint32(a[k] * h + b[k])
            if v < best[k]:
                best[k] = v
        j += 1


@kernel
def band_row(sig: np.ndarray, multipliers: np.ndarray, bands: int, rows: int, out: np.ndarray) -> None:
    """Write to ``out`` (uint64, ``bands`` entries) the band keys of the one signature ``sig`` (see
    :func:`band_keys`)."""
    for band in range(bands):
        acc = np.uint64(band)
        for j in range(band * rows, band * rows + rows):
            acc += np.uint64(sig[j]) * multipliers[j]
        out[band] = fmix64(acc)


@kernel
def signatures(values: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """Write to ``out`` the ``(len(offsets) - 1, len(a))`` uint32 signatures of the sets
    ``values[offsets[i]:offsets[i + 1]]`` (an array returned from a kernel costs microseconds to box).

    ``values`` are uint32 shingle hashes, ``a`` and ``b`` the uint32 permutation parameters; an empty
    set's row is all ``0xFFFFFFFF`` (:data:`rag_dedup.minhash.EMPTY_VALUE`).
    """
    for i in range(offsets.shape[0] - 1):
        signature_row(values[offsets[i] : offsets[i + 1]], a, b, out[i])


@kernel
def band_keys(sigs: np.ndarray, multipliers: np.ndarray, b: int, r: int, out: np.ndarray) -> None:
    """Write to ``out`` the ``(n, b)`` uint64 band keys of ``(n, >= b·r)`` uint32 signatures (see
    :func:`rag_dedup.lsh.band_keys`)."""
    for i in range(sigs.shape[0]):
        band_row(sigs[i], multipliers, b, r, out[i])


@kernel
def signature_band_keys(
    values: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray, multipliers: np.ndarray, bands: int, rows: int,
    out: np.ndarray,
) -> None:
    """Write to ``out`` the ``(len(offsets) - 1, bands)`` uint64 band keys of the signatures of the sets
    ``values[offsets[i]:offsets[i + 1]]``: :func:`signatures` then :func:`band_keys`, one set at a time,
    without the ``(sets, num_perm)`` array of signatures."""
    best = np.empty(a.shape[0], dtype=np.uint32)
    for i in range(offsets.shape[0] - 1):
        signature_row(values[offsets[i] : offsets[i + 1]], a, b, best)
        band_row(best, multipliers, bands, rows, out[i])
