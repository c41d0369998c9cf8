"""The exception hierarchy: one root, the builtin bases callers catch, all reachable from rag_dedup."""

from __future__ import annotations

import inspect

import pytest

import rag_dedup
from rag_dedup import errors


@pytest.mark.parametrize(
    ("name", "builtin"),
    [
        pytest.param("CorruptIndexError", ValueError, id="corrupt"),
        pytest.param("IndexMismatchError", ValueError, id="mismatch"),
        pytest.param("InvalidTextError", ValueError, id="invalid-text"),
        pytest.param("KeyConflictError", ValueError, id="key-conflict"),
        pytest.param("NamespaceLost", ValueError, id="namespace-lost"),
        pytest.param("SharedIndexRequired", RuntimeError, id="shared-required"),
        pytest.param("RedisUnavailable", ConnectionError, id="unavailable"),
        pytest.param("LockTimeout", TimeoutError, id="lock-timeout"),
        pytest.param("LockLost", RuntimeError, id="lock-lost"),
        pytest.param("RedisConfigurationError", Exception, id="config"),
    ],
)
def test_each_error_has_the_common_root_and_its_builtin_base(name: str, builtin: type) -> None:
    cls = getattr(rag_dedup, name)
    assert cls is getattr(errors, name)
    assert issubclass(cls, rag_dedup.RagDedupError) and issubclass(cls, builtin)


def test_every_error_class_is_exported_and_drawn_in_the_hierarchy() -> None:
    """Guards against a class added to errors.py but missing from rag_dedup or from the drawing."""
    classes = {n for n, v in vars(errors).items() if inspect.isclass(v) and issubclass(v, Exception)}
    assert classes == set(errors.__all__)
    assert classes <= set(rag_dedup.__all__)
    drawing = errors.__doc__.split("::")[1].split("\n\n")[1]
    assert {line.split("──")[-1].split()[0] for line in drawing.splitlines()[1:] if "──" in line} == classes - {"RagDedupError"}


def test_old_import_paths_that_callers_use_still_work() -> None:
    from rag_dedup.llama_index.transform import SharedIndexRequired

    assert SharedIndexRequired is errors.SharedIndexRequired
