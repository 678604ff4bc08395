"""`vllm-ascend serve` under a bounded load, then SIGTERM while it generates (one TP=1 server).

The load: 300 greedy requests, 16 in flight, /v1/completions and /v1/chat/completions,
streamed and not, three prompt lengths and three `max_tokens`; every answer must be complete
and consistent, and each (API, prompt, max_tokens) group, streamed and not, must give one
answer. Then 16 long requests run and the API server gets SIGTERM (what a container runtime
sends to its main process): the server must exit 0 within a bound, end every open request
with finish reason "abort", and leave none of its processes behind.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from vllm_ascend_testing.process_tree import ProcessInfo
from vllm_ascend_testing.serve_faults import FaultOutcome, fault_during_load
from vllm_ascend_testing.serve_load import (
    PATHS,
    PROMPTS,
    LoadRequest,
    LoadResult,
    build_load,
    load_problems,
    run_load,
)
from vllm_ascend_testing.serve_process import VllmServer, tiny_serve_args

SERVED_NAME = "tiny-qwen3"
LOAD_REQUESTS = 300
CONCURRENCY = 16
# Small: the load checks correctness under concurrency; its speed is the benchmark's subject.
LOAD_MAX_TOKENS = (4, 8, 16)
# After SIGTERM vLLM aborts every request at once (--shutdown-timeout 0) and the HTTP server
# closes within HTTP_SHUTDOWN_GRACE_S (5 s); seen: about 1.5 s.
SIGTERM_EXIT_BOUND_S = 60.0
# Long enough that no request can finish between the first streamed token and SIGTERM.
LONG_MAX_TOKENS = 1500
# SIGTERM comes this long after the long requests were sent, not after a first streamed token:
# on a loaded host that token reached the client only when a request had finished all its
# tokens (8.5 s), so nothing was left to abort. 16 x 1500 tokens take several seconds more.
SIGTERM_AFTER_S = 2.0

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]


@dataclass
class LoadRun:
    """The load's requests and answers, the server's log, then the SIGTERM outcome."""

    sent: list[LoadRequest]
    results: list[LoadResult]
    log: str
    log_tail: str
    sigterm: FaultOutcome


def _terminate(server: VllmServer) -> Callable[[list[ProcessInfo]], None]:
    def fault(tree: list[ProcessInfo]) -> None:
        os.kill(server.proc.pid, signal.SIGTERM)

    return fault


@pytest.fixture(scope="module")
def load_run(start_server: Callable[..., VllmServer]) -> LoadRun:
    args = tiny_serve_args(SERVED_NAME, "--enforce-eager", max_num_seqs=CONCURRENCY,
                           max_model_len=2048)
    server = start_server("load", args)
    server.wait_healthy(timeout=360)
    sent = build_load(LOAD_REQUESTS, max_tokens=LOAD_MAX_TOKENS)
    results, _ = asyncio.run(run_load(server.base_url, SERVED_NAME, sent, CONCURRENCY,
                                      timeout=120))
    # Short prompts: prompt + LONG_MAX_TOKENS fits the context.
    long_requests = build_load(CONCURRENCY, max_tokens=(LONG_MAX_TOKENS,), seed=1,
                               prompts=PROMPTS[:2])
    outcome = fault_during_load(server, SERVED_NAME, long_requests, CONCURRENCY,
                                _terminate(server), extra_body={"ignore_eos": True},
                                after_first_token=False, settle_s=SIGTERM_AFTER_S,
                                exit_timeout=SIGTERM_EXIT_BOUND_S)
    return LoadRun(sent, results, server.log(), server.log_tail(), outcome)


def test_load_sends_every_kind_of_request(load_run: LoadRun) -> None:
    sent = load_run.sent
    assert len(sent) == LOAD_REQUESTS
    kinds = {(r.api, r.stream) for r in sent}
    assert kinds == {(api, stream) for api in PATHS for stream in (False, True)}
    assert {r.max_tokens for r in sent} == set(LOAD_MAX_TOKENS)
    assert {r.prompt for r in sent} == set(PROMPTS)
    # Every group is sent streamed and not, so the streamed text is compared with the other.
    groups: dict[tuple[str, str, int], set[bool]] = {}
    for r in sent:
        groups.setdefault(r.group, set()).add(r.stream)
    assert all(streams == {False, True} for streams in groups.values())


def test_load_every_request_answered_completely_and_consistently(load_run: LoadRun) -> None:
    problems = load_problems(load_run.results)
    assert not problems, "\n".join(problems[:20]) + "\n" + load_run.log_tail
    assert [r.request for r in load_run.results] == load_run.sent
    # The texts are real greedy continuations, not empty answers that happen to agree.
    assert all(r.completion_tokens == r.request.max_tokens or r.finish_reason == "stop"
               for r in load_run.results)
    assert sum(bool(r.text) for r in load_run.results) > LOAD_REQUESTS // 2


def test_load_streams_report_a_first_token_before_the_end(load_run: LoadRun) -> None:
    # Time to first token is taken at the first chunk with text; a random-weight model's few
    # tokens may decode to no text at all (partial UTF-8 bytes, special tokens).
    streams = [r for r in load_run.results if r.request.stream and r.text]
    assert len(streams) > LOAD_REQUESTS // 4
    for r in streams:
        assert r.ttft_s is not None and 0 < r.ttft_s <= r.latency_s, r


def test_sigterm_during_generation_exits_zero_in_bounded_time(load_run: LoadRun) -> None:
    outcome = load_run.sigterm
    assert outcome.exit_code == 0, load_run.log_tail
    assert outcome.exit_s < SIGTERM_EXIT_BOUND_S
    assert "Application shutdown complete" in load_run.log, load_run.log_tail


def test_sigterm_ends_every_open_request_with_abort(load_run: LoadRun) -> None:
    results = load_run.sigterm.results
    assert len(results) == CONCURRENCY
    for r in results:
        # None hung, none got an engine error: a complete HTTP answer (a stream up to
        # [DONE]) with finish reason "abort", before all its tokens.
        assert r.status == 200 and r.error is None, (r, load_run.log_tail)
        assert r.finish_reason == "abort" and r.finish_count == 1, r
        assert r.completion_tokens is None or r.completion_tokens < LONG_MAX_TOKENS
    # vLLM's output handler may still log EngineDeadError when the engine core is killed a
    # moment later; by then no request is left for it to fail.
    assert f"shutdown: aborted {CONCURRENCY} open request(s)" in load_run.log, load_run.log_tail


def test_sigterm_leaves_no_process_behind(load_run: LoadRun) -> None:
    outcome = load_run.sigterm
    names = sorted(p.name for p in outcome.tree)
    # The API server and its engine core were there to be checked; with one rank the worker
    # runs inside the engine core (config_pipeline.parallel_layout), not in a process of its own.
    assert any(name.startswith("VLLM::EngineCor") for name in names), names
    assert not any(name.startswith("VLLM::Worker") for name in names), names
    assert "the worker runs in the engine core process" in load_run.log, load_run.log_tail
    assert outcome.survivors == [], outcome.survivors
