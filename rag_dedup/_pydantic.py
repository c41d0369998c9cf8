"""``model_copy(update=...)`` for the adapters' query-time copies, without pydantic's Python-level overhead.

LlamaIndex nodes and LangChain documents are pydantic 2 models; a collapse returns a copy of each kept
passage that absorbed others (a query makes a few), and pydantic's ``model_copy`` costs several
microseconds each. :func:`shallow_copy` writes the same four attributes ``model_copy`` writes
(``tests/llama_index/test_postprocessor.py`` and ``tests/langchain/test_compressor.py`` hold its copies
equal to ``model_copy``'s, so a pydantic upgrade that changes them fails loudly). Imported by adapters
only: the core does not depend on pydantic.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

__all__ = ["shallow_copy"]

_Model = TypeVar("_Model", bound=BaseModel)
_new = object.__new__  # BaseModel has no __new__ of its own
_set_attr = object.__setattr__
# BaseModel's own slots, written by their descriptors (object.__setattr__ looks each one up first).
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def shallow_copy(model: _Model, update: dict[str, Any]) -> _Model:
    """``model.model_copy(update=update)``, the same object (fields, fields set, extra and private
    attributes copied shallowly, ``update`` applied without validation), in a third of the time.

    ``update`` must hold valid values of declared fields (the caller built them with the field's type).
    """
    new = _new(type(model))
    state = model.__dict__.copy()
    state.update(update)
    _set_attr(new, "__dict__", state)
    extra = model.__pydantic_extra__
    _set_extra(new, None if extra is None else dict(extra))
    _set_fields_set(new, model.__pydantic_fields_set__.union(update))  # a new set (`| update.keys()` takes a slower path)
    private = model.__pydantic_private__
    _set_private(new, None if private is None else {k: v for k, v in private.items() if v is not PydanticUndefined})
    return new
