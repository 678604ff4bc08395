"""``DeploymentFacts``: every field's range at its bounds, mapping facts, loading from a mapping
or a file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from ascend_config import (
    AscendConfigError,
    DeploymentFacts,
    FactsError,
    resolve,
)
from ascend_config.limits import (
    MAX_FACTS_BYTES,
)
from hypothesis import given
from hypothesis import strategies as st

from .fuzz_checks import resolve_ok_or_error
from .fuzz_inputs import FUZZ, JSON, SCALARS, TEXT


def test_facts_file_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    with path.open("wb") as fh:  # sparse: no disk space used
        fh.truncate(MAX_FACTS_BYTES + 1)
    with pytest.raises(FactsError, match=f"larger than the limit of {MAX_FACTS_BYTES:,} bytes"):
        DeploymentFacts.from_json_file(path)


def test_surrogate_in_facts_that_reach_the_config() -> None:
    quant = {"model.layers.\udcff.self_attn.indexer.quant_type": "INT8_DYNAMIC"}
    with pytest.raises(AscendConfigError) as info:
        resolve({"enable_sparse_li_c8": True},
                DeploymentFacts(index_topk=2048, quant_description=quant), {})
    [problem] = info.value.problems
    assert problem.path == "facts.quant_description"
    assert "contains an unpaired surrogate" in problem.allowed


def test_nan_inside_a_facts_mapping() -> None:
    with pytest.raises(FactsError) as info:
        DeploymentFacts.from_mapping({"quant_description": {"w": [1.0, float("nan")]}})
    assert "numbers must be finite (no NaN or Infinity) (at w[1])" in str(info.value)


def test_unknown_facts_message_is_bounded() -> None:
    with pytest.raises(FactsError) as info:
        DeploymentFacts.from_mapping({f"f{i}": 1 for i in range(10_000)})
    text = str(info.value)
    assert "and 9990 more" in text and len(text) < 1500 and "\n" not in text


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
    resolve_ok_or_error({}, facts)


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
    resolve_ok_or_error({}, facts)


PARALLEL = ["tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size",
            "prefill_context_parallel_size", "decode_context_parallel_size", "nnodes_within_dp"]


MODEL = ["num_experts", "num_experts_per_tok", "moe_intermediate_size", "num_attention_heads",
         "num_key_value_heads", "head_dim", "hidden_size"]


TOKENS = ["num_speculative_tokens", "max_num_seqs", "max_num_batched_tokens", "block_size"]


TEXT_FACTS = ["model_type", "dtype", "scheduler_policy"]


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


def _nest(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


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


@pytest.mark.parametrize("name", TEXT_FACTS + OPT_TEXT)
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


@pytest.mark.parametrize(("depth", "accepted"), [(32, True), (33, False)])
def test_mapping_fact_depth(depth: int, accepted: bool) -> None:
    assert _facts_verdict("kv_connector_extra_config", _nest(depth)) is accepted


@pytest.mark.parametrize(("count", "accepted"), [(1_000_000, True), (1_000_001, False)])
def test_mapping_fact_size(count: int, accepted: bool) -> None:
    value = {"weights": [0] * (count - 1)}  # one key + count - 1 items
    assert _facts_verdict("quant_description", value) is accepted


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


def test_flat_facts_mapping_over_the_limit() -> None:
    from ascend_config import FactsError
    from ascend_config.limits import MAX_FACTS_VALUES

    with pytest.raises(FactsError) as info:
        DeploymentFacts.from_mapping({"quant_description": {
            f"k{i}": 0 for i in range(MAX_FACTS_VALUES + 1)}})
    assert str(info.value).endswith("; more than 1000000 keys and list items")


@pytest.mark.parametrize("name", ["quant_description", "kv_connector_extra_config"])
def test_mapping_facts_are_frozen_copies(name: str) -> None:
    given = {"a": "b"}
    facts = DeploymentFacts(**{name: given})
    given["a"] = "changed"  # the caller's dict is not shared
    held = getattr(facts, name)
    assert dict(held) == {"a": "b"}
    with pytest.raises(TypeError):
        held["x"] = "y"  # read-only
    assert hash(facts) == hash(DeploymentFacts(**{name: {"a": "b"}}))


def test_facts_hash_ignores_mapping_order_and_follows_values() -> None:
    a = DeploymentFacts(quant_description={"a": 1, "b": 2})
    b = DeploymentFacts(quant_description={"b": 2, "a": 1})
    assert a == b and hash(a) == hash(b)
    assert hash(DeploymentFacts(model_type="x")) != hash(DeploymentFacts(model_type="y"))
    odd = DeploymentFacts(quant_description={"s": {1, 2}})  # not JSON: still hashable
    assert hash(odd) == hash(DeploymentFacts(quant_description={"s": {1, 2}}))


FTP = "finegrained_tp_config"


def paths(found: list[tuple[str, str]]) -> list[str]:
    return [p for p, _ in found]


def test_bad_facts_are_problems(problems: Any) -> None:
    assert paths(problems(None, soc="B9", kv_role="both")) == ["facts.soc", "facts.kv_role"]


def test_wrongly_typed_facts_are_problems_not_crashes(problems: Any) -> None:
    found = problems({"finegrained_tp_config": {"mlp_tensor_parallel_size": 2}},
                     tensor_parallel_size="2", quant_description=[1], architectures="Qwen")
    # Rules then judge the config against default facts (dense, DP 1): two problems.
    assert paths(found) == ["facts.tensor_parallel_size", "facts.architectures",
                            "facts.quant_description"] + [f"{FTP}.mlp_tensor_parallel_size"] * 2


def test_new_facts_are_type_checked(problems: Any, res: Any) -> None:
    found = problems(None, scheduler_policy=1, nnodes_within_dp=-1, sequence_parallel="yes",
                     enable_eplb=0)
    assert paths(found) == ["facts.sequence_parallel", "facts.scheduler_policy",
                            "facts.nnodes_within_dp", "facts.enable_eplb"]
    facts = {"sequence_parallel": True, "scheduler_policy": "priority", "nnodes_within_dp": 2,
             "enable_eplb": False}
    from ascend_config import DeploymentFacts

    loaded = DeploymentFacts.from_mapping(facts)
    assert (loaded.sequence_parallel, loaded.scheduler_policy, loaded.nnodes_within_dp) == (
        True, "priority", 2)
    assert res(None, **facts).soc == "A2"  # none of them is a problem on its own


def test_facts_from_file(tmp_path: Path) -> None:

    path = tmp_path / "facts.json"
    path.write_text(json.dumps({"soc": "A3", "architectures": ["X"],
                                "kv_connector_extra_config": {"a": 1}}))
    facts = DeploymentFacts.from_json_file(path)
    assert facts.soc == "A3" and facts.architectures == ("X",)
    assert hash(facts) == hash(DeploymentFacts.from_mapping(facts.to_dict()))
    path.write_text(json.dumps({"soc": "A9", "tp": 2, "tensor_parallel_size": "2"}))
    with pytest.raises(FactsError, match="unknown deployment fact"):
        DeploymentFacts.from_json_file(path)
    path.write_text(json.dumps({"soc": "A9", "tensor_parallel_size": "2"}))
    with pytest.raises(FactsError, match=r"soc.*tensor_parallel_size"):
        DeploymentFacts.from_json_file(path)
