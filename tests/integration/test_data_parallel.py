"""`vllm-ascend serve --data-parallel-size 2`: two engine cores (and vLLM's DP coordinator)
answer HTTP requests.

On the host-CPU platform each DP rank's worker is bound to its own pool, the API server and the
engine cores keep their affinity. On the NPU runtime (two emulated NPUs, a fake npu-smi
replaying a host where NPU 0 is affine to CPU 0 and NPU 1 to CPU 1) each DP rank's worker
drives the NPU vLLM assigns its engine (npu:0, npu:1), plans its CPU pool from that NPU,
decodes in graphs, and both ranks give transformers' greedy tokens.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from vllm_ascend.worker_duties.rank_report import REPORT_DIR_ENV, read_rank_reports
from vllm_ascend_testing.serve_process import VllmServer

from tests.integration.proc_status import cpus_allowed, parent_pid
from tests.integration.test_hf_reference import hf_greedy

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
    env = make_env(device="cpu", shared_inductor=True, **{REPORT_DIR_ENV: str(reports_dir)})
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


# --- the NPU runtime ---------------------------------------------------------------------------

FAKE_NPU = Path(__file__).resolve().parent / "fake_npu"
TWO_NPU_HOST = FAKE_NPU / "hosts" / "two-npu-two-cpu"  # NPU 0 affine to CPU 0, NPU 1 to CPU 1
NPU_SERVED_NAME = "tiny-qwen3-npu-dp"
GREEDY_PROMPT = "The capital of France is"
GREEDY_TOKENS = 6
# The default graph mode (compiled, FULL_AND_PIECEWISE) at two capture sizes. In float32 (for
# transformers' exact tokens) the attention kernel has no FULL graph, so the pieces between
# attention calls are the graphs captured.
NPU_GRAPHS = {"cudagraph_capture_sizes": [1, 2]}


@dataclass
class NpuDpSession:
    by_rank: dict[int, httpx.Response]  # the greedy prompt sent to each DP rank by header
    finished: dict[str, float]  # /metrics: requests finished per engine
    reports: dict[tuple[int, int], dict[str, Any]]
    log: str
    returncode: int


def _finished_per_engine(metrics: str) -> dict[str, float]:
    """`vllm:request_success_total` summed per `engine` label (vLLM labels each DP engine)."""
    finished: dict[str, float] = {}
    for line in metrics.splitlines():
        match = re.match(r'vllm:request_success_total\{(.*)\} (\S+)$', line)
        engine = re.search(r'engine="(\d+)"', match.group(1)) if match else None
        if match and engine:
            finished[engine.group(1)] = finished.get(engine.group(1), 0.0) + float(match.group(2))
    return finished


@pytest.fixture(scope="module")
def npu_dp_session(tiny_models, make_env: Callable[..., dict[str, str]],
                   tmp_path_factory: pytest.TempPathFactory, ascend_log_dir: str
                   ) -> NpuDpSession:
    reports_dir = tmp_path_factory.mktemp("npu_dp_reports")
    path = f"{FAKE_NPU / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    env = make_env(device="npu", VLLM_ASCEND_EMULATED_NPUS="2", PATH=path,
                   FAKE_NPU_SMI_HOST=str(TWO_NPU_HOST), **{REPORT_DIR_ENV: str(reports_dir)})
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")
    env.pop("VLLM_ASCEND_EMULATED_HBM_GIB", None)
    env.pop("ASCEND_RT_VISIBLE_DEVICES", None)
    args = [
        "--served-model-name", NPU_SERVED_NAME, "--dtype", "float32", "--max-model-len", "512",
        "--max-num-seqs", "2", "--kv-cache-memory-bytes", str(64 * 1024 * 1024),
        "--data-parallel-size", "2", "--api-server-count", "1",
        "--compilation-config", json.dumps(NPU_GRAPHS),
        "--additional-config", json.dumps({"ascend_log_path": ascend_log_dir}),
    ]
    log_path = tmp_path_factory.mktemp("npu_dp_serve") / "serve.log"
    server = VllmServer(tiny_models.path("qwen3"), args, env, log_path)
    try:
        server.wait_healthy(timeout=900)
        with httpx.Client(base_url=server.base_url, timeout=120) as client:
            body = {"model": NPU_SERVED_NAME, "prompt": GREEDY_PROMPT,
                    "max_tokens": GREEDY_TOKENS, "temperature": 0, "ignore_eos": True,
                    "return_token_ids": True}
            by_rank = {rank: client.post("/v1/completions", json=body,
                                         headers={"X-data-parallel-rank": str(rank)})
                       for rank in (0, 1)}
            finished = _finished_per_engine(client.get("/metrics").text)
        reports = read_rank_reports(reports_dir)
    finally:
        code = server.stop(timeout=60)
    return NpuDpSession(by_rank, finished, reports, server.log(), code)


def test_npu_dp2_each_rank_answers_with_transformers_greedy_tokens(
        npu_dp_session: NpuDpSession, tiny_models) -> None:
    """The same greedy prompt sent to DP rank 0 and to DP rank 1 (vLLM's
    `X-data-parallel-rank` header): each engine finished one request and both give
    transformers' float32 greedy tokens."""
    (expected,) = hf_greedy(tiny_models.path("qwen3"), [GREEDY_PROMPT], GREEDY_TOKENS)
    for rank, response in npu_dp_session.by_rank.items():
        assert response.status_code == 200, (rank, response.text)
        assert response.json()["choices"][0]["token_ids"] == expected, rank
    assert npu_dp_session.finished == {"0": 1.0, "1": 1.0}, npu_dp_session.finished


def test_npu_dp2_each_rank_drives_its_own_emulated_npu(npu_dp_session: NpuDpSession) -> None:
    """vLLM assigns DP rank d's engine NPU d (TP=1); its worker runs on npu:d, is host rank d
    and captured its graphs there (piecewise: 3 pieces x 2 sizes)."""
    reports = npu_dp_session.reports
    assert sorted(reports) == [(0, 0), (1, 0)], (sorted(reports), npu_dp_session.log[-3000:])
    for dp in (0, 1):
        report = reports[(dp, 0)]
        assert (report["device"], report["npu"], report["host_rank"]) == (f"npu:{dp}", dp, dp)
        assert report["captures"]["count"] >= 2, report["captures"]
    assert reports[(0, 0)]["pid"] != reports[(1, 0)]["pid"]


def test_npu_dp2_each_rank_plans_the_cpu_pool_of_its_npu(npu_dp_session: NpuDpSession) -> None:
    """Each rank's pool is its own NPU's (the recorded host: NPU d affine to CPU d), disjoint
    from the other's. Bound when the host has the SoC's minimum CPUs per NPU; on a smaller
    host (2 CPUs here) the binding is skipped with the reason and the worker keeps its
    affinity."""
    reports = npu_dp_session.reports
    pools = [set(reports[(dp, 0)]["planned_pool"]) for dp in (0, 1)]
    assert 0 in pools[0] and 1 in pools[1] and not pools[0] & pools[1], pools
    for dp in (0, 1):
        report = reports[(dp, 0)]
        if report["bound_cpus"]:
            assert set(report["cpus_allowed"]) == set(report["bound_cpus"]) <= pools[dp]
        else:
            assert any(f"NPU {dp} needs at least" in line for line in report["binding"]), report
            assert report["cpus_allowed"] == sorted(os.sched_getaffinity(0))


def test_npu_dp2_server_stops_cleanly(npu_dp_session: NpuDpSession) -> None:
    assert npu_dp_session.returncode == 0, npu_dp_session.log[-3000:]
    assert "Traceback" not in npu_dp_session.log, npu_dp_session.log[-3000:]
