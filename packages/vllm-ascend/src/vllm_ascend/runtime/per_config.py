"""State kept per VllmConfig (per engine), keyed by the config object's identity.

vLLM passes platform hooks the config and nothing else, so what an engine's hooks share (its
forward state, the user's capture sizes, its graph-parameter store) is looked up by the
config. Identity, not equality: two engines with equal configs still own separate state. The
entry holds the config itself, so an id reused after the config was freed never matches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class PerConfig(Generic[T]):
    """One value of type ``T`` per VllmConfig object."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Any, T]] = {}

    def get(self, vllm_config: Any) -> T | None:
        """The value stored for this very config object, or None."""
        entry = self._entries.get(id(vllm_config))
        return entry[1] if entry is not None and entry[0] is vllm_config else None

    def set(self, vllm_config: Any, value: T) -> T:
        """Store ``value`` for this config object (replacing an earlier one); returns it."""
        self._entries[id(vllm_config)] = (vllm_config, value)
        return value

    def get_or_create(self, vllm_config: Any, make: Callable[[], T]) -> T:
        """The stored value, or ``make()`` stored for this config object."""
        entry = self._entries.get(id(vllm_config))
        if entry is not None and entry[0] is vllm_config:
            return entry[1]
        return self.set(vllm_config, make())

    def values(self) -> list[T]:
        """Every config's value."""
        return [value for _, value in self._entries.values()]

    def clear(self) -> None:
        """Forget every config's value."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
