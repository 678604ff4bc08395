"""The helpers the end-to-end tests stand on: environment, worker protocol, dumps, CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from vllm_ascend.entrypoints.local_engine import engine_env
from vllm_ascend_testing.graph_dump import count_ops_in_dump
from vllm_ascend_testing.worker_client import LLMWorker, WorkerError

GRAPH = """
class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[s72, 512]"):
        # torch.ops.ascend.rotary_embedding is mentioned here but not called
        split_qkv_rmsnorm_rope_default = torch.ops.ascend.split_qkv_rmsnorm_rope.default(arg0_1)
        rms_norm = torch.ops.ascend.rms_norm.default(arg0_1, arg1_1, 1e-06)
        add_rms_norm = torch.ops.ascend.add_rms_norm.default(rms_norm, arg0_1, arg1_1, 1e-06)
"""


def test_engine_env_sets_what_vllm_needs_and_drops_what_slows_it() -> None:
    base = {"PYTHONDONTWRITEBYTECODE": "1", "VLLM_CPU_KVCACHE_SPACE": "40", "KEEP": "me"}
    env = engine_env(device="auto", cache_root="/tmp/c", plugins="none", base=base)
    assert env["VLLM_ASCEND_DEVICE"] == "auto"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_CACHE_ROOT"] == "/tmp/c"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/c/inductor"
    assert env["VLLM_PLUGINS"] == "none"
    assert env["KEEP"] == "me"
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert "VLLM_CPU_KVCACHE_SPACE" not in env
    assert base["PYTHONDONTWRITEBYTECODE"] == "1"  # the caller's mapping is untouched


def test_engine_env_without_cache_root_keeps_the_callers_cache_dirs() -> None:
    base = {"VLLM_CACHE_ROOT": "/v", "TORCHINDUCTOR_CACHE_DIR": "/i"}
    env = engine_env(base=base)
    assert (env["VLLM_CACHE_ROOT"], env["TORCHINDUCTOR_CACHE_DIR"]) == ("/v", "/i")
    assert "TORCHINDUCTOR_CACHE_DIR" not in engine_env(base={})


def test_engine_env_rejects_unknown_device() -> None:
    with pytest.raises(ValueError, match="device='gpu' is not allowed; allowed: auto, npu, cpu"):
        engine_env(device="gpu")


def test_count_ops_in_dump_counts_calls_not_mentions(tmp_path: Path) -> None:
    graph_dir = tmp_path / "run" / "torchinductor" / "model__0_inference_0.0"
    graph_dir.mkdir(parents=True)
    (graph_dir / "fx_graph_transformed.py").write_text(GRAPH)
    (tmp_path / "run" / "fx_graph_readable.py").write_text(GRAPH)  # pre-pass graph: ignored
    ops = ("ascend.split_qkv_rmsnorm_rope", "ascend.rotary_embedding", "ascend.rms_norm")
    assert count_ops_in_dump(tmp_path, ops) == {
        "ascend.split_qkv_rmsnorm_rope": 1,
        "ascend.rotary_embedding": 0,
        "ascend.rms_norm": 1,
    }


def test_count_ops_in_an_empty_dump_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no fx_graph_transformed\.py under"):
        count_ops_in_dump(tmp_path, ("ascend.rms_norm",))


def test_worker_reports_failed_requests_and_exits_on_close(tmp_path: Path) -> None:
    with LLMWorker(engine_env(device="auto"), tmp_path / "worker.log") as worker:
        with pytest.raises(WorkerError, match="unknown op 'nope'"):
            worker.request("nope", timeout=60)
        with pytest.raises(WorkerError, match="KeyError: 'missing'"):
            worker.request("generate", name="missing", prompts=["x"], timeout=60)
    assert worker.proc.returncode == 0


def test_python_m_vllm_ascend_offers_the_demo() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_ascend", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    for option in ("--model", "--no-fusion", "--prompt", "--max-tokens", "--json"):
        assert option in proc.stdout
