"""The NPU binding path in real processes on a simulated Ascend host.

A fake `npu-smi` on PATH replays a recorded host folder (NPU 0 affine to CPU 0, NPU 1 to CPU
1). An "engine" process runs the plugin's per-process setup (what every vLLM process runs,
with no rank), then spawns two worker processes that call the binding hook an NPU worker calls
once its local rank is known. Affinities are read back from /proc by the engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

FAKE_NPU = Path(__file__).resolve().parent / "fake_npu"
HOST = FAKE_NPU / "hosts" / "two-npu-two-cpu"



@pytest.fixture(scope="module")
def npu_binding_run(make_env: Callable[..., dict[str, str]],
                    tmp_path_factory: pytest.TempPathFactory) -> dict:
    if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        pytest.fail("the recorded host maps NPUs to CPUs 0 and 1; this process may not use both")
    logs = tmp_path_factory.mktemp("npu_binding_logs")
    path = f"{FAKE_NPU / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    env = make_env(device="npu", PATH=path, FAKE_NPU_SMI_HOST=str(HOST))
    proc = subprocess.run([sys.executable, str(FAKE_NPU / "npu_engine.py"), str(logs)], env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


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
    assert [w["proc_cpus"] for w in workers] == [[0], [1]], workers
    assert [w["cpus"] for w in workers] == [[0], [1]]
    for rank, w in enumerate(workers):
        assert any(f"-> main CPUs {rank}" in line for line in w["lines"]), w["lines"]


def test_engine_process_keeps_its_affinity(npu_binding_run: dict) -> None:
    before = npu_binding_run["engine_before"]
    assert npu_binding_run["engine_after_setup"] == before
    assert npu_binding_run["engine_end"] == before
    assert npu_binding_run["setup_binding"] == []  # the rank-less setup binds nothing
