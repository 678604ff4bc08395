"""The ``ascend-config`` command."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ascend_config import (
    json_schema,
)
from ascend_config.cli import main
from ascend_config.inputs import InputError
from ascend_config.limits import (
    MAX_CONFIG_BYTES,
    MAX_DEPTH,
    MAX_YAML_ALIASES,
)
from ascend_config.schema.introspect import all_paths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .fuzz_inputs import CONFIG, SCALE, TEXT


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
    assert schema["x-retired-keys"]["enable_sleep_mode_extra_cleanup"] == {
        "retired_in": "v0.26.0rc1", "replacement": "replaced by rl_config.sleep_mode_extra_cleanup"}
    assert set(schema["x-retired-keys"]) == {
        "enable_sleep_mode_extra_cleanup", "torchair_graph_config", "ascend_scheduler_config",
        "expert_tensor_parallel_size"}


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
def test_full_disk_names_the_file_with_its_own_exit_status() -> None:
    with open("/dev/full", "w") as full:
        proc = _cli("schema", stdout=full)
    assert proc.returncode == 74
    assert proc.stderr == "error: no space left on device writing /dev/full\n"


def _close_stdout() -> None:
    os.close(1)


@pytest.mark.parametrize("argv", [["schema"], ["env"], ["explain", "ascend_log_path"],
                                  ["check", "{}"]])
def test_closed_stdout_is_one_error_line_with_exit_1(argv: list[str]) -> None:
    proc = _cli(*argv, stdout=None, preexec_fn=_close_stdout)
    assert proc.returncode == 1
    assert proc.stderr == "error: cannot write the output: stdout is closed\n"


def test_closed_stdout_and_stderr_exit_1_without_a_word() -> None:
    code = "import sys; from ascend_config.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, "schema"], timeout=60, check=False,
                          stdout=None, stderr=None, preexec_fn=lambda: (os.close(1), os.close(2)))
    assert proc.returncode == 1


def test_ascii_terminal_gets_escapes_not_a_traceback() -> None:
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    proc = _cli("check", '{"ascend_log_path": "/tmp/\u00e4"}', env=env)
    assert proc.returncode == 0, proc.stderr
    assert '"ascend_log_path": "/tmp/\\xe4"' in proc.stdout
    proc = _cli("explain", "\u00e4", env=env)
    assert proc.returncode == 2
    assert proc.stderr == "error: unknown key '\\xe4'\n"


HANG_GUARD_S = 60


def cli(*argv: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    """The CLI in a fresh interpreter (a hang becomes TimeoutExpired, a test failure)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "DYNAMIC_EPLB"))}
    proc = subprocess.run([sys.executable, "-m", "ascend_config.cli", *argv], input=stdin,
                          capture_output=True, timeout=HANG_GUARD_S, env=env)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode(errors="replace")


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


BOMB = "\n".join(
    [f'a0: &a0 [{", ".join(["lol"] * 9)}]']
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    + ["dump_config: {x: *a8}"]) + "\n"


def test_non_utf8_config_file(tmp_path: Path) -> None:
    bad = tmp_path / "c.json"
    bad.write_bytes(b'{"ascend_log_path": "\xff"}')
    assert len(b"{\"ascend_log_path\": \"") == 21
    code, _, err = run("check", str(bad))
    assert code == 2
    assert one_error_line(err) == (f"error: config file {str(bad)!r} is not UTF-8 text "
                                   "(invalid byte 0xff at offset 21)")


def test_deep_json_text_stdin_and_facts(tmp_path: Path) -> None:
    deep = nested(100_000)
    code, _, err = run("check", deep)
    assert code == 2
    assert one_error_line(err) == f"error: the JSON text is nested deeper than {MAX_DEPTH} levels"
    facts = tmp_path / "facts.json"
    facts.write_text('{"kv_connector_extra_config": ' + deep + "}")
    code, _, err = run("check", "{}", "--facts", str(facts))
    assert code == 2
    assert one_error_line(err) == (f"error: deployment facts file {str(facts)!r} is nested "
                                   f"deeper than {MAX_DEPTH} levels")


@pytest.mark.child_process
def test_deep_json_on_stdin() -> None:
    code, _, err = cli("check", "-", stdin=nested(100_000).encode())
    assert code == 2
    assert one_error_line(err) == f"error: stdin is nested deeper than {MAX_DEPTH} levels"


@pytest.mark.parametrize(("depth", "ok"), [(MAX_DEPTH, True), (MAX_DEPTH + 1, False)])
def test_json_text_depth_boundary(depth: int, ok: bool) -> None:
    # dump_config holds the rest: {"dump_config": {"a": {"a": ...}}} has `depth` levels
    text = '{"dump_config": ' + '{"a": ' * (depth - 1) + "1" + "}" * depth
    code, _, err = run("check", text)
    assert code == (0 if ok else 2), err


@pytest.mark.child_process
@pytest.mark.parametrize("where", ["config", "facts"])
def test_fifo_is_refused_not_read(tmp_path: Path, where: str) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    args = ("check", str(fifo)) if where == "config" else ("check", "{}", "--facts", str(fifo))
    code, _, err = cli(*args)
    assert code == 2
    kind = "config file" if where == "config" else "deployment facts file"
    assert one_error_line(err) == (f"error: {kind} {str(fifo)!r} is a named pipe (FIFO); "
                                   "give a regular file")


@pytest.mark.child_process
@pytest.mark.parametrize(("path", "kind"), [("/dev/null", "a character device"),
                                            ("/dev/zero", "a character device"),
                                            ("/", "a directory")])
def test_special_files_are_refused(path: str, kind: str) -> None:
    code, _, err = cli("check", path)
    assert code == 2
    assert one_error_line(err) == f"error: config file {path!r} is {kind}; give a regular file"


def test_socket_is_refused(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "s.json"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        code, _, err = run("check", "{}", "--facts", str(path))
    assert code == 2 and err.endswith("is a socket; give a regular file\n")


@pytest.mark.parametrize("extra", [0, 1])
def test_config_file_size_limit(tmp_path: Path, extra: int) -> None:
    path = tmp_path / "c.json"
    body = '{"dump_config": {"pad": "'
    path.write_text(body + "x" * (MAX_CONFIG_BYTES - len(body) - 3 + extra) + '"}}')
    assert path.stat().st_size == MAX_CONFIG_BYTES + extra
    code, _, err = run("check", str(path))
    if extra:
        assert code == 2
        assert one_error_line(err) == (f"error: config file {str(path)!r} is larger than the "
                                       f"limit of {MAX_CONFIG_BYTES:,} bytes")
    else:
        assert code == 0, err


def test_inline_text_size_limit() -> None:
    text = '{"dump_config": {"pad": "' + "x" * MAX_CONFIG_BYTES + '"}}'
    code, _, err = run("check", text)
    assert code == 2
    assert one_error_line(err) == (f"error: the JSON text is longer than the limit of "
                                   f"{MAX_CONFIG_BYTES:,} bytes")


@pytest.mark.child_process
def test_stdin_yaml_is_parsed_as_yaml() -> None:
    code, out, err = cli("check", "-", stdin=b"weight_nz_mode: 0\n")
    assert code == 0, err
    assert json.loads(out)["weight_nz_mode"] == 0


@pytest.mark.child_process
def test_yaml_alias_bomb_under_dump_config(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert len(BOMB.splitlines()) == 10 and BOMB.count("*") == 73
    code, _, err = cli("check", str(path))
    assert code == 2, err
    assert err.splitlines() == [
        "1 problem in the Ascend configuration:",
        err.splitlines()[1]]
    assert err.splitlines()[1].startswith("<additional_config>: more than 100000 keys and list "
                                          "items (given ")


@pytest.mark.parametrize(("aliases", "ok"), [(MAX_YAML_ALIASES, True),
                                             (MAX_YAML_ALIASES + 1, False)])
def test_yaml_alias_count_limit(tmp_path: Path, aliases: int, ok: bool) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("dump_config:\n  a: &v 1\n  l: [" + ", ".join(["*v"] * aliases) + "]\n")
    code, out, err = run("check", str(path))
    if ok:
        assert code == 0 and json.loads(out)["dump_config"]["l"] == [1] * aliases
    else:
        assert code == 2
        assert one_error_line(err).endswith(f"uses more than {MAX_YAML_ALIASES} YAML aliases")


def test_yaml_depth_limit(tmp_path: Path) -> None:
    path = tmp_path / "c.yml"
    path.write_text("dump_config: " + nested(200) + "\n")
    code, _, err = run("check", str(path))
    assert code == 2
    assert one_error_line(err) == (f"error: config file {str(path)!r} is nested deeper than "
                                   f"{MAX_DEPTH} levels")


def test_lone_surrogate_from_json_text_is_refused() -> None:
    code, out, err = run("check", '{"ascend_log_path": "\\udcff"}')
    assert (code, out) == (2, "")
    assert err.splitlines()[1] == (
        "ascend_log_path: must be a usable path: contains an unpaired surrogate (not valid "
        "Unicode text) (given '\\udcff'; allowed: a path string)")


def test_facts_file_nan_and_absurd_sizes(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_text('{"tensor_parallel_size": 100000000000000000000000000000000, '
                    '"routed_scaling_factor": NaN}')
    code, _, err = run("check", "{}", "--facts", str(path))
    assert code == 2
    assert one_error_line(err) == (
        "error: tensor_parallel_size: got 100000000000000000000000000000000, expected an "
        "integer from 1 to 65536; routed_scaling_factor: got nan, expected a finite number "
        "from 0 to 1e+06")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Prepared inputs: good, broken, huge, special and missing files."""
    root = tmp_path_factory.mktemp("cli")
    made = {
        "ok.json": b'{"weight_nz_mode": 0}', "ok.yaml": b"weight_nz_mode: 2\n",
        "bad.json": b"\xff\xfe{", "deep.json": b"[" * 10_000, "nan.json": b'{"a": NaN}',
        "facts.json": b'{"soc": "A5", "routed_scaling_factor": NaN}',
        "bomb.yaml": ("a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\n"
                      + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n"
                                for p, c in zip("abcdefg", "bcdefgh", strict=True))
                      + "dump_config: {x: *h}\n").encode(),
    }
    for name, data in made.items():
        (root / name).write_bytes(data)
    with (root / "huge.json").open("wb") as fh:
        fh.truncate(MAX_CONFIG_BYTES + 1)
    os.mkfifo(root / "fifo.json")
    return [*(str(root / n) for n in made), str(root / "huge.json"), str(root / "fifo.json"),
            str(root), str(root / "missing.json"), "/dev/null", "/dev/zero"]


def _argv(files: list[str]) -> st.SearchStrategy[list[str]]:
    path = st.one_of(st.sampled_from(files), TEXT)
    source = st.one_of(path, st.builds(json.dumps, CONFIG), st.sampled_from(["{", "null", "[]"]))
    env = st.lists(st.one_of(st.builds(lambda k, v: f"{k}={v}", st.sampled_from(
        ["VLLM_ASCEND_ENABLE_NZ", "DYNAMIC_EPLB", "PYTORCH_NPU_ALLOC_CONF", ""]), TEXT), TEXT),
        max_size=2)
    check = st.builds(
        lambda s, f, e, summary: ["check", s, *f, *[x for v in e for x in ("--env", v)],
                                  *summary],
        source, st.one_of(st.just([]), st.builds(lambda p: ["--facts", p], path)), env,
        st.sampled_from([[], ["--summary"]]))
    explain = st.builds(lambda k: ["explain", k],
                        st.one_of(st.sampled_from(sorted(all_paths())), TEXT))
    noise = st.lists(st.one_of(TEXT, st.sampled_from(["check", "explain", "--facts", "--env",
                                                      "-h", "schema", "env"])), max_size=4)
    return st.one_of(check, explain, st.just(["schema"]), noise)


@settings(max_examples=100 // SCALE, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_cli_arguments(files: list[str], data: st.DataObject,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VLLM_ASCEND_ENABLE_NZ", "DYNAMIC_EPLB", "VLLM_ASCEND_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    argv = data.draw(_argv(files))
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv, out, err)
    except SystemExit as exc:  # argparse: usage error (2) or --help (0)
        assert exc.code in (0, 2)
        return
    assert code in (0, 2)
    if code == 2 and argv[:1] == ["check"]:
        lines = err.getvalue().splitlines()
        assert lines and ((lines[0].startswith("error: ") and len(lines) == 1)
                          or lines[0].endswith("in the Ascend configuration:"))


def test_cli_reads_stdin_yaml_and_json(monkeypatch: pytest.MonkeyPatch) -> None:
    for text, expected in ((b"weight_nz_mode: 2\n", 2), (b'{"weight_nz_mode": 0}', 0)):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text)))
        out, err = io.StringIO(), io.StringIO()
        assert main(["check", "-"], out, err) == 0, err.getvalue()
        assert json.loads(out.getvalue())["weight_nz_mode"] == expected
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\xff")))
    err = io.StringIO()
    assert main(["check", "-"], io.StringIO(), err) == 2
    assert err.getvalue() == "error: stdin is not UTF-8 text (invalid byte 0xff at offset 0)\n"


HELP_CHECK = """\
usage: ascend-config check [-h] [--facts FACTS] [--env NAME=VALUE] [--summary]
                           source

positional arguments:
  source            a JSON/YAML file, JSON text such as '{"a": 1}', or - for
                    stdin (JSON or YAML); at most 1,048,576 bytes

options:
  -h, --help        show this help message and exit
  --facts FACTS     JSON file of deployment facts (DeploymentFacts fields; at
                    most 33,554,432 bytes)
  --env NAME=VALUE  override an environment variable for this check
                    (repeatable)
  --summary         print the short summary only
"""


HELP_TOP = """\
usage: ascend-config [-h] {check,schema,explain,env} ...

``ascend-config``: check a config, print the JSON Schema, explain a key, list
env vars. Exit codes: 0 success, 1 the output could not be written (a closed
stdout or pipe), 2 invalid input (every problem listed on stderr), 74 no space
left on the device behind stdout.

positional arguments:
  {check,schema,explain,env}
    check               validate a config; print it resolved (exit 0) or every
                        problem (exit 2)
    schema              print the JSON Schema of additional_config
    explain             type, default, range, description of a key
    env                 every environment variable, its value and source

options:
  -h, --help            show this help message and exit
"""


HELP_EXPLAIN = """\
usage: ascend-config explain [-h] key

positional arguments:
  key         dotted key path or environment variable name

options:
  -h, --help  show this help message and exit
"""


def test_check_prints_indented_json_with_non_ascii_kept() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["check", '{"dump_config": {"说明": "保留"}}'], out, err) == 0
    text = out.getvalue()
    assert '\n  "dump_config": {\n    "说明": "保留"\n  },\n' in text
    assert json.loads(text)["dump_config"] == {"说明": "保留"}


@pytest.mark.parametrize(("argv", "text"), [
    (["--help"], HELP_TOP), (["check", "--help"], HELP_CHECK),
    (["explain", "--help"], HELP_EXPLAIN),
    (["schema", "--help"], "usage: ascend-config schema [-h]\n\noptions:\n"
                           "  -h, --help  show this help message and exit\n"),
    (["env", "--help"], "usage: ascend-config env [-h]\n\noptions:\n"
                        "  -h, --help  show this help message and exit\n")])
def test_help_text(argv: list[str], text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as info:
        main(argv, io.StringIO(), io.StringIO())
    assert info.value.code == 0 and out.getvalue() == text


def test_repeated_env_options_and_missing_command(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VLLM_ASCEND_ENABLE_NZ", "VLLM_BATCH_INVARIANT"):
        monkeypatch.delenv(name, raising=False)
    out = io.StringIO()
    assert main(["check", "{}", "--env", "VLLM_ASCEND_ENABLE_NZ=2", "--env",
                 "VLLM_BATCH_INVARIANT=1", "--summary"], out, io.StringIO()) == 0
    summary = json.loads(out.getvalue())
    assert (summary["weight_nz_mode"], summary["batch_invariant"]) == (0, True)
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit) as info:
        main([], io.StringIO(), io.StringIO())
    assert info.value.code == 2


@pytest.mark.parametrize(("source", "first_line"), [
    ("[1]", "1 problem in the Ascend configuration:"),
    (" null ", None), ('  {"weight_nz_mode": 0}', None),
    ("nonexistent.json", "error: cannot read config file 'nonexistent.json': No such file or "
                         "directory"),
])
def test_inline_json_or_file(source: str, first_line: str | None) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(["check", source], out, err)
    assert code == (0 if first_line is None else 2)
    if first_line:
        assert err.getvalue().splitlines()[0] == first_line


def test_stdin_parse_errors_name_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    for data, expected in ((b'{"a": }', "error: stdin is not valid JSON: Expecting value: "
                                        "line 1 column 7 (char 6)\n"),
                           (b"a: [1,\n", "error: stdin is not valid YAML: ")):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
        out, err = io.StringIO(), io.StringIO()
        assert main(["check", "-"], out, err) == 2
        assert err.getvalue().startswith(expected) and err.getvalue().count("\n") == 1


def test_inline_text_of_exactly_the_limit_is_read() -> None:
    from ascend_config.limits import MAX_CONFIG_BYTES

    head, tail = '{"dump_config": {"p": "', '"}}'
    text = head + "x" * (MAX_CONFIG_BYTES - len(head) - len(tail)) + tail
    assert len(text) == MAX_CONFIG_BYTES
    out = io.StringIO()
    assert main(["check", text, "--summary"], out, io.StringIO()) == 0


def test_missing_command_names_it() -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
        main([], io.StringIO(), io.StringIO())
    assert err.getvalue().splitlines()[-1] == (
        "ascend-config: error: the following arguments are required: command")


def test_explain_env_var_with_fallback() -> None:
    assert run("explain", "VLLM_ASCEND_ENABLE_NZ") == (0, (
        "VLLM_ASCEND_ENABLE_NZ (environment variable)\n"
        "  weight NZ mode: 0 off, 1 quantized weights only, 2 also BF16/FP16 (deprecated "
        "fallback)\n"
        "  default: 1\n"
        "  allowed: 0, 1, 2\n"
        "  fallback of: weight_nz_mode (deprecated; set the key instead)\n"), "")


def test_explain_env_var_without_fallback() -> None:
    assert run("explain", "DYNAMIC_EPLB") == (0, (
        "DYNAMIC_EPLB (environment variable)\n"
        "  dynamic EPLB on model runner v1 (true or 1 enables)\n"
        "  default: 'false'\n"
        "  allowed: any text\n"), "")


def test_explain_legacy_key() -> None:
    assert run("explain", "recompute_scheduler_enable") == (0, (
        "recompute_scheduler_enable (bool | null)\n"
        "  legacy spelling of scheduler_config.recompute_scheduler_enable\n"
        "  default: null\n"
        "  allowed: null or true or false\n"
        "  deprecated: use scheduler_config.recompute_scheduler_enable\n"), "")


def test_explain_key_with_env_fallback() -> None:
    code, out, _ = run("explain", "enable_mlapo")
    assert code == 0 and out == (
        "enable_mlapo (bool)\n"
        "  MLAPO for DeepSeek W8A8\n"
        "  default: true\n"
        "  allowed: true or false\n"
        "  env fallback: VLLM_ASCEND_ENABLE_MLAPO (deprecated; used only when the key is unset)\n")


def test_explain_nested_section_lists_only_its_own_keys() -> None:
    assert run("explain", "scheduler_config.short_request_first_config") == (0, (
        "scheduler_config.short_request_first_config (object)\n"
        "  short-request-first policy\n"
        "  keys:\n"
        "    enabled = false\n"
        "    threshold = 256\n"
        "    long_max_wait_ms = 0.0\n"), "")
    code, out, _ = run("explain", "scheduler_config")
    assert code == 0
    keys = out.split("  keys:\n")[1].splitlines()
    assert keys[-1] == '    dyntra_lb_config = {}' and "    threshold = 256" not in keys


@pytest.mark.parametrize(("key", "hint"), [
    ("scheduler_config.dyntra_lb_config.end_stp", "; did you mean 'end_step'?"),
    ("scheduler_config.dyntra_lb_confg.end_step", "; did you mean 'dyntra_lb_config'?"),
    ("cpu_binding_config.min_cpu", "; did you mean 'min_cpus_per_npu'?"),
    ("dynamic_eplb.x", "; did you mean 'eplb_config.dynamic_eplb'?"),
    ("zzzz", ""), ("eplb_config.dynamic_eplb.x", ""), ("", ""),
])
def test_explain_unknown_key(key: str, hint: str) -> None:
    assert run("explain", key) == (2, "", f"error: unknown key {key!r}{hint}\n")


def test_schema_output_is_indented_json_schema() -> None:
    code, out, _ = run("schema")
    assert code == 0 and out == json.dumps(json_schema(), indent=2) + "\n"
    schema = json_schema()
    assert schema["title"] == "vLLM Ascend additional_config"
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["enable_fused_mc2"]["env"] == "VLLM_ASCEND_ENABLE_FUSED_MC2"


def test_env_option_keeps_equals_signs_in_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTORCH_NPU_ALLOC_CONF", raising=False)
    code, out, _ = run("check", '{"rl_config": {"enabled": true}}', "--env",
                       "PYTORCH_NPU_ALLOC_CONF=a=1,expandable_segments:True")
    assert code == 0
    changes = json.loads(out)["env_changes"]
    assert ["PYTORCH_NPU_ALLOC_CONF", "a=1"] in changes


@pytest.mark.parametrize("pair", ["NOEQUALS", "=value"])
def test_env_option_needs_a_name(pair: str) -> None:
    assert run("check", "{}", "--env", pair) == (
        2, "", f"error: --env expects NAME=VALUE, got {pair!r}\n")


def test_stdin_json_is_json_not_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    # YAML would read NaN as the string "NaN"; JSON reads a number, which is refused.
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(
        b'  {"dump_config": {"x": NaN}}')))
    code, _, err = run("check", "-")
    assert code == 2 and "numbers must be finite" in err
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"null")))
    assert run("check", "-")[0] == 0
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"dump_config: {x: NaN}")))
    code, out, _ = run("check", "-")
    assert code == 0 and json.loads(out)["dump_config"] == {"x": "NaN"}


def test_stdin_must_be_a_byte_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("{}"))
    assert run("check", "-") == (2, "", "error: cannot read stdin: it is not a byte stream\n")


def test_stdin_read_errors_and_size(monkeypatch: pytest.MonkeyPatch) -> None:
    from ascend_config.inputs import read_stream

    class Broken(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            raise OSError(5, "Input/output error")

    with pytest.raises(InputError) as info:
        read_stream(io.BufferedReader(Broken()), 10, "stdin")
    assert str(info.value) == "cannot read stdin: Input/output error"
    with pytest.raises(InputError) as info:
        read_stream(io.BytesIO(b"x" * 11), 10, "stdin")
    assert str(info.value) == "stdin is larger than the limit of 10 bytes"
    assert read_stream(io.BytesIO(b"x" * 10), 10, "stdin") == "x" * 10


@pytest.mark.parametrize(("name", "text", "value"), [
    ("c.yml", "weight_nz_mode: 2\n", 2), ("c.yaml", "weight_nz_mode: 0\n", 0),
    ("c.json", '{"weight_nz_mode": 2}', 2), ("c.txt", '{"weight_nz_mode": 0}', 0)])
def test_config_file_format_follows_the_suffix(tmp_path: Path, name: str, text: str,
                                               value: int) -> None:
    path = tmp_path / name
    path.write_text(text)
    code, out, _ = run("check", str(path))
    assert code == 0 and json.loads(out)["weight_nz_mode"] == value


def test_invalid_json_file_message(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text("weight_nz_mode: 2")
    assert run("check", str(path)) == (2, "", (
        f"error: config file {str(path)!r} is not valid JSON: Expecting value: line 1 column 1 "
        "(char 0)\n"))


DUPLICATE_HINT = "give each key once (which value was meant is not for the reader to guess)"


@pytest.mark.parametrize(("name", "text", "where"), [
    ("dup.json", '{"ascend_log_path": "/tmp/a", "ascend_log_path": "/tmp/b"}', ""),
    ("dup.yaml", "ascend_log_path: /tmp/a\nascend_log_path: /tmp/b\n", " (line 2)"),
])
def test_check_refuses_a_key_given_twice_in_a_file(name: str, text: str, where: str,
                                                   tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_text(text)
    code, out, err = cli("check", str(path))
    assert code == 2 and out == ""
    assert one_error_line(err) == (f"error: config file {str(path)!r} gives the key "
                                   f"'ascend_log_path' twice{where}; {DUPLICATE_HINT}")


def test_check_refuses_a_nested_key_given_twice_on_stdin() -> None:
    stdin = b'{"ascend_compilation_config": {"fuse_muls_add": true, "fuse_muls_add": false}}'
    code, _, err = cli("check", "-", stdin=stdin)
    assert code == 2
    assert one_error_line(err) == f"error: stdin gives the key 'fuse_muls_add' twice; " \
                                  f"{DUPLICATE_HINT}"


def test_check_keeps_yaml_merge_keys_overriding(tmp_path: Path) -> None:
    path = tmp_path / "merge.yaml"
    path.write_text("ascend_compilation_config:\n  <<: {fuse_muls_add: true}\n"
                    "  fuse_muls_add: false\n")
    code, out, err = cli("check", str(path))
    assert code == 0, err
    assert json.loads(out)["ascend_compilation_config"]["fuse_muls_add"] is False


def test_env_option_giving_one_variable_two_values_is_refused() -> None:
    assert run("check", "{}", "--env", "VLLM_ASCEND_ENABLE_NZ=1", "--env",
               "VLLM_ASCEND_ENABLE_NZ=2") == (
        2, "", "error: --env gives VLLM_ASCEND_ENABLE_NZ twice ('1' and '2'); give each "
               "variable once\n")
    # The same value twice says one thing: accepted.
    assert run("check", "{}", "--env", "VLLM_ASCEND_ENABLE_NZ=1", "--env",
               "VLLM_ASCEND_ENABLE_NZ=1", "--summary")[0] == 0
