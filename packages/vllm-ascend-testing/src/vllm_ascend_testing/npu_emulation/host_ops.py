"""Counting what a decode step costs the host on the emulated device: the device operations
dispatched from Python outside graph replays, and the replays (``benchmarks`` bench_graphs and
the harness worker's ``op_host_ops``)."""

from __future__ import annotations

from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

from vllm_ascend_testing.npu_emulation import graphs
from vllm_ascend_testing.npu_emulation.host_code import is_host_code, npu_tensors, run_host_code


class HostOpCounter(TorchDispatchMode):
    """Counts the device operations the host dispatches (ops on ``npu`` tensors) outside
    graph replays, and the replays: what a decode step costs the host. vLLM's attention and
    KV-cache entry points, and higher-order ops, count as the device ops they issue."""

    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self._replays_at_start = 0
        self._depth = 0

    def __enter__(self) -> HostOpCounter:
        # Re-entered around each host-wrapper op (below): only the outermost entry starts the
        # replay count, or every attention call between PIECEWISE pieces would restart it.
        if self._depth == 0:
            self._replays_at_start = graphs.THREAD.state.replays
        self._depth += 1
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._depth -= 1

    @property
    def replays(self) -> int:
        return graphs.THREAD.state.replays - self._replays_at_start

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if is_host_code(func):
            return run_host_code(self, func, args, kwargs)
        out = func(*args, **kwargs)
        if not graphs.THREAD.state.replaying and (
                npu_tensors((args, kwargs)) or npu_tensors(out)):
            self.ops += 1
        return out
