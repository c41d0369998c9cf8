"""The Spark engine against DedupIndex, in local mode on a real JVM (pyspark's ``local[2]``).

One SparkSession for the module; the job runs once on the shipped corpus (chunked, with planted
near-duplicates, exact copies, empty texts, sources, authorities and first_seen values), and its
result is checked against ``DedupIndex().add_many`` on the same items, loaded into an index (memory,
directory and Redis), and continued incrementally. Without Java the module is skipped with the
command that installs it, except under CI (``CI`` set), where that is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.corpus import chunks, edited
from rag_dedup import DedupIndex
from rag_dedup.policy import Member, longest_then_authority

if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    if os.environ.get("CI"):
        pytest.fail("Java is not installed (CI is set, so the Spark tests may not be skipped)", pytrace=False)
    pytest.skip("Java is not installed; install it with: apt-get install openjdk-17-jre-headless", allow_module_level=True)

pa = pytest.importorskip("pyarrow", reason='pyarrow is not installed: pip install -e ".[test]"')

from rag_dedup.spark import CorruptResultError, dedup_dataframe, dedup_job, load_index, session, write_result  # noqa: E402
from rag_dedup.spark.__main__ import main as spark_main  # noqa: E402
from rag_dedup.spark.graph import connected_components  # noqa: E402
from rag_dedup.spark import kernels  # noqa: E402
from rag_dedup.spark.kernels import cluster_batches, cluster_component  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SCHEMA = "key string, text string, source string, authority double, first_seen double"


def _item(key: str, text: str, i: int) -> dict[str, Any]:
    return {
        "key": key,
        "text": text,
        "source": key.split("#")[0],
        "authority": 1.0 if i % 4 == 0 else 0.0,
        "first_seen": float(i) if i % 3 else None,
    }


def _items() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(first part, rest): the corpus with planted families, and new chunks plus more variants of old ones."""
    base = list(chunks())
    first = [(k, t) for k, t in base]
    first += [(f"{k}~e{i}", edited(t, 0.04, i)) for i, (k, t) in enumerate(base[::5])]
    first += [(f"{k}~ee{i}", edited(edited(t, 0.04, i), 0.04, i + 1000)) for i, (k, t) in enumerate(base[::10])]
    first += [(f"{k}~x", t.upper()) for k, t in base[::11]]
    first += [("empty#1", ""), ("empty#2", "  \n ")]
    rest = [(f"{k}~n{i}", edited(t, 0.03, i + 5000)) for i, (k, t) in enumerate(base[1::7])]
    rest += [(f"{k}~y", t.lower()) for k, t in base[2::13]]
    rest += [(f"new:{k}", t) for k, t in chunks(90, 500)]
    rest += [(f"{k}~z", t) for k, t in first[-40:-2]]  # copies of planted variants
    return [_item(k, t, i) for i, (k, t) in enumerate(first)], [_item(k, t, i + 10_000) for i, (k, t) in enumerate(rest)]


FIRST, REST = _items()


def _index_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if v is not None} for item in items]


Answer = dict[str, tuple[str, str, str | None, float, str, int]]


def _answer(matches: Any) -> Answer:
    """Every field of each Match but the key, by key."""
    return {m.key: (m.cluster_id, m.representative, m.duplicate_of, m.similarity, m.kind, m.cluster_size) for m in matches}


def _rows_answer(rows: Any) -> Answer:
    """The same fields from the job's result rows."""
    return {r.key: (r.cluster_id, r.representative, r.duplicate_of, r.similarity, r.kind, r.cluster_size) for r in rows}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    s = session("local[2]", shuffle_partitions=4, spark__ui__enabled="false")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def result_dir(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job's result on FIRST, written once for the module."""
    out = tmp_path_factory.mktemp("spark") / "result"
    df = spark.createDataFrame(FIRST, SCHEMA)
    write_result(dedup_job(df, source="source", authority="authority", first_seen="first_seen"), out)
    return out


@pytest.fixture(scope="module")
def reference() -> DedupIndex:
    index = DedupIndex()
    index.add_many(_index_items(FIRST))
    return index


def _job_answer(spark: Any, result_dir: Path) -> Answer:
    return _rows_answer(spark.read.parquet(str(result_dir / "items")).collect())


def test_job_equals_index_add_many(spark: Any, result_dir: Path, reference: DedupIndex) -> None:
    """Partition, representatives, kind, similarities and cluster sizes of the job equal DedupIndex.add_many's."""
    want = _answer(reference.matches([item["key"] for item in FIRST]))
    got = _job_answer(spark, result_dir)
    assert got == want
    kinds = [v[4] for v in got.values()]
    # cluster_size is what it says: the number of items with that cluster_id (clusters of 3+ are there).
    sizes = Counter(v[0] for v in got.values())
    assert all(v[5] == sizes[v[0]] for v in got.values()) and max(sizes.values()) >= 3
    # The corpus exercises every path: near-duplicate families, exact copies, and multi-group clusters.
    assert kinds.count("near") >= 50 and kinds.count("exact") >= 40
    manifest = json.loads((result_dir / "manifest.json").read_text())
    assert manifest["items"] == len(FIRST)
    assert manifest["clusters"] == sum(1 for _, ms in reference.clusters(include_singletons=False))


def test_dedup_dataframe_columns_and_sources(spark: Any, reference: DedupIndex) -> None:
    """dedup_dataframe returns the documented columns, one row per input row, sources carried through."""
    part = FIRST[:120]
    df = spark.createDataFrame(part, SCHEMA)
    out = dedup_dataframe(df, source="source", authority="authority", first_seen="first_seen")
    assert out.columns == ["key", "cluster_id", "representative", "duplicate_of", "similarity", "kind", "cluster_size", "source"]
    rows = out.collect()
    assert sorted((r.key, r.source) for r in rows) == sorted((i["key"], i["source"]) for i in part)
    small = DedupIndex()
    small.add_many(_index_items(part))
    assert _rows_answer(rows) == _answer(small.matches([i["key"] for i in part]))
    assert all(r.cluster_id == r.representative for r in rows)
    # Hashed in the input's own partitions (no shuffle of the texts first): the same answer.
    kept = dedup_dataframe(df, source="source", authority="authority", first_seen="first_seen", repartition=False)
    assert _rows_answer(kept.collect()) == _rows_answer(rows)


def test_loaded_index_answers_as_the_reference(result_dir: Path, reference: DedupIndex, tmp_path: Path) -> None:
    """The job's result loaded into an index (and saved, and loaded again) answers as add_many's index."""
    keys = [item["key"] for item in FIRST]
    loaded = load_index(result_dir)
    assert _answer(loaded.matches(keys)) == _answer(reference.matches(keys))
    assert sorted(loaded.clusters()) == sorted(reference.clusters())
    loaded.save(tmp_path / "index")
    again = DedupIndex.load(tmp_path / "index")
    assert _answer(again.matches(keys)) == _answer(reference.matches(keys))
    probe = FIRST[7]["text"]
    assert again.query(probe) == reference.query(probe)


def test_batch_then_incremental_equals_one_index(result_dir: Path) -> None:
    """A corpus deduplicated in batch, then continued one add_many at a time, ends where one index of all ends."""
    loaded = load_index(result_dir)
    loaded.add_many(_index_items(REST[: len(REST) // 2]))
    for item in _index_items(REST[len(REST) // 2 :]):
        loaded.add(**item)
    whole = DedupIndex()
    whole.add_many(_index_items(FIRST + REST))
    keys = [item["key"] for item in FIRST + REST]
    assert _answer(loaded.matches(keys)) == _answer(whole.matches(keys))
    # The new items really joined old clusters (near and exact), so the test can tell.
    rest_kinds = [m.kind for m in loaded.matches([item["key"] for item in REST])]
    assert rest_kinds.count("near") >= 10 and rest_kinds.count("exact") >= 10


def test_load_into_redis(result_dir: Path, reference: DedupIndex, redis_url: str) -> None:
    """The result loads into a Redis index that answers as the in-memory reference; a second load is refused."""
    loaded = load_index(result_dir, redis_url, namespace="spark-test")
    keys = [item["key"] for item in FIRST]
    assert _answer(loaded.matches(keys)) == _answer(reference.matches(keys))
    with pytest.raises(ValueError, match="already holds"):
        load_index(result_dir, redis_url, namespace="spark-test")


def test_damaged_result_is_named(result_dir: Path, tmp_path: Path) -> None:
    """A result without its groups, or with a foreign manifest, fails with the file named."""
    copy = tmp_path / "copy"
    shutil.copytree(result_dir, copy)
    shutil.rmtree(copy / "groups")
    with pytest.raises(CorruptResultError, match="groups is missing"):
        load_index(copy)
    (copy / "manifest.json").write_text('{"format": "something-else"}')
    with pytest.raises(CorruptResultError, match="not a rag-dedup Spark result"):
        load_index(copy)


@pytest.mark.parametrize(
    ("rows", "kwargs", "error", "message"),
    [
        pytest.param([("a", "x")], {"text": "body"}, ValueError, r"column 'body' \(text=\) is not in the DataFrame", id="missing-column"),
        pytest.param([("a", "x"), ("b", None)], {}, ValueError, r"null for key\(s\) \['b'\]", id="null-text"),
        pytest.param([("a", "x"), ("a", "y")], {}, ValueError, r"duplicate keys: 'a' \(2 rows\)", id="duplicate-keys"),
        pytest.param([(None, "x")], {}, ValueError, "null or empty key", id="null-key"),
    ],
)
def test_bad_input_is_named(spark: Any, rows: list[tuple[Any, Any]], kwargs: dict[str, str], error: type, message: str) -> None:
    df = spark.createDataFrame(rows, "key string, text string")
    with pytest.raises(error, match=message):
        dedup_dataframe(df, **kwargs)


@pytest.mark.parametrize(
    ("authority", "first_seen", "message"),
    [
        pytest.param(None, 1.0, r"column 'w' \(authority=\) is null or not a finite number for key\(s\) \['a'\]", id="null-authority"),
        pytest.param(float("nan"), 1.0, r"column 'w' \(authority=\) is null or not a finite number", id="nan-authority"),
        pytest.param(1.0, float("nan"), r"column 't' \(first_seen=\) is not a finite number for key\(s\) \['a'\]", id="nan-first-seen"),
        pytest.param(1.0, float("-inf"), r"column 't' \(first_seen=\) is not a finite number", id="inf-first-seen"),
    ],
)
def test_bad_policy_values_are_named(spark: Any, authority: float | None, first_seen: float, message: str) -> None:
    """What DedupIndex refuses in authority and first_seen, the job refuses before any work, naming the key
    (a null authority failed deep in a Python worker for a cluster, or was written and then refused by
    load_index; a NaN first_seen made the representative depend on the members' order)."""
    text = "Permission is hereby granted, free of charge, to any person obtaining a copy of this software."
    with pytest.raises(TypeError):
        DedupIndex().add_many([{"key": "a", "text": text, "authority": authority, "first_seen": first_seen}])
    df = spark.createDataFrame([("a", text, authority, first_seen), ("b", text, 1.0, 5.0)], "k string, x string, w double, t double")
    with pytest.raises(ValueError, match=message):
        dedup_dataframe(df, key="k", text="x", authority="w", first_seen="t")


def test_null_first_seen_and_naive_timestamps_as_the_index(spark: Any) -> None:
    """A null first_seen is unknown (latest), and a TIMESTAMP_NTZ one is read as UTC, as DedupIndex reads a
    naive datetime (Spark cannot cast it to a number: this raised a JVM AnalysisException)."""
    import datetime as dt

    text = "Permission is hereby granted, free of charge, to any person obtaining a copy of this software."
    seen = {"a": dt.datetime(2021, 5, 1, 12, 0, 0, 250_000), "b": dt.datetime(2021, 5, 1, 11, 59, 59), "c": None}
    rows = [(k, text, v) for k, v in seen.items()]
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("key", T.StringType()), T.StructField("text", T.StringType()),
                           T.StructField("seen", T.TimestampNTZType())])
    got = {r.key: (r.representative, r.kind) for r in dedup_dataframe(spark.createDataFrame(rows, schema), first_seen="seen").collect()}
    index = DedupIndex()
    index.add_many([{"key": k, "text": text, "first_seen": v} for k, v in seen.items()])
    want = {m.key: (m.representative, m.kind) for m in index.matches(list(seen))}
    assert got == want and got["a"][0] == "b"  # the earliest wins the tie


def test_dotted_column_names_are_names(spark: Any) -> None:
    """A column named with a dot is that column, not a struct field (this raised UNRESOLVED_COLUMN)."""
    text = "Permission is hereby granted, free of charge, to any person obtaining a copy of this software."
    df = spark.createDataFrame([("a", text, 2.0), ("b", text, 1.0)], "`doc.id` string, `doc.body` string, `doc.w` double")
    got = {r.key: r.representative for r in dedup_dataframe(df, key="doc.id", text="doc.body", authority="doc.w").collect()}
    assert got == {"a": "a", "b": "a"}


def test_non_string_text_is_named(spark: Any) -> None:
    df = spark.createDataFrame([("a", 1), ("b", 2)], "key string, text long")
    with pytest.raises(TypeError, match=r"column 'text' \(text=\) has type bigint, must be string"):
        dedup_dataframe(df)


def test_wrong_cluster_size_is_named(result_dir: Path, tmp_path: Path) -> None:
    """A result whose cluster_size disagrees with its cluster's members is refused, not loaded as a wrong index."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    copy = tmp_path / "copy"
    shutil.copytree(result_dir, copy)
    items = pq.read_table(copy / "items")
    shutil.rmtree(copy / "items")
    (copy / "items").mkdir()
    member = pc.is_valid(items.column("duplicate_of"))
    sizes = pc.if_else(pc.and_(member, pc.equal(pc.cumulative_sum(member.cast("int64")), 1)), 99, items.column("cluster_size"))
    pq.write_table(items.set_column(items.column_names.index("cluster_size"), "cluster_size", sizes), copy / "items" / "part.parquet")
    with pytest.raises(CorruptResultError, match="cluster_size 99"):
        load_index(copy)


def test_connected_components_match_union_find(spark: Any) -> None:
    """Large-star/small-star labels every node with its component's minimum (chains, stars, cycles, repeats)."""
    rng = np.random.default_rng(7)
    edges = [(i, i + 1) for i in range(100, 140)]  # a long chain: many rounds of min-label propagation
    edges += [(500, j) for j in range(501, 520)] + [(j, 500) for j in range(505, 510)]  # a star, both ways
    edges += [(900, 901), (901, 902), (902, 900), (950, 950)]  # a cycle; a self-loop is no component
    edges += [tuple(int(x) for x in rng.integers(1000, 1200, size=2)) for _ in range(150)]  # random
    got = {r.gid: r.comp for r in connected_components(spark.createDataFrame(edges, "a long, b long")).collect()}
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for a, b in edges:
        if a != b:
            ra, rb = find(a), find(b)
            parent[max(ra, rb)] = min(ra, rb)
    want = {x: find(x) for x in parent}
    assert got == want


def test_components_straddling_batches_are_clustered_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A component whose rows arrive in two Arrow batches is clustered once, as one component."""
    sets = {1: np.arange(0, 100, dtype=np.uint32), 2: np.arange(3, 103, dtype=np.uint32), 3: np.arange(500, 600, dtype=np.uint32)}
    members = [(Member("a", 30, None, 0.0, None), 1), (Member("b", 20, None, 0.0, None), 2), (Member("c", 10, None, 0.0, None), 2)]
    rows = [(1, g, m.key, m.length, None, 0.0, None, None) for m, g in members]
    rows += [(1, 1, None, None, None, None, None, sets[1].tobytes()), (1, 2, None, None, None, None, None, sets[2].tobytes())]
    rows += [(3, 3, "d", 5, None, 0.0, None, None), (3, 3, "e", 5, None, 0.0, None, None), (3, 3, None, None, None, None, None, sets[3].tobytes())]
    names = ["comp", "gid", "key", "length", "source", "authority", "first_seen", "shingles"]
    types = [pa.int64(), pa.int64(), pa.string(), pa.int64(), pa.string(), pa.float64(), pa.float64(), pa.binary()]

    def batch(part: list[tuple[Any, ...]]) -> Any:
        return pa.RecordBatch.from_arrays([pa.array(list(col), t) for col, t in zip(zip(*part), types)], names=names)

    out = list(cluster_batches(iter([batch(rows[:2]), batch(rows[2:6]), batch(rows[6:])]), drift_floor=0.7, policy=longest_then_authority))
    monkeypatch.setattr(kernels, "_OUT_ROWS", 1)  # a batch out after every component: the same rows
    small = list(cluster_batches(iter([batch(rows[:2]), batch(rows[2:6]), batch(rows[6:])]), drift_floor=0.7, policy=longest_then_authority))
    assert len(small) == 2 and pa.Table.from_batches(small).to_pylist() == pa.Table.from_batches(out).to_pylist()
    columns = ("key", "representative", "similarity", "kind", "cluster_size")
    got = {k: (r, s, kind, size) for b in out for k, r, s, kind, size in zip(*(b.column(c).to_pylist() for c in columns))}
    want = cluster_component(members, {1: sets[1], 2: sets[2]}, drift_floor=0.7, policy=longest_then_authority)
    assert sorted(k for b in out for k in b.column("key").to_pylist()) == list("abcde")  # each item once
    assert {k: (rep, s) for rep, ms in want for k, s in ms} == {k: (r, s) for k, (r, s, _, _) in got.items() if k in "abc"}
    # Kinds as DedupIndex.matches: near for a's own text, exact for b and c (one canonical text), d and e too.
    assert [got[k][2] for k in "abcde"] == ["near", "exact", "exact", "exact", "exact"]
    assert [got[k][3] for k in "abcde"] == [3, 3, 3, 2, 2]


def test_command_reads_jsonl_writes_parquet_and_an_index(spark: Any, tmp_path: Path) -> None:
    """python -m rag_dedup.spark IN OUT --index DIR: the saved index answers as add_many's."""
    part = _index_items(FIRST[:80] + FIRST[-60:])
    src = tmp_path / "chunks.jsonl"
    src.write_text("".join(json.dumps({"key": i["key"], "text": i["text"], "source": i["source"]}) + "\n" for i in part))
    code = spark_main([str(src), str(tmp_path / "out"), "--source", "source", "--index", str(tmp_path / "index")])
    assert code == 0
    want = DedupIndex()
    want.add_many([{"key": i["key"], "text": i["text"], "source": i["source"]} for i in part])
    keys = [i["key"] for i in part]
    assert _answer(DedupIndex.load(tmp_path / "index").matches(keys)) == _answer(want.matches(keys))
    assert code == 0 and spark_main([str(src), str(tmp_path / "out")]) == 2  # OUT exists: refused, not overwritten


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing input", "missing.jsonl not found"),
        ("text named .txt", "is neither JSONL (name it .jsonl or .json) nor Parquet"),
        ("folder of text read as Parquet", "cannot read {tmp}/folder as Parquet"),
        ("a line that is not JSON", "chunks.jsonl: 1 line(s) are not JSON objects, the first: '{{not json'"),
        ("OUT inside a file", "OUT {tmp}/plain.txt/out cannot be created: {tmp}/plain.txt is not a directory"),
        ("--index inside a file", "--index {tmp}/plain.txt/index cannot be created"),
        ("--index a file", "--index {tmp}/plain.txt is a file; name a directory"),
    ],
)
def test_command_names_bad_paths_in_one_line(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             case: str, message: str) -> None:
    """Each is exit status 2 and one line on stderr, before anything is written (a JVM trace before)."""
    good = tmp_path / "chunks.jsonl"
    rows = ['{"key": "a", "text": "Permission is hereby granted, free of charge, to any person."}',
            '{"key": "b", "text": "The above copyright notice shall be included in all copies."}']
    good.write_text("\n".join(rows) + "\n")
    (tmp_path / "plain.txt").write_text("Permission is hereby granted, free of charge.\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "part-0").write_text("not parquet at all\n")
    out = tmp_path / "out"
    args = {
        "missing input": [str(tmp_path / "missing.jsonl"), str(out)],
        "text named .txt": [str(tmp_path / "plain.txt"), str(out)],
        "folder of text read as Parquet": [str(tmp_path / "folder"), str(out)],
        "a line that is not JSON": [str(good), str(out)],
        "OUT inside a file": [str(good), str(tmp_path / "plain.txt" / "out")],
        "--index inside a file": [str(good), str(out), "--index", str(tmp_path / "plain.txt" / "index")],
        "--index a file": [str(good), str(out), "--index", str(tmp_path / "plain.txt")],
    }[case]
    if case == "a line that is not JSON":
        good.write_text("\n".join([rows[0], "{not json", rows[1]]) + "\n")
    capsys.readouterr()
    assert spark_main(args) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and message.format(tmp=tmp_path) in lines[0], err
    assert "Traceback" not in err and "\tat " not in err
    assert not out.exists()


def test_command_names_a_failed_job_in_one_line(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A Spark error after the input is read (failure injection: the write raises) is exit 1, one line."""
    from pyspark.errors import AnalysisException

    import rag_dedup.spark as engine

    def refuse(*_: Any, **__: Any) -> None:
        raise AnalysisException("[PATH_ALREADY_EXISTS] Path file:/x already exists.\nJVM stacktrace: ...")

    monkeypatch.setattr(engine, "write_result", refuse)
    src = tmp_path / "chunks.jsonl"
    src.write_text('{"key": "a", "text": "Permission is hereby granted, free of charge."}\n')
    assert spark_main([str(src), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "error: the Spark job failed: [PATH_ALREADY_EXISTS] Path file:/x already exists." in err
    assert "JVM stacktrace" not in err


def test_no_java_names_the_fix(tmp_path: Path) -> None:
    """With JAVA_HOME pointing nowhere, the command fails with the apt-get line, not a JVM trace."""
    src = tmp_path / "in.jsonl"
    src.write_text('{"key": "a", "text": "x"}\n')
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java")}
    done = subprocess.run(
        [sys.executable, "-m", "rag_dedup.spark", str(src), str(tmp_path / "out")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2
    assert "apt-get install openjdk-17-jre-headless" in done.stderr
    assert "Traceback" not in done.stderr


def test_no_pyspark_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pyspark, importing the engine says `pip install "rag-dedup[spark]"`."""
    for name in [m for m in sys.modules if m == "rag_dedup.spark" or m.startswith("rag_dedup.spark.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyspark", None)
    with pytest.raises(ImportError, match=r'pip install "rag-dedup\[spark\]"'):
        import rag_dedup.spark  # noqa: F401


def test_scan_engine_spark_prints_the_same_report(spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`rag-dedup scan DIR --engine spark --json` prints the in-process scan's report, numbers and clusters."""
    from rag_dedup.app.cli import main as cli_main

    examples = REPO / "examples" / "data" / "licenses"
    assert cli_main(["scan", str(examples), "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)
    assert cli_main(["scan", str(examples), "--json", "--engine", "spark", "--master", "local[2]"]) == 0
    assert json.loads(capsys.readouterr().out) == memory
    assert memory["near_duplicates"] > 0 and memory["clusters"]


def test_scan_engine_spark_runs_without_the_environment_on_path(tmp_path: Path) -> None:
    """The command run by its interpreter's path, with a PATH whose python3 has no rag-dedup (cron, pipx, a
    service): Spark's Python workers run that interpreter, not PATH's python3 (they failed with
    ModuleNotFoundError and ~300 lines of traces)."""
    examples = REPO / "examples" / "data" / "licenses"
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = "/usr/bin:/bin"
    done = subprocess.run(
        [sys.executable, "-m", "rag_dedup", "scan", str(examples), "--json", "--engine", "spark"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["near_duplicates"] > 0


def test_scan_engine_spark_names_a_failed_worker_in_one_line(tmp_path: Path) -> None:
    """Failure injection: Spark's Python workers run an interpreter without numpy (PYSPARK_PYTHON, a
    shim that hides the site-packages). The command ends with one line naming the worker's exception,
    exit status 1 (the input was good), after every line Spark writes: not a Python traceback, not the
    JVM's task-failure ERROR lines, not a shutdown WARN line after the report (it came last in a CI run)."""
    shim = tmp_path / "python-without-packages"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PYSPARK_PYTHON": str(shim)}
    done = subprocess.run(
        [sys.executable, "-m", "rag_dedup", "scan", str(REPO / "examples" / "data" / "licenses"), "--engine", "spark"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("rag-dedup: error: the Spark job failed: ") and "Error" in lines[-1], lines[-1]
    assert not [line for line in lines if " ERROR " in line], done.stderr[-2000:]


@pytest.mark.parametrize("master", ["local", "local[1]", "local[*]", "local[4, 2]", "local-cluster[2,1,1024]",
                                    "spark://host:7077", "k8s://https://host:6443", "yarn"])
def test_check_master_accepts_what_spark_accepts(master: str) -> None:
    from rag_dedup.spark.session import check_master

    check_master(master)


@pytest.mark.parametrize("master", ["foo", "local[0]", "local[2]x", "local[]", "spark:/x", "spark://", "YARN", ""])
def test_a_master_spark_would_refuse_is_one_line_before_the_corpus_is_read(
        master: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No JVM is started for it (Spark printed a Java trace, then the gateway error blamed Java): both
    commands exit 2 with the master named, `scan` before it reads the corpus, the job before anything."""
    from rag_dedup.app.cli import main as cli_main

    assert cli_main(["scan", str(REPO / "examples" / "data" / "licenses"), "--engine", "spark", "--master", master]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"rag-dedup: error: Spark master {master!r} is not one Spark accepts: local, local[N] "
                                "(N >= 1 threads), local[*], spark://HOST:PORT, k8s://URL or yarn"], err
    src = tmp_path / "chunks.jsonl"
    src.write_text('{"key": "a", "text": "Permission is hereby granted, free of charge."}\n')
    assert spark_main([str(src), str(tmp_path / "out"), "--master", master]) == 2
    assert f"error: Spark master {master!r} is not one Spark accepts" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_empty_jsonl_input_is_no_chunks_as_an_empty_parquet_is(spark: Any, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """An empty JSONL file has no schema to infer: it was refused as "column 'key' is not in the
    DataFrame (columns: [])", while an empty Parquet input gave an empty result."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert spark_main([str(empty), str(tmp_path / "out")]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {"items": 0, "groups": 0, "clusters": 0}
