"""The representative policy: the default order, and a policy that must name one of the members."""

from __future__ import annotations

import pytest
from tests.members import member

from rag_dedup.policy import choose, default_rank, longest_then_authority


def test_default_policy_order() -> None:
    a = member("a", 100)
    b = member("b", 100, authority=1.0)
    c = member("c", 100, authority=1.0, first_seen=5.0)
    d = member("d", 100, authority=1.0, first_seen=3.0)
    e = member("e", 101)
    assert longest_then_authority([a, b]) == b
    assert longest_then_authority([b, c]) == c  # a known first_seen beats an unknown one
    assert longest_then_authority([c, d]) == d
    assert longest_then_authority([a, b, c, d, e]) == e
    assert longest_then_authority([member("z", 1), member("y", 1)]).key == "y"
    assert default_rank(e) < default_rank(d)


def test_policy_must_return_a_member() -> None:
    with pytest.raises(ValueError, match="not one of the members"):
        choose(lambda ms: member("stranger", 1), [member("a", 1)])
