"""Reference computations the tests hold the package's fast paths to (slow, obviously correct)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

import numpy as np
from datasketch import MinHash

from rag_dedup.minhash import SCHEME


def reference_signature(shingles: np.ndarray, num_perm: int = 128, seed: int = 1) -> np.ndarray:
    """The signature datasketch itself computes for ``shingles`` (the reference for MinHasher)."""
    m = MinHash(num_perm=num_perm, seed=seed, scheme=SCHEME, hashfunc=int)
    m.update_batch(shingles.tolist())
    return np.asarray(m.hashvalues, dtype=np.uint32)


def estimate_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """The MinHash estimate of Jaccard similarity: the fraction of equal signature positions."""
    if sig_a.shape != sig_b.shape:
        raise ValueError(f"signatures differ in length ({sig_a.shape} vs {sig_b.shape})")
    return float(np.count_nonzero(sig_a == sig_b)) / len(sig_a)


@contextlib.contextmanager
def batch_path() -> Iterator[None]:
    """Within it, ``add_many`` takes the batch path for every batch, however small (no
    :meth:`~rag_dedup.index.DedupIndex._add_few`): the path the one-at-a-time paths are held to."""
    with mock.patch("rag_dedup.index._ONE_BY_ONE", 0):
        yield
