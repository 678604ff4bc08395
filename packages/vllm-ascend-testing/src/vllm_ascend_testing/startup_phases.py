"""Where an in-process vLLM engine's start-up time goes: load, compile, warm-up.

The same for stock vLLM CPU and the Ascend host-CPU platform (both run vLLM's
``CPUModelRunner``): :class:`PhaseClock` times the runner's ``load_model`` (model built and
weights loaded) and ``warming_up_model`` (the first forward: torch.compile, or its load from the
compile cache, then the warm-up run) while an engine is built. The compile phase is the larger
of two measures of it: vLLM's own (``compilation_config.compilation_time``, counted in
``VLLM_COMPILE`` mode only: the plugin's) and the clock's, the outermost spans of every way a
compile starts: a Dynamo frame compile (its start and end callbacks, ``torch._dynamo.callback``),
vLLM's AOT compile of the model (``TorchCompileWithNoGuardsWrapper.aot_compile``) and its load
of a saved AOT artifact (``decorators._try_load_aot_compiled_fn``): what stock vLLM CPU's
``DYNAMO_TRACE_ONCE`` mode spends. The warm-up phase is the rest of the warming up. Needs the
engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

TIMED_METHODS = {"load": "load_model", "warming": "warming_up_model"}


@dataclass
class PhaseClock:
    """Seconds spent in each timed runner method, and compiling, while the clock ran."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TIMED_METHODS, 0.0))
    compile_s: float = 0.0  # outermost compile spans while the clock ran
    _depth: int = 0
    _compile_start: float = 0.0

    def _compile_enter(self, *_: Any) -> None:
        if self._depth == 0:
            self._compile_start = time.perf_counter()
        self._depth += 1

    def _compile_exit(self, *_: Any) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.compile_s += time.perf_counter() - self._compile_start

    def _timed(self, phase: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - start
        return timed

    def _compiling(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def compiling(*args: Any, **kwargs: Any) -> Any:
            self._compile_enter()
            try:
                return method(*args, **kwargs)
            finally:
                self._compile_exit()
        return compiling

    @contextmanager
    def _patched(self, owner: Any, name: str, make: Callable[[Any], Any]) -> Iterator[None]:
        original = owner.__dict__[name]
        setattr(owner, name, make(original))
        try:
            yield
        finally:
            setattr(owner, name, original)

    @contextmanager
    def running(self) -> Iterator[PhaseClock]:
        """Time ``CPUModelRunner``'s methods and every compile for the duration of the block."""
        from torch._dynamo.callback import callback_handler
        from vllm.compilation import decorators
        from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper
        from vllm.v1.worker.cpu_model_runner import CPUModelRunner

        with ExitStack() as stack:
            for phase, name in TIMED_METHODS.items():
                stack.enter_context(self._patched(
                    CPUModelRunner, name, functools.partial(self._timed, phase)))
            stack.enter_context(self._patched(
                TorchCompileWithNoGuardsWrapper, "aot_compile", self._compiling))
            stack.enter_context(self._patched(
                decorators, "_try_load_aot_compiled_fn", self._compiling))
            # Dynamo runs these around its outermost frame compile only.
            callback_handler.register_start_callback(self._compile_enter)
            callback_handler.register_end_callback(self._compile_exit)
            stack.callback(callback_handler.remove_end_callback, self._compile_exit)
            stack.callback(callback_handler.remove_start_callback, self._compile_enter)
            yield self

    def phases(self, llm: Any) -> dict[str, float]:
        """Load, compile and warm-up seconds of the engine ``llm`` built under the clock."""
        vllm_s = float(llm.llm_engine.vllm_config.compilation_config.compilation_time)
        compile_s = max(vllm_s, self.compile_s)
        return {
            "load": self.seconds["load"],
            "compile": compile_s,
            "warm_up": max(0.0, self.seconds["warming"] - compile_s),
        }
