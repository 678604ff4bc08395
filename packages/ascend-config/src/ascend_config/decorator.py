"""The ``config`` decorator: a plain dataclass becomes a validated, hashable config class.

It follows vLLM's config conventions (every field has a default; ``compute_hash()`` returns a
stable hex digest of the values that affect the computation) without importing vLLM: the class is
rebuilt as a pydantic dataclass, so field types are checked on construction and assignment.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar, overload

from pydantic import ConfigDict, TypeAdapter
from pydantic.dataclasses import dataclass as pydantic_dataclass

T = TypeVar("T")


def _compute_hash(self: Any) -> str:
    """SHA-256 hex digest of the field values (stable across processes and runs)."""
    values = TypeAdapter(type(self)).dump_python(self, mode="json")
    payload = json.dumps([type(self).__qualname__, values], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@overload
def config(cls: type[T], /) -> type[T]: ...
@overload
def config(*, frozen: bool = False) -> Callable[[type[T]], type[T]]: ...


def config(
    cls: type[T] | None = None, /, *, frozen: bool = False
) -> type[T] | Callable[[type[T]], type[T]]:
    """Decorate a (data)class: validated field types, no unknown fields, ``compute_hash()``.

    ``frozen=True`` (or a frozen stdlib dataclass) also makes instances hashable, so they can be
    dict keys and part of other hashed configs. Every field must have a default, as vLLM's
    config classes require.
    """

    def wrap(target: type[T]) -> type[T]:
        is_frozen = frozen
        if dataclasses.is_dataclass(target):
            params = getattr(target, "__dataclass_params__", None)
            is_frozen = is_frozen or bool(getattr(params, "frozen", False))
        built: Any = pydantic_dataclass(
            target,
            frozen=is_frozen,
            config=ConfigDict(extra="forbid", validate_assignment=not is_frozen, strict=True),
        )
        missing = [f.name for f in dataclasses.fields(built)
                   if f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise TypeError(f"{target.__qualname__}: config fields need defaults: {missing}")
        if "compute_hash" not in target.__dict__:
            built.compute_hash = _compute_hash
        return built  # type: ignore[no-any-return]

    return wrap if cls is None else wrap(cls)
