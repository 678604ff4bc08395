"""Counting what a decode step costs the host on the emulated device: the device operations
dispatched from Python outside graph replays, the replays, and the device-to-host
synchronisations (``benchmarks`` bench_graphs and the harness worker's ``op_host_ops``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torch_npu_double.emulation import graphs
from torch_npu_double.emulation.capture_rules import reads_host
from torch_npu_double.emulation.host_code import is_host_code, npu_tensors, run_host_code

_aten = torch.ops.aten
_UNSIZED_REPEAT_INTERLEAVE = (_aten.repeat_interleave.Tensor, _aten.repeat_interleave.self_Tensor)


def sync_reason(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Why dispatching ``func`` on npu operands makes the host wait for the device, if it
    does: a host read or device-to-host copy, or ``repeat_interleave`` without
    ``output_size`` (its output size is data the host must read first)."""
    # ``output_size`` is keyword-only in both overloads; ``self_Tensor`` reaches the mode
    # undecomposed under ``torch.inference_mode()`` (how vLLM's runner prepares a step).
    if func in _UNSIZED_REPEAT_INTERLEAVE and kwargs.get("output_size") is None:
        return "repeat_interleave without output_size"
    if reads_host(func, args, kwargs):
        return str(func)
    return None


class HostOpCounter(TorchDispatchMode):
    """Counts, outside graph replays, the device operations the host dispatches (ops on
    ``npu`` tensors), the replays, and the device-to-host synchronisations (``syncs``; by
    cause in ``sync_reasons``): host reads (``.item()``, ``bool(t)``, ``nonzero``, copies to
    the host), ``repeat_interleave`` without ``output_size``, and ``synchronize()`` of the
    device or a stream. ``Event.synchronize()`` calls are counted apart (``event_waits``):
    vLLM's model runner waits on its own events once or twice a step by design (the previous
    step's input copy, the sampled tokens' copy to the host). vLLM's attention and KV-cache
    entry points, the ``ascend`` ops and higher-order ops count as the device ops they
    issue."""

    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.sync_reasons: Counter[str] = Counter()
        self._replays_at_start = 0
        self._syncs_at_start = 0
        self._event_waits_at_start = 0
        self._depth = 0

    def __enter__(self) -> HostOpCounter:
        # Re-entered around each host-wrapper op (below): only the outermost entry starts the
        # replay count, or every attention call between PIECEWISE pieces would restart it.
        if self._depth == 0:
            self._replays_at_start = graphs.THREAD.state.replays
            self._syncs_at_start = graphs.THREAD.state.synchronizes
            self._event_waits_at_start = graphs.THREAD.state.event_waits
        self._depth += 1
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._depth -= 1

    @property
    def replays(self) -> int:
        return graphs.THREAD.state.replays - self._replays_at_start

    @property
    def event_waits(self) -> int:
        """``Event.synchronize()`` calls (not in ``syncs``)."""
        return graphs.THREAD.state.event_waits - self._event_waits_at_start

    @property
    def syncs(self) -> int:
        """Device-to-host synchronisations: by dispatched ops and device/stream
        ``synchronize()`` calls."""
        api = graphs.THREAD.state.synchronizes - self._syncs_at_start
        return sum(self.sync_reasons.values()) + api

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if is_host_code(func):
            return run_host_code(self, func, args, kwargs)
        out = func(*args, **kwargs)
        if not graphs.THREAD.state.replaying:
            inputs = npu_tensors((args, kwargs))
            if inputs or npu_tensors(out):
                self.ops += 1
            reason = sync_reason(func, args, kwargs) if inputs else None
            if reason is not None:
                self.sync_reasons[reason] += 1
        return out
