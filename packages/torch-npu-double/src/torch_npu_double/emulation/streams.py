"""``torch.npu.Stream``, ``Event`` and ``ExternalEvent`` on the emulated device.

The device runs every eager operation before it returns: streams and events are torch's
generic ``Stream``/``Event`` over the device guard (new stream ids, wall-clock event timing),
with the real wheel's constructor and method signatures. What is asynchronous is what the
graph runtime makes so: task updates and the ``ExternalEvent`` that orders them before a
replay (``task_updates``). A ``synchronize()`` inside a capture is refused.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from torch_npu_double.emulation import graphs
from torch_npu_double.emulation.signatures import bound, check_call
from torch_npu_double.emulation.update_queue import QUEUE


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
        graphs.host_waits("Stream.synchronize()")
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
        self._recorded_at = time.perf_counter()

    @bound("Event.wait")
    def wait(self, stream: Any = None) -> None:
        torch.Event.wait(self, stream)

    @bound("Event.query")
    def query(self) -> bool:
        return True

    @bound("Event.elapsed_time")
    def elapsed_time(self, end_event: Any) -> float:
        # torch.Event.elapsed_time rejects subclasses; the work is synchronous, so the
        # wall-clock time between the two records is the elapsed time.
        start, end = getattr(self, "_recorded_at", None), getattr(end_event, "_recorded_at", None)
        if start is None or end is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return float(end - start) * 1000.0

    @bound("Event.synchronize")
    def synchronize(self) -> None:
        graphs.host_waits("Event.synchronize()", event=True)
        torch.Event.synchronize(self)


class ExternalEvent:
    """``torch_npu.npu.ExternalEvent``: an event graph tasks wait on. Inside a capture
    ``wait``/``reset``/``record`` become graph nodes (the wait before a task group is the
    group's event); outside one, ``record(stream)`` publishes ``stream``'s task updates of the
    groups waiting on this event and resumes a replay suspended at its wait
    (``task_updates`` states the model)."""

    @bound("ExternalEvent")
    def __init__(self) -> None:
        self.recorded = False

    @bound("ExternalEvent.record")
    def record(self, stream: Any = None) -> None:
        if graphs.capture_event(self, "record"):
            return
        QUEUE.publish(stream, self)
        self.recorded = True
        QUEUE.resume(self)

    @bound("ExternalEvent.wait")
    def wait(self, stream: Any = None) -> None:
        graphs.capture_event(self, "wait")

    @bound("ExternalEvent.reset")
    def reset(self, stream: Any = None) -> None:
        if not graphs.capture_event(self, "reset"):
            self.recorded = False
