"""The graph-capture settings a user gave, recorded before vLLM fills in its defaults."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UserCaptureSettings:
    """The capture settings the user gave, before vLLM filled in its defaults."""

    max_size: int | None = None
    sizes: tuple[int, ...] | None = None
