"""Which copy of a duplicate survives: a pure function of the cluster's members.

The representative must never depend on the order in which copies arrived or were merged, or every
downstream id churns when a corpus is re-ingested in another order. A policy therefore sees only the
members (their key, text length, source, authority and first_seen) and returns one of them.

The default, :func:`longest_then_authority`, prefers the longest original text, then the highest
authority, then the earliest ``first_seen`` (unknown counts as latest), then the smallest key; the key
makes the order total, so there are no ties.

Example:
    >>> a = Member(key="a", length=120, source="wiki", authority=0.0, first_seen=None)
    >>> b = Member(key="b", length=120, source="docs", authority=1.0, first_seen=None)
    >>> longest_then_authority([a, b]).key
    'b'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rag_dedup.errors import PolicyError

__all__ = ["Member", "Policy", "choose", "default_rank", "longest_then_authority"]


@dataclass(frozen=True, slots=True)
class Member:
    """What a policy may look at: one indexed item, without its text."""

    key: str
    length: int
    source: str | None
    authority: float
    first_seen: float | None


#: A policy: given the members of a cluster, return the one that represents it.
Policy = Callable[[Sequence[Member]], Member]


def default_rank(member: Member) -> tuple[int, float, bool, float, str]:
    """Sort key of the default policy: smaller is preferred."""
    unknown = member.first_seen is None
    return (-member.length, -member.authority, unknown, 0.0 if unknown else member.first_seen, member.key)


def longest_then_authority(members: Sequence[Member]) -> Member:
    """Longest original text, then highest authority, then earliest first_seen, then smallest key."""
    return min(members, key=default_rank)


def choose(policy: Policy, members: Sequence[Member]) -> Member:
    """Apply ``policy`` and check that it returned one of ``members``.

    Raises:
        PolicyError: The policy raised (its exception is the cause), or returned something that is not
            one of the members (a ``ValueError``).
    """
    try:
        chosen = policy(members)
    except Exception as e:  # noqa: BLE001 - the user's function: any failure is named as the policy's
        raise PolicyError(
            f"the representative policy {getattr(policy, '__name__', policy)!r} raised {type(e).__name__}: {e}"
        ) from e
    if not isinstance(chosen, Member) or chosen not in members:
        raise PolicyError(
            f"the representative policy {getattr(policy, '__name__', policy)!r} returned {chosen!r}, "
            "which is not one of the members it was given; a policy must return one of its arguments"
        )
    return chosen
