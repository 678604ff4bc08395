"""`EngineWatch`: the engine-died verdict of `vllm-ascend serve`, and the abort of the open
requests before an "abort" shutdown, with a stand-in engine and a real event loop thread."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from vllm_ascend.process import serve_exit
from vllm_ascend.process.serve_exit import EngineWatch, abort_open_requests


class FakeEngine:
    """The parts of vLLM's AsyncLLM the watch touches; records what happened, in order."""

    def __init__(self, open_ids: Iterable[str] = (), errored: bool = False,
                 abort_error: Exception | None = None, abort_delay: float = 0.0) -> None:
        self.errored = errored
        self.output_processor = SimpleNamespace(request_states=dict.fromkeys(open_ids))
        self.events: list[tuple[Any, ...]] = []
        self.abort_error, self.abort_delay = abort_error, abort_delay

    async def abort(self, request_ids: list[str], internal: bool = False) -> None:
        await asyncio.sleep(self.abort_delay)
        if self.abort_error is not None:
            raise self.abort_error
        self.events.append(("abort", list(request_ids), internal, threading.get_ident()))
        for rid in request_ids:
            self.output_processor.request_states.pop(rid)

    def shutdown(self, timeout: float | None = None) -> None:
        self.events.append(("shutdown", timeout, dict(self.output_processor.request_states)))


@pytest.fixture
def loop_thread() -> Iterator[tuple[asyncio.AbstractEventLoop, int]]:
    """A running event loop in its own thread (vLLM calls shutdown from an executor thread
    while the server's loop runs); (loop, its thread id)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop, thread.ident or 0
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


def test_abort_shutdown_aborts_every_open_request_on_the_loop_first(
    loop_thread: tuple[asyncio.AbstractEventLoop, int], caplog: pytest.LogCaptureFixture
) -> None:
    loop, loop_ident = loop_thread
    engine, watch = FakeEngine(["a", "b", "c"]), EngineWatch()
    watch.watch(engine, loop)
    with caplog.at_level(logging.INFO, logger="vllm_ascend.process.serve_exit"):
        engine.shutdown(timeout=0)
    assert engine.events == [("abort", ["a", "b", "c"], True, loop_ident), ("shutdown", 0, {})]
    assert loop_ident != threading.get_ident()
    assert "shutdown: aborted 3 open request(s)" in caplog.text
    assert (watch.died, watch.stop_requested) == (False, True)


def test_positional_timeout_zero_counts_too(
    loop_thread: tuple[asyncio.AbstractEventLoop, int],
) -> None:
    engine = FakeEngine(["a"])
    EngineWatch().watch(engine, loop_thread[0])
    engine.shutdown(0)
    assert [e[0] for e in engine.events] == ["abort", "shutdown"]


@pytest.mark.parametrize("timeout", [None, 30, 0.5])
def test_drain_or_default_shutdown_aborts_nothing(
    loop_thread: tuple[asyncio.AbstractEventLoop, int], timeout: float | None
) -> None:
    engine = FakeEngine(["a"])
    EngineWatch().watch(engine, loop_thread[0])
    engine.shutdown(timeout=timeout)
    assert engine.events == [("shutdown", timeout, {"a": None})]


def test_no_open_request_means_no_abort_call(
    loop_thread: tuple[asyncio.AbstractEventLoop, int], caplog: pytest.LogCaptureFixture
) -> None:
    engine = FakeEngine([])
    EngineWatch().watch(engine, loop_thread[0])
    with caplog.at_level(logging.INFO, logger="vllm_ascend.process.serve_exit"):
        engine.shutdown(timeout=0)
    assert engine.events == [("shutdown", 0, {})]
    assert "aborted" not in caplog.text


def test_a_dead_engine_is_recorded_and_not_asked_to_abort(
    loop_thread: tuple[asyncio.AbstractEventLoop, int],
) -> None:
    engine, watch = FakeEngine(["a"], errored=True), EngineWatch()
    watch.watch(engine, loop_thread[0])
    engine.shutdown(timeout=0)
    assert engine.events == [("shutdown", 0, {"a": None})]
    assert watch.died


def test_only_the_first_stop_request_counts(
    loop_thread: tuple[asyncio.AbstractEventLoop, int],
) -> None:
    engine, watch = FakeEngine(["a"]), EngineWatch()
    watch.watch(engine, loop_thread[0])
    engine.shutdown(timeout=0)
    engine.errored = True  # the engine core was killed by that shutdown
    engine.output_processor.request_states["late"] = None
    engine.shutdown(timeout=0)
    watch.serving_ended(engine)
    assert [e[0] for e in engine.events] == ["abort", "shutdown", "shutdown"]
    assert not watch.died


def test_serving_ended_without_a_stop_request_is_a_death_only_if_errored() -> None:
    died, alive = EngineWatch(), EngineWatch()
    died.serving_ended(SimpleNamespace(errored=True))
    alive.serving_ended(SimpleNamespace(errored=False))
    assert (died.died, alive.died) == (True, False)


def test_a_failed_abort_is_one_warning_and_the_shutdown_goes_on(
    loop_thread: tuple[asyncio.AbstractEventLoop, int], caplog: pytest.LogCaptureFixture
) -> None:
    engine = FakeEngine(["a"], abort_error=RuntimeError("socket closed"))
    EngineWatch().watch(engine, loop_thread[0])
    with caplog.at_level(logging.WARNING, logger="vllm_ascend.process.serve_exit"):
        engine.shutdown(timeout=0)
    assert engine.events == [("shutdown", 0, {"a": None})]
    assert "open requests not aborted before the engine stops (RuntimeError: socket closed)" \
        in caplog.text


def test_a_slow_abort_is_given_up_after_the_bound(
    loop_thread: tuple[asyncio.AbstractEventLoop, int], caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(serve_exit, "ABORT_WAIT_S", 0.2)
    engine = FakeEngine(["a"], abort_delay=30.0)
    EngineWatch().watch(engine, loop_thread[0])
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="vllm_ascend.process.serve_exit"):
        engine.shutdown(timeout=0)
    assert 0.2 <= time.monotonic() - start < 5.0
    assert engine.events == [("shutdown", 0, {"a": None})]
    assert "open requests not aborted before the engine stops (TimeoutError" in caplog.text


def test_shutdown_called_on_the_loop_itself_does_not_wait_for_it() -> None:
    async def main() -> FakeEngine:
        engine = FakeEngine(["a"])
        EngineWatch().watch(engine, asyncio.get_running_loop())
        engine.shutdown(timeout=0)  # would deadlock if it waited for the loop
        return engine

    engine = asyncio.run(asyncio.wait_for(main(), timeout=10))
    assert engine.events == [("shutdown", 0, {"a": None})]


def test_without_a_loop_nothing_is_aborted() -> None:
    engine = FakeEngine(["a"])
    EngineWatch().watch(engine)
    engine.shutdown(timeout=0)
    assert engine.events == [("shutdown", 0, {"a": None})]


def test_abort_open_requests_counts_what_it_aborted() -> None:
    engine = FakeEngine(["x", "y"])
    assert asyncio.run(abort_open_requests(engine)) == 2
    assert asyncio.run(abort_open_requests(engine)) == 0
    assert [e[:3] for e in engine.events] == [("abort", ["x", "y"], True)]


class HandlerEngine(FakeEngine):
    """A FakeEngine with vLLM's output handler task: it logs an error, as vLLM's does, when
    the engine core's output queue yields one (the closed socket of a stopped engine)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(["a"])
        self.loop = loop
        self.queue: asyncio.Queue[Exception] = asyncio.Queue()
        self.logged: list[str] = []

        async def output_handler() -> None:
            error = await self.queue.get()
            self.logged.append(f"output_handler failed: {error!r}")

        async def start() -> asyncio.Task[None]:
            return asyncio.create_task(output_handler())

        self.output_handler = asyncio.run_coroutine_threadsafe(start(), loop).result(5)

    def shutdown(self, timeout: float | None = None) -> None:
        super().shutdown(timeout)
        # vLLM's order: the engine core's resources first (its queue gets the dead error),
        # then the handler's cancellation, here late enough for the handler to run first.
        self.loop.call_soon_threadsafe(self.queue.put_nowait, RuntimeError("engine dead"))
        self.loop.call_soon_threadsafe(self.loop.call_later, 0.05, self.output_handler.cancel)


def test_abort_shutdown_ends_the_output_handler_before_the_engine_stops(
    loop_thread: tuple[asyncio.AbstractEventLoop, int],
) -> None:
    loop, _ = loop_thread
    engine = HandlerEngine(loop)
    EngineWatch().watch(engine, loop)
    engine.shutdown(timeout=0)
    time.sleep(0.2)  # let the loop run what shutdown scheduled
    assert engine.output_handler.cancelled()
    assert engine.logged == []  # without the watch: ["output_handler failed: ..."]


def test_without_the_watch_the_handler_reports_the_stopped_engine(
    loop_thread: tuple[asyncio.AbstractEventLoop, int],
) -> None:
    loop, _ = loop_thread
    engine = HandlerEngine(loop)
    engine.shutdown(timeout=0)
    time.sleep(0.2)
    assert engine.logged == ["output_handler failed: RuntimeError('engine dead')"]


def test_a_drain_shutdown_keeps_the_output_handler_running(
    loop_thread: tuple[asyncio.AbstractEventLoop, int],
) -> None:
    loop, _ = loop_thread
    engine = HandlerEngine(loop)
    EngineWatch().watch(engine, loop)
    before = engine.output_handler.done()
    engine.shutdown(timeout=30)  # drain: the handler delivers the remaining outputs
    assert before is False and engine.events[0] == ("shutdown", 30, {"a": None})
