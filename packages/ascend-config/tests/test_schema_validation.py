"""Best-effort schema validation: which keys are dropped (taking their defaults) and the
problem lines.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from ascend_config import DeploymentFacts, resolve

from .rule_outcomes import lines


def test_bad_nested_key_keeps_its_siblings() -> None:
    # end_step is dropped; enabled stays, so DyntraLB's placement rules still run.
    found = lines({"scheduler_config": {"dyntra_lb_config": {"enabled": True, "end_step": 0}}})
    assert [line.split(":")[0] for line in found] == [
        "scheduler_config.dyntra_lb_config.end_step",
        "scheduler_config.dyntra_lb_config.enabled",
        "scheduler_config.dyntra_lb_config.enabled"]


def test_errors_in_two_sections_keep_both_sections() -> None:
    found = lines({"eplb_config": {"num_redundant_experts": -1, "dynamic_eplb": True},
                   "rl_config": {"enabled": "yes", "enable_training_consistency": True}},
                  use_mla=True)
    assert [line.split(":")[0] for line in found] == [
        "eplb_config.num_redundant_experts", "rl_config.enabled", "eplb_config.dynamic_eplb"]


def test_non_string_keys_drop_only_themselves() -> None:
    found = lines({None: 1, 7: 2, "enable_kv_nz": True,  # type: ignore[dict-item]
                   "eplb_config": {None: 1, "dynamic_eplb": True}})
    assert [line.split(":")[0] for line in found] == [
        "eplb_config.None", "None", "[7]", "eplb_config.dynamic_eplb", "enable_kv_nz",
        "enable_kv_nz"]
    assert found[1] == "None: Keys should be strings (given None; allowed: see the schema)"


def test_a_section_given_as_a_list_is_dropped_whole() -> None:
    found = lines({"scheduler_config": [1], "enable_kv_nz": True})
    assert [line.split(":")[0] for line in found] == [
        "scheduler_config", "enable_kv_nz", "enable_kv_nz"]


def test_bad_list_item_drops_the_list() -> None:
    found = lines({"pa_shape_list": [1, "x", 3], "weight_nz_mode": 9})
    assert [line.split(":")[0] for line in found] == ["pa_shape_list[1]", "weight_nz_mode"]


@pytest.mark.parametrize(("config", "line"), [
    ({"zzzz_unrelated": 1},
     "zzzz_unrelated: unknown key (given 1; allowed: a key listed by `ascend-config explain`)"),
    ({"scheduler_config": {"dyntra_lb_config": {"end_stp": 1}}},
     "scheduler_config.dyntra_lb_config.end_stp: unknown key (given 1; allowed: did you mean "
     "'end_step'?)"),
    ({"short_request_first_config": {"thresold": 1}},
     "short_request_first_config.thresold: unknown key (given 1; allowed: did you mean "
     "'threshold'?)"),
    ({"eplb_config": [1]}, "eplb_config: must be a JSON object (given [1]; allowed: a JSON "
     "object)"),
    ({"dump_config": "x"},
     "dump_config: must be a JSON object (given 'x'; allowed: null or a JSON object)"),
    ({"enable_fused_mc2": True},
     "enable_fused_mc2: must be an integer (given True; allowed: 0 or 1)"),
    ({"weight_nz_mode": 1.0},
     "weight_nz_mode: must be an integer (given 1.0; allowed: 0, 1 or 2)"),
    ({"mega_moe_max_tokens": 0},
     "mega_moe_max_tokens: Input should be greater than 0 (given 0; allowed: an integer > 0)"),
    ({"ascend_compilation_config": {"fuse_kv_cache_attention": "yes"}},
     "ascend_compilation_config.fuse_kv_cache_attention: a string, not a boolean "
     "(given 'yes'; allowed: true or false, without quotes)"),
])
def test_schema_error_lines(config: dict[str, Any], line: str) -> None:
    assert lines(config) == [line]


def test_odd_keys_deep_in_a_section_drop_only_themselves() -> None:
    found = lines({"eplb_config": {1.5: 1, "dynamic_eplb": True}})  # type: ignore[dict-item]
    assert [line.split(":")[0] for line in found] == [
        "eplb_config.'1.5'", "eplb_config.dynamic_eplb"]
    found = lines({"dump_config": {1: 2}, "enable_kv_nz": True})  # type: ignore[dict-item]
    assert [line.split(":")[0] for line in found] == [
        "dump_config[1].'[key]'", "enable_kv_nz", "enable_kv_nz"]


@pytest.mark.parametrize(("key", "shown"), [
    (None, "None"), (1.5, "'1.5'"), (Decimal("1.0"), '"Decimal(\'1.0\')"')])
def test_a_non_string_key_keeps_the_other_problems(key: object, shown: str) -> None:
    # pydantic names a None/1.5 key by str() and a Decimal key by repr(); either way only that
    # key is dropped, so the EPLB rule still sees eplb_config and reports it too.
    found = lines({key: "x", "eplb_config": {"dynamic_eplb": True}})
    assert found[0] == f"{shown}: Keys should be strings (given {key!r}; allowed: see the schema)"
    assert found[1].startswith("eplb_config.dynamic_eplb: dynamic EPLB on model runner v1 needs")
    assert len(found) == 2


def test_free_form_object_problem_names_the_inner_path_only_when_there_is_one() -> None:
    # A bad key of dump_config itself is at its root: no "(at ...)" part.
    assert lines({"dump_config": {"\ud800": 1}}) == [
        "dump_config: contains an unpaired surrogate (not valid Unicode text) "
        "(given {'\\ud800': 1}; allowed: null or a JSON object)"]
    assert lines({"dump_config": {"a": [float("nan")]}}) == [
        "dump_config: numbers must be finite (no NaN or Infinity) (at a[0]) "
        "(given {'a': [nan]}; allowed: null or a JSON object)"]


def test_a_non_string_key_problem_says_see_the_schema() -> None:
    assert lines({None: 1}) == ["None: Keys should be strings (given None; allowed: see the "
                                "schema)"]


def test_free_form_objects_name_the_type_that_is_no_json_and_keep_nul_text() -> None:
    assert lines({"dump_config": {"a": {1, 2}}}) == [
        "dump_config: set is not a JSON value (at a) (given {'a': {1, 2}}; allowed: null or a "
        "JSON object)"]
    assert lines({"dump_config": {"a": (1, 2)}}) == [
        "dump_config: tuple is not a JSON value (at a) (given {'a': (1, 2)}; allowed: null or a "
        "JSON object)"]
    # A NUL character is valid JSON text (only paths refuse it).
    assert resolve({"dump_config": {"task": "a\x00b"}}, DeploymentFacts(), {}).dump_config == {
        "task": "a\x00b"}
