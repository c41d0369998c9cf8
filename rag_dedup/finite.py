"""The one test of "a finite number" for every value that is stored as a float (authority, first-seen
times, similarities, parameters read back).

``math.isfinite`` raises ``OverflowError`` on an int too large for a float (``10**400``), so a bare
``isinstance(v, (int, float)) and math.isfinite(v)`` lets that escape as a deep traceback where a
clear error naming the value was meant.
"""

from __future__ import annotations

import math

__all__ = ["is_finite_number"]


def is_finite_number(value: object) -> bool:
    """Whether ``value`` is an int or float (not a bool) that is a finite float: not NaN, not an
    infinity, and not an int beyond the float range (about ``1.8e308``)."""
    if type(value) is float:
        return math.isfinite(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False
