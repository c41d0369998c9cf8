"""The in-memory backend's band table against the obvious dict-of-sets reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_dedup.storage.memory import BandTable


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["insert", "bulk", "delete"]), st.integers(0, 40), st.integers(0, 2**64 - 1)),
        max_size=30,
    )
)
def test_band_table_behaves_like_a_dict_of_sets(ops) -> None:
    """The sorted, sharded, buffered table answers like the obvious dict-of-sets reference."""
    table, ref = BandTable(), {}
    rng = np.random.default_rng(0)
    next_gid, dead = 0, set()
    for op, size, seed in ops:
        if op == "delete" and next_gid:
            gid = seed % next_gid
            table.delete(gid)
            dead.add(gid)
            for gs in ref.values():
                gs.discard(gid)
            continue
        n = 1 if op == "insert" else size * 20  # bulk inserts bypass the buffer
        keys = np.random.default_rng(seed).integers(0, 2**64 - 1, size=(n, 3), dtype=np.uint64)
        keys[: n // 2, 0] = keys[n // 2 :, 0][: n // 2]  # shared buckets
        gids = list(range(next_gid, next_gid + n))
        next_gid += n
        table.insert(gids, keys)
        for g, row in zip(gids, keys.tolist()):
            for k in row:
                ref.setdefault(k, set()).add(g)
    probe = np.array(list(ref)[:50] + [int(x) for x in rng.integers(0, 2**63, 5)], dtype=np.uint64)
    if len(probe) == 0:
        return
    got = table.query(probe.reshape(-1, 1))
    assert got == [ref.get(int(k), set()) - dead for k in probe]
