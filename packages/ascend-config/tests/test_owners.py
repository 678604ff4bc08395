"""Keys of other owners in additional_config, retired keys and string-typed scalars."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ascend_config.schema.owners import VLLM_ENGINE_SECTIONS, VLLM_KEYS

# vLLM's own additional_config keys, as vllm/engine/arg_utils.py writes them from its flags
# (--gdn-prefill-backend, --kda-prefill-backend, --kda-decode-backend).
VLLM_INJECTED = ("gdn_prefill_backend", "kda_prefill_backend", "kda_decode_backend")


def test_vllm_keys_cover_what_vllm_injects() -> None:
    assert set(VLLM_INJECTED) <= set(VLLM_KEYS)


@pytest.mark.parametrize("key", VLLM_INJECTED)
def test_a_vllm_key_passes_with_one_warning_naming_vllm(key: str, res: Any) -> None:
    cfg = res({key: "triton", "enable_kv_nz": False})
    assert cfg.warnings == (
        f"additional_config key '{key}' belongs to vLLM, not to the Ascend plugin: left to "
        "vLLM, not checked here",)


def test_several_keys_of_one_owner_share_one_warning(res: Any) -> None:
    cfg = res({"gdn_prefill_backend": "triton", "kda_decode_backend": "auto"})
    assert cfg.warnings == (
        "additional_config keys 'gdn_prefill_backend', 'kda_decode_backend' belong to vLLM, "
        "not to the Ascend plugin: left to vLLM, not checked here",)


@pytest.mark.parametrize(("key", "value", "owner"), [
    ("other_plugin", {"level": 3}, "other_plugin"),
    ("ucm_config", {"store": "x"}, "ucm_config"),  # "_config" alone is no likeness to ours
    ("other_plugin.level", 3, "other_plugin"),
    ("other_plugin:level", 3, "other_plugin"),
    ("other_plugin/level", 3, "other_plugin"),
])
def test_a_foreign_namespace_passes_with_one_warning(
        key: str, value: object, owner: str, res: Any) -> None:
    cfg = res({key: value, "weight_nz_mode": 2})
    assert cfg.weight_nz_mode == 2
    assert cfg.warnings == (
        f"additional_config key '{key}': not an Ascend option, treated as belonging to another "
        f"component ('{owner}'); passed through, not checked here",)
    assert key not in json.loads(cfg.to_json())  # never kept: its owner reads it


def test_two_owners_give_two_warnings(res: Any) -> None:
    cfg = res({"gdn_prefill_backend": "triton", "other_plugin": {}})
    assert len(cfg.warnings) == 2
    assert "vLLM" in cfg.warnings[0] and "'other_plugin'" in cfg.warnings[1]


@pytest.mark.parametrize(("key", "value", "guess"), [
    ("enable_kv_nzz", True, "enable_kv_nz"),            # a scalar typo
    ("scheduler_confg", {}, "scheduler_config"),        # an object typo is still ours
    ("eplb_confg", {"dynamic_eplb": True}, "eplb_config"),
    ("ascend_fusion_cfg", {}, "ascend_fusion_config"),
    ("dynamic_eplb", True, "eplb_config.dynamic_eplb"),
])
def test_a_typo_of_an_ascend_key_is_an_error_with_did_you_mean(
        key: str, value: object, guess: str, problems: Any) -> None:
    assert problems({key: value}) == [
        (key, f"{key}: unknown key (given {value!r}; allowed: did you mean '{guess}'?)")]


@pytest.mark.parametrize("key", ["eplb_config.dynamic_eplb", "eplb_confg.dynamic_eplb"])
def test_a_flat_path_into_an_ascend_section_is_not_a_namespace(key: str, problems: Any) -> None:
    [(path, line)] = problems({key: True})
    assert path == repr(key)
    assert "unknown key" in line and "did you mean 'eplb_config.dynamic_eplb'?" in line


def test_a_bare_scalar_with_no_owner_is_an_unknown_key(problems: Any) -> None:
    assert problems({"foo": 1}) == [
        ("foo", "foo: unknown key (given 1; allowed: a key listed by `ascend-config explain`)")]


@pytest.mark.parametrize("key", sorted(VLLM_ENGINE_SECTIONS))
def test_a_vllm_engine_section_is_misplaced(key: str, problems: Any) -> None:
    [(path, line)] = problems({key: {}})
    assert path == key
    assert path == key
    assert line.startswith(f"{key}: '{key}' is a vLLM engine option that vLLM never reads from "
                           "additional_config (given {}; allowed: pass it to vLLM itself (")


def test_a_misplaced_section_names_its_flag(problems: Any) -> None:
    assert problems({"kv_transfer_config": {"kv_role": "kv_consumer"}}) == [(
        "kv_transfer_config",
        "kv_transfer_config: 'kv_transfer_config' is a vLLM engine option that vLLM never "
        "reads from additional_config (given {'kv_role': 'kv_consumer'}; allowed: pass it to "
        "vLLM itself (--kv-transfer-config or LLM(kv_transfer_config=...)))")]


def test_additional_config_nested_in_itself(problems: Any) -> None:
    assert problems({"additional_config": {"enable_kv_nz": True}}) == [(
        "additional_config",
        "additional_config: additional_config nested inside additional_config (given "
        "{'enable_kv_nz': True}; allowed: move its keys up one level)")]


@pytest.mark.parametrize(("key", "version", "replacement"), [
    ("torchair_graph_config", "v0.12.0rc1",
     "replaced by ACL graph mode, the default; see vLLM's compilation_config.cudagraph_mode"),
    ("ascend_scheduler_config", "v0.12.0rc1",
     "replaced by vLLM's scheduler; --no-enable-chunked-prefill turns chunked prefill off"),
    ("expert_tensor_parallel_size", "v0.10.0rc1",
     "replaced by vLLM's --enable-expert-parallel"),
    ("enable_sleep_mode_extra_cleanup", "v0.26.0rc1",
     "replaced by rl_config.sleep_mode_extra_cleanup"),
])
def test_a_retired_key_names_its_release_and_replacement(
        key: str, version: str, replacement: str, problems: Any) -> None:
    assert problems({key: {"enabled": True}}) == [(
        key, f"{key}: '{key}' was retired in {version}: remove it ({replacement}) (given "
        "{'enabled': True}; allowed: nothing: remove the key)")]


@pytest.mark.parametrize(("key", "retired"), [
    ("torchair_graph_conifg", "torchair_graph_config"),
    ("ascend_schedular_config", "ascend_scheduler_config"),
])
def test_a_misspelt_retired_key_is_named_as_retired(
        key: str, retired: str, problems: Any) -> None:
    [(path, line)] = problems({key: {}})
    assert path == key
    assert line == (f"{key}: unknown key, close to the retired key '{retired}' (given {{}}; "
                    f"allowed: remove it; {retired} was retired in v0.12.0rc1)")
    assert "did you mean" not in line


@pytest.mark.parametrize(("text", "literal"), [
    ("True", "true"), ("true", "true"), ("TRUE", "true"), ("1", "true"),
    ("False", "false"), ("false", "false"), ("0", "false"), (" false ", "false"),
])
def test_a_string_boolean_names_the_json_spelling(
        text: str, literal: str, problems: Any) -> None:
    assert problems({"enable_kv_nz": text}) == [(
        "enable_kv_nz",
        f"enable_kv_nz: a string, not a boolean (given {text!r}; allowed: true or false; "
        f"write {literal} without quotes (command line: --additional-config.enable_kv_nz="
        f"{literal}))")]


@pytest.mark.parametrize("text", ["yes", "on", "2", "t", ""])
def test_a_string_that_is_no_boolean_spelling_gets_no_guess(text: str, problems: Any) -> None:
    assert problems({"enable_kv_nz": text}) == [(
        "enable_kv_nz", f"enable_kv_nz: a string, not a boolean (given {text!r}; allowed: true "
        "or false, without quotes)")]


@pytest.mark.parametrize(("config", "path", "allowed"), [
    ({"weight_nz_mode": "2"}, "weight_nz_mode", "0, 1 or 2; write 2 without quotes"),
    ({"weight_nz_mode": "0"}, "weight_nz_mode", "0, 1 or 2; write 0 without quotes"),
    ({"weight_nz_mode": "3"}, "weight_nz_mode", "0, 1 or 2, without quotes"),
    ({"enable_fused_mc2": "1"}, "enable_fused_mc2", "0 or 1; write 1 without quotes"),
    ({"mega_moe_max_tokens": "65536"}, "mega_moe_max_tokens",
     "an integer > 0; write 65536 without quotes"),
    ({"mega_moe_max_tokens": "64k"}, "mega_moe_max_tokens", "an integer > 0, without quotes"),
    ({"rejection_sampler_config": {"posterior_threshold": "0.9"}},
     "rejection_sampler_config.posterior_threshold",
     "a number > 0 and <= 1; write 0.9 without quotes"),
    ({"pa_shape_list": ["128"]}, "pa_shape_list[0]",
     "a list of integers; write 128 without quotes"),
])
def test_a_string_number_names_the_json_spelling(
        config: dict[str, Any], path: str, allowed: str, problems: Any) -> None:
    [(got, line)] = problems(config)
    assert got == path
    assert line.startswith(f"{path}: a string, not a number (given ")
    assert line.endswith(f"; allowed: {allowed})")


def test_a_string_null_names_null(problems: Any) -> None:
    assert problems({"draft_window_size": "None"}) == [(
        "draft_window_size", "draft_window_size: a string, not null (given 'None'; allowed: "
        "null or an integer > 0; write null without quotes)")]


def test_a_string_for_a_string_choice_keeps_the_choice_wording(problems: Any) -> None:
    [(_, line)] = problems({"scheduler_config": {"dyntra_lb_config": {"mode": "Static"}}})
    assert "not a number" not in line and "'static', 'dynamic'" in line


def test_real_json_values_still_pass(res: Any) -> None:
    cfg = res({"enable_kv_nz": False, "weight_nz_mode": 2, "mega_moe_max_tokens": 65536})
    assert (cfg.enable_kv_nz, cfg.weight_nz_mode, cfg.mega_moe_max_tokens) == (False, 2, 65536)
    assert cfg.warnings == ()


def test_a_scalar_typo_of_a_retired_key_is_named_as_retired(problems: Any) -> None:
    assert problems({"expert_tensor_parallel_siz": 1}) == [(
        "expert_tensor_parallel_siz",
        "expert_tensor_parallel_siz: unknown key, close to the retired key "
        "'expert_tensor_parallel_size' (given 1; allowed: remove it; expert_tensor_parallel_size "
        "was retired in v0.10.0rc1)")]


def test_only_the_first_fifty_unknown_keys_are_searched_for_an_owner(
        res: Any, problems: Any) -> None:
    fifty = {f"plugin_{i}": {} for i in range(50)}
    cfg = res(fifty)
    assert len(cfg.warnings) == 50
    # The 51st unknown key is left to the schema: an unknown key, as when nothing is searched.
    assert problems({**fifty, "plugin_50": {}}) == [
        ("plugin_50", "plugin_50: unknown key (given {}; allowed: a key listed by "
         "`ascend-config explain`)")]
    # Exact names cost nothing and are sorted beyond the fifty too.
    cfg = res({**fifty, "gdn_prefill_backend": "triton"})
    assert len(cfg.warnings) == 51 and "vLLM" in cfg.warnings[0] + cfg.warnings[-1]
