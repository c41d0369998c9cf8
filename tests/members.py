"""Cluster members for the policy and cluster tests."""

from __future__ import annotations

from rag_dedup.policy import Member


def member(key: str, length: int, authority: float = 0.0, first_seen: float | None = None) -> Member:
    return Member(key, length, None, authority, first_seen)
