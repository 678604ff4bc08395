"""The ``ascend-config`` command."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ascend_config.cli import main


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from ascend_config.envs import REGISTRY

    for var in REGISTRY:
        monkeypatch.delenv(var.name, raising=False)


def test_check_inline_json_ok() -> None:
    code, out, err = run("check", '{"weight_nz_mode": 0}')
    assert code == 0 and err == ""
    assert json.loads(out)["weight_nz_mode"] == 0


def test_check_file_with_facts_and_env(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("eplb_config:\n  dynamic_eplb: true\n")
    facts = tmp_path / "f.json"
    facts.write_text(json.dumps({"soc": "A3", "is_moe": True}))
    code, _, err = run("check", str(cfg), "--facts", str(facts))
    assert code == 2 and "eplb_config.dynamic_eplb" in err
    code, out, _ = run("check", str(cfg), "--facts", str(facts), "--env", "DYNAMIC_EPLB=true",
                       "--summary")
    assert code == 0 and json.loads(out)["eplb"] == "dynamic"


def test_check_lists_every_problem() -> None:
    code, out, err = run("check", '{"weight_nz_mode": 5, "rl_confg": {}, "mix_placement": 1}')
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert lines[0] == "3 problems in the Ascend configuration:" and len(lines) == 4


def test_check_prints_warnings() -> None:
    code, _, err = run("check", '{"recompute_scheduler_enable": false}')
    assert code == 0 and err.startswith("warning: top-level 'recompute_scheduler_enable'")


@pytest.mark.parametrize("args", [("check", "{bad"), ("check", "/nonexistent.json"),
                                  ("check", "{}", "--env", "NOEQUALS"),
                                  ("check", "{}", "--facts", "/nonexistent.json")])
def test_check_bad_input_exit_2(args: tuple[str, ...]) -> None:
    code, _, err = run(*args)
    assert code == 2 and err.startswith("error: ")


def test_schema_is_json_schema() -> None:
    code, out, _ = run("schema")
    schema = json.loads(out)
    assert code == 0 and schema["type"] == "object" and schema["additionalProperties"] is False
    assert "cpu_binding_config" in schema["properties"]
    assert schema["x-retired-keys"] == {
        "enable_sleep_mode_extra_cleanup": "rl_config.sleep_mode_extra_cleanup"}


def test_explain_leaf_with_env_fallback() -> None:
    code, out, _ = run("explain", "weight_nz_mode")
    assert code == 0
    assert "default: 1" in out and "allowed: 0, 1 or 2" in out and "VLLM_ASCEND_ENABLE_NZ" in out


def test_explain_nested_and_section() -> None:
    code, out, _ = run("explain", "scheduler_config.dyntra_lb_config.end_step")
    assert code == 0 and "allowed: -1 or an integer > start_step" in out
    code, out, _ = run("explain", "cpu_binding_config")
    assert code == 0 and "min_cpus_per_npu = null" in out and "bind_irq = false" in out


def test_explain_env_var_and_unknown() -> None:
    code, out, _ = run("explain", "VLLM_ASCEND_DEVICE")
    assert code == 0 and "auto | npu | cpu" in out
    code, _, err = run("explain", "eplb_config.dynamic_epl")
    assert code == 2 and "did you mean 'dynamic_eplb'?" in err


def test_env_lists_values_and_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_ASCEND_ENABLE_NZ", "2")
    code, out, _ = run("env")
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("VLLM_ASCEND_ENABLE_NZ "))
    assert " 2 " in line and "[environment]" in line
    assert "[default]" in next(x for x in out.splitlines() if x.startswith("VLLM_ASCEND_DEVICE"))
    monkeypatch.setenv("VLLM_ASCEND_DEVICE", "gpu")
    code, out, _ = run("env")
    assert code == 2 and "INVALID 'gpu'" in out


def test_stdin_errors_name_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"{bad")))
    code, out, err = run("check", "-")
    assert (code, out) == (2, "")
    assert err.startswith("error: stdin is not valid JSON: ")


@pytest.mark.parametrize(("extra", "too_long"), [(-1, False), (0, False), (1, True)])
def test_inline_json_length_limit(extra: int, too_long: bool) -> None:
    from ascend_config.limits import MAX_CONFIG_BYTES

    # '{"weight_nz_mode": 0}' padded with spaces to the limit (+ extra) characters.
    core = '{"weight_nz_mode": 0}'
    text = core + " " * (MAX_CONFIG_BYTES + extra - len(core))
    assert len(text) == MAX_CONFIG_BYTES + extra
    code, out, err = run("check", text)
    if too_long:
        assert (code, out) == (2, "")
        assert err == (f"error: the JSON text is longer than the limit of {MAX_CONFIG_BYTES:,} "
                       "bytes\n")
    else:
        assert code == 0 and json.loads(out)["weight_nz_mode"] == 0


def test_missing_command_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert capsys.readouterr().err.rstrip().endswith(
        "error: the following arguments are required: command")


def _cli(*argv: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    code = "import sys; from ascend_config.cli import main; sys.exit(main(sys.argv[1:]))"
    kwargs.setdefault("stdout", subprocess.PIPE)
    return subprocess.run([sys.executable, "-c", code, *argv], text=True,
                          stderr=subprocess.PIPE, timeout=60, **kwargs)  # type: ignore[call-overload]


def test_closed_pipe_ends_quietly_with_exit_1() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (e.g. `head -c1`) is gone before the first write
    proc = _cli("schema", stdout=write_end)
    os.close(write_end)
    assert proc.returncode == 1
    assert proc.stderr == ""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_disk_is_one_error_line_with_exit_1() -> None:
    with open("/dev/full", "w") as full:
        proc = _cli("schema", stdout=full)
    assert proc.returncode == 1
    assert proc.stderr == "error: cannot write the output: No space left on device\n"


def test_ascii_terminal_gets_escapes_not_a_traceback() -> None:
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    proc = _cli("check", '{"ascend_log_path": "/tmp/\u00e4"}', env=env)
    assert proc.returncode == 0, proc.stderr
    assert '"ascend_log_path": "/tmp/\\xe4"' in proc.stdout
    proc = _cli("explain", "\u00e4", env=env)
    assert proc.returncode == 2
    assert proc.stderr == "error: unknown key '\\xe4'\n"
