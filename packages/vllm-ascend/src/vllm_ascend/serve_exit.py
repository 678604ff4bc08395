"""How `vllm-ascend serve` ends: the exit status after an engine failure, a bounded shutdown.

Two behaviours of vLLM 0.32's single API server, both seen with real processes:

- When the engine dies while serving (a TP worker killed, the engine core crashed), vLLM
  fails the open requests, logs the error and stops the HTTP server, then returns normally:
  the process exits 0 (upstream issue vllm-project/vllm#48966). A supervisor's
  restart-on-failure never fires.
- On SIGTERM/SIGINT with the default ``--shutdown-timeout 0`` ("abort"), vLLM SIGTERMs the
  engine core and SIGKILLs its process tree at once. Requests whose abort did not reach the API
  server before the kill never finish, and uvicorn waits for their connections with no time
  limit ("Waiting for connections to close"): the process stays up as long as a client keeps
  waiting.

`run_api_server` runs vLLM's single API server from vLLM's own building blocks, tells the
uvicorn server to close connections still open `HTTP_SHUTDOWN_GRACE_S` after the shutdown
began, and records in an `EngineWatch` whether the engine failed before anybody asked it to
stop.
"""

from __future__ import annotations

import signal
from typing import Any, NoReturn

# Seconds the HTTP server keeps connections open once it shuts down. After a shutdown signal
# the engine has already drained (--shutdown-timeout) or aborted every request, so nothing
# more can arrive on them; the grace lets finished responses flush.
HTTP_SHUTDOWN_GRACE_S = 5


class EngineWatch:
    """Whether the engine behind one API server died on its own (``died``).

    An engine that fails while serving stops the HTTP server by itself; one stopped by a
    shutdown signal is asked to stop (its ``shutdown``) before the HTTP server ends. What
    counts is the engine's state at the first stop request, or when serving ended if nobody
    asked: a failure before a late SIGTERM still counts as a failure.
    """

    def __init__(self) -> None:
        self.died = False
        self.stop_requested = False

    def watch(self, engine: Any) -> None:
        """Note, at the first call of ``engine.shutdown``, whether ``engine.errored`` was set."""
        stop = engine.shutdown

        def shutdown(*args: Any, **kwargs: Any) -> Any:
            if not self.stop_requested:
                self.stop_requested = True
                self.died = self.died or bool(engine.errored)
            return stop(*args, **kwargs)

        engine.shutdown = shutdown

    def serving_ended(self, engine: Any) -> None:
        """The HTTP server stopped; without a stop request only a failed engine stops it."""
        if not self.stop_requested and bool(engine.errored):
            self.died = True


def _interrupt_start_up(signum: int, frame: Any) -> NoReturn:
    # Until uvicorn runs, a SIGTERM interrupts the start-up (vLLM's own runner does the same).
    raise KeyboardInterrupt("terminated")


async def run_api_server(args: Any, watch: EngineWatch, **uvicorn_kwargs: Any) -> None:
    """vLLM's single OpenAI API server for parsed `serve` ``args``, watched by ``watch``."""
    from vllm.entrypoints.launchers.api_server.entry import (
        build_and_serve,
        build_async_engine_client,
    )
    from vllm.entrypoints.launchers.launcher import setup_server
    from vllm.utils.system_utils import decorate_logs

    decorate_logs("APIServer", skip_if_decorated=True)
    signal.signal(signal.SIGTERM, _interrupt_start_up)
    uvicorn_kwargs.setdefault("timeout_graceful_shutdown", HTTP_SHUTDOWN_GRACE_S)
    listen_address, sock = setup_server(args, reuse_port=False)
    try:
        async with build_async_engine_client(args) as engine:
            watch.watch(engine)
            http_shutdown = await build_and_serve(engine, listen_address, sock, args,
                                                  **uvicorn_kwargs)
            watch.serving_ended(engine)
        # The engine is shut down (leaving the block); now the HTTP server's own shutdown.
        await http_shutdown
    finally:
        sock.close()
