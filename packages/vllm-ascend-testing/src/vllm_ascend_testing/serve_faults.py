"""A fault while `vllm-ascend serve` generates: what the server and its clients did after it.

`fault_during_load` runs a load against a started `VllmServer` in a thread, applies a fault
(kill a worker, SIGTERM the server, ...) once generation started (the first streamed token
arrived), and records how the server exited, how long that took, what every request got, and
which of the server's processes outlived it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from vllm_ascend_testing.process_tree import ProcessInfo, leftovers, process_tree
from vllm_ascend_testing.serve_load import LoadRequest, LoadResult, run_load
from vllm_ascend_testing.serve_process import ServerError, VllmServer


@dataclass
class FaultOutcome:
    """How the server and the load ended after the fault.

    `exit_code` is None when the server still ran `exit_timeout` seconds after the fault;
    `exit_s` is the seconds from the fault to the server's exit. `tree` is the server's process
    tree just before the fault; `survivors` are those (and any other process of the server's
    session) still running `grace` seconds after the server exited. `fault_at` is
    ``time.perf_counter()`` at the fault: a result whose ``ended_at`` is earlier was answered
    before the fault (it was not open when it happened).
    """

    exit_code: int | None
    exit_s: float
    results: list[LoadResult]
    load_s: float
    tree: list[ProcessInfo]
    survivors: list[ProcessInfo]
    fault_at: float = float("nan")

    def open_at_fault(self) -> list[LoadResult]:
        """The results still open when the fault happened."""
        return [r for r in self.results if not r.ended_at < self.fault_at]


def fault_during_load(
    server: VllmServer,
    model: str,
    requests: Sequence[LoadRequest],
    concurrency: int,
    fault: Callable[[list[ProcessInfo]], None],
    *,
    extra_body: Mapping[str, Any] | None = None,
    after_first_token: bool = True,
    by_first_token: bool = False,
    first_token_timeout: float = 120.0,
    settle_s: float = 0.5,
    exit_timeout: float = 120.0,
    request_timeout: float = 120.0,
    grace: float = 10.0,
) -> FaultOutcome:
    """Send `requests`; `settle_s` after the first streamed token (with `after_first_token`
    off: after the requests were sent; with `by_first_token` too: at the first streamed token,
    or `settle_s` after the requests were sent if none came by then), call `fault` with the
    server's process tree; then wait (bounded) for the server to exit and the load to end.

    A first token seen by the client can come late on a loaded host: the API server may pass
    it on only when the engine has nearly finished. Off, the fault is sure to find every
    request still open (in the API server, or in the engine)."""
    first = threading.Event()
    load = run_load(server.base_url, model, requests, concurrency, timeout=request_timeout,
                    first_token=first, extra_body=extra_body)
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(asyncio.run, load)
        if after_first_token and not first.wait(first_token_timeout):
            server.kill_group()  # the load then ends with connection errors
            raise ServerError(f"no streamed token within {first_token_timeout} s\n"
                              f"{server.log_tail()}")
        if after_first_token or not by_first_token:
            time.sleep(settle_s)
        else:
            # A fast host can finish long requests within a fixed delay; a loaded one passes
            # the first token on late: whichever comes first.
            first.wait(settle_s)
        tree = process_tree(server.proc.pid)
        start = time.monotonic()
        fault_at = time.perf_counter()
        fault(tree)
        exit_code = server.proc_wait(exit_timeout)
        exit_s = time.monotonic() - start
        survivors = leftovers(tree, server.proc.pid, grace) if exit_code is not None else []
        if exit_code is None:
            server.kill_group()  # a hung server: end it so the load (and the test) can end
        results, load_s = running.result(timeout=request_timeout + 60)
    return FaultOutcome(exit_code, exit_s, results, load_s, tree, survivors, fault_at)
