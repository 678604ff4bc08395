"""No compile after ready, through real engines on the host-CPU platform: the rank report counts
the compiles and pass-manager runs of start-up and every one after the engine is ready; prompts
of new lengths compile nothing, while the first request with logprobs makes vLLM's sampler
compile its ``batched_count_greater_than`` (a ``torch.compile`` function first called then),
which is counted and logged once. ``forbid_compile_after_ready`` makes that compile an error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.entrypoints.local_engine import llm_kwargs
from vllm_ascend_testing.worker_client import WorkerError

# Prompts of very different lengths, so every step has a token count not seen before.
PROMPTS = ["Hello", "The capital of France is " * 6, "Once upon a time " * 20]
WARNING = "compile after the engine was ready"


def _report(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "dp0-rank0.json").read_text())
    return data


def _warnings(log: Path) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if WARNING in line]


@pytest.fixture(scope="module")
def compiled_engine(start_worker, tiny_models, tmp_path_factory, ascend_log_dir: str) -> Any:
    reports = tmp_path_factory.mktemp("ready_reports")
    worker = start_worker("compile-after-ready", device="cpu",
                          VLLM_ASCEND_RANK_REPORT_DIR=str(reports))
    kwargs = llm_kwargs(str(tiny_models.path("qwen3")), log_dir=ascend_log_dir)
    worker.request("load", name="watched", kwargs=kwargs, timeout=600)
    return worker, reports


def test_compiles_after_ready_are_counted_and_logged_once_per_cause(compiled_engine) -> None:
    worker, reports = compiled_engine
    started = _report(reports)
    assert started["stage"] == "warmed_up" and started["ready"] is True
    # Start-up compiled the model (vLLM's AOT compile) and ran the passes for it.
    assert started["compiles"]["count"] >= 1 and started["compiles"]["seconds"] > 0
    assert started["pass_runs"] >= 1
    assert started["after_ready"] == {"compiles": 0, "pass_runs": 0, "captures": 0,
                                      "causes": []}

    # New prompt lengths, batched and alone: the compiled ranges cover them.
    worker.request("generate", name="watched", prompts=PROMPTS, max_tokens=6)
    for prompt in PROMPTS:
        worker.request("generate", name="watched", prompts=[prompt], max_tokens=3)
    assert _report(reports)["after_ready"]["compiles"] == 0
    assert _warnings(worker.log_path) == []

    # The first request with logprobs: the sampler's compiled function is compiled now.
    worker.request("generate", name="watched", prompts=PROMPTS[:1], max_tokens=4, logprobs=1)
    worker.request("generate", name="watched", prompts=PROMPTS, max_tokens=4, logprobs=1)
    serving = _report(reports)
    assert serving["stage"] == "serving"
    after = serving["after_ready"]
    assert after["compiles"] == 1 and after["pass_runs"] == 0 and after["captures"] == 0
    assert len(after["causes"]) == 1
    assert after["causes"][0].endswith("a function compiled for the first time")
    warnings = _warnings(worker.log_path)
    assert len(warnings) == 1 and after["causes"][0] in warnings[0]
    assert serving["compiles"]["count"] == started["compiles"]["count"] + 1


def test_forbid_compile_after_ready_makes_it_an_error(start_worker, tiny_models,
                                                     ascend_log_dir: str) -> None:
    worker = start_worker("forbid-compile-after-ready", device="cpu")
    kwargs = llm_kwargs(str(tiny_models.path("qwen3")), compile=False, log_dir=ascend_log_dir)
    kwargs["additional_config"]["ascend_compilation_config"]["forbid_compile_after_ready"] = True
    worker.request("load", name="strict", kwargs=kwargs, timeout=300)
    answer = worker.request("generate", name="strict", prompts=PROMPTS, max_tokens=4)
    assert all(len(out["token_ids"]) == 4 for out in answer["outputs"])  # no compile: no error
    with pytest.raises(WorkerError) as raised:
        worker.request("generate", name="strict", prompts=PROMPTS[:1], max_tokens=4,
                       logprobs=1)
    text = str(raised.value) + worker.log_tail(200)
    assert "CompileAfterReadyError" in text
    assert ("compile after the engine was ready: Dynamo compile" in text
            and "ascend_compilation_config.forbid_compile_after_ready is true" in text)
