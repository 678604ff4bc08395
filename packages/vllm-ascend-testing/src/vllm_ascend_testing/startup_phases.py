"""Where an in-process vLLM engine's start-up time goes: load, compile, warm-up.

The same for stock vLLM CPU and the Ascend host-CPU platform (both run vLLM's
``CPUModelRunner``): :class:`PhaseClock` times the runner's ``load_model`` (model built and
weights loaded) and ``warming_up_model`` (the first forward: torch.compile, or its load from the
compile cache, then the warm-up run) while an engine is built; the compile phase is vLLM's own
measure of it (``compilation_config.compilation_time``), the warm-up phase the rest of the
warming up. Needs the engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

TIMED_METHODS = {"load": "load_model", "warming": "warming_up_model"}


@dataclass
class PhaseClock:
    """Seconds spent in each timed runner method while the clock ran."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TIMED_METHODS, 0.0))

    def _timed(self, phase: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - start
        return timed

    @contextmanager
    def running(self) -> Iterator[PhaseClock]:
        """Time ``CPUModelRunner``'s methods for the duration of the block."""
        from vllm.v1.worker.cpu_model_runner import CPUModelRunner

        originals = {name: CPUModelRunner.__dict__[name] for name in TIMED_METHODS.values()}
        try:
            for phase, name in TIMED_METHODS.items():
                setattr(CPUModelRunner, name, self._timed(phase, originals[name]))
            yield self
        finally:
            for name, original in originals.items():
                setattr(CPUModelRunner, name, original)

    def phases(self, llm: Any) -> dict[str, float]:
        """Load, compile and warm-up seconds of the engine ``llm`` built under the clock."""
        compile_s = float(llm.llm_engine.vllm_config.compilation_config.compilation_time)
        return {
            "load": self.seconds["load"],
            "compile": compile_s,
            "warm_up": max(0.0, self.seconds["warming"] - compile_s),
        }
