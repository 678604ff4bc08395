"""No compile after ready, through real engines on the host-CPU platform: the rank report counts
the compiles and pass-manager runs of start-up and every one after the engine is ready; prompts
of new lengths and requests with logprobs compile nothing (the worker warms up what vLLM's
sampler compiles on first use), while the first request asking the test logits processor
``CompileProbe`` for it compiles a function never called before, which is counted and logged
once. ``forbid_compile_after_ready`` refuses that compile: the function runs uncompiled, the
request is answered and the engine keeps serving.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.entrypoints.local_engine import llm_kwargs

# Prompts of very different lengths, so every step has a token count not seen before.
PROMPTS = ["Hello", "The capital of France is " * 6, "Once upon a time " * 20]
WARNING = "compile after the engine was ready"
PROBE = "vllm_ascend_testing.compile_probe:CompileProbe"


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
    kwargs["logits_processors"] = [PROBE]
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

    # Logprobs, alone and batched: the sampler's compiled helper was warmed up before ready.
    worker.request("generate", name="watched", prompts=PROMPTS[:1], max_tokens=4, logprobs=1)
    worker.request("generate", name="watched", prompts=PROMPTS, max_tokens=4, logprobs=1)
    assert _report(reports)["after_ready"]["compiles"] == 0

    # The probe's function is compiled on its first use, after ready; then reused (one
    # prompt each time: its logits have one shape).
    for prompts in (PROMPTS[:1], PROMPTS[:1]):
        worker.request("generate", name="watched", prompts=prompts, max_tokens=4,
                       extra_args={"compile_probe": 1})
    serving = _report(reports)
    assert serving["stage"] == "serving"
    after = serving["after_ready"]
    assert after["compiles"] == 1 and after["pass_runs"] == 0 and after["captures"] == 0
    assert len(after["causes"]) == 1
    assert after["causes"][0].endswith("a function compiled for the first time")
    warnings = _warnings(worker.log_path)
    assert len(warnings) == 1 and after["causes"][0] in warnings[0]
    assert serving["compiles"]["count"] == started["compiles"]["count"] + 1


def test_forbid_compile_after_ready_refuses_it_and_the_engine_keeps_serving(
        start_worker, tiny_models, ascend_log_dir: str, tmp_path: Path) -> None:
    reports = tmp_path / "strict_reports"
    worker = start_worker("forbid-compile-after-ready", device="cpu", shared_inductor=True,
                          VLLM_ASCEND_RANK_REPORT_DIR=str(reports))
    kwargs = llm_kwargs(str(tiny_models.path("qwen3")), compile=False, log_dir=ascend_log_dir)
    kwargs["additional_config"]["ascend_compilation_config"]["forbid_compile_after_ready"] = True
    kwargs["logits_processors"] = [PROBE]
    worker.request("load", name="strict", kwargs=kwargs, timeout=300)
    plain = worker.request("generate", name="strict", prompts=PROMPTS, max_tokens=4)
    assert all(len(out["token_ids"]) == 4 for out in plain["outputs"])
    # Logprobs compile nothing after ready (warmed up): answered, nothing refused.
    scored = worker.request("generate", name="strict", prompts=PROMPTS[:1], max_tokens=4,
                            logprobs=1)
    assert scored["outputs"][0]["token_ids"] == plain["outputs"][0]["token_ids"]
    assert all(lp is not None and lp <= 0 for lp in scored["outputs"][0]["logprobs"])
    assert _report(reports)["after_ready"]["compiles"] == 0
    # The probe's compile is refused: the same greedy answer (uncompiled), then again.
    for _ in range(2):
        probed = worker.request("generate", name="strict", prompts=PROMPTS, max_tokens=4,
                                extra_args={"compile_probe": 1})
        assert [o["token_ids"] for o in probed["outputs"]] == [
            o["token_ids"] for o in plain["outputs"]]
    after = _report(reports)["after_ready"]
    assert after["compiles"] == 1 and after["causes"][0].endswith(
        "a function compiled for the first time")
    refused = [line for line in _warnings(worker.log_path) if "refused" in line]
    assert len(refused) == 1
    assert "ascend_compilation_config.forbid_compile_after_ready is true" in refused[0]
    assert "Traceback" not in worker.log_tail(400)
