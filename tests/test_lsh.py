"""Band/row arithmetic (the S-curve, its knee, the choice of b and r) and bucket keys."""

from __future__ import annotations

import numpy as np
import pytest

from rag_dedup import candidate_probability, choose_bands, knee
from rag_dedup.lsh import DEFAULT_RECALL, band_keys


def char_trigrams(text: str) -> set[str]:
    return {text[i : i + 3] for i in range(len(text) - 2)}


def test_worked_numbers_of_the_s_curve() -> None:
    """1 - (1 - s^r)^b, computed. (The issue quoted 0.99997 and 0.0616 for s=0.9 and s=0.5 at
    16x8; the formula gives 0.99988 and 0.0607, and those are what the code must return.)"""
    assert candidate_probability(0.9, 16, 8) == pytest.approx(1 - (1 - 0.9**8) ** 16)
    assert round(candidate_probability(0.9, 16, 8), 5) == 0.99988
    assert round(candidate_probability(0.5, 16, 8), 4) == 0.0607
    assert round(knee(16, 8), 3) == 0.707


def test_cat_sat_example() -> None:
    a, b = char_trigrams("the cat sat"), char_trigrams("the cat sit")
    s = len(a & b) / len(a | b)
    assert s == pytest.approx(7 / 11)
    assert round(candidate_probability(s, 16, 8), 2) == 0.35
    assert candidate_probability(s, 32, 4) == pytest.approx(1.0, abs=0.004)


@pytest.mark.parametrize("threshold", [0.5, 0.6, 0.7, 0.8, 0.9, 0.95])
def test_choose_bands_reaches_recall_with_fewest_false_candidates(threshold: float) -> None:
    b, r = choose_bands(threshold, 128)
    assert b * r <= 128 and b == 128 // r
    assert candidate_probability(threshold, b, r) >= DEFAULT_RECALL
    # One more row per band would miss the recall: r is the largest that reaches it.
    assert candidate_probability(threshold, 128 // (r + 1), r + 1) < DEFAULT_RECALL
    assert knee(b, r) < threshold


def test_choose_bands_for_default_threshold() -> None:
    assert choose_bands(0.8, 128) == (21, 6)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda: choose_bands(0.0, 128), r"threshold \(0.0\) must be in \(0, 1\]", id="threshold-0"),
        pytest.param(lambda: choose_bands(0.8, 1), r"num_perm \(1\) must be at least 2", id="num-perm"),
        pytest.param(lambda: choose_bands(0.05, 4), "no \\(b, r\\)", id="unreachable"),
        pytest.param(lambda: candidate_probability(1.5, 2, 2), r"similarity s \(1.5\)", id="s-range"),
        pytest.param(lambda: knee(0, 3), r"bands b \(0\)", id="bands"),
    ],
)
def test_lsh_arithmetic_rejects_bad_parameters(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_band_keys_change_only_with_their_band() -> None:
    rng = np.random.default_rng(0)
    sig = rng.integers(0, 2**32, size=(1, 128), dtype=np.uint32)
    other = sig.copy()
    other[0, 13] ^= 1  # position 13 is in band 2 of 6-row bands
    a, b = band_keys(sig, 21, 6), band_keys(other, 21, 6)
    assert a.shape == (1, 21) and a.dtype == np.uint64
    assert np.flatnonzero(a[0] != b[0]).tolist() == [2]
    # The same rows in another band position give another key: buckets of bands never mix.
    shifted = np.roll(sig, -6, axis=1)
    assert band_keys(shifted, 21, 6)[0, 0] != a[0, 1]
