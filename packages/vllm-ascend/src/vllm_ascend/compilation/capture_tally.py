"""Graph captures of each engine: one log line per capture (size, seconds) and the totals the
rank report carries (``captures: {"count": N, "seconds": S}``).

Keyed by the VllmConfig object like the graph parameters (a worker process holds its rank's
engine), held by the process setup.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from vllm_ascend.runtime.per_config import PerConfig

logger = logging.getLogger("vllm_ascend.compilation.capture_tally")


@dataclass
class CaptureTally:
    """Graphs captured and the seconds their captures took."""

    count: int = 0
    seconds: float = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.seconds += seconds

    def as_report(self) -> dict[str, Any]:
        return {"count": self.count, "seconds": round(self.seconds, 6)}


class CaptureTallies(PerConfig[CaptureTally]):
    """Each engine's tally, held by the process setup."""


def _tallies() -> CaptureTallies:
    from vllm_ascend.runtime.process_setup import current_process_setup

    return current_process_setup().state(CaptureTallies)


def capture_tally_for(vllm_config: Any) -> CaptureTally:
    """The engine's tally (zero before its first capture; reading stores nothing)."""
    found = _tallies().get(vllm_config)
    return found if found is not None else CaptureTally()


def record_capture(vllm_config: Any, key: Any, mode: Any, seconds: float) -> None:
    """Log one capture (its token count from the batch descriptor) and add it to the tally."""
    tally = _tallies().get_or_create(vllm_config, CaptureTally)
    tally.add(seconds)
    size = getattr(key, "num_tokens", key)
    name = getattr(mode, "name", mode)
    logger.info("graph captured: %s num_tokens=%s in %.3f s (capture %d, %.3f s in all)",
                name, size, seconds, tally.count, tally.seconds)
