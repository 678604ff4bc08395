"""Hostile input: one clear error, exit 2, bounded time and memory (issue 14 findings).

Inputs that used to hang are run through the CLI in a child process with a timeout, so a
regression fails the test instead of blocking the suite.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ascend_config import AscendConfigError, DeploymentFacts, FactsError, resolve
from ascend_config.cli import main
from ascend_config.limits import (
    MAX_CONFIG_BYTES,
    MAX_DEPTH,
    MAX_FACTS_BYTES,
    MAX_REPORTED_PROBLEMS,
    MAX_YAML_ALIASES,
)

HANG_GUARD_S = 60


def cli(*argv: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    """The CLI in a fresh interpreter (a hang becomes TimeoutExpired, a test failure)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "DYNAMIC_EPLB"))}
    proc = subprocess.run([sys.executable, "-m", "ascend_config.cli", *argv], input=stdin,
                          capture_output=True, timeout=HANG_GUARD_S, env=env)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode(errors="replace")


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# --- unreadable or hostile files, text and stdin -----------------------------------------

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


@pytest.mark.parametrize(("make", "kind"), [
    ("fifo", "a named pipe (FIFO)"), ("dir", "a directory"), ("/dev/null", "a character device"),
    ("/dev/zero", "a character device")])
def test_special_files_refused_in_process(tmp_path: Path, make: str, kind: str) -> None:
    from ascend_config.inputs import InputError, read_text_file

    path = tmp_path / "x"
    if make == "fifo":
        os.mkfifo(path)
    elif make == "dir":
        path.mkdir()
    else:
        path = Path(make)
    with pytest.raises(InputError) as info:
        read_text_file(path, MAX_CONFIG_BYTES, "what")
    assert str(info.value) == f"what {str(path)!r} is {kind}; give a regular file"


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


def test_facts_file_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    with path.open("wb") as fh:  # sparse: no disk space used
        fh.truncate(MAX_FACTS_BYTES + 1)
    with pytest.raises(FactsError, match=f"larger than the limit of {MAX_FACTS_BYTES:,} bytes"):
        DeploymentFacts.from_json_file(path)


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


# --- YAML aliases -------------------------------------------------------------------------

BOMB = "\n".join(
    [f'a0: &a0 [{", ".join(["lol"] * 9)}]']
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    + ["dump_config: {x: *a8}"]) + "\n"


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


@pytest.mark.child_process
def test_shared_python_values_are_bounded() -> None:
    # The same bomb built from Python objects: 9**10 values once expanded; the walk stops
    # at the budget. Run in a child so that a regression times out instead of hanging.
    code = (
        "from ascend_config import AscendConfigError, resolve\n"
        "v = ['lol'] * 9\n"
        "for _ in range(9):\n"
        "    v = [v] * 9\n"
        "try:\n"
        "    resolve({'dump_config': {'x': v}}, environ={})\n"
        "except AscendConfigError as exc:\n"
        "    [p] = exc.problems\n"
        "    print(p.path, '|', p.message)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, check=True)
    assert proc.stdout == "<additional_config> | more than 100000 keys and list items\n"


def test_self_referencing_value() -> None:
    loop: dict[str, Any] = {}
    loop["again"] = loop
    with pytest.raises(AscendConfigError) as info:
        resolve({"dump_config": loop}, environ={})
    [problem] = info.value.problems
    assert (problem.path, problem.message) == (
        "dump_config", f"nested deeper than {MAX_DEPTH} levels")


# --- strings that cannot become paths or JSON ---------------------------------------------

@pytest.mark.parametrize("key", ["ascend_log_path", "dump_config_path",
                                 "eplb_config.expert_map_path",
                                 "eplb_config.expert_map_record_path"])
@pytest.mark.parametrize(("text", "why"), [
    ("/tmp/a\x00b.json", "contains a NUL byte"),
    ("/tmp/\udcff.json", "contains an unpaired surrogate (not valid Unicode text)"),
    ("/" + "a" * 4096 + ".json", "longer than 4096 characters"),
])
def test_path_keys_refuse_nul_surrogates_and_overlong(key: str, text: str, why: str) -> None:
    section, _, leaf = key.rpartition(".")
    config: dict[str, Any] = {section: {leaf: text}} if section else {leaf: text}
    with pytest.raises(AscendConfigError) as info:
        resolve(config, environ={"DYNAMIC_EPLB": "true"})
    [problem] = info.value.problems
    assert problem.path == key and problem.message == f"must be a usable path: {why}"


def test_lone_surrogate_from_json_text_is_refused() -> None:
    code, out, err = run("check", '{"ascend_log_path": "\\udcff"}')
    assert (code, out) == (2, "")
    assert err.splitlines()[1] == (
        "ascend_log_path: must be a usable path: contains an unpaired surrogate (not valid "
        "Unicode text) (given '\\udcff'; allowed: a path string)")


@pytest.mark.parametrize("config", [
    {"dump_config": {"task": "\udcff"}},
    {"dump_config": {"\ud800": 1}},
    {"dynamic_spec_config": {"method_params": {"k": ["ok", "\udfff"]}}},
])
def test_surrogates_in_free_form_objects(config: dict[str, Any]) -> None:
    with pytest.raises(AscendConfigError) as info:
        resolve(config, environ={})
    [problem] = info.value.problems
    assert "contains an unpaired surrogate" in problem.message


def test_paired_surrogates_decoded_by_json_are_fine() -> None:
    cfg = resolve(json.loads('{"dump_config": {"emoji": "\\ud83d\\ude00"}}'), environ={})
    assert json.loads(cfg.to_json())["dump_config"] == {"emoji": "\U0001F600"}


def test_surrogate_in_facts_that_reach_the_config() -> None:
    quant = {"model.layers.\udcff.self_attn.indexer.quant_type": "INT8_DYNAMIC"}
    with pytest.raises(AscendConfigError) as info:
        resolve({"enable_sparse_li_c8": True},
                DeploymentFacts(index_topk=2048, quant_description=quant), {})
    [problem] = info.value.problems
    assert problem.path == "facts.quant_description"
    assert "contains an unpaired surrogate" in problem.allowed


def test_surrogate_in_environment_value() -> None:
    env = {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True,\udcff"}
    with pytest.raises(AscendConfigError) as info:
        resolve({"rl_config": {"enabled": True}}, environ=env)
    assert info.value.lines() == [
        "env PYTORCH_NPU_ALLOC_CONF: invalid value: contains an unpaired surrogate (not valid "
        "Unicode text) (given 'expandable_segments:True,\\udcff'; allowed: valid UTF-8 text)"]


# --- unbounded work -----------------------------------------------------------------------

def test_fifty_thousand_unknown_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from ascend_config.schema import validation

    calls = []
    real = validation.suggest
    monkeypatch.setattr(validation, "suggest",
                        lambda key, model: calls.append(key) or real(key, model))
    with pytest.raises(AscendConfigError) as info:
        resolve({f"unknown_key_number_{i}": i for i in range(50_000)}, environ={})
    err = info.value
    assert len(err.problems) == MAX_REPORTED_PROBLEMS and err.omitted == 50_000 - 50
    assert len(calls) == MAX_REPORTED_PROBLEMS  # did-you-mean only for the listed keys
    lines = str(err).splitlines()
    assert lines[0] == "50000 problems in the Ascend configuration:"
    assert lines[1].startswith("unknown_key_number_0: unknown key")
    assert lines[-1] == "... and 49950 more problems (the first 50 are listed)"
    assert len(lines) == MAX_REPORTED_PROBLEMS + 2


def test_rules_still_run_after_many_schema_errors() -> None:
    config: dict[str, Any] = {f"k{i}": i for i in range(60)}
    config["enable_kv_nz"] = True
    with pytest.raises(AscendConfigError) as info:
        resolve(config, environ={})
    # 60 unknown keys + 2 kv_nz rule problems; the first 50 are listed
    assert len(info.value.problems) + info.value.omitted == 62


def test_too_many_keys_is_one_problem() -> None:
    with pytest.raises(AscendConfigError) as info:
        resolve({"pa_shape_list": list(range(100_001))}, environ={})
    [problem] = info.value.problems
    assert problem.message == "more than 100000 keys and list items"
    assert problem.allowed == "at most 100000 keys and list items in total"


@pytest.mark.parametrize(("n", "ok"), [(100_000, True), (100_001, False)])
def test_key_count_boundary(n: int, ok: bool) -> None:
    config = {"dump_config": {"items": [0] * (n - 2)}}  # + "dump_config" + "items"
    if ok:
        assert len(resolve(config, environ={}).dump_config["items"]) == n - 2  # type: ignore[index]
    else:
        with pytest.raises(AscendConfigError, match="more than 100000 keys and list items"):
            resolve(config, environ={})


@pytest.mark.parametrize(("chars", "ok"), [(4 << 20, True), ((4 << 20) + 1, False)])
def test_text_size_boundary(chars: int, ok: bool) -> None:
    config = {"dump_config": {"p": "x" * (chars - len("dump_config") - 1)}}
    if ok:
        assert len(resolve(config, environ={}).dump_config["p"]) == chars - 12  # type: ignore[index]
    else:
        with pytest.raises(AscendConfigError, match="more than 4194304 characters of text"):
            resolve(config, environ={})


# --- facts ------------------------------------------------------------------------------

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


def test_nan_inside_a_facts_mapping() -> None:
    with pytest.raises(FactsError) as info:
        DeploymentFacts.from_mapping({"quant_description": {"w": [1.0, float("nan")]}})
    assert "numbers must be finite (no NaN or Infinity) (at w[1])" in str(info.value)


def test_unknown_facts_message_is_bounded() -> None:
    with pytest.raises(FactsError) as info:
        DeploymentFacts.from_mapping({f"f{i}": 1 for i in range(10_000)})
    text = str(info.value)
    assert "and 9990 more" in text and len(text) < 1500 and "\n" not in text
