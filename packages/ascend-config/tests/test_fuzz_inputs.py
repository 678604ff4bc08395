"""Seeded fuzzing of every input channel: text, YAML, files, CLI arguments, facts, payloads.

Each property states the documented error types and nothing else: ``InputError`` from the
readers, ``FactsError`` from facts loading, ``AscendConfigError`` from ``resolve`` and
``from_json``, exit code 0 or 2 (argparse's own usage errors: ``SystemExit(2)``) from the CLI.
``derandomize=True`` makes every run draw the same examples; each suite takes a few seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
from typing import Any

import pytest
import yaml
from ascend_config import AscendConfig, AscendConfigError, DeploymentFacts, FactsError, resolve
from ascend_config.cli import main
from ascend_config.facts import KV_ROLES, SOCS
from ascend_config.inputs import InputError, parse_json_text, parse_yaml_text
from ascend_config.limits import MAX_CONFIG_BYTES, MAX_DEPTH
from ascend_config.schema.introspect import all_paths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# The mutation runner (mutmut sets MUTANT_UNDER_TEST) runs the suite once per mutant; a tenth of
# the examples still reaches every error path there, the full count would take hours.
SCALE = 10 if "MUTANT_UNDER_TEST" in os.environ else 1
FUZZ = settings(max_examples=150 // SCALE, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

KEYS = sorted({p.split(".")[-1] for p in all_paths()})
NASTY_TEXT = ["\udcff", "\ud800x", "a\x00b", "\u2028", "\ufeff", "", " ", "~/x", "/tmp/a.json",
              "x" * 5000, "all", "true", "1", "dspark"]
TEXT = st.one_of(st.text(max_size=20), st.sampled_from(NASTY_TEXT))
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, 2, 3, 5, -1, 1024, 1025, 10**32]),
    st.floats(allow_nan=True, allow_infinity=True), TEXT,
)
JSON: st.SearchStrategy[Any] = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.sampled_from(KEYS), TEXT), inner,
                                            max_size=4)),
    max_leaves=25,
)
SECTIONS = sorted(p for p in all_paths() if "." not in p)
CONFIG = st.dictionaries(st.one_of(st.sampled_from(SECTIONS), TEXT),
                         st.one_of(JSON, st.dictionaries(st.sampled_from(KEYS), SCALARS,
                                                         max_size=5)), max_size=6)


def _check_error(exc: AscendConfigError) -> None:
    lines = str(exc).splitlines()
    assert len(lines) == len(exc.problems) + 1 + (1 if exc.omitted else 0)
    assert all(len(line) <= 300 and line.isprintable() for line in lines[1:])


def _resolve_ok_or_error(config: Any, facts: DeploymentFacts | None = None,
                         env: dict[str, str] | None = None) -> AscendConfig | None:
    try:
        cfg = resolve(config, facts, env or {})
    except AscendConfigError as exc:
        _check_error(exc)
        return None
    assert AscendConfig.from_json(cfg.to_json()) == cfg
    return cfg


# --- text into the parsers, then into resolve -----------------------------------------------

def _nest_text(depth: int, inner: str) -> str:
    return '{"dump_config": ' + '{"a": ' * depth + inner + "}" * depth + "}"


JSON_TEXT = st.one_of(
    st.text(max_size=200),
    st.builds(lambda v: json.dumps(v, allow_nan=True), JSON),
    st.builds(lambda v: json.dumps(v, ensure_ascii=True), CONFIG),
    st.builds(_nest_text, st.integers(0, 3 * MAX_DEPTH), st.sampled_from(["1", "[", '"\\udcff"'])),
    st.builds(lambda n: "[" * n, st.integers(0, 5000)),
)


@FUZZ
@given(text=JSON_TEXT)
def test_json_text(text: str) -> None:
    try:
        data = parse_json_text(text, "text")
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    _resolve_ok_or_error(data)


def _yaml_with_aliases(value: Any, uses: int) -> str:
    body = yaml.safe_dump({"dump_config": {"a": value}}, allow_unicode=False)
    anchor = "dump_config:\n  base: &b " + json.dumps(value, ensure_ascii=True) + "\n"
    return anchor + "  uses: [" + ", ".join(["*b"] * uses) + "]\n" + body.split("\n", 1)[1]


YAML_TEXT = st.one_of(
    st.text(max_size=200),
    st.builds(lambda v: yaml.safe_dump(v, allow_unicode=False), CONFIG),
    st.builds(_yaml_with_aliases, st.lists(st.integers(), max_size=3), st.integers(0, 150)),
    st.sampled_from(["a: &a [*a]\n", "!!python/object:os.system {}\n", "? [1, 2]\n: x\n",
                     "x: !!binary aGk=\n", "t: 2024-01-01\n", "s: !!set {a, b}\n",
                     "---\na: 1\n---\nb: 2\n", "dump_config: " + "[" * 40 + "]" * 40 + "\n"]),
)


@FUZZ
@given(text=YAML_TEXT)
def test_yaml_text(text: str) -> None:
    try:
        data = parse_yaml_text(text, "text")
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    _resolve_ok_or_error(data)


# --- additional_config objects with facts and environment -----------------------------------

FACTS = st.builds(
    DeploymentFacts,
    soc=st.sampled_from([*SOCS, "B9"]),
    tensor_parallel_size=st.sampled_from([0, 1, 2, 8, 16, 65536, 65537, 10**32]),
    data_parallel_size=st.integers(1, 32), pipeline_parallel_size=st.integers(1, 2),
    is_moe=st.booleans(), use_mla=st.booleans(), num_experts=st.integers(0, 600),
    index_topk=st.one_of(st.none(), st.integers(0, 8192)),
    kv_role=st.sampled_from([None, *KV_ROLES]),
    num_key_value_heads=st.integers(0, 64), enforce_eager=st.booleans(),
    routed_scaling_factor=st.floats(allow_nan=True, allow_infinity=True),
    quant_description=st.one_of(st.none(), st.dictionaries(TEXT, JSON, max_size=3)),
    kv_connector_extra_config=st.dictionaries(
        st.sampled_from(["prefill", "decode", "connectors"]), JSON, max_size=2),
)
ENV = st.dictionaries(
    st.sampled_from(["VLLM_ASCEND_ENABLE_NZ", "DYNAMIC_EPLB", "VLLM_BATCH_INVARIANT",
                     "PYTORCH_NPU_ALLOC_CONF", "VLLM_ASCEND_ENABLE_FUSED_MC2",
                     "VLLM_ASCEND_BALANCE_SCHEDULING", "EXPERT_MAP_RECORD"]),
    TEXT, max_size=3)


@FUZZ
@given(config=st.one_of(CONFIG, JSON), facts=FACTS, env=ENV)
def test_resolve_objects(config: Any, facts: DeploymentFacts, env: dict[str, str]) -> None:
    _resolve_ok_or_error(config, facts, env)


# --- facts mappings and files ---------------------------------------------------------------

FACT_NAMES = [f.name for f in __import__("dataclasses").fields(DeploymentFacts)]
FACTS_MAPPING = st.dictionaries(st.one_of(st.sampled_from(FACT_NAMES), TEXT),
                                st.one_of(SCALARS, JSON), max_size=6)


@FUZZ
@given(data=st.one_of(FACTS_MAPPING, JSON))
def test_facts_mapping(data: Any) -> None:
    try:
        facts = DeploymentFacts.from_mapping(data)
    except FactsError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 4000
        return
    assert not isinstance(facts.routed_scaling_factor, float) or math.isfinite(
        facts.routed_scaling_factor)
    _resolve_ok_or_error({}, facts)


@FUZZ
@given(content=st.one_of(st.binary(max_size=300),
                         st.builds(lambda v: json.dumps(v).encode(), FACTS_MAPPING)))
def test_facts_file(tmp_path_factory: pytest.TempPathFactory, content: bytes) -> None:
    path = tmp_path_factory.mktemp("facts") / "f.json"
    path.write_bytes(content)
    try:
        facts = DeploymentFacts.from_json_file(path)
    except FactsError as exc:
        assert "\n" not in str(exc)
        return
    _resolve_ok_or_error({}, facts)


# --- the workers' payload --------------------------------------------------------------------

@FUZZ
@given(text=st.one_of(st.text(max_size=300), st.builds(json.dumps, JSON),
                      st.builds(lambda n: "[" * n, st.integers(0, 3000))))
def test_from_json(text: str) -> None:
    try:
        cfg = AscendConfig.from_json(text)
    except AscendConfigError as exc:
        _check_error(exc)
        return
    assert AscendConfig.from_json(cfg.to_json()) == cfg  # e.g. "{}": every default


# --- CLI arguments ---------------------------------------------------------------------------

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

