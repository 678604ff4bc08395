"""`vllm-ascend serve --data-parallel-size 2` on the host-CPU platform: two engine cores (and
vLLM's DP coordinator) answer HTTP requests; each DP rank's worker is bound to its own pool,
the API server and the engine cores keep their affinity."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from vllm_ascend.worker_duties.rank_report import REPORT_DIR_ENV, read_rank_reports
from vllm_ascend_testing.serve_process import VllmServer

from tests.integration.proc_status import cpus_allowed, parent_pid

SERVED_NAME = "tiny-qwen3-dp"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@dataclass
class DpSession:
    completions: list[httpx.Response]
    chat: httpx.Response
    reports: dict[tuple[int, int], dict[str, Any]]
    affinity: dict[str, list[int]]
    start_affinity: list[int]
    log: str
    returncode: int


@pytest.fixture(scope="module")
def dp_session(tiny_models, make_env: Callable[..., dict[str, str]],
               tmp_path_factory: pytest.TempPathFactory, ascend_log_dir: str) -> DpSession:
    reports_dir = tmp_path_factory.mktemp("dp_reports")
    env = make_env(device="cpu", **{REPORT_DIR_ENV: str(reports_dir)})
    env.pop("VLLM_CPU_OMP_THREADS_BIND", None)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")
    args = [
        "--served-model-name", SERVED_NAME, "--dtype", "float32", "--max-model-len", "512",
        "--max-num-seqs", "4", "--kv-cache-memory-bytes", str(64 * 1024 * 1024),
        "--gpu-memory-utilization", "0.05", "--enforce-eager", "--data-parallel-size", "2",
        "--api-server-count", "1",  # one front end is enough; vLLM defaults to one per DP rank
        "--additional-config", json.dumps({"ascend_log_path": ascend_log_dir}),
    ]
    log_path = tmp_path_factory.mktemp("dp_serve") / "serve.log"
    server = VllmServer(tiny_models.path("qwen3"), args, env, log_path)
    affinity: dict[str, list[int]] = {}
    try:
        server.wait_healthy(timeout=900)
        reports = read_rank_reports(reports_dir)
        affinity["api_server"] = cpus_allowed(server.proc.pid)
        for (dp, _), report in reports.items():
            affinity[f"worker_dp{dp}"] = cpus_allowed(report["pid"])
            affinity[f"engine_core_dp{dp}"] = cpus_allowed(parent_pid(report["pid"]))
        with httpx.Client(base_url=server.base_url, timeout=120) as client:
            body = {"model": SERVED_NAME, "max_tokens": 6, "temperature": 0, "ignore_eos": True}
            # Several requests, so the DP coordinator's balancing sends work to both cores.
            completions = [client.post("/v1/completions", json={**body, "prompt": p})
                           for p in ("Hello, my name is", "The capital of France is",
                                     "The future of AI is", "Once upon a time")]
            chat = client.post("/v1/chat/completions", json={
                **body, "messages": [{"role": "user", "content": "The capital of France is"}]})
    finally:
        code = server.stop(timeout=60)
    return DpSession(completions, chat, reports, affinity, sorted(os.sched_getaffinity(0)),
                     server.log(), code)


def test_dp2_serves_completions_and_chat(dp_session: DpSession) -> None:
    for response in [*dp_session.completions, dp_session.chat]:
        assert response.status_code == 200, response.text
        assert response.json()["usage"]["completion_tokens"] == 6
        assert response.json()["model"] == SERVED_NAME


def test_dp2_starts_two_engine_cores(dp_session: DpSession) -> None:
    assert sorted(dp_session.reports) == [(0, 0), (1, 0)], (sorted(dp_session.reports),
                                                          dp_session.log[-3000:])
    assert "EngineCore_DP0" in dp_session.log and "EngineCore_DP1" in dp_session.log


def test_dp2_binds_each_ranks_worker_to_its_own_pool(dp_session: DpSession) -> None:
    allowed = dp_session.start_affinity
    half = len(allowed) // 2
    assert dp_session.affinity["worker_dp0"] == allowed[:half]
    assert dp_session.affinity["worker_dp1"] == allowed[half:]
    assert [dp_session.reports[(dp, 0)]["host_rank"] for dp in (0, 1)] == [0, 1]


def test_dp2_api_server_and_engine_cores_keep_their_affinity(dp_session: DpSession) -> None:
    for name in ("api_server", "engine_core_dp0", "engine_core_dp1"):
        assert dp_session.affinity[name] == dp_session.start_affinity, name


def test_dp2_server_stops_cleanly(dp_session: DpSession) -> None:
    assert dp_session.returncode == 0, dp_session.log[-3000:]
