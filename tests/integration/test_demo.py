"""`vllm-ascend demo` end to end: the console script runs vLLM in-process and reports in JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from vllm_ascend.cli import main


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_json_reports_fusion_binding_and_generation(
    make_env: Callable[..., dict[str, str]],
) -> None:
    script = Path(sys.executable).with_name("vllm-ascend")
    assert script.exists(), "the vllm-ascend console script is not installed"
    proc = subprocess.run(
        [
            str(script),
            "demo",
            "--json",
            "--max-tokens",
            "8",
            "--prompt",
            "Hello, my name is",
            "--prompt",
            "The capital of France is",
        ],
        env=make_env(device="auto"),  # the demo sets up its own process (device cpu)
        capture_output=True,
        text=True,
        timeout=360,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # stdout is exactly one JSON object: vLLM's logs went to stderr.
    result = json.loads(proc.stdout)
    assert result["model"] == "qwen3"
    assert result["num_layers"] == 2
    assert result["platform"] == "vllm_ascend.platform.cpu.AscendCpuPlatform"
    # A fresh compile cache: the passes ran, one QK-norm+RoPE fusion per attention layer.
    assert result["fusion"]["qknorm_rope"] == 2
    assert result["ascend_config"]["soc"] == "cpu"
    assert [o["prompt"] for o in result["outputs"]] == [
        "Hello, my name is",
        "The capital of France is",
    ]
    assert all(len(o["token_ids"]) == 8 for o in result["outputs"])
    assert all(isinstance(o["text"], str) and o["text"] for o in result["outputs"])
    assert result["tokens_per_s"] > 0
    assert result["cpu_binding"]["example_host"]["plan"]["npus"]
    here = result["cpu_binding"]["this_host"]
    assert here["plan"] is not None or "npu-smi" in here["reason"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--model", "gpt2"], "invalid choice: 'gpt2'"),
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
