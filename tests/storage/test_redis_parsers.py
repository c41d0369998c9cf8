"""RedisStorage answers the same whichever code parses redis-py's replies.

redis-py parses replies with hiredis (C) when hiredis is installed, as the ``redis`` and ``test`` extras
install it; otherwise with its pure-Python parser (``_RESP2Parser``, or ``_RESP3Parser`` on a RESP3
connection). The storage packs commands with its own ``connection.LinearPacker`` either way. Nothing in
rag-dedup may depend on hiredis: the same scenario on chunks of the shipped corpus (exact copies and
edited near-duplicates among them), run against a real redis-server with each parser, must give the
same results value for value, and those of the in-memory index.

The three configurations: redis-py as installed; the pure-Python parser asked for through
``RedisStorage(url, namespace=..., parser_class=...)`` (passed on to ``redis.Redis.from_url``); and a
process in which hiredis cannot be imported at all (a subprocess: what a machine without hiredis runs).
Each test checks that its connections really used the parser (and packer) it is about.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import redis
import redis.connection

from rag_dedup import DedupIndex
from rag_dedup.storage.redis import RedisStorage
from tests.corpus import chunks, edited

ROOT = Path(__file__).resolve().parents[2]

#: redis-py's pure-Python reply parsers (it swaps the first for the second on a RESP3 connection).
PURE_PARSERS = {"_RESP2Parser", "_RESP3Parser"}


def items() -> list[dict[str, Any]]:
    """36 chunks of the corpus, then 6 edited near-duplicates and 3 exact copies of some of them."""
    base = [{"key": k, "text": t, "source": k.split("#")[0]} for k, t in chunks()[:36]]
    near = [{"key": f"near-{i}", "text": edited(base[i]["text"], 0.03, seed=i), "source": "edited"} for i in range(0, 30, 5)]
    exact = [{"key": f"copy-{i}", "text": base[i]["text"], "source": "copies"} for i in (1, 2, 7)]
    return base + near + exact


def wire(storage: RedisStorage) -> set[tuple[str, str]]:
    """The (reply parser, command packer) class names of the storage's idle connections (redis-py's
    private attributes: what the assertion on the configuration needs, not what the storage uses)."""
    pool = storage._client.connection_pool
    return {(type(c._parser).__name__, type(c._command_packer).__name__) for c in pool._available_connections}


def scenario(url: str, namespace: str, **options: Any) -> dict[str, Any]:
    """Adding, updating, removing and reading on a fresh namespace; everything it saw, as JSON values.

    ``options`` go to RedisStorage (and from there to ``redis.Redis.from_url``); without ``url`` the
    index is in memory (the reference)."""
    storage = RedisStorage(url, namespace=namespace, **options) if url else None
    index = DedupIndex(storage=storage)
    try:
        all_items = items()
        seen: dict[str, Any] = {"added": [list(m) for m in index.add_many(all_items[:30])]}
        seen["added"] += [list(m) for m in index.add_many(all_items[30:])]
        replaced = {**all_items[3], "text": edited(all_items[3]["text"], 0.05, seed=99)}
        matches, removed = index.update([replaced], remove=[all_items[0]["key"], "copy-7"])
        seen["updated"] = [[list(m) for m in matches], removed]
        index.remove("near-5")
        keys = sorted(m["key"] for m in all_items if m["key"] not in (all_items[0]["key"], "copy-7", "near-5"))
        seen["matches"] = [list(m) for m in index.matches(keys)]
        seen["clusters"] = sorted([rep, members[0], sorted(members[1:])] for rep, members in index.clusters())
        seen["query"] = [list(hit) for hit in index.query(all_items[10]["text"])]
        # sorted: the order of keys_of_source is no part of its contract (memory and Redis differ in it)
        seen["sources"] = {s: sorted(index.keys_of_source(s)) for s in ("edited", "copies", all_items[5]["source"])}
        seen["len"] = len(index)
        if storage is not None:
            seen["wire"] = sorted(list(w) for w in wire(storage))
        return seen
    finally:
        if storage is not None:
            index.drop()
        index.close()


def without_wire(seen: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in seen.items() if k != "wire"}


def parsers(seen: dict[str, Any]) -> set[str]:
    return {parser for parser, _ in seen["wire"]}


def test_pure_python_parser_gives_the_same_index(redis_url: str) -> None:
    reference = scenario("", "memory")
    default = scenario(redis_url, f"test-{uuid.uuid4().hex[:8]}")
    pure = scenario(redis_url, f"test-{uuid.uuid4().hex[:8]}", parser_class=redis.connection._RESP2Parser)

    if redis.utils.HIREDIS_AVAILABLE:  # as the extras install it
        assert parsers(default) == {"_HiredisParser"}
    else:
        assert parsers(default) and parsers(default) <= PURE_PARSERS
    assert parsers(pure) and parsers(pure) <= PURE_PARSERS
    assert {packer for _, packer in default["wire"] + pure["wire"]} == {"LinearPacker"}
    assert without_wire(pure) == without_wire(default) == reference


def test_without_hiredis_at_all_gives_the_same_index(redis_url: str) -> None:
    """A process where ``import hiredis`` fails: redis-py's pure-Python parser and the storage's LinearPacker."""
    namespace = f"test-{uuid.uuid4().hex[:8]}"
    code = (
        "import sys, json; sys.modules['hiredis'] = None; "  # before redis-py is imported: ImportError
        f"sys.path.insert(0, {str(ROOT)!r}); "
        "import redis.utils; from tests.storage.test_redis_parsers import scenario; "
        "assert not redis.utils.HIREDIS_AVAILABLE; "
        f"print(json.dumps(scenario({redis_url!r}, {namespace!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])

    assert parsers(seen) and parsers(seen) <= PURE_PARSERS
    assert {packer for _, packer in seen["wire"]} == {"LinearPacker"}
    # The reference through JSON too, as the subprocess's answers came: the same values, the same types.
    assert without_wire(seen) == json.loads(json.dumps(scenario("", "memory")))
