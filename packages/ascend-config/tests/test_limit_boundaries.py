"""The named limits, the fact ranges and the env-var ranges at, below and above each bound.

Expected bounds are written out here (powers of two, the documented ranges); a changed limit
must change this file too.
"""

from __future__ import annotations

from typing import Any

import pytest
from ascend_config import AscendConfigError, DeploymentFacts, FactsError, resolve
from ascend_config.envs import BY_NAME, EnvVar, EnvVarError
from ascend_config.errors import AscendConfigError as Err
from ascend_config.errors import make_problem

PARALLEL = ["tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size",
            "prefill_context_parallel_size", "decode_context_parallel_size", "nnodes_within_dp"]
MODEL = ["num_experts", "num_experts_per_tok", "moe_intermediate_size", "num_attention_heads",
         "num_key_value_heads", "head_dim", "hidden_size"]
TOKENS = ["num_speculative_tokens", "max_num_seqs", "max_num_batched_tokens", "block_size"]
TEXT = ["model_type", "dtype", "scheduler_policy"]
OPT_TEXT = ["quantization", "kv_connector", "speculative_method"]


def _facts_verdict(name: str, value: Any) -> bool:
    """True when from_mapping accepts ``{name: value}`` (and resolve agrees)."""
    try:
        facts = DeploymentFacts.from_mapping({name: value})
    except FactsError as exc:
        assert str(exc).startswith(f"{name}: got ")
        with pytest.raises(AscendConfigError) as info:
            resolve({}, DeploymentFacts(**{name: value}), {})
        assert [p.path for p in info.value.problems] == [f"facts.{name}"]
        return False
    assert getattr(facts, name) == (tuple(value) if isinstance(value, list) else value)
    return True


@pytest.mark.parametrize("name", PARALLEL)
@pytest.mark.parametrize(("value", "accepted"), [
    (0, False), (1, True), (65_536, True), (65_537, False), (10**32, False), (True, False),
    (2.0, False)])
def test_parallel_size_range(name: str, value: Any, accepted: bool) -> None:
    assert _facts_verdict(name, value) is accepted


@pytest.mark.parametrize("name", MODEL)
@pytest.mark.parametrize(("value", "accepted"), [
    (-1, False), (0, True), (2**24, True), (2**24 + 1, False), (False, False)])
def test_model_size_range(name: str, value: Any, accepted: bool) -> None:
    assert _facts_verdict(name, value) is accepted


@pytest.mark.parametrize(("value", "accepted"), [
    (None, True), (0, False), (1, True), (2**24, True), (2**24 + 1, False)])
def test_index_topk_range(value: Any, accepted: bool) -> None:
    assert _facts_verdict("index_topk", value) is accepted


@pytest.mark.parametrize("name", TOKENS)
@pytest.mark.parametrize(("value", "accepted"), [
    (-1, False), (0, True), (2**31 - 1, True), (2**31, False)])
def test_token_count_range(name: str, value: Any, accepted: bool) -> None:
    assert _facts_verdict(name, value) is accepted


@pytest.mark.parametrize(("value", "accepted"), [
    (-1e-9, False), (0, True), (0.0, True), (2.5, True), (1e6, True), (1e6 + 0.5, False),
    (float("nan"), False), (float("inf"), False), (True, False), ("1.0", False)])
def test_routed_scaling_factor_range(value: Any, accepted: bool) -> None:
    assert _facts_verdict("routed_scaling_factor", value) is accepted


@pytest.mark.parametrize("name", TEXT + OPT_TEXT)
@pytest.mark.parametrize(("value", "accepted"), [
    ("x" * 4096, True), ("x" * 4097, False), ("\udcff", False), ("ok\u00e9", True), (1, False)])
def test_text_facts(name: str, value: Any, accepted: bool) -> None:
    assert _facts_verdict(name, value) is accepted


@pytest.mark.parametrize("name", [*OPT_TEXT, "kv_role", "quant_description", "index_topk"])
def test_nullable_facts_accept_null(name: str) -> None:
    assert _facts_verdict(name, None) is True


@pytest.mark.parametrize(("value", "accepted"), [
    (["Qwen2ForCausalLM"], True), ([], True), (["x" * 4097], False), (["\ud800"], False),
    ("Qwen", False), ([1], False)])
def test_architectures(value: Any, accepted: bool) -> None:
    assert _facts_verdict("architectures", value) is accepted


@pytest.mark.parametrize("name", ["quant_description", "kv_connector_extra_config"])
@pytest.mark.parametrize(("value", "accepted"), [
    ({"a": [1, 2.5, None, True, "x"]}, True), ({"a": float("nan")}, False),
    ({"a": float("-inf")}, False), ({"a": (1,)}, False), ({"a": {1: 2}}, False),
    ({"\udcff": 1}, False), ({"a": b"x"}, False), ([1], False)])
def test_mapping_facts_are_plain_json(name: str, value: Any, accepted: bool) -> None:
    assert _facts_verdict(name, value) is accepted


def _nest(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize(("depth", "accepted"), [(32, True), (33, False)])
def test_mapping_fact_depth(depth: int, accepted: bool) -> None:
    assert _facts_verdict("kv_connector_extra_config", _nest(depth)) is accepted


@pytest.mark.parametrize(("count", "accepted"), [(1_000_000, True), (1_000_001, False)])
def test_mapping_fact_size(count: int, accepted: bool) -> None:
    value = {"weights": [0] * (count - 1)}  # one key + count - 1 items
    assert _facts_verdict("quant_description", value) is accepted


# --- path keys and reported problems ---------------------------------------------------------

@pytest.mark.parametrize(("length", "accepted"), [(4096, True), (4097, False)])
def test_path_length(length: int, accepted: bool) -> None:
    path = "/" + "a" * (length - 1)
    if accepted:
        assert resolve({"ascend_log_path": path}, environ={}).ascend_log_path == path
    else:
        with pytest.raises(AscendConfigError) as info:
            resolve({"ascend_log_path": path}, environ={})
        assert info.value.problems[0].message == (
            "must be a usable path: longer than 4096 characters")


@pytest.mark.parametrize(("count", "listed", "last"), [
    (49, 49, None), (50, 50, None),
    (51, 50, "... and 1 more problem (the first 50 are listed)"),
    (52, 50, "... and 2 more problems (the first 50 are listed)")])
def test_reported_problems_cap(count: int, listed: int, last: str | None) -> None:
    with pytest.raises(AscendConfigError) as info:
        resolve({f"k{i:03}": i for i in range(count)}, environ={})
    err = info.value
    lines = str(err).splitlines()
    assert lines[0] == f"{count} problems in the Ascend configuration:"
    assert len(err.problems) == listed and err.omitted == count - listed
    assert lines[1:listed + 1] == err.lines()
    assert lines[listed + 1:] == ([last] if last else [])


def test_error_counts_given_omissions() -> None:
    problem = make_problem("a", 1, "x", "")
    err = Err([problem], omitted=4)
    assert str(err).splitlines() == [
        "5 problems in the Ascend configuration:", problem.line(),
        "... and 4 more problems (the first 1 are listed)"]
    assert str(Err([problem])).splitlines() == [
        "1 problem in the Ascend configuration:", problem.line()]


# --- environment variables -------------------------------------------------------------------

@pytest.mark.parametrize(("name", "text", "value"), [
    ("VLLM_ASCEND_ENABLE_NZ", "-1", None), ("VLLM_ASCEND_ENABLE_NZ", "0", 0),
    ("VLLM_ASCEND_ENABLE_NZ", "2", 2), ("VLLM_ASCEND_ENABLE_NZ", "3", None),
    ("VLLM_ASCEND_ENABLE_NZ", " 1 ", 1),
    ("VLLM_ASCEND_ENABLE_FUSED_MC2", "1", 1), ("VLLM_ASCEND_ENABLE_FUSED_MC2", "2", None),
    ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "1000000000", 10**9),
    ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "1000000001", None),
    ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "-1", None),
    ("LOCAL_WORLD_SIZE", "1000000", 10**6), ("LOCAL_WORLD_SIZE", "1000001", None),
    # integers longer than 30 characters are refused before int() runs
    ("VLLM_ASCEND_ENABLE_NZ", "0" * 30, 0), ("VLLM_ASCEND_ENABLE_NZ", "0" * 31, None),
    ("COMPILE_CUSTOM_KERNELS", "0" * 30, False), ("COMPILE_CUSTOM_KERNELS", "0" * 31, None),
    ("COMPILE_CUSTOM_KERNELS", "-1", True), ("COMPILE_CUSTOM_KERNELS", "2", True),
    ("COMPILE_CUSTOM_KERNELS", "0", False), ("COMPILE_CUSTOM_KERNELS", "On", True),
    ("COMPILE_CUSTOM_KERNELS", "no", False),
])
def test_env_ranges(name: str, text: str, value: object) -> None:
    var = BY_NAME[name]
    if value is None:
        with pytest.raises(EnvVarError):
            var.parse(text)
    else:
        assert var.parse(text) == value


@pytest.mark.parametrize(("bounds", "allowed"), [
    ((0, 4), "0, 1, 2, 3, 4"), ((0, 5), "an integer from 0 to 5"), ((3, 3), "3"),
    (None, "an integer")])
def test_int_allowed_wording(bounds: tuple[int, int] | None, allowed: str) -> None:
    assert EnvVar("X", "int", 0, "d", int_range=bounds).allowed() == allowed


def test_scan_depth_of_list_items_and_of_container_keys() -> None:
    from ascend_config.inputs import Finding, scan

    # Lists: [[0]] is 2 levels, [[[0]]] is 3.
    assert scan([[0]], max_depth=2, max_values=100) is None
    assert scan([[[0]]], max_depth=2, max_values=100) == Finding(
        (0, 0), "nested deeper than 2 levels", "depth")
    # A tuple used as a key sits one level below its mapping, like a value.
    assert scan({"a": {(1, 2): 0}}, max_depth=3, max_values=100) is None
    assert scan({"a": {(1, 2): 0}}, max_depth=2, max_values=100) == Finding(
        ("a",), "nested deeper than 2 levels", "depth")


def test_a_non_string_key_in_a_mapping_fact_is_named() -> None:
    with pytest.raises(AscendConfigError) as info:
        resolve({}, DeploymentFacts(kv_connector_extra_config={1: "x"}), {})
    assert info.value.lines() == [
        "facts.kv_connector_extra_config: invalid deployment fact (given mappingproxy({1: 'x'}); "
        "allowed: a JSON object (finite numbers, at most 32 levels, 1000000 keys and list "
        "items); object keys must be strings)"]


def test_bool_fact_message() -> None:
    with pytest.raises(AscendConfigError) as info:
        resolve({}, DeploymentFacts(is_moe="yes"), {})  # type: ignore[arg-type]
    assert info.value.lines() == [
        "facts.is_moe: invalid deployment fact (given 'yes'; allowed: true or false)"]


@pytest.mark.parametrize(("count", "ok"), [(1_000_000, True), (1_000_001, False)])
def test_architectures_count_limit(count: int, ok: bool) -> None:
    from ascend_config.facts import check_fields
    from ascend_config.limits import MAX_FACTS_VALUES

    assert MAX_FACTS_VALUES == 1_000_000
    found = [name for name, _, _ in check_fields(DeploymentFacts(architectures=("A",) * count))]
    assert found == ([] if ok else ["architectures"])


def test_mapping_fact_of_the_wrong_type_says_what_is_allowed() -> None:
    with pytest.raises(AscendConfigError) as info:
        resolve({}, DeploymentFacts(quant_description=5), {})  # type: ignore[arg-type]
    assert info.value.lines() == [
        "facts.quant_description: invalid deployment fact (given 5; allowed: null or a JSON "
        "object (finite numbers, at most 32 levels, 1000000 keys and list items))"]
