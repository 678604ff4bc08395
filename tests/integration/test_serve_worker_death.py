"""`vllm-ascend serve --tensor-parallel-size 2` when one TP worker is killed mid-request.

At the first streamed token of 8 long requests (3 s after they were sent at the latest), rank
1's worker process gets SIGKILL (an OOM kill, a crashed device driver). The server must fail
the open requests with an error answer, log that the engine died, exit with
`ENGINE_DIED_STATUS` within a bound (vLLM 0.32 alone exits 0), and leave none of its processes
(API server, engine core, the other worker) behind.
A SIGTERM while the engine core or its workers start leaves none either, within 10 s.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from vllm_ascend.entrypoints.serve import ENGINE_DIED_STATUS
from vllm_ascend.worker_duties.rank_report import REPORT_DIR_ENV, read_rank_reports
from vllm_ascend_testing.process_tree import ProcessInfo, leftovers, process_tree
from vllm_ascend_testing.serve_faults import FaultOutcome, fault_during_load
from vllm_ascend_testing.serve_load import PROMPTS, build_load
from vllm_ascend_testing.serve_process import VllmServer, tiny_serve_args

SERVED_NAME = "tiny-qwen3"
IN_FLIGHT = 8
# Far more than the engine can generate before the kill (the most the tiny model's 2048-token
# context leaves after the prompts).
LONG_MAX_TOKENS = 1900
# The kill comes at the first streamed token, or this long after the requests were sent if
# none came by then: on a loaded host the API server passed the first token on only once the
# engine had finished every request (CI: 25 s to the first token, nothing left open at the
# kill), while on an AVX-512/AMX host the tiny model generated every request's 1900 tokens
# within 3 s (one finished before the engine noticed the dead worker).
KILL_AFTER_S = 3.0
# vLLM's engine core notices the dead worker, fails the requests and shuts down; seen: about
# 11 s on a loaded 2-core host.
WORKER_DEATH_EXIT_BOUND_S = 120.0

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]


@dataclass
class WorkerDeath:
    """The killed worker's pid, the outcome, and the server's log."""

    victim: int
    outcome: FaultOutcome
    log: str
    log_tail: str


@pytest.fixture(scope="module")
def worker_death(start_server: Callable[..., VllmServer],
                 tmp_path_factory: pytest.TempPathFactory) -> WorkerDeath:
    reports = tmp_path_factory.mktemp("worker_death_reports")
    args = tiny_serve_args(SERVED_NAME, "--enforce-eager", "--tensor-parallel-size", "2",
                           max_num_seqs=IN_FLIGHT, max_model_len=2048)
    server = start_server("worker-death", args, **{REPORT_DIR_ENV: str(reports)})
    server.wait_healthy(timeout=360)
    victim = read_rank_reports(Path(reports))[(0, 1)]["pid"]

    def kill_rank_1(tree: list[ProcessInfo]) -> None:
        os.kill(victim, signal.SIGKILL)

    requests = build_load(IN_FLIGHT, max_tokens=(LONG_MAX_TOKENS,), prompts=PROMPTS[:2])
    outcome = fault_during_load(server, SERVED_NAME, requests, IN_FLIGHT, kill_rank_1,
                                extra_body={"ignore_eos": True}, after_first_token=False,
                                by_first_token=True, settle_s=KILL_AFTER_S,
                                exit_timeout=WORKER_DEATH_EXIT_BOUND_S)
    return WorkerDeath(victim, outcome, server.log(), server.log_tail())


def test_killed_worker_was_a_tp_rank_of_the_running_server(worker_death: WorkerDeath) -> None:
    tree = {p.id.pid: p for p in worker_death.outcome.tree}
    victim = tree[worker_death.victim]
    assert victim.name.startswith("VLLM::Worker_TP"), victim
    engine_core = tree[victim.ppid]
    assert engine_core.name.startswith("VLLM::EngineCor"), engine_core
    workers = [p for p in tree.values() if p.ppid == engine_core.id.pid
               and p.name.startswith("VLLM::Worker_TP")]
    assert len(workers) == 2, tree


def test_worker_death_exits_with_the_engine_died_status_in_bounded_time(
    worker_death: WorkerDeath,
) -> None:
    outcome = worker_death.outcome
    assert outcome.exit_code == ENGINE_DIED_STATUS == 1, worker_death.log_tail
    assert outcome.exit_s < WORKER_DEATH_EXIT_BOUND_S


def test_worker_death_fails_every_open_request_with_an_error(worker_death: WorkerDeath) -> None:
    outcome = worker_death.outcome
    results = outcome.results
    assert len(results) == IN_FLIGHT
    still_open = outcome.open_at_fault()
    assert len(still_open) == IN_FLIGHT, results  # the kill came long before any could end
    for r in still_open:
        # An answer, not a hang or a silently truncated text: HTTP 500 for a plain request,
        # an error event for a stream (its HTTP status was sent with the first token).
        assert not r.timed_out, r
        assert r.error is not None and r.finish_reason != "length", r
        assert r.status == (200 if r.request.stream else 500), r
    assert any("EngineCore encountered an issue" in (r.error or "") for r in still_open), results


def test_worker_death_is_reported_in_the_log(worker_death: WorkerDeath) -> None:
    log = worker_death.log
    assert "the engine died while serving" in log, worker_death.log_tail
    assert f"exiting with status {ENGINE_DIED_STATUS}" in log, worker_death.log_tail


def test_worker_death_leaves_no_process_behind(worker_death: WorkerDeath) -> None:
    outcome = worker_death.outcome
    assert len(outcome.tree) >= 4, outcome.tree  # API server, engine core, two workers
    assert outcome.survivors == [], outcome.survivors


# Every process of the server's tree must be gone this long after a SIGTERM (issue 47).
START_UP_SIGNAL_BOUND_S = 10.0


@pytest.mark.parametrize("wait_for", [2, 4])  # the engine core started; its two workers too
def test_sigterm_during_start_up_leaves_no_process_behind(
        start_server: Callable[..., VllmServer], wait_for: int) -> None:
    server = start_server(f"start-up-sigterm-{wait_for}", tiny_serve_args(
        SERVED_NAME, "--enforce-eager", "--tensor-parallel-size", "2"))
    deadline = time.monotonic() + 300
    tree = process_tree(server.proc.pid)
    while len(tree) < wait_for and time.monotonic() < deadline:
        assert server.proc.poll() is None, server.log_tail()
        time.sleep(0.05)
        tree = process_tree(server.proc.pid)
    assert len(tree) >= wait_for, server.log_tail()
    signalled = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    left = leftovers(tree, server.proc.pid, timeout=START_UP_SIGNAL_BOUND_S)
    assert left == [], (left, server.log_tail())
    assert server.proc.wait(timeout=5) == 0, server.log_tail()
    assert time.monotonic() - signalled <= START_UP_SIGNAL_BOUND_S + 5
