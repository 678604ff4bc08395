"""State kept per VllmConfig (per engine), keyed by the config object's identity, weakly."""
# vLLM passes platform hooks only the config; identity, not equality, so equal configs of two
# engines still own separate state. Objects without weakrefs are held until clear().

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
V = TypeVar("V")


class Held(Generic[V]):
    """A strong reference with ``weakref.ref``'s call interface."""

    def __init__(self, value: V) -> None:
        self.value = value

    def __call__(self) -> V:
        return self.value


class PerConfig(Generic[T]):
    """One value of type ``T`` per VllmConfig object."""

    def __init__(self) -> None:
        # id -> (a reference to the key, value); the reference tells a reused id apart.
        self._entries: dict[int, tuple[Callable[[], object], T]] = {}

    def _entry(self, vllm_config: object) -> tuple[Callable[[], object], T] | None:
        entry = self._entries.get(id(vllm_config))
        return entry if entry is not None and entry[0]() is vllm_config else None

    def get(self, vllm_config: object) -> T | None:
        """The value stored for this very config object, or None."""
        entry = self._entry(vllm_config)
        return entry[1] if entry is not None else None

    def set(self, vllm_config: object, value: T) -> T:
        """Store ``value`` for this config object (replacing an earlier one); returns it."""
        key = id(vllm_config)
        try:
            ref: Callable[[], object] = weakref.ref(vllm_config)
        except TypeError:  # not weakly referenceable: held (test doubles)
            ref = Held(vllm_config)
        else:
            weakref.finalize(vllm_config, self._drop, key, ref)
        self._entries[key] = (ref, value)
        return value

    def _drop(self, key: int, ref: Callable[[], object]) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry[0] is ref:
            del self._entries[key]

    def get_or_create(self, vllm_config: object, make: Callable[[], T]) -> T:
        """The stored value, or ``make()`` stored for this config object."""
        found = self._entry(vllm_config)
        return found[1] if found is not None else self.set(vllm_config, make())

    def values(self) -> list[T]:
        """Every live config's value."""
        return [value for ref, value in list(self._entries.values()) if ref() is not None]

    def clear(self) -> None:
        """Forget every config's value."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self.values())
