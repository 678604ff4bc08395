"""The warm-start log line, through real engine starts: the tiny Qwen3 on the host-CPU platform,
compiled, started twice in new worker processes on one ``VLLM_CACHE_ROOT``. The cold start
logs no warm-start line; the warm start logs exactly one, naming as many artifacts as vLLM's
own log says it loaded from the compile cache, and a directory inside that cache root."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.entrypoints.local_engine import llm_kwargs
from vllm_ascend_testing.worker_client import LLMWorker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

WARM_LINE = re.compile(r"warm start: loaded (\d+) compiled artifacts from (\S+) in ([0-9.]+) s")
# vLLM's own lines for what it loaded from its compile cache (vllm/compilation/decorators.py:
# one whole-model AOT artifact; backends.py: the graphs of one compile range).
VLLM_LOADED = re.compile(r"Directly load AOT compilation from path|Directly load the compiled "
                         r"graph\(s\) for compile range")


def _start(env: dict[str, str], model: Path, log: Path, log_dir: str) -> str:
    worker = LLMWorker(env, log)
    try:
        worker.request("load", name="warm", timeout=900,
                       kwargs=llm_kwargs(str(model), compile=True, log_dir=log_dir))
    finally:
        worker.close()
    return log.read_text(errors="replace")


def test_warm_start_logs_what_it_loaded_from_the_reused_cache(
    make_env: Callable[..., dict[str, str]], tiny_models: Any,
    tmp_path: Path, ascend_log_dir: str,
) -> None:
    env = make_env(device="cpu")  # a fresh cache root, reused by both starts
    cache_root = Path(env["VLLM_CACHE_ROOT"])
    model = tiny_models.path("qwen3")
    cold = _start(env, model, tmp_path / "cold.log", ascend_log_dir)
    assert not WARM_LINE.search(cold), cold[-3000:]
    assert not VLLM_LOADED.search(cold)
    warm = _start(env, model, tmp_path / "warm.log", ascend_log_dir)
    lines = WARM_LINE.findall(warm)
    assert len(lines) == 1, warm[-3000:]
    count, directory, seconds = lines[0]
    assert int(count) > 0 and VLLM_LOADED.search(warm)
    assert Path(directory).is_relative_to(cache_root) and Path(directory).is_dir()
    assert float(seconds) >= 0.0
