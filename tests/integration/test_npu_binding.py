"""The NPU binding path in real processes on a simulated Ascend host.

A fake `npu-smi` on PATH replays a recorded host folder (NPU 0 affine to CPU 0, NPU 1 to CPU
1). An "engine" process runs the plugin's per-process setup (what every vLLM process runs,
with no rank), then spawns two worker processes that call the binding hook an NPU worker calls
once its local rank is known; each worker's SoC comes from its (fake, schema-bound) device,
npu-smi's chip names being the cross-check. Affinities are read back from /proc by the engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

FAKE_NPU = Path(__file__).resolve().parent / "fake_npu"
HOST = FAKE_NPU / "hosts" / "two-npu-two-cpu"
ROOT = Path(__file__).resolve().parents[2]  # the repository



def _run(make_env: Callable[..., dict[str, str]], logs: Path, soc_id: int) -> dict:
    if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        pytest.fail("the recorded host maps NPUs to CPUs 0 and 1; this process may not use both")
    path = f"{FAKE_NPU / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    env = make_env(device="npu", PATH=path, FAKE_NPU_SMI_HOST=str(HOST),
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(FAKE_NPU / "npu_engine.py"), str(logs),
                           str(soc_id)], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def npu_binding_run(make_env: Callable[..., dict[str, str]],
                    tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Workers on an A2 device (id 223, an Ascend910B3; npu-smi shows Ascend 910B4: agrees)."""
    return _run(make_env, tmp_path_factory.mktemp("npu_binding_logs"), 223)


def test_fake_npu_smi_replays_the_recorded_host(run_python) -> None:
    path = f"{FAKE_NPU / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    code = ("import json, ascend_topology as t\n"
            "f = t.read_live_host()\n"
            "r = t.load_recorded_host(" + repr(str(HOST)) + ")\n"
            "print(json.dumps([f.to_dict()['affinity'], r.to_dict()['affinity'], f.soc]))")
    run = run_python(code, PATH=path, FAKE_NPU_SMI_HOST=str(HOST))
    assert run.returncode == 0, run.output[-3000:]
    live, recorded, soc = run.result
    assert live == recorded == {"0": "0", "1": "1"}
    assert soc == "A2"


def test_worker_rank_r_ends_on_npu_r_pool(npu_binding_run: dict) -> None:
    workers = npu_binding_run["workers"]
    assert [(w["soc"], w["plan_soc"]) for w in workers] == [("A2", "A2")] * 2
    assert not [line for w in workers for line in w["lines"] if "mismatch" in line]
    assert [w["proc_cpus"] for w in workers] == [[0], [1]], workers
    assert [w["cpus"] for w in workers] == [[0], [1]]
    for rank, w in enumerate(workers):
        assert any(f"-> main CPUs {rank}" in line for line in w["lines"]), w["lines"]


def test_engine_process_keeps_its_affinity(npu_binding_run: dict) -> None:
    before = npu_binding_run["engine_before"]
    assert npu_binding_run["engine_after_setup"] == before
    assert npu_binding_run["engine_end"] == before
    assert npu_binding_run["setup_binding"] == []  # the rank-less setup binds nothing


def test_the_device_soc_wins_over_npu_smi_with_one_warning(
        make_env: Callable[..., dict[str, str]], tmp_path: Path) -> None:
    """The device says Ascend950 (260) where npu-smi's chip names read as A2: each worker plans
    for A5 (its 950 pools) and says so once, naming both."""
    run = _run(make_env, tmp_path, 260)
    for rank, w in enumerate(run["workers"]):
        assert (w["soc"], w["plan_soc"]) == ("A5", "A5"), w
        [mismatch] = [line for line in w["lines"] if "mismatch" in line]
        assert "torch_npu reports A5 (SoC id 260, Ascend950)" in mismatch
        assert "npu-smi's chip names read as A2" in mismatch
        assert w["proc_cpus"] == [rank], w


@pytest.fixture(scope="module")
def npu_worker_run(make_env: Callable[..., dict[str, str]], tiny_models: Any,
                   tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One engine on one emulated NPU (an Ascend910B1: A2) with its worker in the test's
    child process, the fake npu-smi replaying the recorded host; its calls recorded."""
    reports = tmp_path_factory.mktemp("npu_rank_reports")
    path = f"{FAKE_NPU / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    env = make_env(device="npu", PATH=path, FAKE_NPU_SMI_HOST=str(HOST),
                   VLLM_ASCEND_EMULATED_NPUS="1", VLLM_ENABLE_V1_MULTIPROCESSING="0",
                   VLLM_ASCEND_RANK_REPORT_DIR=str(reports))
    proc = subprocess.run(
        [sys.executable, str(FAKE_NPU / "npu_worker_duties.py"), str(tiny_models.path("llama")),
         str(reports)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_the_npu_worker_binds_after_set_device_and_late_threads_after_load(
        npu_worker_run: dict) -> None:
    assert npu_worker_run["platform"] == "NPUPlatform"
    events = [e for e in npu_worker_run["events"] if e != "device_soc"]
    start = events.index("set_device")
    assert events[start:start + 6] == [
        "set_device", "bind_this_worker A2", "rank_report device", "load_model",
        "bind_late_threads", "rank_report warmed_up"], npu_worker_run["events"]
    assert events.count("bind_this_worker A2") == 1 and events.count("set_device") == 1
    # The SoC the binding uses is read from the device once it is set.
    raw = npu_worker_run["events"]
    assert "device_soc" in raw[raw.index("set_device"):raw.index("bind_this_worker A2")]
    assert npu_worker_run["tokens"] and len(npu_worker_run["tokens"]) == 2


def test_the_npu_engine_and_its_worker_resolve_the_config_once(npu_worker_run: dict) -> None:
    assert len(npu_worker_run["resolutions"]) == 1, npu_worker_run["resolutions"]


def test_the_npu_worker_writes_the_host_cpu_workers_rank_report(npu_worker_run: dict) -> None:
    [report] = npu_worker_run["reports"].values()
    assert set(report) == {
        "stage", "pid", "dp_rank", "rank", "local_rank", "host_rank", "tensor_parallel_size",
        "pipeline_parallel_size", "soc", "cpus_allowed", "bound_cpus", "binding", "fusion",
        "fusion_sites", "captures", "compiles", "pass_runs", "ready", "after_ready", "device",
        "npu", "planned_pool"}
    assert (report["stage"], report["rank"], report["local_rank"], report["dp_rank"]) == (
        "warmed_up", 0, 0, 0)
    assert report["soc"] == "A2" and report["ready"] is True
    # Planned for NPU 0 on the recorded host (NPU 0 near CPU 0): too few CPUs there to bind.
    assert report["binding"] == ["binding skipped: NPU 0 needs at least 5 CPUs near NUMA node 0 "
                                 "(5 per NPU); 1 are allowed there"]
    assert report["bound_cpus"] == [] and report["tensor_parallel_size"] == 1
