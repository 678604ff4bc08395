"""Task updates in flight on the emulated update streams, and the replays they may block.

A graph task update is asynchronous on hardware: it runs on its update stream and reaches a
replay only through an ``ExternalEvent`` the graph waits on (``task_updates`` and ``streams``
state the model). This module holds what is in flight: the updates each stream has issued
and not yet published, and the replays suspended at a captured wait. ``QUEUE`` is the
device's one queue (streams are device-wide); ``reset`` empties it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def stream_key(stream: Any) -> tuple[int, int] | int:
    """What identifies a stream across the ``Stream`` objects that name it."""
    if hasattr(stream, "stream_id") and hasattr(stream, "device_index"):
        return (int(stream.device_index), int(stream.stream_id))
    return id(stream)


@dataclass
class PendingUpdate:
    """A validated task update: ``apply()`` puts its calls into the graph."""

    group: Any  # graphs.TaskGroupHandle
    apply: Callable[[], None]


@dataclass
class UpdateQueue:
    pending: dict[Any, list[PendingUpdate]] = field(default_factory=dict)
    #: event id -> continuations of replays waiting on that event
    waiting: dict[int, list[Callable[[], None]]] = field(default_factory=dict)

    def issue(self, stream: Any, update: PendingUpdate) -> None:
        self.pending.setdefault(stream_key(stream), []).append(update)

    def publish(self, stream: Any, event: Any) -> None:
        """``event.record(stream)``: the updates ``stream`` issued before the record are done;
        those of task groups whose capture waits on ``event`` reach the graph now. The rest
        stay in flight (nothing orders them before their group's next run)."""
        queue = self.pending.get(stream_key(stream), [])
        kept = []
        for update in queue:
            if update.group.event is event:
                update.apply()
            else:
                kept.append(update)
        queue[:] = kept

    def land_late(self, graph: Any) -> None:
        """After a replay of ``graph``: updates still in flight for it finish now, too late
        for that replay (the next one runs with them)."""
        for queue in self.pending.values():
            for update in [u for u in queue if u.group.graph is graph]:
                update.apply()
                queue.remove(update)

    def drop(self, graph: Any) -> None:
        """``graph`` was reset: its updates target nothing any more."""
        for queue in self.pending.values():
            queue[:] = [u for u in queue if u.group.graph is not graph]

    def suspend(self, event: Any, resume: Callable[[], None]) -> None:
        self.waiting.setdefault(id(event), []).append(resume)

    def resume(self, event: Any) -> None:
        for resume in self.waiting.pop(id(event), []):
            resume()

    def blocked(self) -> bool:
        return any(self.waiting.values())

    def reset(self) -> None:
        self.pending.clear()
        self.waiting.clear()


QUEUE = UpdateQueue()
