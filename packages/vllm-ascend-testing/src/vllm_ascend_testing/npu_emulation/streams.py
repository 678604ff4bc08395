"""``torch.npu.Stream``, ``Event`` and ``ExternalEvent`` on the emulated device.

The device runs every operation before it returns, so streams only order nothing: they are
torch's generic ``Stream``/``Event`` over the device guard (new stream ids, wall-clock event
timing), with the real wheel's constructor and method signatures.
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_ascend_testing.npu_emulation.signatures import bound, check_call


class Stream(torch.Stream):
    """An ``npu`` stream (``torch_npu.npu.Stream``)."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        check_call("Stream", (device, priority), kwargs)
        if device is None:
            device = torch.device("npu", torch.accelerator.current_device_index())
        elif isinstance(device, int):
            device = torch.device("npu", device)
        if kwargs:
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=device, priority=priority)

    @bound("Stream.wait_event")
    def wait_event(self, event: Any) -> None:
        torch.Stream.wait_event(self, event)

    @bound("Stream.wait_stream")
    def wait_stream(self, stream: Any) -> None:
        torch.Stream.wait_stream(self, stream)

    @bound("Stream.record_event")
    def record_event(self, event: Any = None) -> Any:
        if event is None:
            event = Event()
        event.record(self)
        return event

    @bound("Stream.query")
    def query(self) -> bool:
        return True

    @bound("Stream.synchronize")
    def synchronize(self) -> None:
        torch.Stream.synchronize(self)


class Event(torch.Event):
    """An ``npu`` event (``torch_npu.npu.Event``)."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False) -> Event:
        check_call("Event", (enable_timing, blocking, interprocess), {})
        return super().__new__(cls, device="npu", enable_timing=enable_timing,
                               blocking=blocking, interprocess=interprocess)

    @bound("Event.record")
    def record(self, stream: Any = None) -> None:
        torch.Event.record(self, stream)

    @bound("Event.wait")
    def wait(self, stream: Any = None) -> None:
        torch.Event.wait(self, stream)

    @bound("Event.query")
    def query(self) -> bool:
        return True

    @bound("Event.elapsed_time")
    def elapsed_time(self, end_event: Any) -> float:
        return float(torch.Event.elapsed_time(self, end_event))

    @bound("Event.synchronize")
    def synchronize(self) -> None:
        torch.Event.synchronize(self)


class ExternalEvent:
    """``torch_npu.npu.ExternalEvent``: an event graph tasks wait on; synchronous here."""

    @bound("ExternalEvent")
    def __init__(self) -> None:
        self.recorded = False

    @bound("ExternalEvent.record")
    def record(self, stream: Any = None) -> None:
        self.recorded = True

    @bound("ExternalEvent.wait")
    def wait(self, stream: Any = None) -> None:
        return None

    @bound("ExternalEvent.reset")
    def reset(self, stream: Any = None) -> None:
        self.recorded = False
