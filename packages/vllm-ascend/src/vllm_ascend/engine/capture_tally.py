"""Graph captures of each engine: one log line per capture and the rank report's totals."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


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


def record_capture(tally: CaptureTally, key: Any, mode: Any, seconds: float) -> None:
    """Log one capture (its token count from the batch descriptor) and add it to ``tally``."""
    tally.add(seconds)
    size = getattr(key, "num_tokens", key)
    name = getattr(mode, "name", mode)
    logger.info("graph captured: %s num_tokens=%s in %.3f s (capture %d, %.3f s in all)",
                name, size, seconds, tally.count, tally.seconds)
