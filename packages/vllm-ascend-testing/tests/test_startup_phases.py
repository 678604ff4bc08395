"""PhaseClock: Dynamo's compile time (through its compile callbacks) and the runner methods it
times, restored afterwards."""

from __future__ import annotations

import time
from typing import Any

import torch
from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm_ascend_testing.startup_phases import TIMED_METHODS, PhaseClock

BACKEND_SLEEP_S = 0.3


def _slow_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    time.sleep(BACKEND_SLEEP_S)  # a compile that takes at least this long
    return gm.forward


def test_dynamo_compile_time_covers_the_backend_and_nothing_outside_the_compile() -> None:
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: torch.sin(x) * 2, backend=_slow_backend)
    clock = PhaseClock()
    start = time.perf_counter()
    with clock.running():
        compiled(torch.randn(4))
        time.sleep(BACKEND_SLEEP_S)  # not compiling: not counted
        compiled(torch.randn(4))  # the compiled code, no new compile
    wall = time.perf_counter() - start
    assert BACKEND_SLEEP_S <= clock.compile_s <= wall - BACKEND_SLEEP_S
    after = clock.compile_s
    torch._dynamo.reset()
    torch.compile(lambda x: x + 1, backend=_slow_backend)(torch.randn(2))  # clock stopped
    assert clock.compile_s == after


def test_the_timed_methods_are_replaced_inside_and_restored_after() -> None:
    from vllm.compilation import decorators
    from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper

    owners = [(CPUModelRunner, name) for name in TIMED_METHODS.values()] + [
        (TorchCompileWithNoGuardsWrapper, "aot_compile"),
        (decorators, "_try_load_aot_compiled_fn")]
    originals = [owner.__dict__[name] for owner, name in owners]
    with PhaseClock().running():
        assert all(owner.__dict__[name] is not fn
                   for (owner, name), fn in zip(owners, originals, strict=True))
    assert [owner.__dict__[name] for owner, name in owners] == originals
