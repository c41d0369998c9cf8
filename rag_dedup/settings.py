"""The shared parameters' rules, written once: each check names the parameter, its value, the bound and a fix.

The index, the framework adapters and the command take the same few parameters; each validates them by
calling these functions, so a bound (the ``ngram`` maximum, the ``num_perm`` ceiling a crafted saved
manifest could otherwise abuse) lives here and nowhere else. A check raises :class:`TypeError` for a value
of the wrong type (``bool`` is not a number here) and :class:`ValueError` for one out of range, and returns
the value in its canonical type (``float`` for the similarities).

Also here: the name and version of the index's stored parameters (``format``/``format_version``).
"""

from __future__ import annotations

import math

__all__ = [
    "INDEX_FORMAT",
    "INDEX_FORMAT_VERSION",
    "MAX_NGRAM",
    "MAX_NUM_PERM",
    "MIN_NUM_PERM",
    "check_cache_size",
    "check_drift_floor",
    "check_fetch_factor",
    "check_ngram",
    "check_num_perm",
    "check_seed",
    "check_threshold",
    "check_top",
]

# --- formats: every persisted format's name and version, here and nowhere else ---------------------
# A reader refuses a version it does not know with an error naming the file (or namespace) and the fix.
#: The ``format`` an index's stored parameters carry (storage meta and saved-directory manifest).
INDEX_FORMAT = "rag-dedup-index"
#: The newest ``format_version`` of those parameters this rag-dedup writes and reads.
INDEX_FORMAT_VERSION = 1
#: The saved index directory's manifest (``format`` is :data:`INDEX_FORMAT`). 2: the manifest carries
#: its own checksum; group ids are compact; no next_gid array.
DIRECTORY_FORMAT_VERSION = 2
#: The Redis key layout (the ``<namespace>:format`` key). 2: readable key names, buckets as fields of
#: a few thousand hashes (see ``rag_dedup/storage/redis/keys.py``). 3: the commit counter and log that
#: optimistic batches are checked against (``ns:commits``, ``ns:commit-log``). 4: no buckets in Redis,
#: the band log ``ns:band-log`` that every worker's copy of them is kept up to date from.
REDIS_LAYOUT_VERSION = 4
#: The LlamaIndex DedupTransform's ``dedup_transform.json``. 2: dropped nodes as compact records with
#: shared parts, plus ``passed``, ``sources`` and ``token``.
TRANSFORM_STATE_FORMAT = "rag-dedup-transform"
TRANSFORM_STATE_VERSION = 2
#: The Spark job's result folder (``manifest.json`` beside ``items/`` and ``groups/``). 2: items carry
#: cluster_size.
SPARK_RESULT_FORMAT = "rag-dedup-spark-result"
SPARK_RESULT_VERSION = 2
#: The command's JSON reports (``to_dict()``); bump on any incompatible change.
REPORT_SCHEMA_VERSION = 1

#: Fewest MinHash permutations (one band of two rows at least).
MIN_NUM_PERM = 2
#: Most MinHash permutations: far above any useful signature length (128-512 are the usual choices), low
#: enough that a crafted saved manifest cannot make loading allocate gigabytes of permutations.
MAX_NUM_PERM = 8192
#: Most words per shingle.
MAX_NGRAM = 64


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_threshold(threshold: object, name: str = "threshold") -> float:
    """``threshold`` as a float in (0, 1].

    Raises:
        TypeError: Not an int or float.
        ValueError: Outside (0, 1] (NaN included).
    """
    if not _is_number(threshold):
        raise TypeError(f"{name} must be a number, got {type(threshold).__name__}")
    if not 0.0 < threshold <= 1.0:  # type: ignore[operator]
        raise ValueError(f"{name} ({threshold}) must be in (0, 1]; 0.8 is a common start, tune per corpus")
    return float(threshold)  # type: ignore[arg-type]


#: Decimal digits the default drift floor (``threshold - 0.1``) is rounded to.
DEFAULT_FLOOR_DIGITS = 12


def check_drift_floor(drift_floor: object, threshold: float, name: str = "drift_floor") -> float:
    """``drift_floor`` as a float in [0, ``threshold``]; None means ``max(0, threshold - 0.1)``.

    ``threshold`` must already be valid (:func:`check_threshold`). ``name`` is how the message names the
    parameter: the index's ``drift_floor``, and the query-time collapse's ``floor`` (the least similarity
    at which a passage folds into a kept passage of its cluster), which follow this one rule.

    Raises:
        TypeError: Not None, an int or a float.
        ValueError: Outside [0, threshold] (NaN included).
    """
    if drift_floor is None:  # rounded: 0.8 - 0.1 is 0.7000000000000001 in floats, and J = 0.7 must pass it
        return max(0.0, round(float(threshold) - 0.1, DEFAULT_FLOOR_DIGITS))
    if not _is_number(drift_floor):
        raise TypeError(f"{name} must be a number, got {type(drift_floor).__name__}")
    if not 0.0 <= drift_floor <= threshold:  # type: ignore[operator]
        raise ValueError(
            f"{name} ({drift_floor}) must be in [0, threshold ({threshold})]; leave it None for threshold - 0.1"
        )
    return float(drift_floor)  # type: ignore[arg-type]


def check_num_perm(num_perm: object) -> int:
    """``num_perm`` as an int in [:data:`MIN_NUM_PERM`, :data:`MAX_NUM_PERM`].

    Raises:
        TypeError: Not an int.
        ValueError: Out of range.
    """
    if not _is_int(num_perm):
        raise TypeError(f"num_perm must be int, got {type(num_perm).__name__}")
    if num_perm < MIN_NUM_PERM:  # type: ignore[operator]
        raise ValueError(f"num_perm ({num_perm}) must be at least {MIN_NUM_PERM}; 128 is the usual choice")
    if num_perm > MAX_NUM_PERM:  # type: ignore[operator]
        raise ValueError(
            f"num_perm ({num_perm}) must be at most {MAX_NUM_PERM}; 128 is the usual choice, 512 already "
            "estimates Jaccard similarity within about 0.02"
        )
    return num_perm  # type: ignore[return-value]


def check_ngram(ngram: object) -> int:
    """``ngram`` (words per shingle) as an int in [1, :data:`MAX_NGRAM`].

    Raises:
        TypeError: Not an int.
        ValueError: Out of range.
    """
    if not _is_int(ngram):
        raise TypeError(f"ngram must be int, got {type(ngram).__name__}")
    if not 1 <= ngram <= MAX_NGRAM:  # type: ignore[operator]
        raise ValueError(f"ngram ({ngram}) must be between 1 and {MAX_NGRAM}; 5-word shingles are the usual choice")
    return ngram  # type: ignore[return-value]


def check_seed(seed: object) -> int:
    """``seed`` (the MinHash permutation seed) as an int.

    Raises:
        TypeError: Not an int.
        ValueError: Outside ``[0, 2**32 - 1]``, the seeds numpy's generator takes.
    """
    if not _is_int(seed):
        raise TypeError(f"seed must be int, got {type(seed).__name__}; the default is 1")
    if not 0 <= seed < 2**32:  # type: ignore[operator]
        raise ValueError(f"seed ({seed}) must be in [0, 2**32 - 1]; the default is 1")
    return seed  # type: ignore[return-value]


def check_top(value: object, name: str = "top_k", *, optional: bool = False) -> int | None:
    """A result count (``top_k``, ``top_n``) as an int >= 1, or None when ``optional``.

    Raises:
        TypeError: Not an int (nor None when ``optional``).
        ValueError: Below 1.
    """
    if value is None and optional:
        return None
    if not _is_int(value):
        also = ", or None for every distinct passage" if optional else ""
        raise TypeError(f"{name} must be int{also}, got {type(value).__name__}")
    if value < 1:  # type: ignore[operator]
        also = ", or None for every distinct passage" if optional else ""
        raise ValueError(f"{name} ({value}) must be at least 1{also}")
    return value  # type: ignore[return-value]


def check_cache_size(cache_size: object) -> int:
    """``cache_size`` (how many texts' shingles the query-time collapse remembers) as an int >= 0.

    Raises:
        TypeError: Not an int.
        ValueError: Negative.
    """
    if not _is_int(cache_size):
        raise TypeError(f"cache_size must be int, got {type(cache_size).__name__}")
    if cache_size < 0:  # type: ignore[operator]
        raise ValueError(f"cache_size ({cache_size}) must be at least 0 (0: remember nothing); 4096 is the default")
    return cache_size  # type: ignore[return-value]


def check_fetch_factor(fetch_factor: object) -> float:
    """``fetch_factor`` (how many times the wanted count to fetch first) as a finite float >= 1.

    Raises:
        TypeError: Not an int or float.
        ValueError: Below 1, infinite or NaN.
    """
    if not _is_number(fetch_factor):
        raise TypeError(f"fetch_factor must be a number, got {type(fetch_factor).__name__}")
    if not 1.0 <= fetch_factor < math.inf:  # type: ignore[operator]
        raise ValueError(f"fetch_factor ({fetch_factor}) must be a finite number >= 1; 3 is the usual over-fetch")
    return float(fetch_factor)  # type: ignore[arg-type]
