"""How `vllm-ascend serve` ends: exit status 1 after an engine failure, a bounded shutdown that
aborts open requests first (the package README, "Serving: `vllm-ascend serve`").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_ascend.process.owned_tree import interrupt_start_up

logger = logging.getLogger(__name__)

# The module of vLLM's `serve` command, whose ``run_server`` the single API server path calls.
VLLM_SERVE_MODULE = "vllm.entrypoints.cli.serve"
_MARKER = "_ascend_single_api_server"

# Seconds the HTTP server keeps connections open once it shuts down. After a shutdown signal
# the engine has already drained (--shutdown-timeout) or aborted every request, so nothing
# more can arrive on them; the grace lets finished responses flush.
HTTP_SHUTDOWN_GRACE_S = 5

# Seconds the abort of the open requests may take before the shutdown goes on without it.
ABORT_WAIT_S = 5.0


async def stop_output_handler(engine: Any) -> bool:
    """Cancel ``engine``'s output handler and wait for it; whether one was still running."""
    # vLLM cancels it only after stopping the engine core, and it may first log the closed socket as
    # an EngineDeadError traceback although nothing failed.
    handler = getattr(engine, "output_handler", None)
    if not isinstance(handler, asyncio.Task) or handler.done():
        return False
    handler.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await handler
    return True


async def abort_open_requests(engine: Any) -> int:
    """Abort every open request of ``engine`` (finish reason "abort"); the number aborted."""
    # Runs on the server's event loop, where the engine's output processor lives.
    ids = list(engine.output_processor.request_states)
    if ids:
        await engine.abort(ids, internal=True)
    return len(ids)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _timeout_of(args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    return kwargs["timeout"] if "timeout" in kwargs else (args[0] if args else None)


class EngineWatch:
    """Whether the engine behind one API server died on its own (``died``)."""
    # What counts is the state at the first stop request (or at the end of serving): a failure
    # before a late SIGTERM still counts.

    def __init__(self) -> None:
        self.died = False
        self.stop_requested = False

    def watch(self, engine: Any, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """At the first ``engine.shutdown``, note ``engine.errored``; with ``loop``, abort open
        requests."""
        stop = engine.shutdown

        def shutdown(*args: Any, **kwargs: Any) -> Any:
            if not self.stop_requested:
                self.stop_requested = True
                self.died = self.died or bool(engine.errored)
                if loop is not None and not self.died and _timeout_of(args, kwargs) == 0:
                    self._abort_before_stop(engine, loop)
            return stop(*args, **kwargs)

        engine.shutdown = shutdown

    @staticmethod
    def _abort_before_stop(engine: Any, loop: asyncio.AbstractEventLoop) -> None:
        if _running_loop() is loop:
            return  # called on the loop itself, which cannot run the abort while it waits
        future = asyncio.run_coroutine_threadsafe(abort_open_requests(engine), loop)
        try:
            count = future.result(timeout=ABORT_WAIT_S)
        except Exception as exc:  # the shutdown must go on whatever the abort hit
            future.cancel()
            logger.warning("open requests not aborted before the engine stops (%s: %s); "
                           "they may end with an engine error instead",
                           type(exc).__name__, exc)
            return
        if count:
            logger.info("shutdown: aborted %d open request(s)", count)
        # Nothing is left to deliver: end the output handler before the engine core goes.
        stopped = asyncio.run_coroutine_threadsafe(stop_output_handler(engine), loop)
        try:
            stopped.result(timeout=ABORT_WAIT_S)
        except Exception as exc:
            stopped.cancel()
            logger.warning("the output handler did not stop before the engine (%s: %s)",
                           type(exc).__name__, exc)

    def serving_ended(self, engine: Any) -> None:
        """The HTTP server stopped; without a stop request only a failed engine stops it."""
        if not self.stop_requested and bool(engine.errored):
            self.died = True


async def run_api_server(args: Any, watch: EngineWatch, **uvicorn_kwargs: Any) -> None:
    """vLLM's single OpenAI API server for parsed `serve` ``args``, watched by ``watch``."""
    from vllm.entrypoints.launchers.api_server.entry import (
        build_and_serve,
        build_async_engine_client,
    )
    from vllm.entrypoints.launchers.launcher import setup_server
    from vllm.utils.system_utils import decorate_logs

    decorate_logs("APIServer", skip_if_decorated=True)
    # Until uvicorn runs, a SIGTERM interrupts the start-up (vLLM's own runner does the same)
    # and ends the engine processes at once.
    signal.signal(signal.SIGTERM, interrupt_start_up)
    uvicorn_kwargs.setdefault("timeout_graceful_shutdown", HTTP_SHUTDOWN_GRACE_S)
    listen_address, sock = setup_server(args, reuse_port=False)
    try:
        async with build_async_engine_client(args) as engine:
            watch.watch(engine, asyncio.get_running_loop())
            http_shutdown = await build_and_serve(engine, listen_address, sock, args,
                                                  **uvicorn_kwargs)
            watch.serving_ended(engine)
        # The engine is shut down (leaving the block); now the HTTP server's own shutdown.
        await http_shutdown
    finally:
        sock.close()


class EngineDiedError(RuntimeError):
    """The engine died while the single API server ran; raised after the server stopped."""


async def run_watched_api_server(args: Any, **uvicorn_kwargs: Any) -> None:
    """`run_api_server` with a fresh `EngineWatch`; `EngineDiedError` if the engine died."""
    watch = EngineWatch()
    await run_api_server(args, watch, **uvicorn_kwargs)
    if watch.died:
        raise EngineDiedError("the engine died while serving")


def install_single_api_server_runner() -> bool:
    """Point vLLM serve's ``run_server`` at `run_watched_api_server` (False: done or absent)."""
    import importlib

    serve_cli = importlib.import_module(VLLM_SERVE_MODULE)
    current = getattr(serve_cli, "run_server", None)
    if current is None:
        logger.warning("vLLM's serve command has no run_server: the engine-death exit status "
                       "and the bounded HTTP shutdown are not applied")
        return False
    if getattr(current, _MARKER, False):
        return False

    async def run_server(args: Any, **uvicorn_kwargs: Any) -> None:
        await run_watched_api_server(args, **uvicorn_kwargs)

    setattr(run_server, _MARKER, True)
    run_server._original = current  # type: ignore[attr-defined]
    setattr(serve_cli, "run_server", run_server)  # noqa: B010 - a vLLM module's name
    return True


def remove_single_api_server_runner() -> None:
    """Put vLLM's own ``run_server`` back (nothing to do when its module was never imported)."""
    serve_cli = sys.modules.get(VLLM_SERVE_MODULE)
    current: Any = getattr(serve_cli, "run_server", None)
    if serve_cli is not None and getattr(current, _MARKER, False):
        setattr(serve_cli, "run_server", current._original)  # noqa: B010
