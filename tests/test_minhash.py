"""MinHash signatures: the batch path against datasketch, value for value, and the estimate against the truth."""

from __future__ import annotations

import numpy as np
import pytest
from tests.corpus import chunks, documents
from tests.oracles import estimate_jaccard, reference_signature

from rag_dedup import jaccard, shingle_hashes
from rag_dedup.minhash import EMPTY_VALUE, MinHasher
from rag_dedup.shingles import shingle_hashes_many


def test_batch_signatures_equal_datasketch_value_for_value() -> None:
    sets = shingle_hashes_many([t for _, t in chunks()[:200]])
    sigs = MinHasher(128, seed=1).signatures(sets)
    for sh, sig in zip(sets, sigs):
        assert np.array_equal(sig, reference_signature(sh, 128, seed=1))


@pytest.mark.parametrize(("num_perm", "seed"), [(64, 7), (256, 1)], ids=["64-seed7", "256-seed1"])
def test_signatures_follow_datasketch_for_other_parameters(num_perm: int, seed: int) -> None:
    sets = shingle_hashes_many([t for _, t in chunks()[:20]])
    sigs = MinHasher(num_perm, seed=seed).signatures(sets)
    for sh, sig in zip(sets, sigs):
        assert np.array_equal(sig, reference_signature(sh, num_perm, seed=seed))


def test_signature_golden_values() -> None:
    sig = MinHasher(128, seed=1).signatures([shingle_hashes("a b c d e", short_tokens=0)])[0]
    assert sig[:4].tolist() == reference_signature(np.array([2259987849], dtype=np.uint32))[:4].tolist()
    assert sig[:4].tolist() == [3635530393, 1156213570, 3709106776, 3031962105]


def test_empty_set_signature_is_empty_sentinel() -> None:
    sigs = MinHasher(32).signatures([np.empty(0, dtype=np.uint32), shingle_hashes("x y")])
    assert (sigs[0] == EMPTY_VALUE).all()
    assert not (sigs[1] == EMPTY_VALUE).all()


def test_minhash_estimate_tracks_exact_jaccard_within_tolerance() -> None:
    """Planted edits of real chunks: the estimate is within 4 standard errors of the truth."""
    from tests.corpus import edited

    hasher = MinHasher(128)
    for i, (_, text) in enumerate(chunks()[:40]):
        a, b = shingle_hashes(text), shingle_hashes(edited(text, 0.03, seed=i))
        j = jaccard(a, b)
        sa, sb = hasher.signatures([a, b])
        sigma = max((j * (1 - j) / 128) ** 0.5, 0.01)
        assert abs(estimate_jaccard(sa, sb) - j) <= 4 * sigma


def test_minhasher_validates_parameters() -> None:
    with pytest.raises(ValueError, match=r"num_perm \(1\) must be at least 2"):
        MinHasher(1)
    with pytest.raises(TypeError, match="num_perm must be int"):
        MinHasher(128.0)  # type: ignore[arg-type]


def test_signature_of_a_long_document_equals_datasketch() -> None:
    """A set larger than one permutation block is reduced in slices, with the same result."""
    sets = shingle_hashes_many([" ".join(documents().values()), "a b c d e f", ""])
    assert len(sets[0]) > 4096
    sigs = MinHasher(128).signatures(sets)
    assert np.array_equal(sigs[0], reference_signature(sets[0]))
    assert np.array_equal(sigs[1], reference_signature(sets[1]))
    assert (sigs[2] == EMPTY_VALUE).all()
