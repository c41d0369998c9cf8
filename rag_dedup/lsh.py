"""Band/row arithmetic of MinHash LSH: the S-curve, its knee, and the choice of (b, r).

A signature of ``b · r`` MinHash values is cut into ``b`` bands of ``r`` rows. Two sets with Jaccard
similarity ``s`` agree on one row with probability ``s``, on a whole band with ``s^r``, and share at
least one band (become *candidates*) with probability

    P(s) = 1 - (1 - s^r)^b,

an S-shaped curve whose steepest part (the knee) sits near ``(1/b)^(1/r)``.

LSH only proposes candidates; rag-dedup verifies every candidate with the exact Jaccard of its
shingle sets. So the bands are chosen for *recall*: :func:`choose_bands` takes the largest ``r`` (fewest
false candidates) for which ``P(threshold) >= recall`` with ``b = num_perm // r`` bands, which puts
the knee well below the threshold. A single 128-permutation estimate is noisy by about 0.035 at
s = 0.8; the exact check after the wide net is what keeps pairs just above the threshold.

Example:
    >>> round(candidate_probability(0.9, 16, 8), 5), round(candidate_probability(0.5, 16, 8), 4)
    (0.99988, 0.0607)
    >>> round(knee(16, 8), 3)
    0.707
    >>> choose_bands(0.8, 128)
    (21, 6)
"""

from __future__ import annotations

import numpy as np

from rag_dedup import compiled
from rag_dedup.compiled import signature as _kernels
from rag_dedup.settings import check_num_perm, check_threshold
from rag_dedup.shingles import _fmix64_inplace

__all__ = ["DEFAULT_RECALL", "band_keys", "candidate_probability", "choose_bands", "knee"]

#: The candidate probability at the threshold that :func:`choose_bands` asks for.
DEFAULT_RECALL = 0.995


def candidate_probability(s: float, b: int, r: int) -> float:
    """P(two sets of Jaccard ``s`` share at least one of ``b`` bands of ``r`` rows) = 1 - (1 - s^r)^b."""
    if not 0.0 <= s <= 1.0:
        raise ValueError(f"similarity s ({s}) must be in [0, 1]")
    _check_bands(b, r)
    return 1.0 - (1.0 - s**r) ** b


def knee(b: int, r: int) -> float:
    """The similarity (1/b)^(1/r) near which the S-curve of ``b`` bands of ``r`` rows is steepest."""
    _check_bands(b, r)
    return (1.0 / b) ** (1.0 / r)


def choose_bands(threshold: float, num_perm: int, recall: float = DEFAULT_RECALL) -> tuple[int, int]:
    """Choose (b, r) for a verification threshold: the largest r with P(threshold) >= recall.

    Args:
        threshold: The Jaccard similarity at and above which pairs are duplicates, in (0, 1].
        num_perm: Signature length; ``b · r <= num_perm``.
        recall: The candidate probability wanted at the threshold.

    Returns:
        (b, r) with ``b = num_perm // r``.

    Raises:
        TypeError: ``threshold`` is not a number or ``num_perm`` not an int.
        ValueError: A parameter is out of range (:mod:`rag_dedup.settings`), or no (b, r) reaches the recall (too few permutations).
    """
    check_threshold(threshold)
    check_num_perm(num_perm)
    if not 0.0 < recall < 1.0:
        raise ValueError(f"recall ({recall}) must be in (0, 1)")
    for r in range(num_perm, 0, -1):
        b = num_perm // r
        if candidate_probability(threshold, b, r) >= recall:
            return b, r
    raise ValueError(
        f"no (b, r) with b*r <= num_perm ({num_perm}) reaches candidate probability {recall} at threshold "
        f"{threshold}; use more permutations or a higher threshold"
    )


def _check_bands(b: int, r: int) -> None:
    if b < 1 or r < 1:
        raise ValueError(f"bands b ({b}) and rows r ({r}) must both be at least 1")


def band_keys(signatures: np.ndarray, b: int, r: int) -> np.ndarray:
    """The ``(n, b)`` uint64 bucket keys of signatures: one 64-bit hash per band.

    Band ``i`` of a signature covers positions ``[i·r, (i+1)·r)``; its key is
    ``fmix64(Σ_j sig_j · K_j mod 2^64)`` with fixed odd multipliers ``K_j`` that differ for every
    position, so equal keys in the same band column mean (up to 2^-64) equal bands, and keys of
    different bands do not collide by construction. With :data:`rag_dedup.compiled.COMPILED`, the
    compiled :func:`rag_dedup.compiled.signature.band_keys` computes the same values in one pass.
    """
    n, width = signatures.shape
    if b * r > width:
        raise ValueError(f"b * r ({b} * {r} = {b * r}) exceeds the signature length ({width})")
    multipliers, offsets = _constants(b, r)
    if compiled.COMPILED:
        out = np.empty((n, b), dtype=np.uint64)
        _kernels.band_keys(np.ascontiguousarray(signatures, dtype=np.uint32), multipliers, b, r, out)
        return out
    # (uint64 array arithmetic wraps modulo 2^64 silently, which is the "mod 2^64" above)
    rows = np.multiply(signatures[:, : b * r], multipliers, dtype=np.uint64, casting="unsafe")  # as astype(uint64)
    keys = rows.reshape(n, b, r).sum(axis=2, dtype=np.uint64)
    keys += offsets
    return _fmix64_inplace(keys)


_CONSTANTS: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}


def _constants(b: int, r: int) -> tuple[np.ndarray, np.ndarray]:
    """The multipliers K_j of ``b * r`` positions and the band numbers 0..b-1 (cached, read-only)."""
    found = _CONSTANTS.get((b, r))
    if found is None:
        gen = np.random.default_rng(0x5EED)
        multipliers = gen.integers(0, 1 << 63, size=b * r, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        offsets = np.arange(b, dtype=np.uint64)
        multipliers.flags.writeable = offsets.flags.writeable = False
        found = _CONSTANTS[(b, r)] = (multipliers, offsets)
    return found
