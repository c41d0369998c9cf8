"""Saving and loading an index: exact round trip, atomic writes, no pickle, clear failures."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from corpus import chunks, edited

from rag_dedup import CorruptIndexError, DedupIndex, IndexMismatchError, Member
from rag_dedup.storage.directory import MANIFEST


@pytest.fixture(scope="module")
def items() -> list[tuple[str, str]]:
    base = list(chunks())[:250]
    return base + [(f"near/{i}", edited(t, 0.02, seed=i)) for i, (_, t) in enumerate(base[:40])]


@pytest.fixture()
def saved(tmp_path: Path, items) -> tuple[DedupIndex, Path]:
    index = DedupIndex(threshold=0.8)
    index.add_many([{"key": k, "text": t, "source": k.split("#")[0], "first_seen": i} for i, (k, t) in enumerate(items)])
    index.remove(items[3][0])
    path = tmp_path / "index"
    index.save(path)
    return index, path


def test_loaded_index_answers_exactly_as_before(saved, items) -> None:
    index, path = saved
    loaded = DedupIndex.load(path)
    keys = [k for k, _ in items if k != items[3][0]]
    assert loaded.matches(keys) == index.matches(keys)
    assert sorted(loaded.clusters()) == sorted(index.clusters())
    assert len(loaded) == len(index)
    for _, text in items[:30]:
        assert loaded.query(text) == index.query(text)
    src = items[0][0].split("#")[0]
    assert loaded.keys_of_source(src) == index.keys_of_source(src)


def test_loaded_index_keeps_growing_like_the_original(saved, items) -> None:
    index, path = saved
    loaded = DedupIndex.load(path)
    more = [(f"late/{i}", edited(t, 0.01, seed=100 + i)) for i, (_, t) in enumerate(items[100:140])]
    assert loaded.add_many(more) == index.add_many(more)
    loaded.remove(items[5][0])
    index.remove(items[5][0])
    keys = [k for k, _ in items if k not in (items[3][0], items[5][0])]
    assert loaded.matches(keys) == index.matches(keys)


def test_saved_files_are_json_and_pickle_free_arrays(saved) -> None:
    _, path = saved
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["format_version"] == 1
    meta = manifest["meta"]
    assert {"scheme", "seed", "num_perm", "b", "r", "ngram", "normalization", "threshold"} <= set(meta)
    assert meta["scheme"] == "affine32" and (meta["b"], meta["r"]) == (21, 6)
    for entry in manifest["files"].values():
        file = path / entry["name"]
        if file.suffix == ".npz":
            with np.load(file, allow_pickle=False) as npz:  # would raise on an object array
                assert all(npz[name].dtype != object for name in npz.files)
        else:
            json.loads(file.read_text())


def test_saving_again_replaces_the_old_generation(saved) -> None:
    index, path = saved
    before = set(p.name for p in path.iterdir())
    index.add("another", "a brand new chunk of text that was not there before the first save")
    index.save(path)
    after = set(p.name for p in path.iterdir())
    assert MANIFEST in after and len(after) == len(before)
    assert not [p for p in after if p.endswith(".tmp")]
    assert DedupIndex.load(path).match("another").kind == "unique"


def data_file(path: Path, role: str) -> Path:
    return path / json.loads((path / MANIFEST).read_text())["files"][role]["name"]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        pytest.param(lambda p: (p / MANIFEST).write_text("{not json"), "manifest.json is not valid JSON", id="manifest-json"),
        pytest.param(lambda p: (p / MANIFEST).write_text("[]"), "not a rag-dedup index manifest", id="manifest-shape"),
        pytest.param(
            lambda p: data_file(p, "items").write_bytes(data_file(p, "items").read_bytes()[:50]),
            r"items-.*\.json has 50 bytes, expected .*truncated",
            id="truncated-items",
        ),
        pytest.param(
            lambda p: data_file(p, "groups").write_bytes(b"x" * data_file(p, "groups").stat().st_size),
            r"groups-.*\.npz fails its checksum",
            id="damaged-groups",
        ),
        pytest.param(lambda p: data_file(p, "clusters").unlink(), r"clusters-.*\.json is missing", id="missing-file"),
    ],
)
def test_damaged_index_fails_naming_the_file(saved, damage, message: str) -> None:
    _, path = saved
    damage(path)
    with pytest.raises(CorruptIndexError, match=message):
        DedupIndex.load(path)


def test_newer_format_version_is_refused(saved) -> None:
    _, path = saved
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["format_version"] = 99
    (path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CorruptIndexError, match="format_version 99.*Upgrade rag-dedup"):
        DedupIndex.load(path)


def test_missing_index_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no saved rag-dedup index"):
        DedupIndex.load(tmp_path / "nothing-here")


def test_storage_built_with_other_parameters_is_refused(saved) -> None:
    _, path = saved
    from rag_dedup.storage.directory import load_directory

    _, storage = load_directory(path)
    with pytest.raises(IndexMismatchError, match="threshold=0.8 but this index has threshold=0.9"):
        DedupIndex(threshold=0.9, storage=storage)


def test_custom_policy_must_be_passed_to_load(tmp_path: Path) -> None:
    def shortest(members: list[Member]) -> Member:
        return min(members, key=lambda m: (m.length, m.key))

    index = DedupIndex(policy=shortest)
    index.add_many(list(chunks())[:20])
    index.save(tmp_path / "custom")
    with pytest.raises(IndexMismatchError, match="pass policy="):
        DedupIndex.load(tmp_path / "custom")
    assert DedupIndex.load(tmp_path / "custom", policy=shortest).policy is shortest


def test_npz_is_a_plain_zip(saved) -> None:
    _, path = saved
    assert zipfile.is_zipfile(data_file(path, "groups"))
