"""Saving and loading an index: exact round trip, atomic writes, no pickle, clear failures."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from tests.corpus import chunks, edited

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
    assert manifest["format_version"] == 2
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
    """The previous generation stays until the next save: a load that read the previous manifest just
    before a save swapped it still finds its files (it failed with "... is missing; the index is
    incomplete" in 2 of 61 loads beside a process saving again and again)."""
    index, path = saved
    first = set(p.name for p in path.iterdir()) - {MANIFEST}
    index.add("another", "a brand new chunk of text that was not there before the first save")
    index.save(path)
    second = set(p.name for p in path.iterdir()) - {MANIFEST}
    assert first < second and len(second) == 2 * len(first)
    index.add("more", "and a third chunk of text that neither of the first two saves held at all")
    index.save(path)
    third = set(p.name for p in path.iterdir())
    assert MANIFEST in third and not third & first and len(third) == len(second) + 1  # the first generation left
    assert not [p for p in third if p.endswith(".tmp")]
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


# --- crafted and damaged files (issue 17 item 5) -----------------------------------------------
def rewrite(path: Path, role: str, change) -> None:
    """Change one data file and make the manifest consistent again (sizes, checksums, its own digest)."""
    manifest = json.loads((path / MANIFEST).read_text())
    file = path / manifest["files"][role]["name"]
    if role == "groups":
        with np.load(file, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        change(arrays)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        data = buf.getvalue()
    else:
        content = json.loads(file.read_text())
        change(content)
        data = json.dumps(content).encode()
    file.write_bytes(data)
    manifest["files"][role].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    rewrite_manifest(path, manifest)


def rewrite_manifest(path: Path, manifest: dict) -> None:
    from rag_dedup.storage import directory

    body = {k: v for k, v in manifest.items() if k != "sha256"}
    manifest["sha256"] = directory._manifest_digest(body)
    (path / MANIFEST).write_text(json.dumps(manifest))


def set_item(column: str, value) -> object:
    return lambda items: items[column].__setitem__(0, value)


CRAFTED = [
    pytest.param("items", lambda c: c["keys"].pop(), r"items-.*\.json: the columns are not lists of equal length: keys \(288\), gid \(289\)", id="short-column"),
    pytest.param("items", lambda c: c.pop("source"), r"items-.*\.json: expected an object with the columns", id="missing-column"),
    pytest.param("items", lambda c: c.__setitem__("gid", 7), r"items-.*\.json: the columns are not lists", id="column-not-list"),
    pytest.param("items", set_item("gid", 10**10), r"items-.*\.json: item 0 .*group id 10000000000 is not an int in \[-1, ", id="gid-out-of-range"),
    pytest.param("items", set_item("gid", "3"), r"item 0 .*group id '3' is not an int", id="gid-str"),
    pytest.param("items", set_item("length", -5), r"item 0 .*length -5 is not a non-negative int", id="negative-length"),
    pytest.param("items", set_item("keys", 3), r"item 0: key '3' is not a non-empty string", id="key-int"),
    pytest.param("items", set_item("keys", "caf\udce9"), r"item 0: key holds a lone surrogate", id="key-surrogate"),
    pytest.param("items", set_item("source", ["x"]), r"item 0 .*source .* is not a string", id="source-list"),
    pytest.param("items", set_item("authority", 1e400), r"item 0 .*authority 'inf' is not a finite number", id="authority-inf"),
    pytest.param("items", lambda c: c["keys"].__setitem__(1, c["keys"][0]), r"item 1: key .* appears twice", id="duplicate-key"),
    pytest.param("clusters", lambda c: c["clusters"].__setitem__(0, "x"), r"clusters-.*\.json: cluster 0 is not \[representative", id="cluster-shape"),
    pytest.param("clusters", lambda c: c["clusters"][0].__setitem__(0, "nobody"), r"cluster 0: representative 'nobody' is not a stored key", id="unknown-rep"),
    pytest.param("clusters", lambda c: c["clusters"][0][1][0].__setitem__(1, 7.5), r"similarity 7.5 .* is not in \[0, 1\]", id="similarity-range"),
    pytest.param("clusters", lambda c: c["components"].append([0]), r"component \d+ is not a list of two or more", id="component-single"),
    pytest.param("clusters", lambda c: c.__setitem__("clusters", [[[[[[]]]]]] * 3), r"cluster 0 is not", id="nested"),
    pytest.param("groups", lambda a: a.__setitem__("gids", a["gids"] * 2), r"groups-.*\.npz: group ids are not 0 \.\. n-1", id="gid-gaps"),
    pytest.param("groups", lambda a: a.__setitem__("shingle_offsets", a["shingle_offsets"][:-1]), r"shingle offsets do not cut", id="offsets-short"),
    pytest.param("groups", lambda a: a.__setitem__("digests", a["digests"][:, :8]), r"digests have shape", id="digest-width"),
    pytest.param("groups", lambda a: a.__setitem__("band_gids", a["band_gids"][:-1]), r"the bucket table has", id="bands-unequal"),
    pytest.param("groups", lambda a: a.__setitem__("band_keys", a["band_keys"][::-1].copy()), r"the bucket table is not sorted by key", id="bands-unsorted"),
    pytest.param("groups", lambda a: a["band_gids"].__setitem__(0, 10**6), r"does not file every group in each of the 21 bands", id="bands-gid-range"),
    pytest.param("groups", lambda a: a.__setitem__("shingles", a["shingles"].astype(np.float64)), r"array 'shingles' is float64", id="dtype"),
    pytest.param("groups", lambda a: a.__setitem__("shingles", a["shingles"][::-1].copy()), r"shingles are not sorted and distinct", id="unsorted-shingles"),
    pytest.param("groups", lambda a: a.pop("band_keys"), r"holds arrays .*, expected", id="missing-array"),
    pytest.param("groups", lambda a: a.__setitem__("gids", np.array([object()], dtype=object)), r"is not a valid array file", id="object-array"),
]


@pytest.mark.parametrize(("role", "change", "message"), CRAFTED)
def test_crafted_but_consistent_files_raise_corrupt_index_error_naming_the_file(saved, role, change, message) -> None:
    """Guards issue 17 item 5: such files raised bare IndexError/TypeError/KeyError, or were cut short by zip."""
    _, path = saved
    rewrite(path, role, change)
    with pytest.raises(CorruptIndexError, match=message):
        DedupIndex.load(path)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param('"seed": 1', '"seed": 3', id="seed"),
        pytest.param('"ngram": 5', '"ngram": 4', id="ngram"),
        pytest.param('"threshold": 0.8', '"threshold": 0.81', id="threshold"),
    ],
)
def test_an_edited_manifest_fails_its_checksum(saved, old: str, new: str) -> None:
    """Guards issue 17 item 5: one changed parameter loaded without error and answered differently."""
    _, path = saved
    text = (path / MANIFEST).read_text()
    assert old in text
    (path / MANIFEST).write_text(text.replace(old, new))
    with pytest.raises(CorruptIndexError, match=r"manifest\.json: the manifest fails its checksum"):
        DedupIndex.load(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(lambda m: m["meta"].__setitem__("threshold", "high"), r"saved parameters are invalid \(threshold must be a number", id="threshold-type"),
        pytest.param(lambda m: m["meta"].__setitem__("seed", -1), r"saved parameters are invalid", id="seed-negative"),
        pytest.param(lambda m: m["meta"].pop("ngram"), r"the parameters lack one of", id="missing-ngram"),
        pytest.param(lambda m: m["files"]["items"].__setitem__("name", "../../etc/passwd"), r"the entry of the items file is malformed", id="path-escape"),
        pytest.param(lambda m: m["meta"].__setitem__("b", "21"), r"meta 'b' is '21'", id="bands-type"),
        pytest.param(lambda m: m.__setitem__("format_version", 1), r"format_version 1; this rag-dedup reads 2\. Rebuild", id="older-format"),
        # It said "has format_version '2'; this rag-dedup reads 2. Upgrade rag-dedup".
        pytest.param(lambda m: m.__setitem__("format_version", "2"), r"format_version '2', not a number: the manifest is damaged", id="version-str"),
    ],
)
def test_crafted_manifests_raise_corrupt_index_error(saved, change, message: str) -> None:
    _, path = saved
    manifest = json.loads((path / MANIFEST).read_text())
    change(manifest)
    rewrite_manifest(path, manifest)
    with pytest.raises(CorruptIndexError, match=message):
        DedupIndex.load(path)


def test_a_crafted_normalization_is_an_index_mismatch(saved) -> None:
    """Indexes saved under the v1 normalisation fail clearly (its invisible characters were fewer)."""
    _, path = saved
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["meta"]["normalization"] = "nfkc-casefold-v1"
    rewrite_manifest(path, manifest)
    with pytest.raises(IndexMismatchError, match="normalization='nfkc-casefold-v1' but this index has normalization='nfkc-casefold-v2'"):
        DedupIndex.load(path)


# --- interrupted saves (issue 17 item 11) --------------------------------------------------------
_KILLED_SAVE = """
import os, signal, sys
sys.path.insert(0, {root!r})
from tests.corpus import chunks
from rag_dedup import DedupIndex
from rag_dedup.storage import directory

real_replace = os.replace
def replace(src, dst):
    if str(dst).endswith("manifest.json"):
        os.kill(os.getpid(), signal.SIGKILL)  # the worst moment: new data files written, manifest not yet
    real_replace(src, dst)
directory.os.replace = replace
index = DedupIndex()
index.add_many(list(chunks())[:{n}])
index.save({path!r})
"""


def test_killed_saves_leave_the_old_index_and_the_next_save_removes_their_files(saved) -> None:
    """Guards issue 17 item 11: 40 killed saves left 42 files (614 MB) that later saves never removed."""
    import subprocess
    import sys

    index, path = saved
    before = sorted(p.name for p in path.iterdir())
    for n in (30, 60, 90):
        script = _KILLED_SAVE.format(root=str(Path(__file__).parents[2]), n=n, path=str(path))
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, cwd=Path(__file__).parents[2])
        assert done.returncode == -9, done.stderr.decode()
    left = sorted(p.name for p in path.iterdir())
    assert len(left) == len(before) + 3 * 4  # three data files and the manifest's temporary, per killed save
    assert len(DedupIndex.load(path)) == len(index)  # the old generation is intact
    (path / "notes.txt").write_text("a file of the user's")
    previous = sorted(e["name"] for e in json.loads((path / MANIFEST).read_text())["files"].values())
    index.save(path)
    after = sorted(p.name for p in path.iterdir())
    manifest = json.loads((path / MANIFEST).read_text())
    # The killed saves' files are gone; the previous generation stays until the next save.
    assert after == sorted([MANIFEST, "notes.txt", *previous, *(e["name"] for e in manifest["files"].values())])
    assert len(DedupIndex.load(path)) == len(index)


def test_a_manifest_whose_parameters_disagree_with_its_data_names_the_file(saved) -> None:
    """Regression: a hand-edited manifest (threshold changed, checksum recomputed) raised IndexMismatchError
    naming '<MemoryStorage object at 0x...>' and advising to open it with the same parameters, which a
    load already does."""
    from rag_dedup import IndexMismatchError

    _, path = saved
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["meta"]["threshold"] = 0.9
    rewrite_manifest(path, manifest)
    with pytest.raises(IndexMismatchError, match=r"manifest\.json: the saved parameters disagree with the saved data \(b=") as info:
        DedupIndex.load(path)
    assert "object at 0x" not in str(info.value) and "open it with" not in str(info.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param({"path": None}, "path must be a str or os.PathLike", id="path-none"),
        pytest.param({"path": 5}, "path must be a str or os.PathLike", id="path-int"),
        pytest.param({"policy": 5}, "policy must be callable", id="policy-int"),
    ],
)
def test_load_refuses_bad_arguments_by_name(saved, args, message) -> None:
    _, path = saved
    with pytest.raises(TypeError, match=message):
        DedupIndex.load(**{"path": path, **args})


def test_a_meta_format_version_from_the_future_is_named_without_a_storage_repr(saved) -> None:
    """The message showed '<rag_dedup.storage.memory.MemoryStorage object at 0x...> holds index format 99'."""
    _, path = saved
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["meta"]["format_version"] = 99
    rewrite_manifest(path, manifest)
    with pytest.raises(IndexMismatchError) as info:
        DedupIndex.load(path)
    assert "object at 0x" not in str(info.value) and "index format 99, newer than this rag-dedup" in str(info.value)
