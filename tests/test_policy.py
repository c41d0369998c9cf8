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


def test_a_policy_that_fails_mid_change_leaves_the_in_memory_index_refusing_not_answering_wrongly():
    """A policy that raised (a metadata service that timed out) in add() left the in-memory index
    half-updated: two exact copies both said "unique", for good, and adding again did not mend it.
    Now the failure is a PolicyError naming the policy, and the index refuses every call with
    IndexIncomplete until drop()."""
    from rag_dedup import DedupIndex
    from rag_dedup.errors import IndexIncomplete, PolicyError

    text = "Permission is hereby granted, free of charge, to any person obtaining a copy of this software"
    calls = []

    def flaky(members):
        calls.append(len(members))
        if len(calls) == 1:
            raise TimeoutError("policy backend timed out")
        return min(members, key=lambda m: m.key)

    index = DedupIndex(policy=flaky)
    index.add("a", text)
    with pytest.raises(PolicyError, match=r"the representative policy 'flaky' raised TimeoutError: policy backend timed out"):
        index.add("b", text.upper())
    for call in (lambda: index.match("a"), lambda: index.add("b", text.upper()), lambda: list(index.clusters())):
        with pytest.raises(IndexIncomplete, match=r"in the middle of add\(\).*Rebuild it from its texts"):
            call()
    index.drop()
    index.add_many([("a", text), ("b", text.upper())])
    assert index.match("b").duplicate_of == "a"
