"""Where an in-process vLLM engine's start-up time goes: load, compile, warm-up.

The same for stock vLLM CPU and the Ascend host-CPU platform (both run vLLM's
``CPUModelRunner``): :class:`PhaseClock` times the runner's ``load_model`` (model built and
weights loaded) and ``warming_up_model`` (the first forward: torch.compile, or its load from the
compile cache, then the warm-up run) while an engine is built. The compile phase is the larger
of two nested measures of it: vLLM's (``compilation_config.compilation_time``: its whole
torch.compile, or the load of its AOT artifact; only counted in ``VLLM_COMPILE`` mode, the
plugin's) and Dynamo's (between its compile start and end callbacks, ``torch._dynamo.callback``:
tracing plus the backend compile, or inductor's cache hit; what stock vLLM CPU's
``DYNAMO_TRACE_ONCE`` mode spends). The warm-up phase is the rest of the warming up. Needs the
engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``).
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
    dynamo_s: float = 0.0  # Dynamo's compile seconds while the clock ran
    _dynamo_start: float = 0.0

    def _compile_started(self, _: Any) -> None:
        self._dynamo_start = time.perf_counter()

    def _compile_ended(self, _: Any) -> None:
        self.dynamo_s += time.perf_counter() - self._dynamo_start

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
        from torch._dynamo.callback import callback_handler

        # Dynamo runs these around its outermost compile only (nested frames add nothing).
        callback_handler.register_start_callback(self._compile_started)
        callback_handler.register_end_callback(self._compile_ended)
        try:
            for phase, name in TIMED_METHODS.items():
                setattr(CPUModelRunner, name, self._timed(phase, originals[name]))
            yield self
        finally:
            callback_handler.remove_start_callback(self._compile_started)
            callback_handler.remove_end_callback(self._compile_ended)
            for name, original in originals.items():
                setattr(CPUModelRunner, name, original)

    def phases(self, llm: Any) -> dict[str, float]:
        """Load, compile and warm-up seconds of the engine ``llm`` built under the clock."""
        vllm_s = float(llm.llm_engine.vllm_config.compilation_config.compilation_time)
        compile_s = max(vllm_s, self.dynamo_s)
        return {
            "load": self.seconds["load"],
            "compile": compile_s,
            "warm_up": max(0.0, self.seconds["warming"] - compile_s),
        }
