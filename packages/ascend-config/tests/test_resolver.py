"""``resolve``: every problem in one error, bounded work on hostile values, env-var fallbacks,
and only ``AscendConfigError`` escaping.
"""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys
from typing import Any

import pytest
from ascend_config import (
    AscendConfigError,
    DeploymentFacts,
    resolve,
)
from ascend_config.facts import KV_ROLES, SOCS
from ascend_config.limits import (
    MAX_DEPTH,
    MAX_REPORTED_PROBLEMS,
)
from ascend_config.schema.introspect import all_paths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .fuzz_checks import resolve_ok_or_error
from .fuzz_inputs import CONFIG as OBJ_CONFIG
from .fuzz_inputs import FUZZ, SCALE, TEXT
from .fuzz_inputs import JSON as OBJ_JSON
from .rule_outcomes import lines

HANG_GUARD_S = 60


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


def test_surrogate_in_environment_value() -> None:
    env = {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True,\udcff"}
    with pytest.raises(AscendConfigError) as info:
        resolve({"rl_config": {"enabled": True}}, environ=env)
    assert info.value.lines() == [
        "env PYTORCH_NPU_ALLOC_CONF: invalid value: contains an unpaired surrogate (not valid "
        "Unicode text) (given 'expandable_segments:True,\\udcff'; allowed: valid UTF-8 text)"]


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


KNOWN = sorted({p.split(".")[-1] for p in all_paths()})


SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2, -1, 10**40, 512, 513]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 1.0, 1e308]),
    st.text(max_size=30),
    st.sampled_from(["all", "dspark", "dynamic", "true", "1", "x.json", "\n\u2028\x00"]),
)


KEYS = st.one_of(st.sampled_from(KNOWN), st.text(min_size=0, max_size=20), st.integers(-2, 2))


JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(KEYS, inner, max_size=5)),
    max_leaves=30,
)


SECTIONS = st.sampled_from([p for p in all_paths() if "." not in p])


CONFIG = st.one_of(
    JSON,
    st.dictionaries(st.one_of(SECTIONS, KEYS), JSON, max_size=8),
    st.dictionaries(SECTIONS, st.dictionaries(st.sampled_from(KNOWN), SCALARS, max_size=6),
                    max_size=6),
)


FACTS = st.builds(
    DeploymentFacts,
    soc=st.sampled_from(["A2", "A3", "A5", "310P", "cpu"]),
    tensor_parallel_size=st.integers(1, 16), data_parallel_size=st.integers(1, 16),
    pipeline_parallel_size=st.integers(1, 2), is_moe=st.booleans(), use_mla=st.booleans(),
    index_topk=st.one_of(st.none(), st.integers(1, 8192)),
    kv_role=st.sampled_from([None, "kv_producer", "kv_consumer", "kv_both"]),
    num_key_value_heads=st.integers(0, 64), enforce_eager=st.booleans(),
    kv_connector_extra_config=st.dictionaries(
        st.sampled_from(["prefill", "decode", "connectors"]), JSON, max_size=2),
)


ENV = st.dictionaries(
    st.sampled_from(["VLLM_ASCEND_ENABLE_NZ", "DYNAMIC_EPLB", "VLLM_BATCH_INVARIANT",
                     "VLLM_ASCEND_BALANCE_SCHEDULING", "PYTORCH_NPU_ALLOC_CONF",
                     "VLLM_ASCEND_ENABLE_FUSED_MC2"]),
    st.text(max_size=12), max_size=3)


def _deep(depth: int) -> Any:
    value: Any = {"enabled": True}
    for _ in range(depth):
        value = {"method_params": value, "x": [value]}
    return value


# Fewer examples under the mutation runner (see fuzz_inputs.SCALE).
@settings(max_examples=200 // SCALE, deadline=None,
          derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(config=CONFIG, facts=FACTS, env=ENV)
def test_only_ascend_config_error_escapes(config: Any, facts: DeploymentFacts,
                                          env: dict[str, str]) -> None:
    try:
        cfg = resolve(config, facts, env)
    except AscendConfigError as exc:
        assert exc.problems
        for problem in exc.problems:
            line = problem.line()
            assert len(line) <= 300 and "\n" not in line and line.isprintable()
        assert len(str(exc).splitlines()) == len(exc.problems) + 1
    else:
        assert type(cfg).from_json(cfg.to_json()) == cfg


def test_deep_nesting_and_huge_values() -> None:
    config = {"dynamic_spec_config": {"method_params": _deep(60)},
              "dump_config": _deep(60), "mega_moe_max_tokens": 10**400,
              "scheduler_config": _deep(30), "ü" * 400: "λ" * 5000}
    with pytest.raises(AscendConfigError) as info:
        resolve(config, environ={})
    # Too deep to validate: the first over-deep key found (the walk takes the last key
    # first) is the one problem; nothing else is run.
    [problem] = info.value.problems
    assert (problem.path, problem.message) == ("scheduler_config",
                                               "nested deeper than 32 levels")
    assert len(problem.line()) <= 300


def test_huge_integer_and_long_key_within_limits() -> None:
    with pytest.raises(AscendConfigError) as info:
        resolve({"mega_moe_max_tokens": 10**400, "ü" * 400: "λ" * 5000}, environ={})
    [unknown] = info.value.problems
    assert unknown.message == "unknown key" and len(unknown.line()) <= 300
    cfg = resolve({"mega_moe_max_tokens": 10**400}, environ={})
    assert cfg.mega_moe_max_tokens == 10**400
    assert type(cfg).from_json(cfg.to_json()) == cfg


OBJ_FACTS = st.builds(
    DeploymentFacts,
    soc=st.sampled_from([*SOCS, "B9"]),
    tensor_parallel_size=st.sampled_from([0, 1, 2, 8, 16, 65536, 65537, 10**32]),
    data_parallel_size=st.integers(1, 32), pipeline_parallel_size=st.integers(1, 2),
    is_moe=st.booleans(), use_mla=st.booleans(), num_experts=st.integers(0, 600),
    index_topk=st.one_of(st.none(), st.integers(0, 8192)),
    kv_role=st.sampled_from([None, *KV_ROLES]),
    num_key_value_heads=st.integers(0, 64), enforce_eager=st.booleans(),
    routed_scaling_factor=st.floats(allow_nan=True, allow_infinity=True),
    quant_description=st.one_of(st.none(), st.dictionaries(TEXT, OBJ_JSON, max_size=3)),
    kv_connector_extra_config=st.dictionaries(
        st.sampled_from(["prefill", "decode", "connectors"]), OBJ_JSON, max_size=2),
)


OBJ_ENV = st.dictionaries(
    st.sampled_from(["VLLM_ASCEND_ENABLE_NZ", "DYNAMIC_EPLB", "VLLM_BATCH_INVARIANT",
                     "PYTORCH_NPU_ALLOC_CONF", "VLLM_ASCEND_ENABLE_FUSED_MC2",
                     "VLLM_ASCEND_BALANCE_SCHEDULING", "EXPERT_MAP_RECORD"]),
    TEXT, max_size=3)


@FUZZ
@given(config=st.one_of(OBJ_CONFIG, OBJ_JSON), facts=OBJ_FACTS, env=OBJ_ENV)
def test_resolve_objects(config: Any, facts: DeploymentFacts, env: dict[str, str]) -> None:
    resolve_ok_or_error(config, facts, env)


def test_facts_problems_have_a_message() -> None:
    assert lines({}, soc="B9") == [
        "facts.soc: invalid deployment fact (given 'B9'; allowed: one of ['A2', 'A3', 'A5', "
        "'310P', 'cpu'])"]
    with pytest.raises(AscendConfigError) as info:
        resolve({}, {"soc": "A2"}, {})  # type: ignore[arg-type]
    assert info.value.lines() == [
        "facts: wrong type of deployment facts (given {'soc': 'A2'}; allowed: a "
        "DeploymentFacts instance)"]


def test_json_path_line() -> None:
    assert lines({"eplb_config": {"expert_map_record_path": "map.txt"}}) == [
        "eplb_config.expert_map_record_path: must be a path ending in .json (given 'map.txt'; "
        "allowed: null or a .json path)"]


def test_non_string_keys_do_not_count_as_given_paths() -> None:
    # Model runner v2 lists legacy EPLB fields given by name; a non-string inner key is only
    # a schema problem, and a non-string top-level key does not hide later sections.
    found = lines({"eplb_config": {1: "x"}}, use_model_runner_v2=True)
    assert [line.split(":")[0] for line in found] == ["eplb_config[1]"]
    found = lines({None: 1, "eplb_config": {"load_collection_phase": "all"}})
    assert [line.split(":")[0] for line in found] == ["None",
                                                      "eplb_config.load_collection_phase"]


def test_shape_problems_name_where_and_what() -> None:
    from ascend_config.limits import MAX_CONFIG_CHARS, MAX_DEPTH

    deep: dict[str, Any] = {"v": 1}
    for _ in range(MAX_DEPTH):
        deep = {"k": deep}  # MAX_DEPTH + 1 levels inside dump_config
    assert lines({"dump_config": deep}) == [
        f"dump_config: nested deeper than {MAX_DEPTH} levels (given {{'k': {{'k': {{'k': "
        f"{{...}}}}}}}}; allowed: at most {MAX_DEPTH} levels of objects and lists)"]
    # Too much text is a property of the whole config: no inner path is named.
    found = lines({"dump_config": {"a": "x" * (MAX_CONFIG_CHARS + 1)}})
    assert len(found) == 1
    assert found[0].startswith(f"<additional_config>: more than {MAX_CONFIG_CHARS} characters "
                               "of text (given {'dump_config': {'a': 'xxx")


def test_a_derivation_bug_is_reported_as_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from ascend_config import resolver

    def bad_rule(ctx: Any) -> None:
        ctx.derived["num_head_replica"] = "many"  # not an int: AscendConfig refuses it

    monkeypatch.setattr(resolver, "RULES", (*resolver.RULES, bad_rule))
    found = lines({})
    assert len(found) == 1
    assert found[0].startswith("<resolved>: internal derivation error (given '1 validation "
                               "error for Asce")
    assert found[0].endswith("; allowed: a valid config)")


def test_three_independent_mistakes_one_error() -> None:
    config = {
        "rejection_sampler_config": {"posterior_threshold": 1.5},       # range
        "scheduler_config": {"dyntra_lb_config": {"enabled": "yes"}},  # type
        "enable_mc2_hierarchy_comm": True,                              # deployment rule (A5)
    }
    with pytest.raises(AscendConfigError) as info:
        resolve(config, DeploymentFacts(soc="A5"), {})
    err = info.value
    assert [p.path for p in err.problems] == [
        "scheduler_config.dyntra_lb_config.enabled",
        "rejection_sampler_config.posterior_threshold",
        "enable_mc2_hierarchy_comm",
    ]
    lines = str(err).splitlines()
    assert lines[0] == "3 problems in the Ascend configuration:"
    assert lines[1:] == err.lines()
    assert "given 1.5" in lines[2] and "<= 1" in lines[2]
    assert "given 'yes'" in lines[1] and "true or false" in lines[1]
    assert "A5" in lines[3]
    assert isinstance(err, ValueError)


def test_rules_still_run_next_to_schema_errors() -> None:
    # The bad threshold is dropped to its default so the kv_nz rule still reports.
    with pytest.raises(AscendConfigError) as info:
        resolve({"scheduler_config": {"short_request_first_config": {"threshold": "x"}},
                 "enable_kv_nz": True, "mega_moe_max_tokens": 0}, environ={})
    assert [p.path for p in info.value.problems] == [
        "scheduler_config.short_request_first_config.threshold", "mega_moe_max_tokens",
        "enable_kv_nz", "enable_kv_nz"]


def test_problem_objects_carry_path_value_allowed_message() -> None:
    with pytest.raises(AscendConfigError) as info:
        resolve({"weight_nz_mode": 9}, environ={})
    [p] = info.value.problems
    assert (p.path, p.value, p.allowed) == ("weight_nz_mode", "9", "0, 1 or 2")
    assert p.message


FALLBACKS = [
    ("weight_nz_mode", "VLLM_ASCEND_ENABLE_NZ", "2", 2),
    ("enable_fused_mc2", "VLLM_ASCEND_ENABLE_FUSED_MC2", "1", 1),
    ("enable_mlapo", "VLLM_ASCEND_ENABLE_MLAPO", "0", False),
    ("msmonitor_use_daemon", "MSMONITOR_USE_DAEMON", "1", True),
    ("enable_transpose_kv_cache_by_block", "VLLM_ASCEND_FUSION_OP_TRANSPOSE_KV_CACHE_BY_BLOCK",
     "0", False),
]


def test_resolve_never_touches_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    from ascend_config import resolve

    monkeypatch.setenv("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True")
    before = dict(os.environ)
    cfg = resolve({"rl_config": {"enabled": True, "enable_batch_invariant": True}})
    assert dict(os.environ) == before
    assert dict(cfg.env_changes)["PYTORCH_NPU_ALLOC_CONF"] is None
    env: dict[str, str] = dict(before)
    done = cfg.apply_env(env)
    assert "PYTORCH_NPU_ALLOC_CONF" not in env and env["VLLM_BATCH_INVARIANT"] == "1"
    assert "unset PYTORCH_NPU_ALLOC_CONF" in done


@pytest.mark.parametrize(("key", "var", "text", "value"), FALLBACKS)
def test_env_fallback_used_with_one_deprecation(
    res: Any, key: str, var: str, text: str, value: Any
) -> None:
    cfg = res(None, env={var: text})
    assert getattr(cfg, key) == value
    assert cfg.warnings == (
        f"'{key}' falls back to environment variable {var}; this fallback is deprecated and "
        f"will be removed in the next release, set '{key}' in additional_config instead",)


@pytest.mark.parametrize(("key", "var", "text", "value"), FALLBACKS)
def test_key_overrides_env_without_warning(
    res: Any, key: str, var: str, text: str, value: Any
) -> None:
    default = res(None).model_dump()[key]
    cfg = res({key: default}, env={var: text})
    assert getattr(cfg, key) == default and cfg.warnings == ()


@pytest.mark.parametrize(("var", "text"), [
    ("VLLM_ASCEND_ENABLE_NZ", "3"), ("VLLM_ASCEND_ENABLE_NZ", "on"),
    ("VLLM_ASCEND_ENABLE_FUSED_MC2", "2"), ("VLLM_ASCEND_ENABLE_MLAPO", "maybe")])
def test_invalid_env_value_is_a_problem(problems: Any, var: str, text: str) -> None:
    [(path, line)] = problems(None, env={var: text})
    assert path == f"env {var}" and f"given '{text}'" in line


def test_flashcomm_deprecated_from_key_and_env(res: Any) -> None:
    assert "FlashComm" in res({"enable_flashcomm1": True}).warnings[0]
    assert "FlashComm" in res(None, env={"VLLM_ASCEND_ENABLE_FLASHCOMM1": "1"}).warnings[0]


def test_resolve_is_pure_and_deterministic() -> None:
    config = {"rl_config": {"enabled": True}, "scheduler_config": {"profiling_chunk_config": {
        "enabled": True, "min_chunk": 9000}}, "recompute_scheduler_enable": False}
    snapshot = copy.deepcopy(config)
    env = {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
    facts = DeploymentFacts(pipeline_parallel_size=2)
    first = resolve(config, facts, env)
    second = resolve(config, facts, dict(env))
    assert config == snapshot and env == {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
    assert first == second and first.to_json() == second.to_json()
