"""Seed capabilities that are wired into a real engine start (host-CPU platform, one eager
engine in its own worker process and working directory):

- msprobe: with ``dump_config`` set, starting the engine writes the dump file;
- batch invariance: the worker applies the mode's environment overrides and deterministic
  algorithms, vllm-ascend's custom kernels are off, and every ``ascend::add_rms_norm`` the model
  runs goes through the add-then-rms_norm kernel (its call counter), not the fused one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.entrypoints.local_engine import llm_kwargs
from vllm_ascend_testing.worker_client import LLMWorker

DUMP = {"task": "statistics", "level": "L1", "dump_path": "./msprobe_out", "rank": [0]}
ENV = ("VLLM_BATCH_INVARIANT", "HCCL_DETERMINISTIC", "LCCL_DETERMINISTIC")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def engine(make_env: Callable[..., dict[str, str]], tiny_models: Any,
           tmp_path_factory: pytest.TempPathFactory, ascend_log_dir: str) -> Iterator[Any]:
    cwd = tmp_path_factory.mktemp("engine_cwd")
    worker = LLMWorker(make_env(device="cpu", shared_inductor=True), cwd / "worker.log", cwd=cwd)
    kwargs = llm_kwargs(str(tiny_models.path("qwen3")), compile=False, batch_invariant=True,
                        log_dir=ascend_log_dir)
    kwargs["additional_config"]["dump_config"] = DUMP
    try:
        worker.request("load", name="seed", kwargs=kwargs, timeout=900)
        yield worker, cwd
    finally:
        worker.close()


def test_engine_start_writes_the_msprobe_dump_file(engine: Any) -> None:
    _, cwd = engine
    written = Path(cwd) / ".vllm_ascend" / "msprobe" / "msprobe_dump_config.json"
    assert json.loads(written.read_text(encoding="utf-8")) == DUMP


def test_batch_invariant_worker_state_and_add_rms_norm_route(engine: Any) -> None:
    worker, _ = engine
    state = worker.request("process_state", env_names=list(ENV))
    assert state["env"] == {"VLLM_BATCH_INVARIANT": "1", "HCCL_DETERMINISTIC": "strict",
                            "LCCL_DETERMINISTIC": "1"}
    assert state["deterministic"] is True and state["custom_kernels"] is False
    worker.request("call_counts", reset=True)
    worker.request("generate", name="seed", prompts=["Hello, my name is"], max_tokens=4,
                   timeout=600)
    counts = worker.request("call_counts", reset=True)
    assert counts["enabled"]
    # Layer 0's input norm has no residual; every later norm (post-attention norms, layer 1's
    # input norm, the final norm: 4 per step) adds its residual: 4 steps x 4 at least.
    assert counts["counts"].get("add_rms_norm", 0) >= 16, counts
